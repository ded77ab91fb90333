// engine/nehash/nehash.cc - reading and writing keys (design in nehash.h §3).
#include "engine/nehash/nehash.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/item.h"
#include "engine/nehash/nehash_index.h"
#include "engine/nehash/nehash_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::nehash {

NehashIndex::NehashIndex(const Env& env)
    : env_(env),
      region_(env.pool->region()),
      heap_(*env.heap),
      view_(env.pool->region(), env.pool->heap_offset(), env.pool->heap_size(), env.heap),
      root_(reinterpret_cast<Root*>(env.pool->root())) {
  Params p{};
  std::memcpy(&p, env.pool->header().engine_params, sizeof(p));
  b_ = p.bucket_bits;
  g0_ = p.initial_dir_bits;
}

NehashIndex::~NehashIndex() { close(); }

// ---------------------------------------------------------------------------
// Slots, locks and the readers' seqlock
// ---------------------------------------------------------------------------

NehashIndex::Place NehashIndex::place(GroupRef* g, std::size_t k, unsigned s) const {
  return {&g->lock[k], &group_metas(g->hdr)[k].meta[s], &group_buckets(g->hdr, b_)[k].slot[s], s};
}

NehashIndex::Place NehashIndex::conflict(GroupRef* g, unsigned s) const {
  return place(g, std::size_t{1} << b_, s);
}

std::atomic<std::uint64_t>* NehashIndex::conflict_lock(GroupRef* g) const {
  return &g->lock[std::size_t{1} << b_];
}

void NehashIndex::count_conflicts(GroupRef* g) const {
  const std::size_t k = std::size_t{1} << b_;
  for (std::size_t i = 0; i < k; ++i) {
    g->lock[i].fetch_and(~kConflictMask, std::memory_order_relaxed);
  }
  for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
    const Place c = conflict(g, s);
    const View v{c.meta->load(std::memory_order_relaxed), c.slot->w0.load(std::memory_order_relaxed),
                 c.slot->w1.load(std::memory_order_relaxed)};
    // Every VALID conflict slot counts, in range or not: clean_stale()
    // uncounts each one it clears. A damaged slot counts for the bucket its
    // w1 names (readers then scan; check() reports the slot).
    if (!meta_valid(v.meta)) continue;
    const std::uint64_t h1 = readable(v) ? slot_h1(v) : v.w1;
    g->lock[home_bucket(h1, b_)].fetch_add(kConflictOne, std::memory_order_relaxed);
  }
}

NehashIndex::Place NehashIndex::overflow_place(OverflowRef* o, unsigned s) {
  return {&o->lock, &o->block->meta.meta[s], &o->block->bucket.slot[s], s};
}

void NehashIndex::lock_bucket(std::atomic<std::uint64_t>* word) {
  for (unsigned spins = 0;; ++spins) {
    std::uint64_t cur = word->load(std::memory_order_relaxed);
    if ((cur & kSlotLockMask) == 0 &&
        word->compare_exchange_weak(cur, cur | kSlotLockMask, std::memory_order_seq_cst)) {
      break;
    }
    if (spins > 64) std::this_thread::yield();
  }
}

void NehashIndex::unlock_bucket(std::atomic<std::uint64_t>* word) {
  // All 16 bits cleared and the version bumped in one step (as unlock()).
  word->fetch_add(kVersionOne - kSlotLockMask, std::memory_order_release);
}

void NehashIndex::lock(const Place& p) {
  const std::uint64_t bit = std::uint64_t{1} << p.bit;
  for (unsigned spins = 0;; ++spins) {
    std::uint64_t cur = p.lock->load(std::memory_order_relaxed);
    if ((cur & bit) == 0 &&
        p.lock->compare_exchange_weak(cur, cur | bit, std::memory_order_seq_cst)) {
      break;
    }
    if (spins > 64) std::this_thread::yield();
  }
}

bool NehashIndex::try_lock(const Place& p) {
  const std::uint64_t bit = std::uint64_t{1} << p.bit;
  std::uint64_t cur = p.lock->load(std::memory_order_relaxed);
  while ((cur & bit) == 0) {
    if (p.lock->compare_exchange_weak(cur, cur | bit, std::memory_order_seq_cst)) return true;
  }
  return false;
}

void NehashIndex::unlock(const Place& p) {
  // Clears the bit and bumps the version in one step: a reader that copied
  // the slot meanwhile sees the version change and reads again.
  p.lock->fetch_add(kVersionOne - (std::uint64_t{1} << p.bit), std::memory_order_release);
}

