// engine/clevel/clevel_recovery.cc - create, open (recovery), close, check
// and the engine's registration (design in clevel.h).
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "engine/clevel/clevel.h"
#include "engine/clevel/clevel_index.h"
#include "sync/rcu.h"

namespace pmhash::engine::clevel {
namespace {

constexpr unsigned kLevelIntent = 1;

struct Params {
  std::uint32_t initial_log2;
  std::uint32_t min_log2;
};

// The checks beyond the descriptor's ranges (the store has checked those).
Status validate(const Options& options) {
  const Config c = Config::from(options);
  if (c.shrink_threshold >= 0.5) {
    return Status::InvalidArgument("clevel.shrink_threshold must be below 0.5, got " +
                                   std::to_string(c.shrink_threshold));
  }
  return Status::OK();
}

Status encode_params(const Options& options, std::uint8_t* out) {
  const Config c = Config::from(options);
  if (c.min_level_log2 > c.initial_level_log2) {
    return Status::InvalidArgument(
        "clevel.min_level_log2 must be at most clevel.initial_level_log2 (" +
        std::to_string(c.initial_level_log2) + "), got " + std::to_string(c.min_level_log2));
  }
  if (Status s = validate(options); !s.ok()) return s;
  const Params p{c.initial_level_log2, c.min_level_log2};
  std::memcpy(out, &p, sizeof(p));
  return Status::OK();
}

Status create_index(const Env& env, std::unique_ptr<Index>* out) {
  auto index = std::make_unique<ClevelIndex>(env);
  if (Status s = index->format(); !s.ok()) return s;
  index->start();
  *out = std::move(index);
  return Status::OK();
}

Status open_index(const Env& env, std::unique_ptr<Index>* out) {
  if (Status s = validate(env.options); !s.ok()) return s;
  auto index = std::make_unique<ClevelIndex>(env);
  if (Status s = index->recover(); !s.ok()) return s;
  index->start();
  *out = std::move(index);
  return Status::OK();
}

}  // namespace

const EngineInfo kEngineInfo = {&kDescriptor, &encode_params, &create_index, &open_index};

Status ClevelIndex::format() {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  Params p;
  std::memcpy(&p, env_.pool->header().engine_params, sizeof(p));
  std::memset(static_cast<void*>(root_), 0, sizeof(Root));
  root_->magic = kRootMagic;
  root_->initial_log2 = p.initial_log2;
  root_->min_log2 = p.min_log2;
  // Two levels, 2^n and 2^(n-1) buckets (paper §3.1), ids 1 and 0.
  for (std::uint16_t id = 0; id < 2; ++id) {
    const unsigned log2 = p.initial_log2 - 1 + id;
    std::uint64_t off = 0;
    if (s = tc->allocate(level_bytes(log2), &off, /*zero=*/true, kLevelIntent); !s.ok()) {
      return Status::NoSpace("pool too small for the initial levels: " + s.message());
    }
    auto* l = region_.at<LevelHeader>(off);
    l->magic = kLevelMagic;
    l->log2 = log2;
    l->id = id;
    region_.flush(l, sizeof(LevelHeader));  // buckets: zeroed and flushed by allocate
    root_->levels[id].store(off);
  }
  for (std::uint16_t id = 0; id < 2; ++id) ensure_filter(id);
  root_->context.store(Ctx{}.next(1, 0, false, false).w);
  // The levels and the root are durable before create returns; a crash
  // before this point leaves a pool that open rejects ("clevel root is not
  // initialised").
  region_.persist(root_, sizeof(Root));
  tc->clear_intent(kLevelIntent);
  count_.set_base(0);
  ready_ = true;
  return Status::OK();
}

Status ClevelIndex::recover() {
  const std::string& path = env_.pool->path();
  // 0. Validation, reading only: a pool this rejects is left unchanged, and
  //    everything recovery and the rehash threads look up through the root
  //    (levels and their buckets) lies within the pool.
  if (root_->magic != kRootMagic && root_->magic != kRootMagicV1) {
    return Status::Corruption("pool " + path + ": clevel root is not initialised");
  }
  // Item states keep the open generation in 61 bits (layout.h): one that
  // does not fit would make this session's own items look like a crashed
  // session's to the insert race and to writers taking ownership.
  if (state_generation(make_state(generation_, kLive)) != generation_) {
    return Status::Corruption("pool " + path + ": open generation " +
                              std::to_string(generation_) +
                              " does not fit clevel's item states (damaged shutdown state)");
  }
  const Ctx seen{root_->context.load() & ~kCtxDirty};
  if (seen.levels() < 1 || seen.levels() > kRingSize - 2) {
    return Status::Corruption("pool " + path + ": clevel context names " +
                              std::to_string(seen.levels()) + " levels");
  }
  for (unsigned i = 0; i < seen.levels(); ++i) {
    const auto id = static_cast<std::uint16_t>(seen.last() + i);
    const std::uint64_t off = root_->levels[id % kRingSize].load();
    if (off == 0 || !heap_.is_allocated(off) || region_.at<LevelHeader>(off)->magic != kLevelMagic ||
        region_.at<LevelHeader>(off)->id != id) {
      return Status::Corruption("pool " + path + ": clevel level " + std::to_string(id) +
                                " is missing or damaged");
    }
    // Every bucket index is taken mod 2^log2: the buckets must lie in the
    // level's block.
    const unsigned log2 = region_.at<LevelHeader>(off)->log2;
    if (log2 > kMaxLevelLog2 || heap_.block_size(off) < level_bytes(log2)) {
      return Status::Corruption("pool " + path + ": clevel level " + std::to_string(id) +
                                " claims 2^" + std::to_string(log2) + " buckets, more than its " +
                                std::to_string(heap_.block_size(off)) + "-byte block holds");
    }
  }
  // The pool is accepted. An R1 pool is R2 from now on (layout.h, kRootMagic).
  if (root_->magic == kRootMagicV1) {
    root_->magic = kRootMagic;
    region_.persist(&root_->magic, sizeof(std::uint64_t));
  }
  // 1. The context word, durable and without DIRTY.
  const Ctx c = load_ctx();
  //    The scan epoch is odd only while a shrink moves items (clevel.h,
  //    "Scan"); a shrink's rehash thread makes it odd again when it resumes.
  if (!c.shrinking() && (root_->scan_epoch.load() & 1) != 0) {
    root_->scan_epoch.fetch_add(1);
    region_.persist(&root_->scan_epoch, sizeof(std::uint64_t));
  }
  // 2. MOVING bits: a rehash thread can only have been inside the bucket its
  //    progress entry names.
  for (Progress& p : root_->progress) {
    const std::uint64_t key = p.level_id.load();
    if (key == 0) continue;
    const auto id = static_cast<std::uint16_t>(key);
    if (!c.contains(id)) continue;
    LevelHeader* l = level(id);
    const std::uint64_t b = p.next.load();
    if (b >= (std::uint64_t{1} << l->log2)) continue;
    for (auto& s : level_buckets(l)[b].slot) {
      const std::uint64_t v = s.load();
      if (v & kMoving) s.store(v & ~kMoving);
    }
    region_.flush(level_buckets(l) + b, sizeof(Bucket));
  }
  region_.drain();  // unfrozen slots durable before anything else changes
  // 3. Heap logs: blocks allocated or retired by operations in flight.
  heap_.recover([this](std::uint64_t off) { return keep_block(off); });
  // 4. Ring entries outside the live range: expansions that never reached
  //    the context, or dropped levels whose entry was not cleared yet.
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  for (unsigned i = 0; i < kRingSize; ++i) {
    auto& entry = root_->levels[i];
    const std::uint64_t off = entry.load();
    bool live = false;
    for (unsigned k = 0; k < c.levels(); ++k) {
      live |= (static_cast<std::uint16_t>(c.last() + k) % kRingSize) == i;
    }
    if (live || off == 0) continue;
    // A stale entry may name a block that is a live level by now (freed
    // and reused before the entry's clearing was durable): never free that.
    bool in_use = false;
    for (unsigned k = 0; k < c.levels(); ++k) {
      in_use |= root_->levels[static_cast<std::uint16_t>(c.last() + k) % kRingSize].load() == off;
    }
    if (!in_use && heap_.is_allocated(off) && region_.at<LevelHeader>(off)->magic == kLevelMagic) {
      tc->free_unpublished(off);
    }
    entry.store(0);
    region_.flush(&entry, sizeof(std::uint64_t));
  }
  // Freed levels and cleared entries are durable before we serve.
  region_.drain();
  // 5. The saved item count is valid only until the next crash; without
  //    it, count now, before any writer can change what is counted.
  if (!count_.take_saved(region_, root_->item_count, root_->count_valid)) {
    count_at_open(tc);
  }
  // 6. Tag filters (DRAM) for the live levels, empty and not yet trusted:
  //    writers add to them from now on, and the first rehash thread adds the
  //    slots already there (build_filters), so open does not wait for a scan
  //    of the table.
  if (use_filters_) {
    for (unsigned i = 0; i < c.levels(); ++i) {
      const auto id = static_cast<std::uint16_t>(c.last() + i);
      auto* f = new TagFilter(level(id), /*ready=*/false);
      filters_[id % kRingSize].store(f);
      unbuilt_filters_.emplace_back(id, f);
    }
  }
  ready_ = true;
  return Status::OK();
}

void ClevelIndex::build_filters() {
  constexpr std::uint64_t kChunk = 1024;  // buckets per read-side section
  for (auto [id, f] : unbuilt_filters_) {
    bool gone = false;
    for (std::uint64_t first = 0; !gone; first += kChunk) {
      if (stop_.load(std::memory_order_relaxed)) return;
      rcu::ReadGuard guard;
      // A rehash round that drops the level unhooks the filter before its
      // grace period: seen here, the filter and the level stay valid until
      // the guard ends. (Were f freed and its address reused by the next
      // level in this ring entry, we would add that level's own tags to its
      // own filter: harmless.)
      if (filters_[id % kRingSize].load(std::memory_order_acquire) != f) {
        gone = true;
        break;
      }
      if (first >= f->buckets()) {
        // Every slot that existed when we passed it is in, and every later
        // pointer was added by its writer before it was stored.
        f->set_ready();
        break;
      }
      Bucket* buckets = level_buckets(level(id));
      const std::uint64_t end = std::min(first + kChunk, f->buckets());
      for (std::uint64_t b = first; b < end; ++b) {
        std::uint64_t bits = 0;
        for (auto& s : buckets[b].slot) {
          const std::uint64_t v = s.load(std::memory_order_seq_cst);
          if (!slot_empty(v)) bits |= TagFilter::bits(pool::pptr_tag(v));
        }
        if (bits != 0) f->add_bits(b, bits);
      }
    }
  }
}

void ClevelIndex::count_at_open(heap::ThreadCache* tc) {
  // O(slots), once per crash, with no operation running (the rehash threads
  // start after open): the count is exact (a scan beside running writers
  // counts an insert twice or a delete not at all). Every slot is checked
  // against the heap before its item is read; a slot that names no whole
  // item is left alone, uncounted, for check() to report, and the count is
  // then not saved by close().
  const Ctx c = load_ctx();
  std::unordered_set<std::uint64_t> items;
  std::unordered_set<std::uint64_t> dead;
  std::vector<std::atomic<std::uint64_t>*> dead_slots;
  bool damaged = false;
  for (unsigned k = 0; k < c.levels(); ++k) {
    LevelHeader* l = level(static_cast<std::uint16_t>(c.last() + k));
    const std::uint64_t n = std::uint64_t{1} << l->log2;
    for (std::uint64_t b = 0; b < n; ++b) {
      bool dirty = false;
      for (auto& s : level_buckets(l)[b].slot) {
        const std::uint64_t v = s.load();
        if (slot_empty(v)) {
          if (v != 0) damaged = true;  // moved out outside any progress bucket
          continue;
        }
        const std::uint64_t off = slot_offset(v);
        const std::size_t size = heap_.is_allocated(off) ? heap_.block_size(off) : 0;
        const auto* item = region_.at<ItemHeader>(off);
        if (size < sizeof(ItemHeader) ||
            sizeof(ItemHeader) + std::uint64_t{item->key_len} + item->value_len > size) {
          damaged = true;
          continue;
        }
        const std::uint64_t st = item->state.load();
        if (state_visible(st)) {
          items.insert(off);
          // PENDING from before the crash: what is on media now is durable.
          if (v & kPending) {
            s.store(v & ~kPending);
            dirty = true;
          }
        } else if (state_kind(st) == kRemoved) {
          // A delete whose REMOVED state reached media and whose retire
          // entry did not (one drain covers both; heap recovery saw no log
          // naming the item). Retired, then unlinked, below.
          dead_slots.push_back(&s);
          dead.insert(off);
        } else if (state_kind(st) > kRemoved) {
          damaged = true;
        }
        // (A TENTATIVE or LOSER item here is one no log names: a broken
        // persist order, left for check() to report.)
      }
      if (dirty) region_.flush(level_buckets(l) + b, sizeof(Bucket));
    }
  }
  // The deletes are finished in their own order (P3): the retire entries
  // are durable before the unlink, so that a crash in between leaves the
  // items in a log, which the next recovery asks keep_block() about; the
  // heap frees them after a grace period.
  for (std::uint64_t off : dead) {
    if (!heap_.is_allocated(off)) continue;
    tc->reserve_retire(1);
    tc->retire(off);
  }
  region_.drain();
  for (auto* s : dead_slots) {
    s->store(0);
    region_.flush(s, sizeof(std::uint64_t));
  }
  region_.drain();  // the cleared PENDING bits and the unlinks, durable before we serve
  count_.set_base(static_cast<std::int64_t>(items.size()), /*known=*/!damaged);
}

bool ClevelIndex::keep_block(std::uint64_t off) {
  const Ctx c = load_ctx();
  for (unsigned i = 0; i < c.levels(); ++i) {
    if (root_->levels[static_cast<std::uint16_t>(c.last() + i) % kRingSize].load() == off) return true;
  }
  // Otherwise it can only be an item (or garbage).
  const std::size_t size = heap_.block_size(off);
  if (size < sizeof(ItemHeader)) return false;
  const auto* item = region_.at<ItemHeader>(off);
  const std::uint64_t st = item->state.load();
  if (state_kind(st) > kRemoved || item->key_len > kMaxKeySize ||
      sizeof(ItemHeader) + std::uint64_t{item->key_len} + item->value_len > size) {
    return false;
  }
  const Key key = make_key(item_key(item));
  std::vector<SlotRef> refs;
  collect(key, c, off, &refs);
  if (refs.empty()) return false;
  if (state_visible(st)) return true;
  // TENTATIVE or LOSER from before the crash: an insert that was never
  // acknowledged; REMOVED: a delete whose unlink did not finish. Unlink it
  // everywhere, then it is freed.
  for (const SlotRef& r : refs) {
    r.slot->store(0);
    region_.flush(r.slot, sizeof(std::uint64_t));
  }
  region_.drain();  // unlinked before the block is freed and reused
  return false;
}

void ClevelIndex::close() {
  if (closed_) return;
  closed_ = true;
  stop_.store(true);
  wake_rehash();
  for (std::thread& t : rehashers_) t.join();
  rehashers_.clear();
  // A rejected pool is left as it was found.
  if (!ready_) return;
  // Only an exact count is saved (not after open found damaged slots);
  // without one the next open counts, as after a crash.
  count_.save(region_, root_->item_count, root_->count_valid);
}

Status ClevelIndex::check() {
  auto fail = [&](const std::string& what) {
    return Status::Corruption("pool " + env_.pool->path() + ": clevel: " + what);
  };
  // The filters made at open are complete, so that all of them are checked.
  build_filters();
  // Rehash threads finish their bucket and wait: no move is half-done.
  std::unique_lock pause(pause_);
  heap_.drain_all();  // quiescent: retired blocks must not look like leaks
  rcu::ReadGuard guard;
  const Ctx c = load_ctx();
  if (c.levels() < 1 || c.levels() > kRingSize - 2) return fail("bad level count");
  if (!c.resizing() && c.levels() != 2) {
    return fail(std::to_string(c.levels()) + " levels while not resizing");
  }
  std::unordered_set<std::uint64_t> live_levels;
  for (unsigned i = 0; i < kRingSize; ++i) {
    const std::uint64_t off = root_->levels[i].load();
    bool in_range = false;
    for (unsigned k = 0; k < c.levels(); ++k) {
      in_range |= (static_cast<std::uint16_t>(c.last() + k) % kRingSize) == i;
    }
    if (in_range != (off != 0)) return fail("ring entry " + std::to_string(i) + " inconsistent");
  }
  unsigned prev_log2 = 0;
  std::unordered_map<std::string, std::uint64_t> by_key;
  std::unordered_set<std::uint64_t> items;
  std::uint64_t duplicates = 0;
  for (unsigned k = 0; k < c.levels(); ++k) {
    const auto id = static_cast<std::uint16_t>(c.last() + k);
    const std::uint64_t loff = root_->levels[id % kRingSize].load();
    if (!heap_.is_allocated(loff)) return fail("level " + std::to_string(id) + " not allocated");
    LevelHeader* l = region_.at<LevelHeader>(loff);
    if (l->magic != kLevelMagic || l->id != id) return fail("level header " + std::to_string(id));
    if (k > 0 && l->log2 != prev_log2 + 1) return fail("level sizes do not double");
    if (heap_.block_size(loff) < level_bytes(l->log2)) return fail("level block too small");
    prev_log2 = l->log2;
    live_levels.insert(loff);
    const TagFilter* filter = filters_[id % kRingSize].load();
    if (use_filters_ && (filter == nullptr || !filter->is_for(l) || !filter->ready())) {
      return fail("level " + std::to_string(id) + " has no complete tag filter");
    }
    const std::uint64_t mask = (std::uint64_t{1} << l->log2) - 1;
    for (std::uint64_t b = 0; b <= mask; ++b) {
      for (auto& s : level_buckets(l)[b].slot) {
        const std::uint64_t v = s.load();
        if (v == 0) continue;
        if (v & kMoving) return fail("slot left frozen (MOVING)");
        const std::uint64_t off = slot_offset(v);
        if (!heap_.is_allocated(off)) return fail("slot points to a free block");
        const auto* item = region_.at<ItemHeader>(off);
        if (heap_.block_size(off) < sizeof(ItemHeader) + std::uint64_t{item->key_len} + item->value_len) {
          return fail("item larger than its block");
        }
        if (!state_visible(item->state.load())) return fail("slot points to an unfinished insert");
        const Key key = make_key(item_key(item));
        if (pool::pptr_tag(v) != key_tag(key.h1)) return fail("tag does not match the key");
        if (filter != nullptr && !filter->may_hold(b, key_tag(key.h1))) {
          return fail("tag filter of level " + std::to_string(id) + " misses a slot");
        }
        if (b != (key.h1 & mask) && b != (key.h2 & mask)) return fail("item in a foreign bucket");
        auto [it, fresh] = by_key.emplace(std::string(item_key(item)), off);
        if (!fresh && it->second != off) return fail("two items hold one key");
        if (!fresh) ++duplicates;
        items.insert(off);
      }
    }
  }
  if (count_.known() && size() != items.size()) {
    return fail("item count " + std::to_string(size()) + " but " + std::to_string(items.size()) +
                " items in the table");
  }
  std::string leak;
  heap_.for_each_allocated([&](std::uint64_t off, std::size_t) {
    if (leak.empty() && !live_levels.contains(off) && !items.contains(off)) {
      leak = "heap block at offset " + std::to_string(off) + " is allocated but unreachable";
    }
  });
  if (!leak.empty()) return fail(leak);
  (void)duplicates;
  return Status::OK();
}

}  // namespace pmhash::engine::clevel
