// tests/crash/oracle.h - what a recovered store must hold after a crash in
// the middle of the crash-checker workload (workload.h), and the check of
// it, shared by the simulated-crash explorer and the process-kill test.
//
// The promise, per thread t, is a window [done_t, seen_t]: operations below
// done_t were promised before the crash and must all be present; operations
// done_t..seen_t may have been in flight (seen_t is how many the thread had
// acknowledged by the time the crash image was complete), each wholly
// present or wholly absent, in order. What was promised depends on the
// durability (DESIGN.md, "Durability contract"):
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
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <thread>
#include <utility>
#include <set>
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
    std::string dup;
    const Status it = store.for_each([&](std::string_view k, std::string_view v) {
      if (!seen.emplace(std::string(k), std::string(v)).second && dup.empty()) dup = std::string(k);
      return true;
    });
    if (!it.ok()) return "for_each failed: " + it.to_string();
    if (!dup.empty()) return "key " + dup + " is visible twice";

    std::vector<std::map<std::uint64_t, std::string>> found(w_.threads);
    for (const auto& [k, v] : seen) {
      const auto parsed = parse_key(k);
      if (!parsed || parsed->first >= w_.threads || parsed->second >= w_.keys) {
        return "key " + printable(k) + " was never written by the workload";
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
          return "get(" + key_name(t, k) + ") = " + g.to_string() + " '" + printable(v) +
                 "', but for_each lists '" + printable(f->second) + "'";
        }
      }
    }
    if (store.size() != seen.size()) {
      return "size() = " + std::to_string(store.size()) + ", but " + std::to_string(seen.size()) +
             " keys are visible";
    }
    // An engine that sweeps leaked blocks in the background after a crash
    // reports leaks once the sweep has ended: wait for it (bounded).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!store.stats().swept) {
      if (std::chrono::steady_clock::now() > deadline) return "the sweep after recovery never ended";
      std::this_thread::yield();
    }
    if (Status c = store.check(); !c.ok()) return "check() after recovery: " + c.to_string();
    if (further) return keeps_working(store, found);
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
      const std::string expected = p == promised.end() ? "<absent>" : "'" + printable(p->second) + "'";
      const std::string actual = f == found.end() ? "<absent>" : "'" + printable(f->second) + "'";
      if (expected != actual) what = "key " + key_name(t, k) + ": acknowledged " + expected + ", recovered " + actual;
    }
    return "thread " + std::to_string(t) + ": recovered keys match no prefix of its operations in [" +
           std::to_string(win.done) + ", " + std::to_string(hi) + "] (" +
           std::to_string(win.done) + " acknowledged); first difference from the acknowledged state: " +
           what;
  }

  // A further workload on the recovered store, checked against a model.
  static std::string keeps_working(Store& store,
                                   const std::vector<std::map<std::uint64_t, std::string>>& found) {
    std::map<std::string, std::string> model;
    for (unsigned t = 0; t < found.size(); ++t) {
      for (const auto& [k, v] : found[t]) model.emplace(key_name(t, k), v);
    }
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

  static std::string printable(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 48)) out += (c >= 32 && c < 127) ? c : '?';
    if (s.size() > 48) out += "...(" + std::to_string(s.size()) + " bytes)";
    return out;
  }

  WorkloadSpec w_;
  std::vector<ThreadModel> models_;
  std::vector<std::uint64_t> prefix_;
};

}  // namespace pmhash::crashtest