NehashIndex::View NehashIndex::read(const Place& p) {
  const std::uint64_t bit = std::uint64_t{1} << p.bit;
  for (unsigned spins = 0;; ++spins) {
    const std::uint64_t v1 = p.lock->load(std::memory_order_acquire);
    if ((v1 & bit) == 0) {
      // Writers store a slot's words and meta with release after locking
      // it: a reader that sees one of those stores (acquire) sees the lock
      // word changed at the load below, and reads again.
      View v;
      v.meta = p.meta->load(std::memory_order_acquire);
      v.w0 = p.slot->w0.load(std::memory_order_acquire);
      v.w1 = p.slot->w1.load(std::memory_order_acquire);
      if (p.lock->load(std::memory_order_relaxed) == v1) return v;
    }
    if (spins > 64) std::this_thread::yield();
  }
}

std::uint64_t NehashIndex::slot_h1(const View& v) {
  if (meta_is_inline(v.meta)) return make_key(unpack_word(v.w0, meta_key_len(v.meta))).h1;
  return v.w1;
}

bool NehashIndex::readable(const View& v, bool in_block) const {
  if (meta_is_inline(v.meta)) {
    return meta_key_len(v.meta) <= kInlineMax && meta_value_len(v.meta) <= kInlineMax;
  }
  return checked_item(view_, pool::pptr_offset(v.w0), in_block) != nullptr;
}

bool NehashIndex::matches(const View& v, const Key& key) const {
  if (!meta_valid(v.meta) || meta_fp(v.meta) != fingerprint(key.h2)) return false;
  if (meta_is_inline(v.meta)) {
    return meta_key_len(v.meta) == key.bytes.size() && v.w0 == pack_word(key.bytes);
  }
  if (v.w1 != key.h1) return false;
  // Items never change, and RCU keeps a replaced one alive for us. A damaged
  // pointer matches nothing (get() reports it).
  const auto* item = checked_item(view_, pool::pptr_offset(v.w0));
  return item != nullptr && item_key(item) == key.bytes;
}

NehashIndex::Place NehashIndex::locate(GroupRef* g, const Key& key) const {
  // The caller holds the key's home bucket: no slot of it changes under us.
  const unsigned k = home_bucket(key.h1, b_);
  const unsigned hs = home_slot(key.h1);
  const std::uint16_t fp = fingerprint(key.h2);
  for (unsigned i = 0; i < kSlotsPerBucket; ++i) {
    const Place p = place(g, k, (hs + i) & (kSlotsPerBucket - 1));
    const std::uint16_t m = p.meta->load(std::memory_order_relaxed);
    if (!meta_valid(m) || meta_fp(m) != fp) continue;
    const View v{m, p.slot->w0.load(std::memory_order_relaxed),
                 p.slot->w1.load(std::memory_order_relaxed)};
    if (matches(v, key)) return p;
  }
  // A count of 0 means no conflict slot holds a key of this bucket: the
  // count is never below them (C1-C3), and only a writer holding the key's
  // home bucket, as we do, could add the key there.
  const bool none = conflict_count(g->lock[k].load(std::memory_order_relaxed)) == 0;
  for (unsigned s = 0; s < kSlotsPerBucket && !none; ++s) {
    const Place c = conflict(g, s);
    const std::uint16_t m = c.meta->load(std::memory_order_relaxed);
    if (meta_valid(m) && meta_fp(m) == fp && matches(read(c), key)) return c;
  }
  for (OverflowRef* o = g->overflow.load(std::memory_order_acquire); o != nullptr;
       o = o->next.load(std::memory_order_acquire)) {
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      const Place c = overflow_place(o, s);
      const std::uint16_t m = c.meta->load(std::memory_order_relaxed);
      if (meta_valid(m) && meta_fp(m) == fp && matches(read(c), key)) return c;
    }
  }
  return {};
}

