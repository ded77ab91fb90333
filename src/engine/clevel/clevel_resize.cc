// engine/clevel/clevel_resize.cc - expansion, shrinking and the rehash
// threads (design in clevel.h).
#include <algorithm>
#include <bit>
#include <chrono>
#include <functional>
#include <mutex>
#include <string_view>

#include "engine/clevel/clevel_index.h"
#include "engine/clevel/clevel_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::clevel {
namespace {

// Intent slots of the heap log: an insert holds its item in one while an
// expansion it triggers holds the new level in the other.
[[maybe_unused]] constexpr unsigned kItemIntent = 0;  // write_item() allocation: the default slot
constexpr unsigned kLevelIntent = 1;

// The test hooks (clevel_testing.h): set while no operation runs, copied
// under the mutex before each call.
std::mutex hook_mutex;
std::atomic<bool> has_move_hook{false};
std::atomic<bool> has_writer_wait_hook{false};
std::function<void(testing::MoveStep, std::string_view)> move_hook;
std::function<void()> writer_wait_hook;

std::uint64_t round_key(Ctx c) {
  return std::uint64_t{c.drain_level()} | (c.shrinking() ? std::uint64_t{1} << 16 : 0) |
         (std::uint64_t{1} << 17);
}

}  // namespace

void testing::set_move_hook(std::function<void(MoveStep, std::string_view)> hook) {
  std::lock_guard lock(hook_mutex);
  has_move_hook.store(static_cast<bool>(hook));
  move_hook = std::move(hook);
}

void testing::set_writer_wait_hook(std::function<void()> hook) {
  std::lock_guard lock(hook_mutex);
  has_writer_wait_hook.store(static_cast<bool>(hook));
  writer_wait_hook = std::move(hook);
}

void run_move_hook(testing::MoveStep step, std::string_view key) {
  if (!has_move_hook.load(std::memory_order_relaxed)) return;
  std::function<void(testing::MoveStep, std::string_view)> hook;
  {
    std::lock_guard lock(hook_mutex);
    hook = move_hook;
  }
  if (hook) hook(step, key);
}

void run_writer_wait_hook() {
  if (!has_writer_wait_hook.load(std::memory_order_relaxed)) return;
  std::function<void()> hook;
  {
    std::lock_guard lock(hook_mutex);
    hook = writer_wait_hook;
  }
  if (hook) hook();
}

void ClevelIndex::wake_rehash() {
  {
    std::lock_guard lock(rehash_mutex_);
    ++wake_seq_;
  }
  rehash_cv_.notify_all();
}

// Allocates a zeroed level and links it into the ring at `id`. Returns the
// level linked there (ours or a concurrent winner's); *mine says whose.
static Status make_level(media::Region& region, heap::ThreadCache* tc, std::atomic<std::uint64_t>& entry,
                         std::uint16_t id, unsigned log2, std::uint64_t* linked, bool* mine) {
  *mine = false;
  std::uint64_t off = 0;
  if (Status s = tc->allocate(level_bytes(log2), &off, /*zero=*/true, kLevelIntent); !s.ok()) {
    return Status::NoSpace("pool full: no room for a level of " +
                           std::to_string(level_bytes(log2)) + " bytes (" + s.message() + ")");
  }
  auto* l = region.at<LevelHeader>(off);
  l->magic = kLevelMagic;
  l->log2 = log2;
  l->id = id;
  region.flush(l, sizeof(LevelHeader));
  // The zeroed buckets, the header and the allocation are durable before the
  // ring links the level.
  region.drain();
  std::uint64_t expected = 0;
  if (entry.compare_exchange_strong(expected, off)) {
    // The ring entry is durable before a context can name the level.
    region.flush(&entry, sizeof(std::uint64_t));
    if (!planted::active(testing::kNoFenceBeforeContextSwap)) region.drain();
    *mine = true;
    *linked = off;
  } else {
    tc->free_unpublished(off);  // a concurrent expander linked its level first
    tc->clear_intent(kLevelIntent);
    *linked = expected;
  }
  return Status::OK();
}

