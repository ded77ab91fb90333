// engine/clevel/clevel.cc - searching and writing (design in clevel.h).
#include "engine/clevel/clevel.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "engine/clevel/clevel_index.h"
#include "engine/clevel/clevel_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::clevel {

ClevelIndex::ClevelIndex(const Env& env)
    : env_(env),
      config_(Config::from(env.options)),
      region_(env.pool->region()),
      heap_(*env.heap),
      view_(env.pool->region(), env.pool->heap_offset(), env.pool->heap_size(), env.heap),
      root_(reinterpret_cast<Root*>(env.pool->root())),
      generation_(env.pool->generation()),
      rehash_threads_(config_.rehash_threads),
      use_filters_(config_.tag_filter) {}

ClevelIndex::~ClevelIndex() {
  close();
  for (auto& f : filters_) delete f.exchange(nullptr);
}

// ---------------------------------------------------------------------------
// Context and levels
// ---------------------------------------------------------------------------

Ctx ClevelIndex::load_ctx() const {
  std::uint64_t w = root_->context.load(std::memory_order_acquire);
  if (w & kCtxDirty) {
    // Whatever we do next may depend on this context (e.g. an insert into
    // its new first level); it must be durable before that write is.
    region_.persist(&root_->context, sizeof(std::uint64_t));
    root_->context.compare_exchange_strong(w, w & ~kCtxDirty);
    w &= ~kCtxDirty;
  }
  return Ctx{w};
}

bool ClevelIndex::cas_ctx(Ctx expected, Ctx desired) {
  std::uint64_t e = expected.w;
  if (!root_->context.compare_exchange_strong(e, desired.w | kCtxDirty,
                                              std::memory_order_seq_cst)) {
    return false;
  }
  // The new context is durable before anyone acts on it (readers that saw
  // DIRTY persist it themselves first).
  region_.persist(&root_->context, sizeof(std::uint64_t));
  std::uint64_t d = desired.w | kCtxDirty;
  root_->context.compare_exchange_strong(d, desired.w);
  return true;
}

LevelHeader* ClevelIndex::level(std::uint16_t id) const {
  return region_.at<LevelHeader>(root_->levels[id % kRingSize].load(std::memory_order_acquire));
}

Bucket* ClevelIndex::candidate(LevelHeader* l, const Key& key, int which) const {
  const std::uint64_t mask = (std::uint64_t{1} << l->log2) - 1;
  return level_buckets(l) + ((which == 0 ? key.h1 : key.h2) & mask);
}

template <typename Fn>
void ClevelIndex::for_levels(Ctx c, bool top_down, Fn&& fn) const {
  const unsigned n = c.levels();
  for (unsigned i = 0; i < n; ++i) {
    const auto id = static_cast<std::uint16_t>(top_down ? c.first() - i : c.last() + i);
    if (!fn(id, level(id))) return;
  }
}

template <typename Fn>
void ClevelIndex::for_candidate_slots(const Key& key, Ctx c, Fn&& fn) const {
  // Search direction = the direction items move (bottom-to-top while
  // expanding, top-to-bottom while shrinking): a mover copies before it
  // clears, so the source is always scanned before the destination. When
  // nothing moves, top-down: the first level holds two thirds of the items.
  // (A resize that starts meanwhile changes the context, and callers that
  // found nothing re-check it and search again.)
  const bool top_down = !c.resizing() || c.shrinking();
  const std::uint16_t tag = key_tag(key.h1);
  bool go = true;
  for_levels(c, top_down, [&](std::uint16_t id, LevelHeader* l) {
    const TagFilter* filter = usable_filter(id, l);
    const std::uint64_t mask = (std::uint64_t{1} << l->log2) - 1;
    const std::uint64_t i0 = key.h1 & mask;
    const std::uint64_t i1 = key.h2 & mask;
    for (std::uint64_t i : {i0, i1}) {
      // A bucket whose filter lacks the tag holds no slot with it.
      if (filter == nullptr || filter->may_hold(i, tag)) {
        for (auto& s : level_buckets(l)[i].slot) {
          if (!(go = fn(s, id))) return false;
        }
      } else {
        count_rejection();
      }
      if (i0 == i1) break;
    }
    return true;
  });
}

// ---------------------------------------------------------------------------
// Tag filters
// ---------------------------------------------------------------------------

const TagFilter* ClevelIndex::usable_filter(std::uint16_t id, const LevelHeader* l) const {
  const TagFilter* f = filters_[id % kRingSize].load(std::memory_order_acquire);
  return f != nullptr && f->is_for(l) && f->ready() ? f : nullptr;
}