bool NehashIndex::has_room(GroupRef* g, std::uint64_t h1) const {
  const unsigned k = home_bucket(h1, b_);
  for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
    if (!meta_valid(group_metas(g->hdr)[k].meta[s].load())) return true;
  }
  for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
    if (!meta_valid(conflict(g, s).meta->load())) return true;
  }
  for (OverflowRef* o = g->overflow.load(); o != nullptr; o = o->next.load()) {
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      if (!meta_valid(o->block->meta.meta[s].load())) return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------
// get (lock-free)
// ---------------------------------------------------------------------------

Status NehashIndex::get(const Key& key, std::string* value) {
  rcu::ReadGuard guard;
  const std::uint16_t fp = fingerprint(key.h2);
  const bool unpersisted = planted::active(testing::kReadUnpersisted);
  const unsigned k = home_bucket(key.h1, b_);
  const unsigned hs = home_slot(key.h1);
  for (;;) {
    const Leaf leaf = dir_->find(key.h1);
    GroupRef* g = leaf.group;
    if (g == nullptr) return Status::NotFound();
    // Every writer of the key holds its home bucket's lock (all 16 bits of
    // the bucket's word) from before its first store until its last drain
    // (quiescent unlock). The bucket is read under one seqlock over that
    // word: it was unlocked at the start, and a hit or a NotFound is
    // answered only if the word did not move until the end (nehash.h,
    // "Durable linearizability", R1-R2): no writer of the bucket was in
    // flight meanwhile, so every store the scan saw was durable.
    std::atomic<std::uint64_t>* const word = &g->lock[k];
    BucketMeta& metas = group_metas(g->hdr)[k];
    Slot* const slots = group_buckets(g->hdr, b_)[k].slot;
    // The lock word, the bucket's metas and the home slot are three lines
    // whose addresses depend only on g: start the two pool lines before
    // the lock word's load, so that the three misses overlap.
    __builtin_prefetch(&metas);
    __builtin_prefetch(&slots[hs]);
    std::uint64_t home_word = word->load(std::memory_order_acquire);
    for (unsigned spins = 0; (home_word & kSlotLockMask) != 0 && !unpersisted; ++spins) {
      if (spins > 64) std::this_thread::yield();
      home_word = word->load(std::memory_order_acquire);
    }
    View found;
    bool hit = false;
    std::uint64_t damaged = 0;  // a slot of the key's h1 whose item fails the check
    auto consider = [&](const View& v) {
      if (!meta_is_inline(v.meta) && v.w1 == key.h1 && !readable(v)) {
        damaged = pool::pptr_offset(v.w0);
        return;
      }
      if (matches(v, key)) {
        found = v;
        hit = true;
      }
    };
    // The bucket: its 16 fingerprints, the home slot's first; only a slot
    // whose fingerprint matches is read. Acquire loads (R2): a meta or word
    // a writer stored after locking the bucket makes the final load of the
    // word below see that lock; and each load stays before that final load.
    for (unsigned i = 0; i < kSlotsPerBucket && !hit; ++i) {
      const unsigned s = (hs + i) & (kSlotsPerBucket - 1);
      const std::uint16_t m = metas.meta[s].load(std::memory_order_acquire);
      if (!meta_valid(m) || meta_fp(m) != fp) continue;
      consider(View{m, slots[s].w0.load(std::memory_order_acquire),
                    slots[s].w1.load(std::memory_order_acquire)});
    }
    // The conflict bucket and the overflow chain are scanned only if the
    // home word counts a conflict slot of this home bucket, or the group
    // has overflow blocks (nehash.h, "Conflict counts", R2'): a writer that
    // puts the key there holds its home bucket, so it changes the word this
    // scan compares at its end. Their slots are read under their own
    // seqlocks (R1).
    OverflowRef* chain = g->overflow.load(std::memory_order_acquire);
    if (!hit && (conflict_count(home_word) != 0 || chain != nullptr)) {
      auto try_place = [&](const Place& p) {
        const std::uint16_t m = p.meta->load(std::memory_order_acquire);
        if (!meta_valid(m) || meta_fp(m) != fp) return;
        consider(unpersisted ? View{p.meta->load(std::memory_order_acquire),
                                    p.slot->w0.load(std::memory_order_acquire),
                                    p.slot->w1.load(std::memory_order_acquire)}
                             : read(p));
      };
      for (unsigned s = 0; s < kSlotsPerBucket && !hit; ++s) try_place(conflict(g, s));
      for (OverflowRef* o = chain; o != nullptr && !hit;
           o = o->next.load(std::memory_order_acquire)) {
        for (unsigned s = 0; s < kSlotsPerBucket && !hit; ++s) try_place(overflow_place(o, s));
      }
    }
    // R1-R2: a writer of the bucket (any of its keys; also a split, which
    // locks every bucket it cleans) ran during the scan: scan again.
    // Acquire, and before the covers() check below, so that a split seen
    // here is seen there too.
    if (!unpersisted && word->load(std::memory_order_acquire) != home_word) continue;
    // A split may have moved the key's half to a new group after we loaded
    // g: only an answer from a group that still covers the key counts.
    if (!g->covers(key.h1)) continue;
    if (!hit && damaged != 0) {
      return fail("a slot of the key names an item at offset " + std::to_string(damaged) +
                  " that lies outside the heap (damaged pool; 'pmhash scan --skip-damaged' "
                  "salvages the rest)");
    }
    if (!hit) return Status::NotFound();
    if (meta_is_inline(found.meta) && meta_value_len(found.meta) > kInlineMax) {
      return fail("the key's inline slot claims a " + std::to_string(meta_value_len(found.meta)) +
                  "-byte value (damaged pool)");
    }
    if (value != nullptr) {
      if (meta_is_inline(found.meta)) {
        value->assign(unpack_word(found.w1, meta_value_len(found.meta)));
      } else {
        value->assign(item_value(region_.at<ItemHeader>(pool::pptr_offset(found.w0))));
      }
    }
    return Status::OK();
  }
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

NehashIndex::View NehashIndex::new_view(const Key& key, std::string_view value,
                                        std::uint64_t item) const {
  const std::uint16_t fp = fingerprint(key.h2);
  if (item == 0) {
    return {meta_inline(key.bytes.size(), value.size(), fp), pack_word(key.bytes),
            pack_word(value)};
  }
  return {meta_pointer(fp), pool::pptr_make(item, 0), key.h1};
}

void NehashIndex::store_new(const Place& p, const View& v) {
  p.slot->w0.store(v.w0, std::memory_order_release);
  p.slot->w1.store(v.w1, std::memory_order_release);
  region_.flush(p.slot, sizeof(Slot));
  // Drain #1: the item, its allocation bit and intent, and the slot words
  // are durable before the meta that makes them visible. (The meta on media
  // is not VALID: the last writer of this slot drained before unlocking.)
  if (!planted::active(testing::kMetaBeforeSlotDurable)) region_.drain();
  p.meta->store(v.meta, std::memory_order_release);
  region_.flush(p.meta, sizeof(std::uint16_t));
  // Drain #2: the insert is durable before it is acknowledged.
  region_.drain();
}

void NehashIndex::update_slot(heap::ThreadCache* tc, const Place& p, const View& old,
                              const View& fresh) {
  const bool old_inline = meta_is_inline(old.meta);
  const bool new_inline = meta_is_inline(fresh.meta);
  if (old_inline && new_inline && meta_value_len(old.meta) == meta_value_len(fresh.meta)) {
    // (a) Only the value word changes: one atomic store.
    p.slot->w1.store(fresh.w1, std::memory_order_release);
    // The new value is durable before the update is acknowledged.
    region_.persist(&p.slot->w1, sizeof(std::uint64_t));
    return;
  }
  if (!old_inline) tc->retire(pool::pptr_offset(old.w0));
  if (!old_inline && !new_inline) {
    // (b) Pointer to pointer: w1 (= h1) and the meta stay.
    // Drain #1: the new item and the old one's retire entry are durable
    // before the slot stops naming the old item.
    region_.drain();
    p.slot->w0.store(fresh.w0, std::memory_order_release);
    // Persist #2: the update is durable before it is acknowledged.
    region_.persist(&p.slot->w0, sizeof(std::uint64_t));
    return;
  }
  // (c) The meta and the words change, in two lines: through the op log
  // (common/op_log.h; its drain #1 also covers the new item and the retire
  // entry).
  write_slot_update(region_, root_->op_log[tc->slot()], *p.slot, *p.meta, fresh.meta, fresh.w0,
                    fresh.w1, testing::kOpLogClearNotPersisted);
}

NehashIndex::Attempt NehashIndex::write_attempt(heap::ThreadCache* tc, const Key& key,
                                                std::string_view value, Mode mode,
                                                const Swap* swap, std::uint64_t item,
                                                bool* published) {
  Attempt a;
  rcu::ReadGuard guard;
  const Leaf leaf = dir_->find(key.h1);
  GroupRef* g = leaf.group;
  if (g == nullptr) {
    // No group covers the key (a durable state: P5): it is absent.
    if (mode == Mode::kUpdate) {
      a.status = Status::NotFound();
    } else if (mode == Mode::kSwap && swap->expected) {
      a.status = Status::Conflict("the key is absent");
    } else if (mode == Mode::kSwap && swap->remove) {
      // Absent, as expected, and to stay absent: nothing to write.
    } else {
      a.kind = Attempt::kCreate;
    }
    return a;
  }
  const unsigned k = home_bucket(key.h1, b_);
  std::atomic<std::uint64_t>* const h = &g->lock[k];
  lock_bucket(h);
  // Dekker handshake with the splitter: it stores SPLITTING, then reads our
  // lock word; we stored our lock bits, then read its state (both seq_cst).
  if (g->state.load(std::memory_order_seq_cst) & kSplitting) {
    unlock_bucket(h);
    a.kind = Attempt::kWaitSplit;
    a.group = g;
    return a;
  }
  // The depth cannot change while we hold a lock of g.
  const unsigned d = g->depth.load(std::memory_order_acquire);
  if (!in_range(key.h1, g->prefix, d)) {
    unlock_bucket(h);
    a.kind = Attempt::kRetry;
    return a;
  }
  const Place at = locate(g, key);
  if (at) {
    if (mode == Mode::kInsert) {
      a.status = Status::AlreadyExists("key exists");
    } else {
      // A conflict or overflow slot has its own lock; a slot of the home
      // bucket is ours already.
      const bool other = at.lock != h;
      if (other) lock(at);
      const View old{at.meta->load(), at.slot->w0.load(), at.slot->w1.load()};
      if (mode == Mode::kSwap &&
          !(swap->expected && slot_value_is(view_, old.meta, old.w0, old.w1, *swap->expected))) {
        // Decided on durable slots (R3): every earlier writer of the key
        // held the home bucket, and unlocked it only once durable.
        a.status = Status::Conflict("the key's value is not the expected one");
      } else if (mode == Mode::kSwap && swap->remove) {
        erase(tc, g, h, at);
      } else {
        update_slot(tc, at, old, new_view(key, value, item));
        *published = item != 0;
      }
      if (other) unlock(at);
    }
    unlock_bucket(h);
    return a;
  }
  if (mode == Mode::kUpdate) {
    unlock_bucket(h);
    a.status = Status::NotFound();
    return a;
  }
  if (mode == Mode::kSwap && (swap->expected || swap->remove)) {
    unlock_bucket(h);
    // Absent (R3): a conflict when a value was expected; else absent as
    // expected, and to stay absent: nothing to write.
    if (swap->expected) a.status = Status::Conflict("the key is absent");
    return a;
  }
  // Target: the first free slot of the home bucket from the home slot on,
  // else a free conflict slot, else a free overflow slot.
  Place target;
  const unsigned hs = home_slot(key.h1);
  for (unsigned i = 0; i < kSlotsPerBucket && !target; ++i) {
    const Place p = place(g, k, (hs + i) & (kSlotsPerBucket - 1));
    if (!meta_valid(p.meta->load(std::memory_order_relaxed))) target = p;
  }
  if (!target) {
    for (unsigned s = 0; s < kSlotsPerBucket && !target; ++s) {
      const Place c = conflict(g, s);
      if (meta_valid(c.meta->load(std::memory_order_relaxed)) || !try_lock(c)) continue;
      if (!meta_valid(c.meta->load(std::memory_order_relaxed))) {
        target = c;
      } else {
        unlock(c);
      }
    }
    for (OverflowRef* o = g->overflow.load(std::memory_order_acquire); o != nullptr && !target;
         o = o->next.load(std::memory_order_acquire)) {
      for (unsigned s = 0; s < kSlotsPerBucket && !target; ++s) {
        const Place c = overflow_place(o, s);
        if (meta_valid(c.meta->load(std::memory_order_relaxed)) || !try_lock(c)) continue;
        if (!meta_valid(c.meta->load(std::memory_order_relaxed))) {
          target = c;
        } else {
          unlock(c);
        }
      }
    }
  }
  if (!target) {
    unlock_bucket(h);
    a.kind = Attempt::kSplit;
    a.group = g;
    a.depth = d;
    return a;
  }
  // A key that goes to the conflict bucket is counted in its home word
  // while the home bucket is locked (nehash.h, "Conflict counts").
  if (target.lock == conflict_lock(g)) h->fetch_add(kConflictOne, std::memory_order_relaxed);
  store_new(target, new_view(key, value, item));
  *published = item != 0;
  add_count(tc, 1);
  dir_->stamp_insert(leaf);
  if (target.lock != h) unlock(target);
  unlock_bucket(h);
  return a;
}

Status NehashIndex::write(const Key& key, std::string_view value, Mode mode, const Swap* swap) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  // An update (or a swap's removal) may retire the old item: room for it
  // before the read section.
  if (mode != Mode::kInsert) tc->reserve_retire(1);
  std::uint64_t item = 0;
  // A swap that removes stores no value.
  const bool stores = mode != Mode::kSwap || !swap->remove;
  if (stores && !fits_inline(key.bytes.size(), value.size())) {
    const std::size_t n = item_size(key.bytes.size(), value.size());
    if (s = tc->allocate(n, &item, false, kItemIntent); !s.ok()) return s;
    auto* h = region_.at<ItemHeader>(item);
    item_write(h, key.h1, key.bytes, value);
    region_.flush(h, n);
  }
  bool published = false;
  for (;;) {
    Attempt a = write_attempt(tc, key, value, mode, swap, item, &published);
    if (a.kind == Attempt::kDone) {
      s = a.status;
      break;
    }
    if (a.kind == Attempt::kWaitSplit) {
      a.group->state.wait(kSplitting, std::memory_order_acquire);
    } else if (a.kind == Attempt::kCreate) {
      s = create_group(tc, key.h1);
    } else if (a.kind == Attempt::kSplit) {
      s = split(tc, a.group, a.depth, key.h1);
    }
    if (!s.ok()) break;
  }
  if (item != 0) {
    if (!published) tc->free_unpublished(item);  // no other thread ever saw it
    tc->clear_intent(kItemIntent);
  }
  return s;
}

Status NehashIndex::insert(const Key& key, std::string_view value) {
  return write(key, value, Mode::kInsert);
}
Status NehashIndex::update(const Key& key, std::string_view value) {
  return write(key, value, Mode::kUpdate);
}
Status NehashIndex::upsert(const Key& key, std::string_view value) {
  return write(key, value, Mode::kUpsert);
}

void NehashIndex::erase(heap::ThreadCache* tc, GroupRef* g, std::atomic<std::uint64_t>* home,
                        const Place& at) {
  const std::uint16_t m = at.meta->load(std::memory_order_relaxed);
  if (!meta_is_inline(m)) {
    tc->retire(pool::pptr_offset(at.slot->w0.load(std::memory_order_relaxed)));
    // Drain #1: the retire entry is durable before the slot stops naming
    // the item (else a crash would leak it).
    region_.drain();
  }
  at.meta->store(static_cast<std::uint16_t>(m & ~kMetaValid), std::memory_order_release);
  // The removal is durable before it is acknowledged.
  region_.persist(at.meta, sizeof(std::uint16_t));
  if (at.lock == conflict_lock(g)) home->fetch_sub(kConflictOne, std::memory_order_relaxed);
  add_count(tc, -1);
}

Status NehashIndex::compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                                     std::optional<std::string_view> desired) {
  const Swap swap{expected, !desired.has_value()};
  return write(key, desired.value_or(std::string_view()), Mode::kSwap, &swap);
}

