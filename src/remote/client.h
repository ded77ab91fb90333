// remote/client.h - a compute node's handle on the memory pool: one
// transport per memory node, and the loop that keeps many coroutines'
// verbs in flight on one thread.
//
// Usage (one Client per thread, like a set of queue pairs):
//
//   Batch b;
//   b.read(0, off, &meta, sizeof(meta)).cas(0, slot, old, new_word);
//   Status s = co_await client.exec(b);     // one round trip
//   if (s.ok() && b.result(1) == old) ...   // the CAS won
//
// exec() posts the batch's verbs, a sub-batch per node (doorbell batching),
// and suspends the coroutine until every sub-batch has completed; the
// sub-batches travel in parallel, so exec() costs one round trip however
// many nodes it touches. While one coroutine waits, the Client resumes
// others whose verbs completed (run(), block_on()). The counters count
// round trips (exec calls), verbs and payload bytes.
//
// Errors of exec(): the first error of any sub-batch (remote/transport.h:
// InvalidArgument for a bad verb, IOError for an unreachable or silent
// node); the other sub-batches still complete before exec() returns, so
// the batch's buffers are never written after it.
//
// Tests: a fate hook (remote_testing.h) decides, per sub-batch, whether its
// reply is lost (it ran; the completion says IOError) or whether the
// request itself is late (IOError at once; it runs later, behind the
// node's next sub-batch): the two ways a remote batch fails without saying
// whether it ran.
#pragma once

#include <coroutine>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pmhash/status.h"
#include "remote/task.h"
#include "remote/transport.h"

namespace pmhash::remote {

// The verbs of one round trip, to any nodes. Ops keep their insertion
// order per node; result(i) is the old word of the i-th op (CAS, FAA).
class Batch {
 public:
  Batch& read(unsigned node, std::uint64_t off, void* dst, std::uint32_t len);
  Batch& write(unsigned node, std::uint64_t off, const void* src, std::uint32_t len);
  Batch& cas(unsigned node, std::uint64_t off, std::uint64_t expected, std::uint64_t desired);
  Batch& faa(unsigned node, std::uint64_t off, std::uint64_t add);

  std::uint64_t result(std::size_t i) const;
  std::size_t size() const { return where_.size(); }
  void clear();
  // Whether the batch has a verb for `node`.
  bool visits(unsigned node) const { return node < per_node_.size() && !per_node_[node].empty(); }
  // Drops the verbs added after the first `n` (size() is then n).
  void truncate(std::size_t n);

 private:
  friend class Client;
  Batch& add(unsigned node, const Op& op);

  std::vector<std::vector<Op>> per_node_;
  struct Where {
    unsigned node;
    std::size_t index;
  };
  std::vector<Where> where_;
};

// Tests: what becomes of one sub-batch (remote/transport.h, "Failure").
enum class Fate {
  kDeliver,    // as always
  kLoseReply,  // it runs; its completion is IOError and its CAS/FAA results
               // are garbage (the reply was lost, or came after the timeout)
  kDelay,      // its completion is IOError at once, nothing of it has run; it
               // runs (its WRITE bytes copied, its READs discarded) just after
               // this Client's next sub-batch to the same node (a request
               // that reaches the node after the client gave up on it), or
               // never, if the Client is destroyed first
};
// What a test's fate hook (remote_testing.h) decides for a sub-batch.
using FateHook = std::function<Fate(unsigned node, std::span<const Op> ops)>;

struct ClientCounters {
  std::uint64_t round_trips = 0;  // exec() calls that posted something
  std::uint64_t posts = 0;        // sub-batches posted (doorbells)
  std::uint64_t verbs = 0;
  std::uint64_t bytes = 0;        // payload_bytes() of every verb
  std::uint64_t max_in_flight = 0;  // most sub-batches in flight at one node at once
};

class Client {
 public:
  // Connects to every memory node of `specs` (remote::connect's forms);
  // node i of a Batch is specs[i]. Errors: those of connect(), naming the
  // node; InvalidArgument for no node.
  static Status connect(const std::vector<std::string>& specs, const ConnectOptions& options,
                        std::unique_ptr<Client>* out);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  std::size_t nodes() const { return nodes_.size(); }
  const std::string& node_name(unsigned node) const { return nodes_[node]->name(); }
  std::uint64_t node_size(unsigned node) const { return nodes_[node]->size(); }

  // co_await exec(b): posts b and suspends until it has completed. The
  // batch must outlive the await. An empty batch completes at once.
  auto exec(Batch& b) {
    struct Awaiter {
      Client* c;
      Batch* b;
      Wait w;
      bool await_ready() { return !c->post(*b, &w); }
      void await_suspend(std::coroutine_handle<> h) { w.handle = h; }
      Status await_resume() { return w.status; }
    };
    return Awaiter{this, &b, {}};
  }

  // Runs `task` to its end on this thread, driving every coroutine in
  // flight meanwhile; returns its result. Not to be called from inside a
  // coroutine of this Client.
  template <class T>
  T block_on(Task<T> task) {
    task.handle().resume();
    while (!task.done()) drive();
    return task.result();
  }
  // Runs one batch outside any coroutine.
  Status exec_sync(Batch& b);

  // Starts `task` (it runs to its first suspension); run() drives it on.
  void spawn(Task<void> task);
  // Drives every spawned task and their verbs until all have finished.
  void run();

  const ClientCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 private:
  struct Wait {
    std::coroutine_handle<> handle;
    unsigned remaining = 0;
    Status status;
  };
  // Tests (Fate): a sub-batch whose reply is to be lost, and one held back
  // to run later, with the bytes its verbs point at.
  struct Lost {
    Wait* w;
    unsigned node;
    std::span<Op> ops;
  };
  struct Held {
    unsigned node;
    std::vector<Op> ops;
    std::vector<std::vector<std::byte>> bytes;
  };
  Client() = default;
  // Tests: what the fate hook decides for a sub-batch (kDeliver without one).
  static Fate fate_of(unsigned node, std::span<const Op> ops);
  // Tests: keeps a copy of `ops` for node `node` to run later.
  void hold(unsigned node, std::span<const Op> ops);
  // Tests: posts what is held for `node` (its completions are dropped).
  void post_held(unsigned node);
  // Tests: true (and the completion turned into a lost reply) when `c`,
  // from `node`, belongs to a sub-batch held back or marked lost.
  bool intercept(unsigned node, Completion& c);
  // Posts every sub-batch; false if nothing is left to wait for.
  bool post(Batch& b, Wait* w);
  // Resumes the coroutines whose batches completed, then polls the nodes.
  void drive();

  std::vector<std::unique_ptr<Transport>> nodes_;
  std::vector<std::coroutine_handle<>> ready_;
  std::vector<Completion> done_;
  std::vector<Task<void>> spawned_;
  ClientCounters counters_;
  std::vector<Lost> lost_;                   // tests: replies to lose
  std::vector<std::unique_ptr<Held>> held_;  // tests: not yet posted
  std::vector<std::unique_ptr<Held>> late_;  // tests: posted, completion dropped
};

}  // namespace pmhash::remote
