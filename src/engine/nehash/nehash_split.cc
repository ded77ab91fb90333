// engine/nehash/nehash_split.cc - growing: group creation, the in-place
// split and its persist order, overflow blocks, the full main expansion,
// and the recovery table's ids (design in nehash.h §1.2, §2.5, §3, §4.2).
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "engine/nehash/nehash.h"
#include "engine/nehash/nehash_index.h"
#include "engine/nehash/nehash_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::nehash {
namespace {

std::mutex hook_mutex;
std::function<void()> split_hook;
std::atomic<bool> has_split_hook{false};
std::function<void(testing::SplitStep)> step_hook;
std::atomic<bool> has_step_hook{false};

void run_split_hook() {
  if (!has_split_hook.load(std::memory_order_relaxed)) return;
  std::function<void()> hook;
  {
    std::lock_guard lock(hook_mutex);
    hook = split_hook;
  }
  if (hook) hook();
}

void run_step_hook(testing::SplitStep step) {
  if (!has_step_hook.load(std::memory_order_relaxed)) return;
  std::function<void(testing::SplitStep)> hook;
  {
    std::lock_guard lock(hook_mutex);
    hook = step_hook;
  }
  if (hook) hook(step);
}

}  // namespace

void testing::set_split_hook(std::function<void()> hook) {
  std::lock_guard lock(hook_mutex);
  has_split_hook.store(static_cast<bool>(hook));
  split_hook = std::move(hook);
}

void testing::set_split_step_hook(std::function<void(SplitStep)> hook) {
  std::lock_guard lock(hook_mutex);
  has_step_hook.store(static_cast<bool>(hook));
  step_hook = std::move(hook);
}

// ---------------------------------------------------------------------------
// Rec_BG_TABLE ids
// ---------------------------------------------------------------------------

std::atomic<std::uint64_t>* NehashIndex::table_word(std::uint32_t id) const {
  const unsigned s = segment_of(id);
  auto* seg = region_.at<SegmentHeader>(root_->rec_segments[s].load(std::memory_order_acquire));
  return segment_table(seg) + index_in_segment(id);
}

Status NehashIndex::take_id(heap::ThreadCache* tc, std::uint32_t* id) {
  std::lock_guard lock(table_mutex_);
  if (!free_ids_.empty()) {
    *id = free_ids_.back();
    free_ids_.pop_back();
    return Status::OK();
  }
  if (next_id_ == UINT32_MAX) return Status::NoSpace("nehash: every bucket-group id is taken");
  const unsigned s = segment_of(next_id_);
  if (s >= kSegments) return Status::NoSpace("nehash: the recovery table is full");
  if (root_->rec_segments[s].load() == 0) {
    // The table grows by one segment; no entry ever moves.
    std::uint64_t off = 0;
    if (Status st = tc->allocate(segment_bytes(s), &off, /*zero=*/true, kBlockIntent); !st.ok()) {
      return st;
    }
    auto* seg = region_.at<SegmentHeader>(off);
    seg->magic = kSegmentMagic;
    seg->index = s;
    region_.flush(seg, sizeof(SegmentHeader));
    // The segment (zeroed by allocate), its header and its intent are
    // durable before the root names it.
    region_.drain();
    root_->rec_segments[s].store(off, std::memory_order_release);
    // Named by the root before its intent is dropped (else a crash frees it).
    region_.persist(&root_->rec_segments[s], sizeof(std::uint64_t));
    tc->clear_intent(kBlockIntent);
  }
  *id = next_id_++;
  return Status::OK();
}

void NehashIndex::release_id(std::uint32_t id) {
  std::lock_guard lock(table_mutex_);
  free_ids_.push_back(id);
}

// ---------------------------------------------------------------------------
// Group creation in an empty main entry (Algorithm 1, line 3)
// ---------------------------------------------------------------------------