Status NehashIndex::remove(const Key& key) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  tc->reserve_retire(1);
  for (;;) {
    GroupRef* wait_for = nullptr;
    {
      rcu::ReadGuard guard;
      GroupRef* g = dir_->find(key.h1).group;
      if (g == nullptr) return Status::NotFound();
      std::atomic<std::uint64_t>* const h = &g->lock[home_bucket(key.h1, b_)];
      lock_bucket(h);
      if (g->state.load(std::memory_order_seq_cst) & kSplitting) {
        unlock_bucket(h);
        wait_for = g;
      } else if (!g->covers(key.h1)) {
        unlock_bucket(h);
        continue;
      } else {
        const Place at = locate(g, key);
        if (!at) {
          unlock_bucket(h);
          return Status::NotFound();
        }
        const bool other = at.lock != h;
        if (other) lock(at);
        erase(tc, g, h, at);
        if (other) unlock(at);
        unlock_bucket(h);
        return Status::OK();
      }
    }
    wait_for->state.wait(kSplitting, std::memory_order_acquire);
  }
}

// ---------------------------------------------------------------------------
// Iteration and counting
// ---------------------------------------------------------------------------

namespace {

std::mutex copy_hook_mutex;
std::function<void(std::uint64_t)> copy_hook;
std::atomic<bool> has_copy_hook{false};

void run_copy_hook(std::uint64_t x) {
  if (!has_copy_hook.load(std::memory_order_relaxed)) return;
  std::function<void(std::uint64_t)> hook;
  {
    std::lock_guard lock(copy_hook_mutex);
    hook = copy_hook;
  }
  if (hook) hook(x);
}

}  // namespace

