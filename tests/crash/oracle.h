// tests/crash/oracle.h - what a recovered store must hold after a crash in
// the middle of the crash-checker workload (workload.h), and the check of
// it, shared by the simulated-crash explorer and the process-kill test.
//
// The promise, per thread t, is a window [done_t, seen_t]: operations below
// done_t were promised before the crash and must all be present; operations
// done_t..seen_t may have been in flight (seen_t is how many the thread had
// acknowledged by the time the crash image was complete), each wholly
// present or wholly absent, in order. What was promised depends on the
// durability (docs/architecture.md, "Durability contract"):
//   strict   every acknowledged operation: done_t = acknowledged;
//   epoch    every operation that ran before the first epoch this crash
//            failed: the window carries, for the epochs around the crash,
//            how many operations had been acknowledged by the end of each
//            (by_epoch; its first epoch is one no crash of that moment can
//            fail), and the verifier picks the count for the epoch before
//            the oldest failed epoch after it that the recovered store
//            reports (F-1 after a crash at F; after a crash during recovery
//            too, which fails F and F+1 as well);
//   either   every operation before an acknowledged sync (synced_t).
// A transaction is one operation: its writes survive together or not at
// all. So thread t's
// keys must equal the model after some prefix j of its operations, done_t <=
// j <= seen_t + 1. Beyond that: no key outside the workload's, no key
// visible twice, get() agrees with for_each() for every key of the
// universe, size() agrees, check() passes (which includes the engine's
// dangling-pointer and leak accounting), and the store keeps working: a
// short further workload of inserts, updates and removes behaves like a
// model and check() passes again.
//
// The second half of this file, SharedOracle, checks the shared-key workload
// (threads on common keys), where a thread's keys are no longer a prefix
// of its own operations: it holds the recovered store to every answer a
// call gave (durable linearizability; its rules are stated there).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <thread>
#include <utility>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "crash/workload.h"
#include "pmhash/store.h"

namespace pmhash::crashtest {

struct Window {
  std::uint64_t done = 0;  // acknowledged before the crash (strict)
  std::uint64_t seen = 0;  // acknowledged when the image was complete (>= done)
  std::uint64_t synced = 0;  // operations before the last acknowledged sync
  // Epoch durability: (epoch e, operations acknowledged having run in an
  // epoch <= e), e increasing; no crash of the moment can fail the first
  // epoch. Empty under strict durability.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> by_epoch;

  // The operations promised after a crash, given the recovered store's
  // failure list.
  std::uint64_t promised(const std::vector<std::uint64_t>& failed) const {
    if (by_epoch.empty()) return std::max(done, synced);
    const auto first = std::upper_bound(failed.begin(), failed.end(), by_epoch.front().first);
    std::uint64_t n = by_epoch.back().second;
    if (first != failed.end()) {
      for (const auto& [e, count] : by_epoch) {
        if (e < *first) n = count;
      }
    }
    return std::max(n, synced);
  }
};

namespace detail {

// At most 48 bytes of `s`, non-printing bytes as '?'.
inline std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 48)) out += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > 48) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

// A further workload on a recovered store that holds exactly `model`,
// checked against the model: "" when the store behaves, else what differed.
inline std::string keeps_working(Store& store, std::map<std::string, std::string> model) {
  auto fail = [](const std::string& op, const Status& s) {
    return "after recovery, " + op + " failed: " + s.to_string();
  };
  for (int i = 0; i < 24; ++i) {
    const std::string key = "after" + std::to_string(i);
    const std::string value = "value-after-recovery-" + std::to_string(i) + std::string(i * 5, 'z');
    if (Status s = store.insert(key, value); !s.ok()) return fail("insert " + key, s);
    model[key] = value;
  }
  int n = 0;
  for (auto it = model.begin(); it != model.end() && n < 16; ++n) {
    if (n % 2 == 0) {
      if (Status s = store.update(it->first, "updated-after-recovery"); !s.ok()) return fail("update " + it->first, s);
      it->second = "updated-after-recovery";
      ++it;
    } else {
      if (Status s = store.remove(it->first); !s.ok()) return fail("remove " + it->first, s);
      it = model.erase(it);
    }
  }
  for (const auto& [k, v] : model) {
    std::string got;
    if (Status s = store.get(k, &got); !s.ok() || got != v) {
      return "after recovery, get(" + k + ") = " + s.to_string() + " '" + printable(got) +
             "', expected '" + printable(v) + "'";
    }
  }
  if (store.size() != model.size()) {
    return "after recovery and more writes, size() = " + std::to_string(store.size()) +
           ", expected " + std::to_string(model.size());
  }
  if (Status c = store.check(); !c.ok()) return "check() after further writes: " + c.to_string();
  return "";
}