Status NehashIndex::create_group(heap::ThreadCache* tc, std::uint64_t h1) {
  std::shared_lock dir_lock(dir_mutex_);
  rcu::ReadGuard guard;
  const Leaf leaf = dir_->find(h1);
  if (leaf.group != nullptr) return Status::OK();  // another thread made it
  if (!dir_->lock_empty(leaf)) {
    std::this_thread::yield();  // another thread is making it: look again
    return Status::OK();
  }
  std::uint32_t id = 0;
  if (Status s = take_id(tc, &id); !s.ok()) {
    dir_->unlock_empty(leaf);
    return s;
  }
  std::uint64_t off = 0;
  if (Status s = tc->allocate(group_bytes(b_), &off, /*zero=*/true, kBlockIntent); !s.ok()) {
    release_id(id);
    dir_->unlock_empty(leaf);
    return s;
  }
  const unsigned depth = leaf.depth();
  auto* hdr = region_.at<GroupHeader>(off);
  hdr->magic = kGroupMagic;
  hdr->prefix = depth == 0 ? 0 : leaf.node()->hl_value(leaf.entry()) << (64 - depth);
  hdr->bg_id = id;
  hdr->create_depth = static_cast<std::uint8_t>(depth);
  hdr->bucket_bits = static_cast<std::uint8_t>(b_);
  region_.flush(hdr, sizeof(GroupHeader));
  // Drain #1: the block (zeroed by allocate), its header and its intent are
  // durable before the table entry names it.
  region_.drain();
  table_word(id)->store(rec_make(off, depth), std::memory_order_relaxed);
  // Persist #2: the group is in the table before its intent is dropped.
  region_.persist(table_word(id), sizeof(std::uint64_t));
  tc->clear_intent(kBlockIntent);
  dir_->publish_group(leaf, dir_->add_group(off, hdr, depth));
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Split (§4.2)
// ---------------------------------------------------------------------------

void NehashIndex::wait_unlocked(GroupRef* g) const {
  auto busy = [&] {
    for (std::size_t k = 0; k < buckets_per_group(b_); ++k) {
      if (g->lock[k].load(std::memory_order_seq_cst) & kSlotLockMask) return true;
    }
    for (OverflowRef* o = g->overflow.load(); o != nullptr; o = o->next.load()) {
      if (o->lock.load(std::memory_order_seq_cst) & kSlotLockMask) return true;
    }
    return false;
  };
  while (busy()) std::this_thread::yield();
}

bool NehashIndex::clean_stale(GroupRef* g, bool lock_buckets) {
  const unsigned depth = g->depth.load();
  bool any = false;
  for (std::size_t k = 0; k < buckets_per_group(b_); ++k) {
    BucketMeta& metas = group_metas(g->hdr)[k];
    Bucket& bucket = group_buckets(g->hdr, b_)[k];
    auto stale = [&](unsigned s) {
      const std::uint16_t m = metas.meta[s].load(std::memory_order_relaxed);
      if (!meta_valid(m)) return false;
      const View v{m, bucket.slot[s].w0.load(std::memory_order_relaxed),
                   bucket.slot[s].w1.load(std::memory_order_relaxed)};
      return !in_range(slot_h1(v), g->prefix, depth);
    };
    bool found = false;
    for (unsigned s = 0; s < kSlotsPerBucket && !found; ++s) found = stale(s);
    if (!found) continue;
    any = true;
    // All 16 slot locks: readers of the bucket wait, then retry on the
    // version bump and fail the covering check. Taken by one CAS once no
    // bit is set, as a writer takes its home bucket: a writer that reached
    // g may hold the bucket for a moment while it sees SPLITTING and backs
    // off, and taking its bits over (fetch_or) would let both release them,
    // the second subtraction borrowing into the conflict count and leaving
    // slot locks set for good.
    if (lock_buckets) lock_bucket(&g->lock[k]);
    const bool conflict_bucket = k == (std::size_t{1} << b_);
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      if (stale(s)) {
        const std::uint16_t m = metas.meta[s].load(std::memory_order_relaxed);
        // Its home word stops counting a cleared conflict slot, after the
        // clear: a reader that saw the old count scans, one that sees the
        // new one misses only a key g no longer covers. (At open the
        // counts are made after the cleaning: count_conflicts().)
        const std::uint64_t h1 = conflict_bucket && lock_buckets
                                     ? slot_h1({m, bucket.slot[s].w0.load(std::memory_order_relaxed),
                                                bucket.slot[s].w1.load(std::memory_order_relaxed)})
                                     : 0;
        metas.meta[s].store(static_cast<std::uint16_t>(m & ~kMetaValid), std::memory_order_release);
        if (conflict_bucket && lock_buckets) {
          g->lock[home_bucket(h1, b_)].fetch_sub(kConflictOne, std::memory_order_relaxed);
        }
      }
    }
    region_.flush(&metas, sizeof(BucketMeta));
    if (lock_buckets) {
      unlock_bucket(&g->lock[k]);
      run_step_hook(testing::SplitStep::kBucketCleaned);
    }
  }
  return any;
}