void testing::set_range_copy_hook(std::function<void(std::uint64_t x)> hook) {
  std::lock_guard lock(copy_hook_mutex);
  has_copy_hook.store(static_cast<bool>(hook));
  copy_hook = std::move(hook);
}

Status NehashIndex::for_each(const ForEachFn& fn) { return salvage(fn, nullptr); }

namespace {

// The end of the piece of a range of depth `depth` that holds x, the range
// cut into 2^sub_bits pieces (0: the piece ends the hash space).
std::uint64_t piece_end(std::uint64_t x, unsigned depth, unsigned sub_bits) {
  const unsigned d = std::min(depth + sub_bits, 63u);
  return d == 0 ? 0 : (top_bits(x, d) + 1) << (64 - d);
}

}  // namespace

Status NehashIndex::copy_range(std::uint64_t x, unsigned sub_bits, Batch* batch,
                               std::uint64_t* skipped, std::uint64_t* end) {
  for (;;) {
    batch->clear();
    std::uint64_t damaged = 0;  // slots passed over (counted once the copy holds)
    std::string damage;         // the first damaged slot, when not skipping
    rcu::ReadGuard guard;
    const Leaf leaf = dir_->find(x);
    GroupRef* g = leaf.group;
    unsigned depth = leaf.depth();
    std::uint64_t stop = 0;  // the end of the piece of the range copied (0: 2^64)
    if (g != nullptr) {
      depth = g->depth.load(std::memory_order_acquire);
      // g no longer covers x (a split of g moved x's half to another group
      // after find() read the directory): look again.
      if (!in_range(x, g->prefix, depth)) continue;
      stop = piece_end(x, depth, sub_bits);
      run_copy_hook(x);
      auto take = [&](const Place& p) {
        // Acquire: a split clears a stale slot's VALID (release) only after
        // it deepened g, so a copy that sees the clear sees the new depth
        // in the check below and starts over.
        if (!meta_valid(p.meta->load(std::memory_order_acquire))) return;
        const View v = read(p);
        if (!meta_valid(v.meta)) return;
        // Checked against the item's whole block: a scan is what salvages
        // a damaged pool.
        if (!readable(v, /*in_block=*/true)) {
          ++damaged;
          if (damage.empty()) {
            damage = "group " + std::to_string(g->bg_id) + " holds a slot that " +
                     (meta_is_inline(v.meta) ? std::string("claims inline lengths over 8")
                                             : "names an item at offset " +
                                                   std::to_string(pool::pptr_offset(v.w0)) +
                                                   " outside the heap or its block") +
                     " (damaged pool; 'pmhash scan --skip-damaged' salvages the rest)";
          }
          return;
        }
        const std::uint64_t h1 = slot_h1(v);
        // Stale copies outside g's range (a split's upper half not yet
        // cleaned) belong to another group; keys below x to an earlier call.
        if (!in_range(h1, g->prefix, depth) || h1 < x || (stop != 0 && h1 >= stop)) return;
        if (meta_is_inline(v.meta)) {
          batch->emplace_back(unpack_word(v.w0, meta_key_len(v.meta)),
                              unpack_word(v.w1, meta_value_len(v.meta)));
        } else {
          // The item stays alive while the read guard is held (RCU retires).
          const auto* it = region_.at<ItemHeader>(pool::pptr_offset(v.w0));
          batch->emplace_back(item_key(it), item_value(it));
        }
      };
      for (std::size_t k = 0; k < buckets_per_group(b_); ++k) {
        for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
          take(place(g, k, s));
        }
      }
      for (OverflowRef* o = g->overflow.load(std::memory_order_acquire); o != nullptr;
           o = o->next.load(std::memory_order_acquire)) {
        for (unsigned s = 0; s < kSlotsPerBucket; ++s) take(overflow_place(o, s));
      }
      // A split deepened g while we copied: its step 10 may have cleared
      // keys of the range we took before we reached them. Copy again.
      if (g->depth.load(std::memory_order_acquire) != depth) continue;
      if (damaged != 0) {
        if (skipped == nullptr) return fail(damage);
        *skipped += damaged;
      }
    }
    // The piece ends where the next one starts (the whole space: 0; the
    // last piece of the space wraps to 0). An empty entry is one piece.
    *end = g != nullptr ? stop : piece_end(x, depth, 0);
    return Status::OK();
  }
}