void ClevelIndex::ensure_filter(std::uint16_t id) {
  if (!use_filters_) return;
  // The level linked at `id` now. None (its expansion was abandoned): the
  // context CAS that follows fails, since the abandoner saw it change.
  const std::uint64_t off = root_->levels[id % kRingSize].load(std::memory_order_acquire);
  if (off == 0) return;
  const LevelHeader* l = region_.at<LevelHeader>(off);
  auto& entry = filters_[id % kRingSize];
  TagFilter* f = entry.load(std::memory_order_acquire);
  while (f == nullptr || !f->is_for(l)) {
    // The level is not in any context yet, so it is empty: the new filter is
    // complete as it is. A mismatching filter belongs to a level whose
    // expansion was abandoned; nobody searches with it, but a racing
    // ensure_filter may still be reading it, so it is freed at close.
    auto fresh = std::make_unique<TagFilter>(l, /*ready=*/true);
    if (entry.compare_exchange_strong(f, fresh.get(), std::memory_order_acq_rel)) {
      if (f != nullptr) {
        std::lock_guard lock(filter_mutex_);
        stale_filters_.emplace_back(f);
      }
      f = fresh.release();
    }
  }
}

std::unique_ptr<TagFilter> ClevelIndex::take_filter(std::uint16_t id) {
  return std::unique_ptr<TagFilter>(filters_[id % kRingSize].exchange(nullptr));
}

// ---------------------------------------------------------------------------
// Searching
// ---------------------------------------------------------------------------

std::vector<ClevelIndex::SlotRef>& ClevelIndex::scratch() {
  // Reused per thread: writers collect slots on every update and delete.
  thread_local std::vector<SlotRef> refs;
  return refs;
}