Status NehashIndex::split(heap::ThreadCache* tc, GroupRef* g, unsigned d, std::uint64_t h1,
                          bool force) {
  // 0. Exclusive right to split g, and no writer inside it.
  std::shared_lock dir_lock(dir_mutex_);
  std::uint32_t state = 0;
  if (!g->state.compare_exchange_strong(state, kSplitting, std::memory_order_seq_cst)) {
    dir_lock.unlock();
    g->state.wait(kSplitting, std::memory_order_acquire);
    return Status::OK();  // the other split may have made room: retry
  }
  auto finish = [&] {
    g->state.store(0, std::memory_order_seq_cst);
    g->state.notify_all();
  };
  wait_unlocked(g);
  if (g->depth.load() != d || (!force && has_room(g, h1))) {
    finish();
    return Status::OK();
  }
  // A group that has overflow blocks is never split again (its keys could
  // not all move into the new group's buckets): it gets another block.
  if (g->overflow.load() != nullptr) {
    const Status s = add_overflow(tc, g);
    finish();
    return s;
  }
  // 1. The directory action.
  SplitPlan plan;
  bool planned;
  {
    rcu::ReadGuard guard;
    planned = dir_->plan_split(*g, h1, &plan);
  }
  if (!planned) {
    finish();
    return Status::NoSpace("nehash: no DRAM for a directory node");
  }
  if (force && plan.kind != SplitCase::kShared) {
    // Only a group shared by several entries is split in the background;
    // any other split waits for a key that needs it.
    Directory::discard(&plan);
    finish();
    return Status::OK();
  }
  if (plan.kind == SplitCase::kTwoTimeFull && dir_->can_expand()) {
    Node* seen = plan.leaf.path[0];
    finish();
    dir_lock.unlock();
    return expand_main(seen);  // the caller retries: now case A or B
  }
  // No directory bit left, or the main node would pass its DRAM bound
  // (keys sharing unusually long hash prefixes): an overflow block.
  if (plan.kind == SplitCase::kMaxDepth || plan.kind == SplitCase::kTwoTimeFull) {
    const Status s = add_overflow(tc, g);
    finish();
    return s;
  }
  // 2. An id for the upper half.
  std::uint32_t id1 = 0;
  if (Status s = take_id(tc, &id1); !s.ok()) {
    Directory::discard(&plan);
    finish();
    return s;
  }
  // 3. The upper half's group, with the keys that move. Buckets do not
  //    depend on the depth, so a key of a bucket keeps its (bucket, slot).
  std::uint64_t off1 = 0;
  if (Status s = tc->allocate(group_bytes(b_), &off1, /*zero=*/true, kBlockIntent); !s.ok()) {
    release_id(id1);
    Directory::discard(&plan);
    finish();
    return s;
  }
  const std::uint64_t upper_bit = std::uint64_t{1} << (63 - d);
  auto* hdr1 = region_.at<GroupHeader>(off1);
  hdr1->magic = kGroupMagic;
  // g's prefix has no bit set below d (create_depth <= d).
  hdr1->prefix = g->prefix | upper_bit;
  hdr1->bg_id = id1;
  hdr1->create_depth = static_cast<std::uint8_t>(d + 1);
  hdr1->bucket_bits = static_cast<std::uint8_t>(b_);
  region_.flush(hdr1, sizeof(GroupHeader));
  const std::size_t conflict_k = std::size_t{1} << b_;
  BucketMeta* metas = group_metas(g->hdr);
  Bucket* buckets = group_buckets(g->hdr, b_);
  BucketMeta* metas1 = group_metas(hdr1);
  Bucket* buckets1 = group_buckets(hdr1, b_);
  std::vector<bool> touched(buckets_per_group(b_), false);
  bool lower_keys = false, upper_keys = false;
  std::uint64_t moved = 0;  // slots copied into g1
  for (std::size_t k = 0; k <= conflict_k; ++k) {
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      const View v{metas[k].meta[s].load(std::memory_order_relaxed),
                   buckets[k].slot[s].w0.load(std::memory_order_relaxed),
                   buckets[k].slot[s].w1.load(std::memory_order_relaxed)};
      if (!meta_valid(v.meta)) continue;
      const std::uint64_t h = slot_h1(v);
      if (!in_range(h, g->prefix, d)) continue;  // stale: never visible
      if ((h & upper_bit) == 0) {
        lower_keys = true;
        continue;
      }
      upper_keys = true;
      std::size_t tk = k;
      unsigned ts = s;
      if (k == conflict_k) {
        // A conflict key goes to the first free slot of its home bucket in
        // g1 from its home slot on (the buckets were copied first, each key
        // at its own slot index), else to g1's conflict bucket (at most 16
        // keys come from g's: they fit).
        tk = home_bucket(h, b_);
        ts = kSlotsPerBucket;
        for (unsigned i = 0; i < kSlotsPerBucket && ts == kSlotsPerBucket; ++i) {
          const unsigned c = (home_slot(h) + i) & (kSlotsPerBucket - 1);
          if (!meta_valid(metas1[tk].meta[c].load(std::memory_order_relaxed))) ts = c;
        }
        if (ts == kSlotsPerBucket) {
          tk = conflict_k;
          ts = 0;
          while (meta_valid(metas1[tk].meta[ts].load(std::memory_order_relaxed))) ++ts;
        }
      }
      buckets1[tk].slot[ts].w0.store(v.w0, std::memory_order_relaxed);
      buckets1[tk].slot[ts].w1.store(v.w1, std::memory_order_relaxed);
      metas1[tk].meta[ts].store(v.meta, std::memory_order_relaxed);
      touched[tk] = true;
      ++moved;
    }
  }
  for (std::size_t k = 0; k <= conflict_k; ++k) {
    if (!touched[k]) continue;
    region_.flush(&metas1[k], sizeof(BucketMeta));
    region_.flush(&buckets1[k], sizeof(Bucket));
  }
  // 4. The split record.
  OpLog& log = root_->op_log[tc->slot()];
  log.op.store(op_split(d, g->bg_id), std::memory_order_relaxed);
  region_.flush(&log.op, sizeof(std::uint64_t));
  // 5. Drain #1: g1, its intent and the record are durable before either
  //    table word can reach media.
  if (!planted::active(testing::kTableBeforeGroupDurable)) region_.drain();
  // 6. Both table words.
  table_word(id1)->store(rec_make(off1, d + 1), std::memory_order_relaxed);
  table_word(g->bg_id)->store(rec_make(g->off, d + 1), std::memory_order_relaxed);
  region_.flush(table_word(id1), sizeof(std::uint64_t));
  region_.flush(table_word(g->bg_id), sizeof(std::uint64_t));
  // 7. Drain #2: the split is committed.
  region_.drain();
  // 8.
  tc->clear_intent(kBlockIntent);
  run_step_hook(testing::SplitStep::kCopied);
  // 9. DRAM: g's depth first, so that a reader who still reaches g for an
  //    upper-half key fails the covering check and looks again; then the
  //    directory.
  GroupRef* g1 = dir_->add_group(off1, hdr1, d + 1);
  count_conflicts(g1);  // before the directory names g1
  g->depth.store(static_cast<std::uint8_t>(d + 1), std::memory_order_seq_cst);
  dir_->apply_split(plan, g, g1, lower_keys, upper_keys);
  run_split_hook();
  // 10-11. The stale copies of the upper half leave g. Drain #3: durably
  //    cleared before the record goes.
  if (clean_stale(g, /*lock_buckets=*/true)) region_.drain();
  // 12. No drain: a record that outlives its split replays as "committed",
  //    which is idempotent (nehash.h, "Split").
  log.op.store(kOpNone, std::memory_order_relaxed);
  region_.flush(&log.op, sizeof(std::uint64_t));
  // 13.
  splits_.fetch_add(1, std::memory_order_relaxed);
  items_moved_.fetch_add(moved, std::memory_order_relaxed);
  finish();
  return Status::OK();
}