// Every pair for_each lists, into `seen`: "" when it listed each key once,
// else what went wrong.
inline std::string list_once(Store& store, std::map<std::string, std::string>* seen) {
  std::string dup;
  const Status it = store.for_each([&](std::string_view k, std::string_view v) {
    if (!seen->emplace(std::string(k), std::string(v)).second && dup.empty()) dup = std::string(k);
    return true;
  });
  if (!it.ok()) return "for_each failed: " + it.to_string();
  if (!dup.empty()) return "key " + dup + " is visible twice";
  return "";
}

// Waits (bounded) for an engine that sweeps leaked blocks in the background
// after a crash to end its sweep: it reports leaks only then.
inline std::string await_sweep(Store& store) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!store.stats().swept) {
    if (std::chrono::steady_clock::now() > deadline) return "the sweep after recovery never ended";
    std::this_thread::yield();
  }
  return "";
}

}  // namespace detail

class Oracle {
 public:
  explicit Oracle(WorkloadSpec w) : w_(w), models_(w.threads), prefix_(w.threads, 0) {}

  const WorkloadSpec& workload() const { return w_; }

  // Verifies a recovered store; "" when it keeps the promise, otherwise
  // what is wrong (one line). `windows` has one entry per thread. With
  // `further`, a short further workload runs on the store (it adds keys the
  // workload does not know). *matched, when given, gets per thread the
  // prefix of its operations the store holds.
  std::string verify(Store& store, const std::vector<Window>& windows, bool further = true,
                     std::vector<std::uint64_t>* matched = nullptr) {
    if (windows.size() != w_.threads) return "oracle: expected one window per thread";
    // Epoch durability: what was promised depends on the epochs recovery
    // failed.
    std::vector<std::uint64_t> failed;
    if (!windows[0].by_epoch.empty()) {
      const Stats st = store.stats();
      failed = st.failed_epochs;
      // (An image taken at the very end of a close is a clean pool.)
      if (failed.empty() && !st.clean_shutdown) return "recovery after a crash failed no epoch";
    }
    std::map<std::string, std::string> seen;
    if (std::string e = detail::list_once(store, &seen); !e.empty()) return e;

    std::vector<std::map<std::uint64_t, std::string>> found(w_.threads);
    for (const auto& [k, v] : seen) {
      const auto parsed = parse_key(k);
      if (!parsed || parsed->first >= w_.threads || parsed->second >= w_.keys) {
        return "key " + detail::printable(k) + " was never written by the workload";
      }
      found[parsed->first].emplace(parsed->second, v);
    }
    if (matched != nullptr) matched->assign(w_.threads, 0);
    for (unsigned t = 0; t < w_.threads; ++t) {
      std::uint64_t j = 0;
      Window win = windows[t];
      win.done = win.promised(failed);
      if (std::string e = match_thread(t, win, found[t], &j); !e.empty()) return e;
      if (matched != nullptr) (*matched)[t] = j;
    }
    for (unsigned t = 0; t < w_.threads; ++t) {
      for (std::uint64_t k = 0; k < w_.keys; ++k) {
        std::string v;
        const Status g = store.get(key_name(t, k), &v);
        const auto f = found[t].find(k);
        if (f == found[t].end()) {
          if (!g.is_not_found()) {
            return "get(" + key_name(t, k) + ") = " + g.to_string() +
                   ", but for_each does not list the key";
          }
        } else if (!g.ok() || v != f->second) {
          return "get(" + key_name(t, k) + ") = " + g.to_string() + " '" + detail::printable(v) +
                 "', but for_each lists '" + detail::printable(f->second) + "'";
        }
      }
    }
    if (store.size() != seen.size()) {
      return "size() = " + std::to_string(store.size()) + ", but " + std::to_string(seen.size()) +
             " keys are visible";
    }
    // An engine that sweeps leaked blocks in the background after a crash
    // reports leaks once the sweep has ended: wait for it (bounded).
    if (std::string e = detail::await_sweep(store); !e.empty()) return e;
    if (Status c = store.check(); !c.ok()) return "check() after recovery: " + c.to_string();
    if (further) {
      std::map<std::string, std::string> model;
      for (unsigned t = 0; t < found.size(); ++t) {
        for (const auto& [k, v] : found[t]) model.emplace(key_name(t, k), v);
      }
      return detail::keeps_working(store, std::move(model));
    }
    return "";
  }

