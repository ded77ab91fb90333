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
// Epoch E ends by an advance, run by the worker thread every interval or by
// a caller that waits for durability (see "Who ends an epoch"). Advance(E),
// with E current:
//
//   1. ends E-1, which the advance before published E past: waits until no
//      thread still works in E-1 (the epoch boundary is a consistent cut,
//      paper Lemma 2; quiescent() becomes E-1), then runs the global fence
//      for E-1:
//        page        write back every page the threads marked as dirtied
//                    in E-1 (dirty()), then one drain (fdatasync)
//        cache_line  user space has no WBINVD: flush every line the threads
//                    recorded as dirtied in E-1, then one drain (none if
//                    they recorded nothing)
//        byte        a drain
//        none        nothing
//   2. counter := E+1 and persisted, then, under the sequence lock, E+1
//      published. No operation runs in E+1 before recovery would count E+1
//      (and E) as failed after a crash. The paper persists the counter
//      under the sequence lock; persisting it first, while threads still
//      work in E, is as safe (a crash then fails E and E+1, and E has not
//      been fenced anyway; E-1's fence ran in step 1) and keeps the
//      write-back, a system call on page granularity, out of the window in
//      which enter() waits.
// The wait for E and E's fence are left to the next advance: the caller
// that needed E+1 published does not wait for the threads still in E. (An
// earlier version ran them at the end of advance(E), so that a caller that
// needed E+1 published waited for them too.)
//
// When an epoch's writes are durable. Recovery after a crash with the
// counter F on media fails F and F-1 (dali_recovery.cc, append_failures),
// nothing else of the run that crashed. So a write of epoch e survives a
// crash exactly when, at that crash, (i) the counter on media is >= e+2 (e
// is then below F-1) and (ii) everything e wrote is on media. The orders:
//   P1  fence(e) runs in advance(e+1), step 1, after the wait for the
//       threads in e, and before its step 2 persists the counter e+2;
//   P2  advances run one at a time (advance_mu_), so fence(e) has ended
//       before the counter e+2 is stored;
//   P3  advance(e+1) persists the counter e+2 (its step 2) before it
//       publishes e+2 as current().
// Hence once current() >= e+2, the counter e+2 is on media (P3) and
// fence(e) ended before it was stored (P1, P2): both conditions hold.
// durable_through() = current() - 2, and wait_durable(e) returns as soon as
// advance(e+1) has published e+2, without waiting for the threads still in
// e+1 nor for fence(e+1) (those run in advance(e+2)). Not any sooner: with
// the counter e+1 on media, recovery fails e. The signal is the
// publication, not the persist just before it, so that every operation
// that starts after a strict write returned runs in an epoch >= e+2 and a
// snapshot read (as of its epoch - 2) sees the write.
//
// Who ends an epoch. The worker, every interval (bounding what a crash can
// lose in epoch durability); and any caller of wait_durable(e), which runs
// the advances itself ("helping") instead of waking the worker and sleeping
// until it is done: on a machine with few cores each such hand-off costs
// two context switches, many times an advance. A helper takes advance_mu_
// with try_lock; a caller that finds it taken polls current() (with
// yields) until the holder has published, and helps on if that was not
// enough. So one advance serves every caller waiting on it (group commit),
// and P1-P3 hold whoever advances. The caller must not be inside an epoch
// (step 1 would wait for itself); it may hold stripe locks, since no
// thread inside an epoch waits for one (dali.h, "Locks").
//
// Reclamation: a block unlinked in epoch u may be freed once quiescent() >=
// u+1 (set in advance(u+2), step 1). Then the counter u+2 is durable
// (advance(u+1) persisted it after fence(u): the unlink survives every crash),
// and every thread that could have reached the block before its unlink
// (those in u-1, u and u+1) has left.
//
// Dirty-line buffers (cache_line): each thread slot keeps two lists of
// ranges, one per epoch parity. A thread appends to the list of the epoch it
// entered; advance(E+1) flushes and clears the list of E in its step 1,
// after the wait for E, when no thread appends to it any more, and before
// its step 2 lets any thread enter E+2, the next epoch with that parity.
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
#include "pmhash/limits.h"

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
  // operation so far durable, and fences the epoch left open (empty). No
  // operation may run concurrently.
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
  // Returns once every operation of epoch e survives any crash, ending
  // epochs in the calling thread as needed. The caller must not be inside
  // an epoch.
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
  // The quiescence wait and fence of the epoch the last advance ended, if
  // not run yet (under advance_mu_).
  void finish_pending();
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
  // 1 + the highest slot that ever entered an epoch; only grows. The
  // advances scan slots [0, slots_used_).
  std::atomic<unsigned> slots_used_{0};
  std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> quiescent_{0};
  std::atomic<std::uint64_t> fences_{0};
  std::uint64_t pending_ = 0;  // under advance_mu_: epoch ended, not fenced yet

  // One advance at a time (worker, helpers in wait_durable, stop).
  std::mutex advance_mu_;
  mutable std::mutex mu_;  // the fields below
  std::condition_variable wake_;  // the worker: stop
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pmhash::engine::dali