// ---------------------------------------------------------------------------
// The background split of shallow groups (§5 Step 6, nehash.h "Open")
// ---------------------------------------------------------------------------

void NehashIndex::split_shallow(unsigned bits) {
  Status status;
  heap::ThreadCache* tc = heap_.thread(&status);
  std::unordered_set<GroupRef*> skipped;
  while (tc != nullptr && status.ok() && !shallow_stop_.load(std::memory_order_relaxed)) {
    // The upper halves are new groups, shallow too until they reach `bits`:
    // scan again until a scan finds none.
    std::vector<GroupRef*> shallow;
    dir_->for_each_group([&](GroupRef& g) {
      if (g.depth.load() < bits && !skipped.contains(&g)) shallow.push_back(&g);
    });
    if (shallow.empty()) break;
    for (GroupRef* g : shallow) {
      unsigned d;
      while (status.ok() && !shallow_stop_.load(std::memory_order_relaxed) &&
             (d = g->depth.load()) < bits) {
        status = split(tc, g, d, g->prefix, /*force=*/true);
        // Not split, and no other split made it deeper: the directory has
        // another shape than the rebuild left (left to writers).
        if (status.ok() && g->depth.load() == d) {
          skipped.insert(g);
          break;
        }
      }
    }
  }
  shallow_status_ = status;
}

