// remote/task.h - Task<T>: a lazily started C++20 coroutine returning T.
//
// A Task does nothing until it is awaited (co_await task, from another
// coroutine) or handed to a Client (remote/client.h: block_on, spawn). When
// it finishes, it resumes its awaiter directly (symmetric transfer, so deep
// chains of awaits use no stack). A Task owns its coroutine frame and
// destroys it when the Task is destroyed. Exceptions are not used by this
// layer; one escaping a task terminates the program.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace pmhash::remote {

template <class T>
class Task;

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation;  // resumed when the task finishes
  bool finished = false;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      h.promise().finished = true;
      if (h.promise().continuation) return h.promise().continuation;
      return std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { std::terminate(); }
};

template <class T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() { return std::move(*value); }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object();
  void return_void() {}
  void take() {}
};

}  // namespace detail

template <class T = void>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::Promise<T>;
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle h) : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  bool done() const { return h_ && h_.promise().finished; }
  Handle handle() const { return h_; }
  // The result of a finished task (once).
  T result() { return h_.promise().take(); }

  // co_await task: runs it to its end, then continues the awaiter.
  auto operator co_await() noexcept {
    struct Awaiter {
      Handle h;
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        h.promise().continuation = awaiting;
        return h;
      }
      T await_resume() { return h.promise().take(); }
    };
    return Awaiter{h_};
  }

 private:
  void reset() {
    if (h_) h_.destroy();
    h_ = {};
  }
  Handle h_;
};

namespace detail {

template <class T>
Task<T> Promise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}

}  // namespace detail

}  // namespace pmhash::remote