namespace {

// Equal n bytes; 8..16 bytes (the usual key) as two overlapping 8-byte
// words, without a call. Never reads outside [a, a + n) or [b, b + n).
inline bool bytes_equal(const void* a, const void* b, std::size_t n) {
  if (n < 8 || n > 16) return std::memcmp(a, b, n) == 0;
  std::uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a, 8);
  std::memcpy(&b0, b, 8);
  std::memcpy(&a1, static_cast<const char*>(a) + n - 8, 8);
  std::memcpy(&b1, static_cast<const char*>(b) + n - 8, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

}  // namespace

bool ClevelIndex::key_equals(std::uint64_t off, const Key& key) const {
  const auto* item = checked_item(view_, off);
  return item != nullptr && item->key_len == key.bytes.size() &&
         bytes_equal(item + 1, key.bytes.data(), key.bytes.size());
}

Status ClevelIndex::damaged_item(std::uint64_t off, const std::string& where) const {
  return Status::Corruption("pool " + env_.pool->path() + ": clevel: " + where +
                            " names an item at offset " + std::to_string(off) +
                            " that lies outside the heap or beyond its block (damaged pool; "
                            "'pmhash scan --skip-damaged' salvages the rest)");
}

ClevelIndex::Found ClevelIndex::find_visible(const Key& key, Ctx c, std::uint64_t* damaged) const {
  const std::uint16_t tag = key_tag(key.h1);
  Found found;
  for_candidate_slots(key, c, [&](std::atomic<std::uint64_t>& s, std::uint16_t) {
    const std::uint64_t v = s.load(std::memory_order_acquire);
    if (slot_empty(v) || pool::pptr_tag(v) != tag) return true;
    const std::uint64_t off = slot_offset(v);
    const auto* item = checked_item(view_, off);
    if (item == nullptr) {
      if (damaged != nullptr) *damaged = off;
      return true;
    }
    const std::uint64_t st = item->state.load(std::memory_order_acquire);
    if (!state_visible(st)) {
      // A delete of this session still unlinking the item: its REMOVED state
      // may not be durable yet, and a NotFound must not depend on it (P5).
      if (state_kind(st) == kRemoved && state_generation(st) == generation_ &&
          key_equals(off, key)) {
        found.removed = off;
      }
      return true;
    }
    if (!key_equals(off, key)) return true;
    found.off = off;
    found.pending = (v & kPending) != 0;  // the fast path's only extra test
    return false;
  });
  return found;
}

void ClevelIndex::settle(const Key& key, Ctx c, const Found& f) const {
  // Slow path of a read that met a change maybe not durable yet (clevel.h,
  // "Durable linearizability", P4/P5): flush what the answer depends on
  // ourselves (another thread's flushes are not ordered by our drain),
  // drain, then clear PENDING so that later readers take the fast path.
  if (planted::active(testing::kReadUnpersisted)) return;
  thread_local std::vector<SlotRef> refs;
  refs.clear();
  if (f.off != 0) {
    // Every copy: a copy in the level being emptied, behind a rehash thread's
    // progress, is dropped by recovery with that level, so it alone would
    // not keep the item.
    collect(key, c, f.off, &refs);
    for (const SlotRef& r : refs) region_.flush(r.slot, sizeof(std::uint64_t));
    region_.flush(&region_.at<ItemHeader>(f.off)->state, sizeof(std::uint64_t));
  }
  if (f.removed != 0) {
    region_.flush(&region_.at<ItemHeader>(f.removed)->state, sizeof(std::uint64_t));
  }
  region_.drain();
  for (const SlotRef& r : refs) {
    if ((r.value & (kPending | kMoving)) != kPending) continue;
    std::uint64_t e = r.value;
    r.slot->compare_exchange_strong(e, r.value & ~kPending);  // lost to a writer or mover: fine
  }
}

void ClevelIndex::clear_pending(const Key& key, std::uint64_t off) {
  // After the writer's drain. A CAS, not a store: a rehash thread may have
  // frozen the slot (MOVING), an owner replaced it, a reader cleared the bit
  // already; then the bit stays on that value (or its copy) until a reader
  // or the next crash recovery clears it. Not flushed: a PENDING bit on
  // media only costs a reader one flush and drain.
  std::vector<SlotRef>& refs = scratch();
  collect(key, load_ctx(), off, &refs);
  for (const SlotRef& r : refs) {
    if ((r.value & (kPending | kMoving)) != kPending) continue;
    std::uint64_t e = r.value;
    r.slot->compare_exchange_strong(e, r.value & ~kPending);
  }
}

void ClevelIndex::clear_pending_at(std::atomic<std::uint64_t>* const* slots, unsigned n,
                                   std::uint64_t value) {
  // After the writer's drain, as clear_pending; a CAS that fails found the
  // slot frozen or moved out by a rehash thread, or replaced by an owner.
  for (unsigned i = 0; i < n; ++i) {
    std::uint64_t e = value;
    slots[i]->compare_exchange_strong(e, value & ~kPending);
  }
}

void ClevelIndex::shed(const SlotRef& r) {
  if (!use_filters_) return;
  TagFilter* f = filters_[r.level % kRingSize].load(std::memory_order_acquire);
  LevelHeader* l = level(r.level);
  if (f == nullptr || !f->is_for(l)) return;
  // The slot may be in a level dropped since it was collected, whose ring
  // entry now names another level: only a slot of this level's buckets.
  auto* b = reinterpret_cast<Bucket*>(reinterpret_cast<std::uintptr_t>(r.slot) &
                                      ~std::uintptr_t{sizeof(Bucket) - 1});
  Bucket* first = level_buckets(l);
  if (b < first || b >= first + f->buckets()) return;
  f->shed(static_cast<std::uint64_t>(b - first), *b);
}

void ClevelIndex::count_rejection() const {
  static std::atomic<unsigned> next{0};
  thread_local const unsigned stripe = next.fetch_add(1, std::memory_order_relaxed) % kRejectStripes;
  // Not an RMW: a plain add on a line this thread (almost) owns. Two threads
  // sharing a stripe may lose a count; it is a statistic.
  auto& c = rejections_[stripe].v;
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void ClevelIndex::prefetch(const Key& key, Ctx c) const {
  // Every candidate bucket of every level is a likely cache miss; asking for
  // all of them at once overlaps the misses instead of paying them in turn.
  // Not gated by the tag filters: a positive search would then wait for the
  // filter words before its bucket misses even start (measured: slower),
  // while a negative one does not wait for prefetches it never reads.
  for_levels(c, true, [&](std::uint16_t, LevelHeader* l) {
    const std::uint64_t mask = (std::uint64_t{1} << l->log2) - 1;
    __builtin_prefetch(level_buckets(l) + (key.h1 & mask));
    __builtin_prefetch(level_buckets(l) + (key.h2 & mask));
    return true;
  });
}

std::uint64_t ClevelIndex::lookup(const Key& key, Ctx* seen, std::uint64_t* damaged) const {
  for (;;) {
    const Ctx c = load_ctx();
    prefetch(key, c);
    const Found f = find_visible(key, c, damaged);
    // Nothing found: a level may have been added and our item moved into it
    // after we passed (paper §3.2.1); search again under the new context.
    if (f.off != 0 || load_ctx() == c) {
      // The answer (the item, or its absence behind a delete) is durable
      // before the caller acts on it.
      if (f.pending || f.removed != 0) settle(key, c, f);
      if (seen != nullptr) *seen = c;
      return f.off;
    }
  }
}

bool ClevelIndex::collect(const Key& key, Ctx c, std::uint64_t off,
                          std::vector<SlotRef>* out) const {
  out->clear();
  bool settled = true;
  for_candidate_slots(key, c, [&](std::atomic<std::uint64_t>& s, std::uint16_t id) {
    const std::uint64_t v = s.load(std::memory_order_seq_cst);
    if (v == kMoving) {
      // Only the level being emptied has moved-out slots, and only for the
      // moment between two drains; elsewhere (a damaged pool) never wait.
      settled &= !(c.resizing() && id == c.drain_level());
    } else if (v != 0 && slot_offset(v) == off) {
      out->push_back({&s, v, id});
    }
    return true;
  });
  return settled;
}

Status ClevelIndex::get(const Key& key, std::string* value) {
  rcu::ReadGuard guard;
  std::uint64_t damaged = 0;
  const std::uint64_t off = lookup(key, nullptr, &damaged);
  if (off == 0) return damaged != 0 ? damaged_item(damaged, "a slot of the key") : Status::NotFound();
  if (value != nullptr) value->assign(item_value(region_.at<ItemHeader>(off)));
  return Status::OK();
}

Status ClevelIndex::snapshot_get(const Key& key, std::string* value) {
  // get() answers only from durable state (it makes a change it depends on
  // durable first), so the latest durable state is what it returns.
  return get(key, value);
}

// ---------------------------------------------------------------------------
// Insert
// ---------------------------------------------------------------------------

Status ClevelIndex::write_item(heap::ThreadCache* tc, const Key& key, std::string_view value,
                               Kind kind, std::uint64_t* off) {
  const std::size_t n = item_size(key.bytes.size(), value.size());
  if (Status s = tc->allocate(n, off); !s.ok()) return s;
  auto* item = region_.at<ItemHeader>(*off);
  item_write(item, make_state(generation_, kind), key.bytes, value);
  region_.flush(item, n);
  return Status::OK();
}

bool ClevelIndex::safe_level(Ctx c, std::uint16_t id) const {
  return c.contains(id) && !(c.resizing() && id == c.drain_level());
}

ClevelIndex::Attempt ClevelIndex::place(heap::ThreadCache* tc, const Key& key,
                                        std::uint64_t value, Ctx c, bool rehasher,
                                        std::uint16_t* level_out, Status* status,
                                        std::atomic<std::uint64_t>** slot_out) {
  bool placed = false;
  // Top-down: the first level holds two thirds of the slots, and items
  // there never move during an expansion.
  for_levels(c, true, [&](std::uint16_t id, LevelHeader* l) {
    if (!safe_level(c, id)) return true;
    Bucket* b0 = candidate(l, key, 0);
    Bucket* b1 = candidate(l, key, 1);
    auto empties = [](Bucket* b) {
      int n = 0;
      for (auto& s : b->slot) n += s.load(std::memory_order_relaxed) == 0;
      return n;
    };
    // Less-loaded candidate bucket first (paper §3.2.2).
    Bucket* order[2] = {b0, b1};
    if (b1 != b0 && empties(b1) > empties(b0)) std::swap(order[0], order[1]);
    // Every level a context names has its filter (ensure_filter), and it is
    // for this level: no other level can hold its ring entry meanwhile.
    TagFilter* filter = filters_[id % kRingSize].load(std::memory_order_acquire);
    assert(filter == nullptr || filter->is_for(l));
    for (Bucket* b : order) {
      const auto bi = static_cast<std::uint64_t>(b - level_buckets(l));
      bool adding = false;
      for (auto& s : b->slot) {
        if (s.load(std::memory_order_relaxed) != 0) continue;
        if (!adding && filter != nullptr) {
          // The tag is in the filter before the pointer is in the slot, and
          // no remover recomputes the word until our CAS is done.
          filter->begin_add(bi, pool::pptr_tag(value));
          adding = true;
        }
        std::uint64_t expected = 0;
        if (s.compare_exchange_strong(expected, value, std::memory_order_seq_cst)) {
          if (adding) filter->end_add(bi);
          region_.flush(&s, sizeof(s));
          *level_out = id;
          if (slot_out != nullptr) *slot_out = &s;
          placed = true;
          return false;
        }
      }
      if (adding) filter->end_add(bi);
      if (b0 == b1) break;
    }
    return true;
  });
  if (placed) return Attempt::kDone;
  if (c.shrinking()) {
    // No room outside the level being emptied: the rehash threads turn the
    // shrink around (the level it added is emptied upwards instead), after
    // which an expansion is possible. Wait for that outside the section.
    shrink_abort_requested_.store(true);
    wake_rehash();
    return Attempt::kYield;
  }
  return expand(tc, c, rehasher, status);
}

ClevelIndex::Race ClevelIndex::same_key_race(const Key& key, std::uint64_t off,
                                              Found* rival) const {
  const std::uint16_t tag = key_tag(key.h1);
  Race race = Race::kClear;
  const Ctx c = load_ctx();
  for_candidate_slots(key, c, [&](std::atomic<std::uint64_t>& s, std::uint16_t) {
    // seq_cst: our publishing CAS and this load form the store-load pair
    // that makes two racing inserts see each other.
    const std::uint64_t v = s.load(std::memory_order_seq_cst);
    if (slot_empty(v) || pool::pptr_tag(v) != tag) return true;
    const std::uint64_t other = slot_offset(v);
    if (other == off || !key_equals(other, key)) return true;
    auto& st = region_.at<ItemHeader>(other)->state;
    std::uint64_t sv = st.load(std::memory_order_seq_cst);
    if (state_visible(sv)) {
      race = Race::kVisible;
      *rival = Found{other, (v & kPending) != 0, 0};
      return false;
    }
    if (state_kind(sv) != kTentative || state_generation(sv) != generation_) return true;
    if (other < off) {
      race = Race::kWait;  // a lower racer decides first
    } else if (!st.compare_exchange_strong(sv, make_state(generation_, kLoser)) &&
               state_visible(sv)) {
      race = Race::kVisible;  // it claimed itself before we killed it
      *rival = Found{other, (v & kPending) != 0, 0};
      return false;
    }
    return true;
  });
  if (race == Race::kClear && load_ctx() != c) return same_key_race(key, off, rival);
  if (race == Race::kVisible && rival->pending) settle(key, c, *rival);
  return race;
}

void ClevelIndex::unpublish(const Key& key, std::uint64_t off) {
  std::vector<SlotRef>& refs = scratch();
  for (;;) {
    if (!collect(key, load_ctx(), off, &refs)) {
      run_writer_wait_hook();
      std::this_thread::yield();  // a moved-out slot's clearing: one drain
      continue;
    }
    if (refs.empty()) return;
    for (const SlotRef& r : refs) {
      if (r.value & kMoving) continue;  // the mover clears it; we scan again
      std::uint64_t e = r.value;
      if (r.slot->compare_exchange_strong(e, 0)) {
        region_.flush(r.slot, sizeof(std::uint64_t));
        shed(r);
      }
    }
  }
}

ClevelIndex::Attempt ClevelIndex::publish(heap::ThreadCache* tc, const Key& key,
                                          std::uint64_t off, Publishing* p, Status* status) {
  *status = Status::OK();
  // Published PENDING: once the state is LIVE, a reader that meets the
  // pointer before our drain #2 makes it durable itself (P4).
  const std::uint64_t value = pool::pptr_make(off, key_tag(key.h1)) | kPending;
  auto& state = region_.at<ItemHeader>(off)->state;
  // Slots remembered from an earlier read-side section may have been freed.
  p->stored_here = false;
  p->n_stored = 0;
  const auto remember = [&](std::atomic<std::uint64_t>* s) {
    if (p->n_stored < Publishing::kMaxStored) {
      p->stored[p->n_stored] = s;
    }
    ++p->n_stored;
  };
  if (p->stage == Publishing::kSearch) {
    Ctx c;
    if (lookup(key, &c) != 0) {
      *status = Status::AlreadyExists("key exists");
      return Attempt::kDone;
    }
    std::atomic<std::uint64_t>* slot = nullptr;
    if (Attempt a = place(tc, key, value, c, /*rehasher=*/false, &p->level, status, &slot); a != Attempt::kDone) return a;
    if (!status->ok()) return Attempt::kDone;
    p->stage = Publishing::kSafe;
    p->stored_here = true;
    remember(slot);
  }
  if (p->stage == Publishing::kSafe) {
    // Context-aware insert (paper §3.2.2): if the level we used is being
    // emptied, or was dropped, since we chose it, a rehash thread may already
    // have passed our bucket. Put the same pointer somewhere safe as well.
    for (Ctx now = load_ctx(); !safe_level(now, p->level); now = load_ctx()) {
      std::atomic<std::uint64_t>* slot = nullptr;
      const Attempt a = place(tc, key, value, now, /*rehasher=*/false, &p->level, status, &slot);
      if (slot != nullptr) remember(slot);
      if (!status->ok()) {
        unpublish(key, off);  // nothing was acknowledged; undo
        p->stage = Publishing::kRetired;
        return Attempt::kDone;
      }
      if (a != Attempt::kDone) return a;
    }
    p->stage = Publishing::kRace;
  }
  if (p->stage == Publishing::kRace) {
    Found rival;
    switch (same_key_race(key, off, &rival)) {
      case Race::kWait:
        return Attempt::kYield;
      case Race::kVisible:
        std::uint64_t sv;
        sv = state.load();
        if (state_kind(sv) == kTentative) state.compare_exchange_strong(sv, make_state(generation_, kLoser));
        unpublish(key, off);
        p->stage = Publishing::kRetired;
        *status = Status::AlreadyExists("key exists");
        return Attempt::kDone;
      case Race::kClear:
        break;
    }
    std::uint64_t sv = make_state(generation_, kTentative);
    if (!state.compare_exchange_strong(sv, make_state(generation_, kLive))) {
      // A lower racer killed us. Answer only from what we see ourselves: the
      // key present -> AlreadyExists; otherwise insert again, with a new item.
      unpublish(key, off);
      p->stage = Publishing::kKilled;
      return Attempt::kDone;
    }
    region_.flush(&state, sizeof(std::uint64_t));
    // The slot(s) and the LIVE state are durable before we acknowledge.
    region_.drain();
    // Every slot we stored into, known when this section stored them all
    // (the common case: no wait for a rival or a rehash thread), else by a
    // search.
    if (p->stored_here && p->n_stored <= Publishing::kMaxStored) {
      clear_pending_at(p->stored, p->n_stored, value);
    } else {
      clear_pending(key, off);
    }
    p->stage = Publishing::kLive;
  }
  return Attempt::kDone;
}

Status ClevelIndex::insert(const Key& key, std::string_view value) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  for (;;) {
    tc->reserve_retire(2);
    std::uint64_t off = 0;
    if (s = write_item(tc, key, value, kTentative, &off); !s.ok()) return s;
    // The allocation, the intent and the item are durable before any slot
    // can point at the item.
    if (!planted::active(testing::kSlotBeforeItemDurable)) region_.drain();
    Publishing p;
    for (;;) {
      Attempt a;
      {
        rcu::ReadGuard guard;
        a = publish(tc, key, off, &p, &s);
      }
      if (a == Attempt::kDone) break;
      if (a == Attempt::kYield) std::this_thread::yield();
    }
    if (p.stage == Publishing::kLive) {
      add_count(tc, 1);
    } else if (p.stage == Publishing::kSearch) {
      tc->free_unpublished(off);  // no other thread ever saw it
    } else {
      tc->retire(off);  // published once: readers may still look at it
      // The retire entry and the unpublished slots are durable before the
      // intent is cleared: the cleared intent may reach media at once (it
      // shares a line with retired_count), and a crash keeping it without
      // them would leave a TENTATIVE or LOSER item in a slot no log names.
      if (!planted::active(testing::kLoserClearBeforeDrain)) region_.drain();
    }
    tc->clear_intent();
    if (p.stage != Publishing::kKilled) return s;
    // Killed by a lower racer: start over; the search will find the winner.
  }
}

// ---------------------------------------------------------------------------
// Update, remove, upsert
// ---------------------------------------------------------------------------

std::uint64_t ClevelIndex::own(const Key& key) {
  for (;;) {
    const std::uint64_t off = lookup(key, nullptr);
    if (off == 0) return 0;
    auto& state = region_.at<ItemHeader>(off)->state;
    std::uint64_t st = state.load(std::memory_order_acquire);
    if (!state_visible(st)) continue;
    if (state_kind(st) == kOwned && state_generation(st) == generation_) {
      // Another writer is replacing or removing it; after it, search again.
      std::this_thread::yield();
      continue;
    }
    // OWNED from an earlier generation is a crashed writer's: plain LIVE.
    if (state.compare_exchange_strong(st, make_state(generation_, kOwned))) return off;
  }
}

void ClevelIndex::release(std::uint64_t off) {
  region_.at<ItemHeader>(off)->state.store(make_state(generation_, kLive),
                                           std::memory_order_release);
}

std::atomic<std::uint64_t>* ClevelIndex::replace_all(const Key& key, std::uint64_t off,
                                                     std::uint64_t replacement) {
  // We own the item, so besides us only a rehash thread touches slots that
  // hold it, and it only copies from a slot it has frozen with MOVING.
  std::vector<SlotRef>& refs = scratch();
  bool replaced = false;
  std::atomic<std::uint64_t>* stored_at = nullptr;
  for (;;) {
    const Ctx c = load_ctx();
    // A slot being moved is waited for: one item copy, then the slot is ours
    // again. So is a moved-out source whose clearing is not durable yet: were
    // our change to the copy durable first, a crash would bring back the old
    // pointer beside it (found by the crash checker, two threads).
    if (!collect(key, c, off, &refs) ||
        std::any_of(refs.begin(), refs.end(), [](const SlotRef& r) { return r.value & kMoving; })) {
      run_writer_wait_hook();
      std::this_thread::yield();
      continue;
    }
    if (refs.empty()) {
      if (replaced && load_ctx() == c) return replacement != 0 ? stored_at : nullptr;
      continue;  // moved under a new context; scan again
    }
    // Content-conscious find (paper §3.2.3): keep the copy a search meets
    // last, i.e. the one nearest to where items move; drop the others.
    bool ok = true;
    for (std::size_t i = 0; i + 1 < refs.size() && ok; ++i) {
      std::uint64_t e = refs[i].value;
      ok = refs[i].slot->compare_exchange_strong(e, 0);
      if (ok) {
        region_.flush(refs[i].slot, sizeof(std::uint64_t));
        shed(refs[i]);
      }
    }
    if (!ok) continue;
    // An update's dropped copies are durable before its replacement can be:
    // else a crash could keep a dropped copy of the old item beside the new
    // one, two visible items with one key (found by the crash checker).
    if (refs.size() > 1 && replacement != 0 && !replaced) region_.drain();
    std::uint64_t e = refs.back().value;
    const std::uint64_t stored = replaced ? 0 : replacement;
    if (!refs.back().slot->compare_exchange_strong(e, stored)) continue;
    // (replaced already: a stale extra copy surfaced after we replaced)
    if (!replaced) stored_at = refs.back().slot;
    replaced = true;
    region_.flush(refs.back().slot, sizeof(std::uint64_t));
    if (stored == 0) shed(refs.back());
  }
}

bool ClevelIndex::holds(std::uint64_t off, const std::string_view* expected) const {
  // Called by the owner, before it writes anything: the item's value never
  // changes once published, and its writer drained it before that (P8).
  return expected == nullptr || item_value(region_.at<ItemHeader>(off)) == *expected;
}

Status ClevelIndex::update(const Key& key, std::string_view value) {
  return update_if(key, value, nullptr);
}

Status ClevelIndex::update_if(const Key& key, std::string_view value,
                              const std::string_view* expected) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  tc->reserve_retire(1);
  std::uint64_t fresh = 0;
  if (s = write_item(tc, key, value, kLive, &fresh); !s.ok()) return s;
  {
    rcu::ReadGuard guard;
    const std::uint64_t old = own(key);
    if (old == 0) {
      s = Status::NotFound();
    } else if (!holds(old, expected)) {
      release(old);  // nothing was written: the item is LIVE as before
      s = Status::Conflict("the key holds another value");
    } else {
      tc->retire(old);
      // The new item, its allocation and the retire entry are durable
      // before any slot stops pointing at the old item.
      region_.drain();
      // PENDING until our drain below: a reader that meets the new pointer
      // first makes it durable itself (P6).
      const std::uint64_t replacement = pool::pptr_make(fresh, key_tag(key.h1)) | kPending;
      std::atomic<std::uint64_t>* slot = replace_all(key, old, replacement);
      // The replaced slots are durable before we acknowledge.
      region_.drain();
      // Still in the section replace_all stored in: its slot is live memory.
      clear_pending_at(&slot, slot != nullptr ? 1 : 0, replacement);
    }
  }
  if (!s.ok()) tc->free_unpublished(fresh);
  tc->clear_intent();
  return s;
}