ClevelIndex::Attempt ClevelIndex::expand(heap::ThreadCache* tc, Ctx c, bool rehasher,
                                         Status* status) {
  // Rehash threads may go further than workers: they are what shrinks the
  // list again, so they must never wait for it.
  if (c.levels() >= (rehasher ? kRingSize - 4 : kMaxLevels)) {
    wake_rehash();
    return Attempt::kYield;
  }
  const auto nid = static_cast<std::uint16_t>(c.first() + 1);
  auto& entry = root_->levels[nid % kRingSize];
  std::uint64_t linked = entry.load(std::memory_order_acquire);
  bool mine = false;
  if (linked == 0) {
    const unsigned log2 = level(c.first())->log2 + 1;
    if (log2 > kMaxLevelLog2) {
      *status = Status::NoSpace("table reached its largest level size");
      return Attempt::kDone;
    }
    if (Status s = make_level(region_, tc, entry, nid, log2, &linked, &mine); !s.ok()) {
      *status = s;
      return Attempt::kDone;
    }
  }
  // Paper §3.1.2 step 3: the context names the new first level.
  for (;;) {
    const Ctx now = load_ctx();
    if (now.contains(nid)) break;
    if (now.first() != c.first() || now.shrinking()) {
      // A shrink started meanwhile; this level will never be used.
      if (mine) abandon_level(tc, nid, linked);
      return Attempt::kRetry;
    }
    // The entry may still hold the level a shrink just dropped from this id
    // (its round clears the entry after a grace period): naming that one
    // would make the context point at a freed level, then at the pool
    // header. Wait outside the read-side section for the entry to clear.
    // (dropping_ first: the round clears the entry before dropping_, so an
    // entry read afterwards that still equals it is the dropped level.)
    const std::uint64_t dropping = dropping_[nid % kRingSize].load(std::memory_order_seq_cst);
    const std::uint64_t current = entry.load(std::memory_order_seq_cst);
    if (current == 0) return Attempt::kRetry;  // abandoned or dropped: make one
    if (current == dropping) return Attempt::kYield;
    // A level another expander linked may not be durable yet (its linker
    // persists the entry after the CAS): the context must not name it
    // before it is (found by the crash checker, two threads).
    if (!mine) region_.persist(&entry, sizeof(std::uint64_t));
    ensure_filter(nid);
    if (cas_ctx(now, now.next(nid, now.last(), /*resizing=*/true, /*shrinking=*/false))) {
      expansions_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  if (mine) tc->clear_intent(kLevelIntent);
  wake_rehash();
  return Attempt::kRetry;
}

void ClevelIndex::abandon_level(heap::ThreadCache* tc, std::uint16_t id, std::uint64_t off) {
  auto& entry = root_->levels[id % kRingSize];
  std::uint64_t e = off;
  if (entry.compare_exchange_strong(e, 0)) {
    region_.flush(&entry, sizeof(std::uint64_t));
    tc->retire(off);
    // The cleared entry and the retire entry are durable before the intent
    // is cleared: else a crash could keep the cleared intent and the cleared
    // entry without the retire entry, and leak the level.
    region_.drain();
  }
  tc->clear_intent(kLevelIntent);
}

void ClevelIndex::maybe_shrink(heap::ThreadCache* tc) {
  static thread_local unsigned ticks = 0;
  if (config_.shrink_threshold <= 0 || ++ticks % 256 != 0) return;
  tc->reserve_retire(1);
  rcu::ReadGuard guard;
  const Ctx c = load_ctx();
  if (c.resizing() || c.levels() != 2) return;
  LevelHeader* first = level(c.first());
  LevelHeader* last = level(c.last());
  if (first->log2 < root_->min_log2 + 1 || last->log2 == 0) return;
  const std::uint64_t slots_now = (std::uint64_t{kSlotsPerBucket} << first->log2) +
                                  (std::uint64_t{kSlotsPerBucket} << last->log2);
  if (static_cast<double>(size()) >= config_.shrink_threshold * slots_now) return;
  // Paper §5: a level of half the last level's buckets below the last; the
  // first level is then emptied top-to-bottom and dropped.
  const auto nid = static_cast<std::uint16_t>(c.last() - 1);
  auto& entry = root_->levels[nid % kRingSize];
  if (entry.load() != 0) return;  // another thread is shrinking
  std::uint64_t linked = 0;
  bool mine = false;
  if (!make_level(region_, tc, entry, nid, last->log2 - 1, &linked, &mine).ok() || !mine) return;
  ensure_filter(nid);
  if (cas_ctx(c, c.next(c.first(), nid, /*resizing=*/true, /*shrinking=*/true))) {
    shrinks_.fetch_add(1, std::memory_order_relaxed);
    tc->clear_intent(kLevelIntent);
    wake_rehash();
  } else {
    abandon_level(tc, nid, linked);
  }
}

// ---------------------------------------------------------------------------
// Rehash threads
// ---------------------------------------------------------------------------

std::uint64_t ClevelIndex::resume_bucket(std::uint64_t key) const {
  // Buckets below the smallest `next` of the round's threads are done by all
  // of them (every thread of a round writes its entry when the round starts).
  std::uint64_t start = UINT64_MAX;
  for (const Progress& p : root_->progress) {
    if (p.level_id.load() == key) start = std::min(start, p.next.load());
  }
  return start == UINT64_MAX ? 0 : start;
}

ClevelIndex::Attempt ClevelIndex::move_bucket(heap::ThreadCache* tc, Bucket* b,
                                              std::uint16_t src) {
  std::atomic<std::uint64_t>* where[kSlotsPerBucket];
  std::uint64_t what[kSlotsPerBucket];
  unsigned n = 0;
  for (auto& s : b->slot) {
    std::uint64_t v = s.load(std::memory_order_acquire);
    // Freeze: from now on we are the only writer of this slot.
    while (!slot_empty(v) && !s.compare_exchange_weak(v, v | kMoving)) {
    }
    if (!slot_empty(v)) {
      where[n] = &s;
      what[n++] = v & ~kMoving;
    }
  }
  if (n == 0) return Attempt::kDone;
  // What we copy is durable where it is before any copy is: a writer's CAS
  // into one of these slots may not be durable yet, and a durable copy of it
  // beside the old value still on media would be two items with one key
  // after a crash (found by the crash checker, page granularity). Recovery
  // clears the MOVING bits this makes durable (progress names the bucket).
  region_.persist(b, sizeof(Bucket));
  unsigned copied = 0;
  Attempt result = Attempt::kDone;
  std::vector<SlotRef> refs;
  // The keys of the whole items, for the test hook only.
  std::string_view keys[kSlotsPerBucket];
  bool whole[kSlotsPerBucket] = {};
  for (; copied < n; ++copied) {
    const std::uint64_t off = slot_offset(what[copied]);
    // A resize that open resumed runs before check() has seen the table: a
    // damaged slot, one that names no whole item, is dropped (cleared below
    // with the copied ones), never read beyond its block.
    const std::size_t size = heap_.block_size(off);
    if (size < sizeof(ItemHeader) ||
        sizeof(ItemHeader) + std::uint64_t{region_.at<ItemHeader>(off)->key_len} +
                region_.at<ItemHeader>(off)->value_len >
            size) {
      continue;
    }
    keys[copied] = item_key(region_.at<ItemHeader>(off));
    whole[copied] = true;
    run_move_hook(testing::MoveStep::kFrozen, keys[copied]);
    const Key key = make_key(keys[copied]);
    Ctx c = load_ctx();
    collect(key, c, off, &refs);
    if (std::any_of(refs.begin(), refs.end(), [&](const SlotRef& r) { return r.level != src; })) {
      continue;  // already copied (a context-aware insert, or a crash mid-move)
    }
    std::uint16_t id = 0;
    Status s;
    Attempt a;
    while ((a = place(tc, key, what[copied], c, /*rehasher=*/true, &id, &s)) == Attempt::kRetry) {
      c = load_ctx();
    }
    if (!s.ok() || a != Attempt::kDone) {
      result = Attempt::kYield;
      break;
    }
  }
  // The copies are durable before the sources are cleared: a crash in
  // between leaves two pointers to one item, never none.
  region_.drain();
  // A cleared source is "moved out" (MOVING alone) until the clearing is
  // durable. Searches take it for empty, but writers wait for it: an update
  // or delete of the copy made durable by the writer's own drain before
  // this one would let a crash bring the old pointer back beside the new
  // state (found by the crash checker, two threads).
  for (unsigned i = 0; i < n; ++i) {
    if (i < copied) {
      where[i]->store(kMoving, std::memory_order_release);
      moved_.fetch_add(1, std::memory_order_relaxed);
    } else {
      where[i]->store(what[i], std::memory_order_release);  // unfreeze: not moved
    }
  }
  for (unsigned i = 0; i < copied; ++i) {
    if (whole[i]) run_move_hook(testing::MoveStep::kMovedOut, keys[i]);
  }
  region_.persist(b, sizeof(Bucket));
  // Then truly empty, durably so before the progress entry moves past the
  // bucket: recovery clears moved-out slots only in the buckets it names.
  for (unsigned i = 0; i < copied; ++i) where[i]->store(0, std::memory_order_release);
  region_.persist(b, sizeof(Bucket));
  return result;
}

bool ClevelIndex::rehash_share(heap::ThreadCache* tc, unsigned j, Ctx c, std::uint64_t start) {
  const std::uint16_t src = c.drain_level();
  Progress& progress = root_->progress[j];
  std::uint64_t buckets = 0;
  {
    rcu::ReadGuard guard;
    buckets = std::uint64_t{1} << level(src)->log2;
  }
  for (std::uint64_t b = start + j; b < buckets; b += rehash_threads_) {
    if (stop_.load(std::memory_order_relaxed)) return false;
    if (c.shrinking() && shrink_abort_requested_.load()) return false;
    {
      std::shared_lock pause(pause_);
      rcu::ReadGuard guard;
      if (move_bucket(tc, level_buckets(level(src)) + b, src) != Attempt::kDone) {
        // No room for an item: a shrink must turn around; an expansion waits
        // for space (rehash_main backs off).
        if (c.shrinking()) shrink_abort_requested_.store(true);
        return false;
      }
      progress.next.store(b + rehash_threads_, std::memory_order_relaxed);
      // Progress is durable after the bucket's moves (move_bucket drained
      // the copies, then the cleared sources): recovery resumes after it.
      if (!planted::active(testing::kProgressNotPersisted)) {
        region_.persist(&progress.next, sizeof(std::uint64_t));
      }
    }
  }
  return true;
}

void ClevelIndex::finish_round(heap::ThreadCache* tc, Ctx c, bool complete) {
  const std::uint16_t src = c.drain_level();
  // Every move of the round is done (each thread has returned from its
  // share). After a shrink's round, scans learn that items may move up again
  // before the context allows any move up (clevel.h, "Scan").
  if (c.shrinking()) set_scan_epoch_parity(0);
  if (!complete) {
    // Paper-external: a shrink that ran out of room turns into an expansion
    // that empties the small level it added (upwards).
    for (;;) {
      const Ctx now = load_ctx();
      if (!now.shrinking() || cas_ctx(now, now.next(now.first(), now.last(), true, false))) break;
    }
    shrink_abort_requested_.store(false);
    return;
  }
  const std::uint64_t off = root_->levels[src % kRingSize].load();
  // The level is empty and nothing is placed into it any more: its filter is
  // unhooked (searches that still reach the level scan its buckets
  // unfiltered) and freed after the grace period below.
  const std::unique_ptr<TagFilter> filter = take_filter(src);
  dropping_[src % kRingSize].store(off, std::memory_order_seq_cst);
  for (;;) {  // paper §3.1.2 step 5
    const Ctx now = load_ctx();
    Ctx next;
    if (c.shrinking()) {
      next = now.next(static_cast<std::uint16_t>(src - 1), now.last(), false, false);
    } else {
      // Still resizing while more than two levels remain (paper: rehash
      // until two levels are left).
      const auto last = static_cast<std::uint16_t>(src + 1);
      next = now.next(now.first(), last, static_cast<std::uint16_t>(now.first() - last) > 1, false);
    }
    if (cas_ctx(now, next)) break;
  }
  shrink_abort_requested_.store(false);
  // New searches no longer reach the level, but a thread that loaded the old
  // context may still look its id up in the ring: the entry must stay until
  // every such reader is gone (a zero entry would resolve to the pool
  // header). Until it is cleared, recovery frees the level (out of range).
  rcu::synchronize();
  tc->retire(off);
  region_.drain();  // the retire entry is durable before the ring forgets the level
  root_->levels[src % kRingSize].store(0, std::memory_order_release);
  region_.persist(&root_->levels[src % kRingSize], sizeof(std::uint64_t));
  dropping_[src % kRingSize].store(0, std::memory_order_seq_cst);
}

void ClevelIndex::set_scan_epoch_parity(std::uint64_t parity) {
  std::uint64_t e = root_->scan_epoch.load(std::memory_order_seq_cst);
  if ((e & 1) == parity) return;  // a resumed round, or a pool that was left so
  root_->scan_epoch.fetch_add(1, std::memory_order_seq_cst);
  // Durable before the first move it announces: a cursor handed out after a
  // crash must not carry the old epoch past moves the new one covers.
  region_.persist(&root_->scan_epoch, sizeof(std::uint64_t));
}

void ClevelIndex::rehash_main(unsigned j) {
  rcu::register_thread();
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return;
  if (j == 0) build_filters();
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(rehash_mutex_);
      // The timeout only bounds how long a missed wake-up could delay a
      // resize; correctness never depends on it.
      rehash_cv_.wait_for(lock, std::chrono::milliseconds(100),
                          [&] { return stop_ || wake_seq_ != seen; });
      if (stop_) return;
      seen = wake_seq_;
      round_failed_ = false;
    }
    for (;;) {
      {
        std::shared_lock pause(pause_);
        tc->reserve_retire(2);
      }
      Ctx c;
      {
        rcu::ReadGuard guard;
        c = load_ctx();
      }
      if (!c.resizing()) break;
      const std::uint64_t key = round_key(c);
      std::uint64_t start = 0;
      std::uint64_t epoch = 0;
      {
        std::unique_lock lock(rehash_mutex_);
        if (stop_) return;
        if (round_key_ != key) {
          // Before a shrink's first move down, scans learn that items now
          // move towards smaller levels (clevel.h, "Scan").
          if (c.shrinking()) set_scan_epoch_parity(1);
          round_key_ = key;
          round_start_ = resume_bucket(key);
          round_done_mask_ = 0;
          round_complete_ = 0;
          // Every thread's entry names this round before any bucket moves,
          // so resume_bucket() after a crash sees exactly this round. The
          // next buckets are durable before the level ids that vouch for
          // them: an entry is one line, but a line may reach media in part,
          // and a new id beside an old `next` would skip buckets (found by
          // the crash checker).
          for (unsigned i = 0; i < kMaxRehashThreads; ++i) {
            const bool member = i < rehash_threads_;
            root_->progress[i].next.store(member ? round_start_ + i : 0);
          }
          region_.persist(root_->progress, sizeof(root_->progress));
          for (unsigned i = 0; i < kMaxRehashThreads; ++i) {
            const bool member = i < rehash_threads_;
            root_->progress[i].level_id.store(member ? key : 0);
          }
          region_.persist(root_->progress, sizeof(root_->progress));
        }
        if (round_failed_) break;  // out of space: wait for a wake-up
        if (round_done_mask_ & (1u << j)) {
          epoch = round_epoch_;
          rehash_cv_.wait_for(lock, std::chrono::milliseconds(100),
                              [&] { return stop_ || round_epoch_ != epoch; });
          continue;
        }
        start = round_start_;
        epoch = round_epoch_;
      }
      const bool complete = rehash_share(tc, j, c, start);
      bool last = false;
      bool all = false;
      {
        std::unique_lock lock(rehash_mutex_);
        if (stop_) return;
        round_done_mask_ |= 1u << j;
        round_complete_ += complete ? 1 : 0;
        last = std::popcount(round_done_mask_) == static_cast<int>(rehash_threads_);
        all = round_complete_ == rehash_threads_;
      }
      if (!last) continue;  // wait above for the round to end
      // Lock order is pause_ before rehash_mutex_ (a move may expand, which
      // wakes rehash threads), so the round is finished outside the latter.
      {
        std::shared_lock pause(pause_);
        finish_round(tc, c, all);
      }
      std::unique_lock lock(rehash_mutex_);
      round_failed_ = !all && !c.shrinking();
      round_key_ = 0;
      ++round_epoch_;
      rehash_cv_.notify_all();
    }
  }
}

void ClevelIndex::start() {
  for (unsigned j = 0; j < rehash_threads_; ++j) {
    rehashers_.emplace_back([this, j] { rehash_main(j); });
  }
  wake_rehash();
}

}  // namespace pmhash::engine::clevel