 private:
  // The model of thread t after its first j operations (j only grows between
  // calls, as crash points do; a smaller j starts over).
  const ThreadModel& model_after(unsigned t, std::uint64_t j) {
    if (j < prefix_[t]) {
      models_[t].clear();
      prefix_[t] = 0;
    }
    for (; prefix_[t] < j; ++prefix_[t]) apply_op(op_at(w_, t, prefix_[t]), &models_[t]);
    return models_[t];
  }

  std::string match_thread(unsigned t, const Window& win,
                           const std::map<std::uint64_t, std::string>& found, std::uint64_t* matched) {
    const std::uint64_t hi = std::min(win.seen + 1, w_.ops);
    ThreadModel m = model_after(t, win.done);
    const ThreadModel promised = m;
    for (std::uint64_t j = win.done;; ++j) {
      if (m == found) {
        *matched = j;
        return "";
      }
      if (j >= hi) break;
      apply_op(op_at(w_, t, j), &m);
    }
    // Name the first difference from the acknowledged state.
    std::string what;
    for (std::uint64_t k = 0; k < w_.keys && what.empty(); ++k) {
      const auto p = promised.find(k);
      const auto f = found.find(k);
      const std::string expected = p == promised.end() ? "<absent>" : "'" + detail::printable(p->second) + "'";
      const std::string actual = f == found.end() ? "<absent>" : "'" + detail::printable(f->second) + "'";
      if (expected != actual) what = "key " + key_name(t, k) + ": acknowledged " + expected + ", recovered " + actual;
    }
    return "thread " + std::to_string(t) + ": recovered keys match no prefix of its operations in [" +
           std::to_string(win.done) + ", " + std::to_string(hi) + "] (" +
           std::to_string(win.done) + " acknowledged); first difference from the acknowledged state: " +
           what;
  }

  WorkloadSpec w_;
  std::vector<ThreadModel> models_;
  std::vector<std::uint64_t> prefix_;
};


// ===========================================================================
// The shared-key oracle: durable linearizability, key by key
// ===========================================================================
//
// In the shared-key workload (workload.h, shared_op_at) threads read and
// write each other's keys, so a thread's part of the store is no longer a
// prefix of its own operations: what a recovered store must hold depends on
// what every call answered. Each call is recorded (Call): its thread and
// operation, the global sequence numbers at which it began and returned (the
// runner numbers every call start and return, in one order), and its
// answer, a get's value naming the write that wrote it (values are unique).
// A crash point P is a sequence number too: the calls that returned before
// it completed before the crash; the others that had begun are in flight.
//
// Strict durability promises durable linearizability (docs/architecture.md, "Durability
// contract"): the history with the crash removed, in which each call in
// flight either took effect (with some answer) or never happened, is
// linearizable, followed by the recovered state. Linearizability is local
// (Herlihy and Wing: a history is linearizable exactly when each object's
// sub-history is), so it is checked key by key, each key a register whose
// writes write values of their own. For key k the recovered store is
// explainable when
//
//   R1  some order of the completed calls on k, and of any subset of its
//       calls in flight, exists that respects real time (a call that
//       returned before another began comes first; a call in flight never
//       returned, so it only comes after those that returned before it
//       began), in which every completed call gives the answer it gave
//       (insert OK exactly when k was absent, AlreadyExists when present;
//       update and remove OK exactly when present, NotFound when absent;
//       upsert OK; get the value of the last write before it, NotFound
//       after a remove or none), and
//   R2  after which k holds the recovered value (or is absent).
//
// What follows from it, and what the check finds in practice:
//   - every completed write is in the order (a completed call must be);
//   - a completed call that saw a write (a get returned its value, an
//     insert met it) puts that write before itself: a write in flight at
//     the crash that a completed read saw must have survived, and a later
//     write that overwrote it must be one that may be in the order;
//   - writes that had not begun by the crash are nowhere.
// A get of a value no write wrote (torn) cannot be ordered anywhere.
// The check is exact (a search over the orders, remembering the
// states seen: the calls of one key overlap little, so it stays small), so
// it flags a read of a write that is then lost, and nothing legal.
//
// Epoch durability (dali, Durability::kEpoch) promises less: a call's
// effect survives once its epoch was made durable (include/pmhash/options.h),
// and recovery keeps exactly the epochs below the first failed one
// (engine/dali/dali.h: the epoch boundary is a consistent cut). Nothing is
// promised about answers: a read's answer is not an effect, and the newest
// state a get reads may include writes of an epoch a crash then fails (a
// reader still announced in epoch E may read a write of E+1). So, with cut =
// the first epoch the recovery failed:
//   E1  a completed write that changed k is "promised" when it returned in
//       an epoch below the cut (the epoch read right after it returned
//       bounds the one it ran in), or returned before a completed sync()
//       began: it must be in the order, with its answer;
//   E2  any other write that changed k, completed or in flight, may be in
//       the order (with its answer, if it returned);
//   E3  calls that changed nothing (gets, NotFound, AlreadyExists) bind
//       nothing, except
//   E4  a snapshot get (ReadOptions::snapshot: "the latest state that is
//       already durable") that returned a value: its write must be in the
//       order. (A snapshot read is serializable, not linearizable, under
//       epoch durability: it binds no place in the order.)
// Under strict durability a snapshot get binds like any get (R1).
//
// Calls that returned while the crash image was being taken are treated as
// in flight (their effect may or may not be in the image); that only admits
// more recoveries.