Status ClevelIndex::remove(const Key& key) { return remove_if(key, nullptr); }

Status ClevelIndex::remove_if(const Key& key, const std::string_view* expected) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  tc->reserve_retire(1);
  {
    rcu::ReadGuard guard;
    const std::uint64_t old = own(key);
    if (old == 0) return Status::NotFound();
    if (!holds(old, expected)) {
      release(old);  // nothing was written: the item is LIVE as before
      return Status::Conflict("the key holds another value");
    }
    tc->retire(old);
    // The delete takes effect here (P7): REMOVED hides the item from every
    // search although slots still hold it; a reader that meets it makes the
    // state durable before it answers NotFound.
    auto& state = region_.at<ItemHeader>(old)->state;
    state.store(make_state(generation_, kRemoved), std::memory_order_seq_cst);
    region_.flush(&state, sizeof(std::uint64_t));
    // The retire entry and REMOVED are durable before the unlink: a crash
    // after the unlink would otherwise leak the item, and a reader that
    // finds the slots empty relies on the delete being durable.
    region_.drain();
    replace_all(key, old, 0);
    // The cleared slots are durable before we acknowledge.
    region_.drain();
  }
  add_count(tc, -1);
  maybe_shrink(tc);
  return Status::OK();
}

Status ClevelIndex::compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                                     std::optional<std::string_view> desired) {
  // Each case is the write it becomes, decided where that write decides
  // "present" or "absent" (clevel.h, "compare_and_swap").
  if (expected) {
    // The value is compared by the writer that owns the item: no other
    // writer can replace or remove it meanwhile, and no insert of the key
    // can win while it is visible.
    const Status s = desired ? update_if(key, *desired, &*expected) : remove_if(key, &*expected);
    return s.is_not_found() ? Status::Conflict("the key is absent") : s;
  }
  if (desired) {
    const Status s = insert(key, *desired);
    return s.is_already_exists() ? Status::Conflict("the key is present") : s;
  }
  // Absent to absent writes nothing: a search, answered as get answers.
  rcu::ReadGuard guard;
  std::uint64_t damaged = 0;
  if (lookup(key, nullptr, &damaged) != 0) return Status::Conflict("the key is present");
  return damaged != 0 ? damaged_item(damaged, "a slot of the key") : Status::OK();
}

