// engine/dali/epochs.cc - epochs and the global fence (see epochs.h).
#include "engine/dali/epochs.h"

#include <pthread.h>

#include <algorithm>
#include <system_error>

namespace pmhash::engine::dali {

namespace {
constexpr std::uint64_t kPageSize = 4096;
}  // namespace

Epochs::Epochs(media::Region& region, std::atomic<std::uint64_t>* counter,
               std::chrono::milliseconds interval)
    : region_(region),
      counter_(counter),
      interval_(interval),
      track_lines_(region.granularity() == media::Granularity::kCacheLine),
      track_pages_(region.granularity() == media::Granularity::kPage),
      slots_(new Slot[kMaxThreads]) {
  if (track_pages_) {
    page_words_ = (region.size() / kPageSize + 63) / 64;
    for (auto& bits : pages_) bits.reset(new std::atomic<std::uint64_t>[page_words_]());
  }
  const std::uint64_t e = counter_->load(std::memory_order_acquire);
  current_.store(e);
  quiescent_.store(e - 1);
}

Epochs::~Epochs() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Epochs::start() {
  try {
    thread_ = std::thread([this] { worker(); });
  } catch (const std::system_error& e) {
    return Status::IOError(std::string("dali: cannot start the epoch thread: ") + e.what());
  }
  return Status::OK();
}

void Epochs::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Two advances: the counter then says that every operation so far
  // survives a crash. Then the fence of the epoch the second one left open,
  // in which nothing ran: the pool is left with no epoch half done.
  std::lock_guard lock(advance_mu_);
  advance();
  advance();
  finish_pending();
}

std::uint64_t Epochs::enter(unsigned t) {
  Slot& s = slots_[t];
  // A slot above the ones in use joins the advances' scans before it first
  // announces an epoch (seq_cst, before the announcement below: an advance
  // that must see the announcement sees the raised count).
  if (t >= slots_used_.load(std::memory_order_relaxed)) {
    unsigned used = slots_used_.load(std::memory_order_seq_cst);
    while (used <= t && !slots_used_.compare_exchange_weak(used, t + 1, std::memory_order_seq_cst)) {
    }
  }
  for (;;) {
    const std::uint64_t seq = seq_.load(std::memory_order_seq_cst);
    if (seq & 1) {  // the next epoch is being published
      std::this_thread::yield();
      continue;
    }
    // Acquire: an epoch seen here was persisted before it was published.
    const std::uint64_t e = current_.load(std::memory_order_acquire);
    s.active.store(e, std::memory_order_seq_cst);
    // An advance that began after our first read of seq must see this
    // announcement or make us see it: we announce again.
    if (seq_.load(std::memory_order_seq_cst) == seq) return e;
  }
}

void Epochs::exit(unsigned t) {
  // Release: our writes and dirty-range appends happen before the worker's
  // acquire load that sees the slot free.
  slots_[t].active.store(0, std::memory_order_release);
}

void Epochs::dirty(unsigned t, const void* p, std::size_t n) {
  if (n == 0) return;
  Slot& s = slots_[t];
  if (track_pages_) {
    std::atomic<std::uint64_t>* bits = pages_[s.active.load(std::memory_order_relaxed) & 1].get();
    const std::uint64_t off = region_.offset_of(p);
    for (std::uint64_t page = off / kPageSize; page <= (off + n - 1) / kPageSize; ++page) {
      std::atomic<std::uint64_t>& w = bits[page / 64];
      const std::uint64_t bit = std::uint64_t{1} << (page % 64);
      if ((w.load(std::memory_order_relaxed) & bit) == 0) w.fetch_or(bit, std::memory_order_relaxed);
    }
    return;
  }
  if (!track_lines_) return;
  std::vector<Range>& list = s.dirty[s.active.load(std::memory_order_relaxed) & 1];
  const std::uint64_t off = region_.offset_of(p);
  // Consecutive writes often touch the same lines (a record, then the
  // bucket beside the last one): merge a range that extends the last.
  if (!list.empty()) {
    Range& last = list.back();
    if (off >= last.off && off <= last.off + last.len) {
      last.len = std::max(last.len, off + n - last.off);
      return;
    }
  }
  list.push_back({off, n});
}

void Epochs::wait_durable(std::uint64_t e) {
  // Lock-free when already durable (a strict read of an old record).
  if (current() >= e + 2) return;
  // Helping (epochs.h, "Who ends an epoch"): the caller runs the advances
  // itself. One advance at a time: a caller that finds another advancing
  // waits for it to publish, and then needs one advance fewer, or none
  // (group commit: one advance serves every caller waiting on it).
  while (current() < e + 2) {
    std::unique_lock lock(advance_mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      if (current() < e + 2) advance();
      continue;
    }
    std::this_thread::yield();
  }
}

