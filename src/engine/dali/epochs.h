// engine/dali/epochs.h - epochs and the global fence (Dalí paper §3.1, §3.4).
//
// Time is divided into epochs numbered by a persistent counter that only
// grows, also across crashes. Every update runs inside one epoch, and so
// does every lock-free (snapshot) read:
//
//   enter(t)  waits while the sequence lock is held (the counter is being
//             advanced), reads the epoch E, announces "thread t works in E"
//             in its slot (paper: the global array indexed by thread), and
//             re-reads the sequence: if an advance began meanwhile it
//             announces again. seq_cst on both sides (Dekker): either the
//             worker sees the announcement, or the thread sees the advance.
//   exit(t)   clears the announcement.
//
// A worker thread ends epoch E every interval (or sooner when a caller
// waits for durability):
//
//   1. counter := E+1 and persisted, then, under the sequence lock, E+1
//      published. No operation runs in E+1 before recovery would count E+1
//      (and E) as failed after a crash. The paper persists the counter
//      under the sequence lock; persisting it first, while threads still
//      work in E, is as safe (a crash then fails E and E+1, and E has not
//      been fenced anyway; E-1's fence ran in the previous advance) and
//      keeps the write-back, a system call on page granularity, out of the
//      window in which enter() waits.
//   2. waits until no thread still works in E: the epoch boundary is a
//      consistent cut (paper Lemma 2). quiescent() becomes E.
//   3. the global fence for E:
//        page        write back every page the threads marked as dirtied
//                    in E (dirty()), then one drain (fdatasync)
//        cache_line  user space has no WBINVD: flush every line the threads
//                    recorded as dirtied in E, then one drain
//        byte        a drain
//        none        nothing
//
// When an epoch's writes are durable. Recovery after a crash with the
// counter F on media fails F and F-1 (dali_recovery.cc, append_failures),
// nothing else of the run that crashed. So a write of epoch e survives a
// crash exactly when, at that crash, (i) the counter on media is >= e+2 (e
// is then below F-1) and (ii) everything e wrote is on media. The orders:
//   P1  fence(e) runs in advance(e), after the wait of its step 2 and
//       before advance(e) returns;
//   P2  advances run one at a time (advance_mu_), so advance(e) has
//       returned before advance(e+1) begins;
//   P3  advance(e+1) persists the counter e+2 (its step 1) before it
//       publishes e+2 as current().
// Hence once current() >= e+2, the counter e+2 is on media (P3) and
// fence(e) ended before it was persisted (P1, P2): both conditions hold.
// durable_through() = current() - 2, and wait_durable(e) returns as soon as
// advance(e+1) has published e+2, without waiting for the threads still in
// e+1 nor for fence(e+1). (An earlier version waited for advance(e+1) to
// end, one quiescence wait and one fence longer than recovery needs.) Not
// any sooner: with the counter e+1 on media, recovery fails e. The signal
// is the publication, not the persist just before it, so that every
// operation that starts after a strict write returned runs in an epoch >=
// e+2 and a snapshot read (as of its epoch - 2) sees the write.
// wait_durable(e) asks the worker to move on at once and waits for that
// (group commit: one fence serves every waiter).
//
// Reclamation: a block unlinked in epoch u may be freed once quiescent() >=
// u+1. Then the counter u+2 is durable (the unlink survives every crash),
// and every thread that could have reached the block before its unlink
// (those in u-1, u and u+1) has left.
//
// Dirty-line buffers (cache_line): each thread slot keeps two lists of
// ranges, one per epoch parity. A thread appends to the list of the epoch it
// entered; the worker flushes and clears the list of E after step 2, when no
// thread appends to it any more, and before any thread can enter E+2, the
// next epoch with that parity.
//
// Dirty-page bitmaps (page): on a file every flush is a system call and the
// file system writes whole pages anyway, so a thread sets the bit of each
// page it writes in a bitmap shared by all threads, one per epoch parity
// (an already set bit costs a load; hot pages are set once per epoch). The
// fence writes back every marked page, runs of neighbours in one pwrite, and
// clears the bits, under the same parity argument as the lists. Writing
// back lines of a marked page that were not written in E is allowed: any
// line may reach media at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "media/region.h"
#include "pmhash/store.h"

namespace pmhash::engine::dali {

class Epochs {
 public:
  // `counter`: the persistent epoch counter in the pool, already durable.
  Epochs(media::Region& region, std::atomic<std::uint64_t>* counter,
         std::chrono::milliseconds interval);
  ~Epochs();
  Epochs(const Epochs&) = delete;
  Epochs& operator=(const Epochs&) = delete;

  // Starts the worker.
  Status start();
  // Stops the worker, then ends the current epoch and the next, making every
  // operation so far durable. No operation may run concurrently.
  void stop();

  std::uint64_t enter(unsigned t);
  void exit(unsigned t);
  // Thread t (between enter and exit) wrote [p, p+n) of the pool.
  void dirty(unsigned t, const void* p, std::size_t n);

  std::uint64_t current() const { return current_.load(std::memory_order_acquire); }
  // No thread works in this epoch or an earlier one any more.
  std::uint64_t quiescent() const { return quiescent_.load(std::memory_order_acquire); }
  // Every operation of an epoch <= this survives any crash (current() - 2;
  // see "When an epoch's writes are durable" above). Lock-free.
  std::uint64_t durable_through() const {
    const std::uint64_t c = current();
    return c >= 2 ? c - 2 : 0;
  }
  // Returns once every operation of epoch e survives any crash. The caller
  // must not be inside an epoch.
  void wait_durable(std::uint64_t e);
  // Ends the current epoch now, in the calling thread (not inside an epoch).
  void advance_now();

  std::uint64_t fences() const { return fences_.load(std::memory_order_relaxed); }

 private:
  struct Range {
    std::uint64_t off;
    std::uint64_t len;
  };
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> active{0};  // epoch worked in, 0: none
    std::vector<Range> dirty[2];           // by epoch parity
  };

  void worker();
  void advance();  // under advance_mu_
  void fence(std::uint64_t e);

  media::Region& region_;
  std::atomic<std::uint64_t>* const counter_;
  const std::chrono::milliseconds interval_;
  const bool track_lines_;  // cache_line: dirty ranges in the slots
  const bool track_pages_;  // page: dirty pages in pages_
  std::unique_ptr<Slot[]> slots_;
  // Page granularity: one bit per 4 KiB page of the region, by epoch parity.
  std::size_t page_words_ = 0;
  std::unique_ptr<std::atomic<std::uint64_t>[]> pages_[2];
  std::atomic<std::uint64_t> seq_{0};  // odd while a new epoch is published
  std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> quiescent_{0};
  std::atomic<std::uint64_t> fences_{0};

  std::mutex advance_mu_;  // one advance at a time (worker, stop, advance_now)
  mutable std::mutex mu_;  // the fields below
  std::condition_variable wake_;      // the worker: stop or a waiter
  std::condition_variable advanced_;  // waiters: the counter moved
  std::uint64_t wanted_ = 0;          // a waiter needs current_ >= wanted_
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pmhash::engine::dali