Status ClevelIndex::upsert(const Key& key, std::string_view value) {
  for (;;) {
    Status s = update(key, value);
    if (!s.is_not_found()) return s;
    s = insert(key, value);
    if (!s.is_already_exists()) return s;
  }
}

// ---------------------------------------------------------------------------
// Iteration and counting
// ---------------------------------------------------------------------------

Status ClevelIndex::for_each(const ForEachFn& fn) { return salvage(fn, nullptr); }

Status ClevelIndex::salvage(const ForEachFn& fn, std::uint64_t* skipped) {
  // Levels are scanned in search order, bucket by bucket, each bucket inside
  // its own read-side section; the callback runs outside of it. A moving item
  // is met before or after its move, possibly twice (deduplicated by key),
  // never not at all. When the context changes, the levels of the old one
  // may be freed, so the scan starts over under the new context; the keys
  // already reported are skipped.
  std::unordered_set<std::string> seen;
  std::vector<std::pair<std::string, std::string>> batch;
  for (;;) {
    Ctx c;
    {
      rcu::ReadGuard guard;
      c = load_ctx();
    }
    bool restart = false;
    const unsigned n = c.levels();
    for (unsigned i = 0; i < n && !restart; ++i) {
      const auto id = static_cast<std::uint16_t>(c.shrinking() ? c.first() - i : c.last() + i);
      std::uint64_t buckets = 0;
      for (std::uint64_t b = 0; !restart && (b == 0 || b < buckets); ++b) {
        batch.clear();
        {
          rcu::ReadGuard guard;
          if (load_ctx() != c) {
            restart = true;
            break;
          }
          LevelHeader* l = level(id);
          buckets = std::uint64_t{1} << l->log2;
          for (auto& s : level_buckets(l)[b].slot) {
            const std::uint64_t v = s.load(std::memory_order_acquire);
            if (slot_empty(v)) continue;
            // Each slot is checked against its whole block: a scan is what
            // salvages a damaged pool.
            const auto* item = checked_item(view_, slot_offset(v), /*in_block=*/true);
            if (item == nullptr) {
              if (skipped == nullptr) {
                return damaged_item(slot_offset(v), ("level " + std::to_string(id) + " bucket " +
                                                     std::to_string(b)));
              }
              ++*skipped;
              continue;
            }
            if (!state_visible(item->state.load(std::memory_order_acquire))) continue;
            std::string k(item_key(item));
            if (seen.contains(k)) continue;
            batch.emplace_back(std::move(k), std::string(item_value(item)));
          }
        }
        for (auto& [k, v] : batch) {
          if (!seen.insert(k).second) continue;
          if (!fn(k, v)) return Status::OK();
        }
      }
    }
    if (!restart) return Status::OK();
  }
}