void NehashIndex::stop_shallow_splits() {
  shallow_stop_.store(true, std::memory_order_relaxed);
  if (shallow_thread_.joinable()) shallow_thread_.join();
}

Status NehashIndex::wait_shallow_splits() {
  if (shallow_thread_.joinable()) shallow_thread_.join();
  return shallow_status_;
}

// ---------------------------------------------------------------------------
// Overflow blocks (only at max depth) and the full main expansion
// ---------------------------------------------------------------------------

Status NehashIndex::add_overflow(heap::ThreadCache* tc, GroupRef* g) {
  std::uint64_t off = 0;
  if (Status s = tc->allocate(sizeof(OverflowBlock), &off, /*zero=*/true, kBlockIntent); !s.ok()) {
    return s;
  }
  auto* block = region_.at<OverflowBlock>(off);
  block->magic = kOverflowMagic;
  region_.flush(block, 64);
  // The block and its intent are durable before the chain names it.
  region_.drain();
  OverflowRef* last = g->overflow.load();
  while (last != nullptr && last->next.load() != nullptr) last = last->next.load();
  std::atomic<std::uint64_t>& link = last == nullptr ? g->hdr->overflow : last->block->next;
  link.store(off, std::memory_order_relaxed);
  // Linked durably before its intent is dropped.
  region_.persist(&link, sizeof(std::uint64_t));
  tc->clear_intent(kBlockIntent);
  OverflowRef* ref = dir_->add_overflow(off, block);
  (last == nullptr ? g->overflow : last->next).store(ref, std::memory_order_release);
  return Status::OK();
}

Status NehashIndex::expand_main(Node* seen_main) {
  std::vector<Node*> retired;
  bool ok;
  {
    // Splits and group creations wait; gets and writes go on.
    std::unique_lock lock(dir_mutex_);
    ok = dir_->expand_main(seen_main, &retired);
  }
  // Refused (another split made the directory deeper meanwhile): the
  // caller retries, and its split then takes an overflow block.
  if (!ok) return Status::OK();
  // Lookups that began before the new main node may still be in the old ones.
  rcu::synchronize();
  for (Node* n : retired) Node::destroy(n);
  return Status::OK();
}

}  // namespace pmhash::engine::nehash
