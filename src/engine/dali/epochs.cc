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
  // The current epoch's fence, then the next one's: the counter then says
  // that every operation so far survives a crash.
  advance_now();
  advance_now();
}

std::uint64_t Epochs::enter(unsigned t) {
  Slot& s = slots_[t];
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
  std::unique_lock lock(mu_);
  if (!stop_ && thread_.joinable()) {
    wanted_ = std::max(wanted_, e + 2);
    wake_.notify_all();
    advanced_.wait(lock, [&] { return current() >= e + 2 || stop_; });
    if (current() >= e + 2) return;
  }
  // No worker (stopping, or it never started): advance in this thread.
  lock.unlock();
  while (durable_through() < e) advance_now();
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
    // The interval bounds the work a crash can lose; a waiter cuts it short.
    wake_.wait_for(lock, interval_, [&] { return stop_ || wanted_ > current(); });
    if (stop_) return;
    lock.unlock();
    advance_now();
    lock.lock();
  }
}

void Epochs::advance() {
  const std::uint64_t e = current_.load(std::memory_order_relaxed);
  // 1. The new counter is durable before anything runs in it: a crash in
  //    e+1 must find e+1 on media, or recovery would trust e+1's writes (and
  //    e's, whose fence has not run). Then, under the sequence lock, e+1 is
  //    published.
  counter_->store(e + 1, std::memory_order_release);
  region_.persist(counter_, sizeof(std::uint64_t));
  seq_.fetch_add(1, std::memory_order_seq_cst);
  current_.store(e + 1, std::memory_order_release);
  seq_.fetch_add(1, std::memory_order_seq_cst);
  // Epoch e-1 is durable now (epochs.h, "When an epoch's writes are
  // durable": its fence ran in the previous advance, and the counter e+1 is
  // on media): its waiters go. The lock orders the store above before a
  // waiter's check of its predicate, so no wake-up is lost.
  { std::lock_guard lock(mu_); }
  advanced_.notify_all();
  // 2. Wait for the threads still in e (or in an earlier epoch: a thread
  //    announces the value it read, which may be older than e only if it
  //    read it before the last advance, whose wait covered it).
  for (unsigned t = 0; t < kMaxThreads; ++t) {
    for (;;) {
      const std::uint64_t a = slots_[t].active.load(std::memory_order_seq_cst);
      if (a == 0 || a > e) break;
      std::this_thread::yield();
    }
  }
  quiescent_.store(e, std::memory_order_release);
  // 3. Everything written in e reaches media, before the next advance can
  //    persist the counter e+2 (advance_mu_): from then on recovery trusts
  //    e's writes.
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
    case media::Granularity::kCacheLine:
      for (unsigned t = 0; t < kMaxThreads; ++t) {
        std::vector<Range>& list = slots_[t].dirty[e & 1];
        for (const Range& r : list) region_.flush(region_.at(r.off), r.len);
        list.clear();
      }
      region_.drain();
      return;
    case media::Granularity::kByte:
      region_.drain();
      return;
    case media::Granularity::kNone:
      return;
  }
}

}  // namespace pmhash::engine::dali