void Epochs::advance_now() {
  std::lock_guard lock(advance_mu_);
  advance();
}

void Epochs::worker() {
  // Named for top and perf: "pmhash-epochs".
  pthread_setname_np(pthread_self(), "pmhash-epochs");
  std::unique_lock lock(mu_);
  for (;;) {
    // The interval bounds the work a crash can lose. Callers that wait for
    // durability end epochs themselves (wait_durable).
    const std::uint64_t seen = current();
    wake_.wait_for(lock, interval_, [&] { return stop_; });
    if (stop_) return;
    // An epoch a helper ended meanwhile restarts the interval.
    if (current() != seen) continue;
    lock.unlock();
    advance_now();
    lock.lock();
  }
}

void Epochs::advance() {
  const std::uint64_t e = current_.load(std::memory_order_relaxed);
  // 1. Epoch e-1, published by the advance before, ends: its quiescence
  //    wait and its fence, before the counter e+1 can reach media (from
  //    then on recovery trusts e-1's writes).
  finish_pending();
  // 2. The new counter is durable before anything runs in it: a crash in
  //    e+1 must find e+1 on media, or recovery would trust e+1's writes (and
  //    e's, whose fence has not run). Then, under the sequence lock, e+1 is
  //    published.
  counter_->store(e + 1, std::memory_order_release);
  region_.persist(counter_, sizeof(std::uint64_t));
  seq_.fetch_add(1, std::memory_order_seq_cst);
  current_.store(e + 1, std::memory_order_release);
  seq_.fetch_add(1, std::memory_order_seq_cst);
  // Epoch e-1 is durable now (epochs.h, "When an epoch's writes are
  // durable": its fence ran in step 1, and the counter e+1 is on media):
  // its waiters, who poll current(), go. Epoch e ends in the next advance.
  pending_ = e;
}

void Epochs::finish_pending() {
  const std::uint64_t e = pending_;
  if (e == 0) return;
  pending_ = 0;
  // Wait for the threads still in e (or in an earlier epoch: a thread
  // announces the value it read, which may be older than e only if it read
  // it before the last advance, whose wait covered it).
  // Only the slots ever used (enter()): the scan touches one line per
  // thread, not one per possible thread.
  const unsigned used = slots_used_.load(std::memory_order_seq_cst);
  for (unsigned t = 0; t < used; ++t) {
    for (;;) {
      const std::uint64_t a = slots_[t].active.load(std::memory_order_seq_cst);
      if (a == 0 || a > e) break;
      std::this_thread::yield();
    }
  }
  quiescent_.store(e, std::memory_order_release);
  // Everything written in e reaches media, before the counter e+2 can
  // (advance_mu_ is held from here to the persist of the next counter).
  fence(e);
}

void Epochs::fence(std::uint64_t e) {
  fences_.fetch_add(1, std::memory_order_relaxed);
  switch (region_.granularity()) {
    case media::Granularity::kPage: {
      std::atomic<std::uint64_t>* bits = pages_[e & 1].get();
      std::uint64_t run = 0, len = 0;  // pages to write back, coalesced
      auto write_run = [&] {
        if (len == 0) return;
        const std::uint64_t off = run * kPageSize;
        region_.flush(region_.at(off), std::min<std::uint64_t>(len * kPageSize, region_.size() - off));
        len = 0;
      };
      for (std::size_t i = 0; i < page_words_; ++i) {
        std::uint64_t w = bits[i].load(std::memory_order_relaxed);
        if (w == 0) {
          write_run();
          continue;
        }
        bits[i].store(0, std::memory_order_relaxed);
        for (unsigned b = 0; b < 64; ++b) {
          if ((w >> b & 1) == 0) {
            write_run();
            continue;
          }
          const std::uint64_t page = std::uint64_t{i} * 64 + b;
          if (len == 0) run = page;
          ++len;
        }
      }
      write_run();
      // E's pages are on media before the counter can reach E+2: else a
      // crash in E+2 would have recovery trust E's writes with some lost.
      region_.drain();
      return;
    }
    case media::Granularity::kCacheLine: {
      bool flushed = false;
      // Only slots that entered an epoch have dirtied lines.
      const unsigned used = slots_used_.load(std::memory_order_acquire);
      for (unsigned t = 0; t < used; ++t) {
        std::vector<Range>& list = slots_[t].dirty[e & 1];
        for (const Range& r : list) region_.flush(region_.at(r.off), r.len);
        flushed = flushed || !list.empty();
        list.clear();
      }
      // E's lines are on media before the counter can reach E+2. An epoch
      // that dirtied nothing has nothing to drain: every flush before it
      // was drained by an earlier fence or counter persist.
      if (flushed) region_.drain();
      return;
    }
    case media::Granularity::kByte:
      region_.drain();
      return;
    case media::Granularity::kNone:
      return;
  }
}

}  // namespace pmhash::engine::dali