Status NehashIndex::salvage(const ForEachFn& fn, std::uint64_t* skipped) {
  // Walks the hash space in prefix order, one group range at a time. x
  // always starts a range (ranges only subdivide), and copy_range() takes
  // only keys with h1 in [x, end of the range), so no point of the hash
  // space is visited twice.
  if (skipped != nullptr) *skipped = 0;
  Batch batch;
  for (std::uint64_t x = 0;;) {
    std::uint64_t end = 0;
    if (Status s = copy_range(x, 0, &batch, skipped, &end); !s.ok()) return s;
    for (auto& [k, v] : batch) {
      if (!fn(k, v)) return Status::OK();
    }
    if (end == 0) return Status::OK();
    x = end;
  }
}

Status NehashIndex::scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
                         std::uint64_t* next) {
  // Position = h1 (nehash.h, "Scan"): whole group ranges from the one that
  // holds the cursor, the first one's keys from the cursor on.
  *next = 0;
  // Pieces of about `count` slots, but of at least 64 and at most 1/64 of a
  // group: a small count does not pass a whole large group per call.
  const std::size_t slots = buckets_per_group(b_) * kSlotsPerBucket;
  unsigned sub_bits = 0;
  while (sub_bits < 6 && (slots >> (sub_bits + 1)) >= std::max<std::size_t>(count, 64)) ++sub_bits;
  Batch batch;
  std::size_t passed = 0;
  for (std::uint64_t x = cursor;;) {
    std::uint64_t end = 0;
    if (Status s = copy_range(x, sub_bits, &batch, nullptr, &end); !s.ok()) return s;
    for (auto& [k, v] : batch) fn(k, v);  // outside the read guard
    passed += batch.size();
    if (end == 0) return Status::OK();
    x = end;
    if (passed >= count) {
      *next = x;
      return Status::OK();
    }
  }
}