namespace durable {

inline constexpr std::uint64_t kInFlight = ~std::uint64_t{0};
inline constexpr std::int64_t kAbsent = -1;

// One call on one key, for the register check.
struct Event {
  enum Kind : unsigned char { kInsert, kUpdate, kUpsert, kRemove, kGet };
  Kind kind = kGet;
  std::int64_t write = kAbsent;  // insert, update, upsert: the id of the value it writes (>= 0)
  std::uint64_t start = 0;
  std::uint64_t end = kInFlight;  // kInFlight: had not returned by the crash
  bool must = false;   // must be in the order
  bool binds = false;  // where it is in the order, it gives the answer below
  bool changed = false;             // a write's answer: OK (true), or NotFound / AlreadyExists
  std::int64_t observed = kAbsent;  // a get's answer: the write id it returned, or kAbsent
};

namespace detail {

// The search for an order. Calls that returned (finite end) are kept sorted
// by start, with a bit each once decided (in the order, or left out); calls
// in flight (at most one per thread, and those that returned while the image
// was taken) hold no call back, so they sit apart, a bit each once in the
// order. A call is ready when every call that returned before it began is
// decided. States already seen (decided calls, calls in flight used, the
// register) are not searched again: with calls that overlap little the
// search is about linear in the calls.
class Search {
 public:
  Search(const std::vector<Event>& events, std::int64_t recovered, std::int64_t initial)
      : recovered_(recovered), initial_(initial) {
    for (const Event& e : events) {
      (e.end == kInFlight ? open_ : done_).push_back(e);
      musts_left_ += e.must ? 1 : 0;
    }
    if (open_.size() > 64) throw std::length_error("more than 64 calls on one key in flight at once");
    std::sort(done_.begin(), done_.end(), [](const Event& a, const Event& b) { return a.start < b.start; });
    decided_.assign((done_.size() + 63) / 64 + 1, 0);
  }

  bool run() { return dfs(initial_); }

 private:
  bool is_decided(std::size_t i) const { return (decided_[i / 64] >> (i % 64)) & 1; }
  void flip(std::size_t i) { decided_[i / 64] ^= std::uint64_t{1} << (i % 64); }

  // The register after `e` in state v, or false when e, binding, would give
  // another answer there.
  static bool apply(const Event& e, std::int64_t v, std::int64_t* out) {
    const bool present = v != kAbsent;
    *out = v;
    switch (e.kind) {
      case Event::kInsert:
        if (e.binds && e.changed == present) return false;
        if (!present) *out = e.write;
        return true;
      case Event::kUpdate:
        if (e.binds && e.changed != present) return false;
        if (present) *out = e.write;
        return true;
      case Event::kUpsert:
        if (e.binds && !e.changed) return false;
        *out = e.write;
        return true;
      case Event::kRemove:
        if (e.binds && e.changed != present) return false;
        *out = kAbsent;
        return true;
      case Event::kGet:
        return !e.binds || e.observed == v;
    }
    return false;
  }

  // Takes event e (decided by toggling `mark`), searches on, undoes.
  template <typename Mark>
  bool take(const Event& e, std::int64_t v, Mark mark) {
    std::int64_t next = kAbsent;
    if (!apply(e, v, &next)) return false;
    mark();
    musts_left_ -= e.must ? 1 : 0;
    const bool ok = dfs(next);
    musts_left_ += e.must ? 1 : 0;
    mark();
    return ok;
  }