void ClevelIndex::add_count(heap::ThreadCache* tc, std::int64_t delta) {
  count_.add(tc->slot(), delta);
}

std::uint64_t ClevelIndex::size() const {
  // The base (saved by a clean close, or counted by open before any writer
  // ran) plus every change since: exact whenever no write is in flight, and
  // O(threads) on any path (maybe_shrink calls it inside a remove).
  return count_.total();
}

std::uint64_t ClevelIndex::slots() const {
  rcu::ReadGuard guard;
  const Ctx c = load_ctx();
  std::uint64_t n = 0;
  for_levels(c, true, [&](std::uint16_t, LevelHeader* l) {
    n += std::uint64_t{kSlotsPerBucket} << l->log2;
    return true;
  });
  return n;
}

Status ClevelIndex::sync() {
  // Every acknowledged write is already durable (strict durability).
  return Status::OK();
}

void ClevelIndex::fill_stats(Stats* st) const {
  st->items = size();
  st->slots = slots();
  st->load_factor = st->slots == 0 ? 0 : static_cast<double>(st->items) / st->slots;
  const Ctx c = load_ctx();
  st->resizing = c.resizing();
  std::uint64_t rejections = 0;
  for (const auto& r : rejections_) rejections += r.v.load(std::memory_order_relaxed);
  // In the descriptor's order (descriptor.cc).
  st->add_property("clevel.levels", c.levels());
  st->add_property("clevel.expansions", expansions_.load());
  st->add_property("clevel.shrinks", shrinks_.load());
  st->add_property("clevel.items_moved", moved_.load());
  st->add_property("clevel.filter_rejections", rejections);
  rcu::ReadGuard guard;  // filters are freed after a grace period
  for (const auto& entry : filters_) {
    if (const TagFilter* f = entry.load(std::memory_order_acquire)) st->dram_bytes += f->bytes();
  }
}

}  // namespace pmhash::engine::clevel