void NehashIndex::add_count(heap::ThreadCache* tc, std::int64_t delta) {
  count_.add(tc->slot(), delta);
}

std::int64_t NehashIndex::count_items() const {
  // After a crash the saved count is gone: count the VALID slots of every
  // group that lie in its range. Writes running meanwhile may or may not
  // be counted (size() is exact only when quiescent).
  std::int64_t n = 0;
  rcu::ReadGuard guard;
  dir_->for_each_group([&](GroupRef& g) {
    const unsigned depth = g.depth.load();
    auto count = [&](const Place& p) {
      if (!meta_valid(p.meta->load())) return;
      const View v = read(p);
      // A damaged slot (check() names it) is not counted.
      if (meta_valid(v.meta) && readable(v) && in_range(slot_h1(v), g.prefix, depth)) ++n;
    };
    for (std::size_t k = 0; k < buckets_per_group(b_); ++k) {
      for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
        count(place(&g, k, s));
      }
    }
    for (OverflowRef* o = g.overflow.load(); o != nullptr; o = o->next.load()) {
      for (unsigned s = 0; s < kSlotsPerBucket; ++s) count(overflow_place(o, s));
    }
  });
  return n;
}

std::uint64_t NehashIndex::size() const {
  return count_.total_or_count([this] { return count_items(); });
}