  bool dfs(std::int64_t v) {
    if (musts_left_ == 0 && v == recovered_) return true;
    std::size_t lo = 0;  // the first undecided call that returned
    while (lo / 64 < decided_.size() - 1 && decided_[lo / 64] == ~std::uint64_t{0}) lo += 64;
    while (lo < done_.size() && is_decided(lo)) ++lo;
    std::string memo(reinterpret_cast<const char*>(&lo), sizeof lo);
    memo.append(reinterpret_cast<const char*>(&used_), sizeof used_);
    memo.append(reinterpret_cast<const char*>(&v), sizeof v);
    memo.append(reinterpret_cast<const char*>(decided_.data() + lo / 64), (decided_.size() - lo / 64) * 8);
    if (!seen_.insert(std::move(memo)).second) return false;
    // Calls that begin after the earliest end among the undecided ones
    // cannot be ready (they begin after it, so they end after it too).
    std::uint64_t min_end = kInFlight;
    for (std::size_t i = lo; i < done_.size() && done_[i].start < min_end; ++i) {
      if (!is_decided(i)) min_end = std::min(min_end, done_[i].end);
    }
    for (std::size_t i = lo; i < done_.size() && done_[i].start < min_end; ++i) {
      if (is_decided(i)) continue;
      const Event& e = done_[i];
      if (take(e, v, [&] { flip(i); })) return true;
      // A call that may be left out: leave it out (it holds back the calls
      // that began after it returned).
      if (!e.must) {
        flip(i);
        const bool ok = dfs(v);
        flip(i);
        if (ok) return true;
      }
    }
    for (std::size_t j = 0; j < open_.size(); ++j) {
      const std::uint64_t bit = std::uint64_t{1} << j;
      if ((used_ & bit) != 0 || open_[j].start >= min_end) continue;
      if (take(open_[j], v, [&] { used_ ^= bit; })) return true;
    }
    return false;
  }

  std::int64_t recovered_, initial_;
  std::vector<Event> done_, open_;
  std::vector<std::uint64_t> decided_;  // one spare word: the scan for lo stops on it
  std::uint64_t used_ = 0;              // calls in flight in the order
  std::size_t musts_left_ = 0;
  std::set<std::string> seen_;
};

}  // namespace detail

// R1 and R2 (or E1-E4, as the events' must and binds say) for one key: some
// order of the events exists that respects real time, includes every `must`
// event, gives every `binds` event its answer, and ends with the register
// holding `recovered` (a write id, or kAbsent), starting from `initial`.
inline bool explainable(const std::vector<Event>& events, std::int64_t recovered,
                        std::int64_t initial = kAbsent) {
  return detail::Search(events, recovered, initial).run();
}

}  // namespace durable

// One call of the shared-key workload, as its thread saw it.
struct Call {
  static constexpr std::uint64_t kOpen = durable::kInFlight;
  enum Answer : unsigned char { kOk, kNotFound, kAlreadyExists, kOther };
  unsigned thread = 0;
  std::uint64_t index = 0;       // shared_op_at(w, thread, index)
  std::uint64_t start = 0;       // sequence number when it began
  std::uint64_t end = kOpen;     // when it returned; kOpen: not (yet)
  Answer answer = kOther;        // kOther: any other status (a failure)
  std::int64_t observed = durable::kAbsent;  // a get's value: the write id; -2: no write's value
  std::uint64_t epoch = 0;       // epoch durability: the store's epoch right after it returned
};

// The id of write i of thread t (unique: threads <= 16).
inline std::int64_t shared_write_id(unsigned thread, std::uint64_t index) {
  return static_cast<std::int64_t>(index * 16 + thread);
}