Status NehashIndex::sync() {
  // Every acknowledged write is already durable (strict durability).
  return Status::OK();
}

void NehashIndex::fill_stats(Stats* st) const {
  st->items = size();
  const std::uint64_t groups = dir_->group_count();
  st->slots = groups * buckets_per_group(b_) * kSlotsPerBucket;
  st->load_factor = st->slots == 0 ? 0 : static_cast<double>(st->items) / st->slots;
  const Directory::Counters& c = dir_->counters();
  const std::uint64_t moved = items_moved_.load();
  // In the descriptor's order (descriptor.cc).
  st->add_property("nehash.groups", groups);
  st->add_property("nehash.depth", dir_->levels_in_use());
  st->add_property("nehash.splits", splits_.load());
  st->add_property("nehash.one_time_nodes", c.one_time_nodes.load());
  st->add_property("nehash.two_time_nodes", c.two_time_nodes.load());
  st->add_property("nehash.rule1_nodes", c.rule1_nodes.load());
  st->add_property("nehash.rule2_nodes", c.rule2_nodes.load());
  st->add_property("nehash.full_expansions", c.full_expansions.load());
  st->add_property("nehash.items_moved", moved);
  // A moved slot is its 16 bytes and its 2-byte meta (items stay put), as
  // pmeh counts them.
  st->add_property("nehash.bytes_moved", moved * (sizeof(Slot) + sizeof(std::uint16_t)));
  rcu::ReadGuard guard;  // nodes are freed after a grace period
  st->dram_bytes = dir_->dram_bytes();
}

}  // namespace pmhash::engine::nehash