// The write whose value `value` is (its id), or -2 when no write of the
// shared-key workload writes it.
inline std::int64_t shared_write_of(const WorkloadSpec& w, const std::string& value) {
  constexpr std::int64_t kNone = -2;
  std::uint64_t thread = 0, index = 0;
  if (value.size() >= 5 && value.size() <= 8 && value[0] == '#') {
    std::uint64_t n = 0;
    for (std::size_t i = 1; i < value.size(); ++i) {
      const char c = value[i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'Z' ? c - 'A' + 10
                  : c >= 'a' && c <= 'z' ? c - 'a' + 36 : -1;
      if (d < 0) return kNone;
      n = n * 62 + static_cast<std::uint64_t>(d);
    }
    if (n % 8 != 0) return kNone;
    thread = n / 8 % 16;
    index = n / 8 / 16;
  } else {
    const std::string head = "w" + std::to_string(w.seed) + ".";
    if (value.compare(0, head.size(), head) != 0) return kNone;
    std::size_t at = head.size();
    auto number = [&](std::uint64_t* out) {
      const std::size_t dot = value.find('.', at);
      if (dot == std::string::npos || dot == at || dot - at > 19) return false;
      for (std::size_t i = at; i < dot; ++i) {
        if (value[i] < '0' || value[i] > '9') return false;
      }
      *out = std::stoull(value.substr(at, dot - at));
      at = dot + 1;
      return true;
    };
    if (!number(&thread) || !number(&index)) return kNone;
  }
  if (thread >= w.threads || index >= w.ops) return kNone;
  const Op op = shared_op_at(w, static_cast<unsigned>(thread), index);
  if (op.kind == Op::kGet || op.kind == Op::kRemove || op.kind == Op::kSync || op.value != value) return kNone;
  return shared_write_id(static_cast<unsigned>(thread), index);
}

// Calls as one line of text (a request file, a reproducer field):
// "thread,index,start,end,answer,observed,epoch" per call, ';' between
// calls, end "-" while open.
inline std::string calls_text(const std::vector<Call>& calls) {
  std::string out;
  for (const Call& c : calls) {
    if (!out.empty()) out += ';';
    out += std::to_string(c.thread) + ',' + std::to_string(c.index) + ',' + std::to_string(c.start) + ',' +
           (c.end == Call::kOpen ? std::string("-") : std::to_string(c.end)) + ',' +
           std::to_string(static_cast<unsigned>(c.answer)) + ',' + std::to_string(c.observed) + ',' +
           std::to_string(c.epoch);
  }
  return out;
}

// The inverse of calls_text; false for text of another form.
inline bool parse_calls(const std::string& text, std::vector<Call>* out) {
  out->clear();
  std::stringstream in(text);
  std::string rec;
  try {
    while (std::getline(in, rec, ';')) {
      std::stringstream fields(rec);
      std::string f[7];
      for (std::string& x : f) {
        if (!std::getline(fields, x, ',') || x.empty()) return false;
      }
      Call c;
      c.thread = static_cast<unsigned>(std::stoul(f[0]));
      c.index = std::stoull(f[1]);
      c.start = std::stoull(f[2]);
      c.end = f[3] == "-" ? Call::kOpen : std::stoull(f[3]);
      const unsigned a = static_cast<unsigned>(std::stoul(f[4]));
      if (a > Call::kOther) return false;
      c.answer = static_cast<Call::Answer>(a);
      c.observed = std::stoll(f[5]);
      c.epoch = std::stoull(f[6]);
      out->push_back(c);
    }
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// What a crash at one point promised about the shared-key workload.
struct SharedCrash {
  std::uint64_t point = 0;  // sequence number of the crash: calls that returned below it completed
  std::vector<Call> calls;  // every call begun by the time the image was complete
  bool epoch = false;       // epoch durability (E1-E4), else strict (R1-R2)
};

class SharedOracle {
 public:
  explicit SharedOracle(WorkloadSpec w) : w_(w) {}

  // The events of each key for a crash at `crash.point` whose recovery
  // failed epochs from `cut` on (epoch durability; ~0: none failed).
  // `live`: the history of a run that did not crash (every call returned,
  // all answers bind, snapshot gets under epoch durability aside).
  std::map<std::uint64_t, std::vector<durable::Event>> events(const SharedCrash& crash, std::uint64_t cut,
                                                               bool live = false) const {
    std::map<std::uint64_t, std::vector<durable::Event>> by_key;
    std::uint64_t sync_start = 0;  // the latest start of a completed sync, + 1
    for (const Call& c : crash.calls) {
      if (c.end < crash.point && shared_op_at(w_, c.thread, c.index).kind == Op::kSync) {
        sync_start = std::max(sync_start, c.start + 1);
      }
    }
    std::map<std::int64_t, std::pair<std::uint64_t, std::size_t>> where;  // write id -> key, event
    std::vector<std::int64_t> durable_reads;                               // E4
    for (const Call& c : crash.calls) {
      const Op op = shared_op_at(w_, c.thread, c.index);
      if (op.kind == Op::kSync || op.kind == Op::kTxn) continue;
      const bool completed = c.end < crash.point;
      durable::Event e;
      e.kind = op.kind == Op::kInsert   ? durable::Event::kInsert
             : op.kind == Op::kUpdate   ? durable::Event::kUpdate
             : op.kind == Op::kUpsert   ? durable::Event::kUpsert
             : op.kind == Op::kRemove   ? durable::Event::kRemove
                                        : durable::Event::kGet;
      if (e.kind != durable::Event::kGet && e.kind != durable::Event::kRemove) {
        e.write = shared_write_id(c.thread, c.index);
      }
      e.start = c.start;
      e.end = completed ? c.end : durable::kInFlight;
      if (completed && c.answer == Call::kOther) continue;  // failed: changed nothing (the runner reports it)
      e.changed = completed && c.answer == Call::kOk;
      e.observed = c.answer == Call::kOk ? c.observed : durable::kAbsent;
      if (!completed) {
        if (e.kind == durable::Event::kGet) continue;  // a read in flight has no effect
      } else if (!crash.epoch || (live && !is_snapshot_get(op))) {
        e.must = e.binds = true;  // R1
      } else if (e.kind == durable::Event::kGet) {
        if (is_snapshot_get(op) && c.answer == Call::kOk) durable_reads.push_back(c.observed);  // E4
        continue;
      } else if (!e.changed) {
        continue;  // E3
      } else {
        e.binds = true;
        e.must = c.epoch < cut || c.end < sync_start;  // E1, else E2
      }
      auto& list = by_key[op.key];
      if (e.write != durable::kAbsent) where[e.write] = {op.key, list.size()};
      list.push_back(e);
    }
    for (std::int64_t id : durable_reads) {
      const auto it = where.find(id);
      if (it != where.end()) by_key[it->second.first][it->second.second].must = true;
    }
    return by_key;
  }

  // Checks the recovered contents of the shared keys, `found` (key index ->
  // value), against the calls: "" when every key is explainable, else what
  // is wrong, naming the key, what it holds and the calls on it.
  std::string check(const SharedCrash& crash, const std::map<std::uint64_t, std::string>& found,
                    std::uint64_t cut, bool live = false) const {
    const auto by_key = events(crash, cut, live);
    for (const auto& [k, v] : found) {
      if (k >= w_.keys) return "key " + shared_key_name(k) + " is not a key of the workload";
      const std::int64_t id = shared_write_of(w_, v);
      if (id < 0) return "key " + shared_key_name(k) + " holds '" + detail::printable(v) + "', which no write wrote";
    }
    for (std::uint64_t k = 0; k < w_.keys; ++k) {
      const auto f = found.find(k);
      const std::int64_t recovered = f == found.end() ? durable::kAbsent : shared_write_of(w_, f->second);
      static const std::vector<durable::Event> kNoEvents;
      const auto e = by_key.find(k);
      const std::vector<durable::Event>& events = e == by_key.end() ? kNoEvents : e->second;
      try {
        if (!durable::explainable(events, recovered)) return explain(crash, k, recovered, live);
      } catch (const std::length_error& e) {
        return "key " + shared_key_name(k) + ": the oracle cannot check it: " + e.what();
      }
    }
    return "";
  }

  // Verifies a recovered store: the checks of Oracle::verify (no duplicate
  // or foreign key, get agrees with for_each, size, check(), a further
  // workload) and every shared key explainable.
  std::string verify(Store& store, const SharedCrash& crash, bool further = true) const {
    std::uint64_t cut = ~std::uint64_t{0};
    if (crash.epoch) {
      const Stats st = store.stats();
      if (st.failed_epochs.empty() && !st.clean_shutdown) return "recovery after a crash failed no epoch";
      if (!st.failed_epochs.empty()) cut = *std::min_element(st.failed_epochs.begin(), st.failed_epochs.end());
    }
    std::map<std::string, std::string> seen;
    if (std::string e = detail::list_once(store, &seen); !e.empty()) return e;
    std::map<std::uint64_t, std::string> found;
    for (const auto& [k, v] : seen) {
      const auto key = parse_shared_key(k);
      if (!key || *key >= w_.keys) return "key " + detail::printable(k) + " was never written by the workload";
      found.emplace(*key, v);
    }
    if (std::string e = check(crash, found, cut); !e.empty()) return e;
    for (std::uint64_t k = 0; k < w_.keys; ++k) {
      std::string v;
      const Status g = store.get(shared_key_name(k), &v);
      const auto f = found.find(k);
      if (f == found.end() ? !g.is_not_found() : (!g.ok() || v != f->second)) {
        return "get(" + shared_key_name(k) + ") = " + g.to_string() + " '" + detail::printable(v) +
               "', but for_each lists " + (f == found.end() ? "nothing" : "'" + detail::printable(f->second) + "'");
      }
    }
    if (store.size() != seen.size()) {
      return "size() = " + std::to_string(store.size()) + ", but " + std::to_string(seen.size()) +
             " keys are visible";
    }
    if (std::string e = detail::await_sweep(store); !e.empty()) return e;
    if (Status c = store.check(); !c.ok()) return "check() after recovery: " + c.to_string();
    return further ? detail::keeps_working(store, std::move(seen)) : "";
  }

 private:
  // "t0#55 insert" for a call.
  std::string name(const Call& c) const {
    static constexpr const char* kKinds[] = {"insert", "update", "upsert", "remove", "get", "sync", "txn"};
    const Op op = shared_op_at(w_, c.thread, c.index);
    return "t" + std::to_string(c.thread) + "#" + std::to_string(c.index) + " " +
           (is_snapshot_get(op) ? "snapshot-get" : kKinds[op.kind]);
  }

  std::string write_name(const SharedCrash& crash, std::int64_t id) const {
    if (id == durable::kAbsent) return "<absent>";
    const unsigned t = static_cast<unsigned>(id % 16);
    const std::uint64_t i = static_cast<std::uint64_t>(id / 16);
    for (const Call& c : crash.calls) {
      if (c.thread == t && c.index == i) {
        return "the value of " + name(c) + (c.end < crash.point ? " (returned)" : " (in flight at the crash)");
      }
    }
    return "the value of t" + std::to_string(t) + "#" + std::to_string(i) + " (not begun by the crash)";
  }

  static constexpr const char* kAnswers[] = {"OK", "NotFound", "AlreadyExists", "failed"};

  // Why key k is not explainable: the calls on it, and any completed call
  // that saw a write still in flight at the crash.
  std::string explain(const SharedCrash& crash, std::uint64_t k, std::int64_t recovered, bool live) const {
    std::vector<const Call*> on_key;
    for (const Call& c : crash.calls) {
      const Op op = shared_op_at(w_, c.thread, c.index);
      if (op.kind != Op::kSync && op.kind != Op::kTxn && op.key == k) on_key.push_back(&c);
    }
    std::sort(on_key.begin(), on_key.end(), [](const Call* a, const Call* b) { return a->start < b->start; });
    std::string out = "key " + shared_key_name(k) + (live ? " at the end of the run" : " after recovery") +
                      " holds " + write_name(crash, recovered) + ", which no order of the calls on it explains" +
                      (crash.epoch ? " (epoch durability)" : "");
    auto in_flight = [&](std::int64_t id) {
      for (const Call& c : crash.calls) {
        if (shared_write_id(c.thread, c.index) == id) return !(c.end < crash.point);
      }
      return false;
    };
    for (const Call* c : on_key) {
      if (c->end < crash.point && c->answer == Call::kOk && c->observed >= 0 && in_flight(c->observed) &&
          shared_op_at(w_, c->thread, c->index).kind == Op::kGet) {
        out += "; " + name(*c) + " (seq " + std::to_string(c->start) + "-" + std::to_string(c->end) +
               ") returned " + write_name(crash, c->observed);
      }
    }
    // NotFound and AlreadyExists answered after a write of the key in flight
    // at the crash began: the answer may rest on it.
    for (const Call* c : on_key) {
      const bool absent_or_present = c->answer == Call::kNotFound || c->answer == Call::kAlreadyExists;
      if (!(c->end < crash.point) || !absent_or_present) continue;
      for (const Call* f : on_key) {
        const Op fop = shared_op_at(w_, f->thread, f->index);
        if (f->end < crash.point || f->start > c->start || fop.kind == Op::kGet) continue;
        out += "; " + name(*c) + " answered " + kAnswers[c->answer] + " (seq " + std::to_string(c->start) + "-" +
               std::to_string(c->end) + ") while " + name(*f) + " was in flight (seq " + std::to_string(f->start) +
               "-)";
      }
    }
    out += "; crash at seq " + std::to_string(crash.point) + "; calls on the key (last 12):";
    for (std::size_t i = on_key.size() > 12 ? on_key.size() - 12 : 0; i < on_key.size(); ++i) {
      const Call& c = *on_key[i];
      out += " [" + name(c) + " seq " + std::to_string(c.start) + "-" +
             (c.end == Call::kOpen ? std::string("") : std::to_string(c.end));
      if (c.end < crash.point) {
        out += " " + std::string(kAnswers[c.answer]);
        if (c.answer == Call::kOk && c.observed != durable::kAbsent) {
          out += c.observed >= 0 ? " t" + std::to_string(c.observed % 16) + "#" + std::to_string(c.observed / 16)
                                 : std::string(" torn");
        }
      } else {
        out += " in flight";
      }
      out += "]";
    }
    return out;
  }

  WorkloadSpec w_;
};

}  // namespace pmhash::crashtest
