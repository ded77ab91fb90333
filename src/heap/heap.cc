// heap/heap.cc - the persistent heap (design: heap/heap.h; format: heap/layout.h).
//
// Volatile state, rebuilt by open() from the chunk table and the bitmaps in
// O(chunks):
//
//   ChunkInfo[chunk]    state and size class packed in one atomic word;
//                       `used`, the allocated blocks of a slab chunk; links
//                       of the class list the chunk is on.
//   ClassShard[class]   mutex + two lists of the class's inactive slabs with
//                       free blocks: roomy (at least a quarter free) and
//                       tight (fewer).
//   free set            mutex + bitset of free chunks, searched first-fit.
//   CacheImpl           one per (thread, heap): a log slot, one active chunk
//                       per class, the bytes its thread allocated and freed.
//
// Slab chunk states (the class mutex guards every transition except the
// ones into and out of kFree, which the free-set mutex guards):
//
//              take from the free set, format
//   kFree -----------------------------------> kActive (one cache owns it)
//     ^                                          |    ^
//     |          owner finds no zero bit: fold   |    | pop from the roomy
//     |          its allocs into used, settle    v    | or the tight list
//     +--- settle: used == 0 -------- kFull / kPartial / kRoomy
//          (table entry freed, persisted)  (settle files the chunk by its
//                                           `used`: full, tight or roomy)
//
// "settle" re-evaluates an inactive chunk under its class mutex: used == 0
// -> its table entry becomes free (persisted) and the chunk joins the free
// set, so space freed by deleted items can later hold runs; otherwise the
// chunk moves to the list its `used` calls for. It runs when an owner
// deactivates a chunk and when a free moves `used` across a boundary (from
// blocks, to the roomy limit, or to 0). Both read the current state under
// the mutex, so a stale trigger is harmless.
//
// Which chunk an owner activates: a roomy one, else a fresh one from the
// free set, else a tight one (activate() says why: dense allocation).
//
// Small allocation (the hot path: no lock, no shared line but the bitmap
// word): only the owner of an active chunk sets its bits, other threads only
// clear them (fetch_and), so a zero bit the owner reads stays zero until it
// sets it. The owner counts its allocations in the thread-private
// Active::allocs and folds them into `used` when the chunk stops being
// active; so while a chunk is active, `used` may run below the true count
// (even below 0) and nobody acts on it. A free clears the bit first and
// decrements `used` after, so `used` never runs below the true count of an
// inactive chunk.
//
// Persist order of an allocation: the intent is written, flushed and
// drained before the bit is set, so no crash leaves an allocated block that
// no log names. (Page regions flush synchronously and byte regions keep x86
// store order, where the drain costs nothing; on cache-line regions it is
// the one extra fence an allocation pays so that recovery needs no sweep.)
// Unlogged allocations (epoch engines) skip the intent and every flush: the
// engine's own sweep, not recovery, finds the blocks a crash leaks.
//
// Byte counters: each cache counts the slab bytes its thread allocated and
// freed, written only by that thread (a plain load and store); frees by
// other parties (drain_all, recovery, heap destruction) and runs use shared
// atomics. used_bytes() sums them under the cache-list mutex.
//
// Thread caches: thread() keeps the last (heap id, cache) pair in two
// trivially-initialised thread_locals (the fast path), and every pair of the
// thread in a thread_local list whose destructor releases the caches at
// thread exit. Heap ids are never reused, and each pair holds a shared
// Anchor that the heap's destructor clears, so a thread that exits after the
// heap died touches nothing of it. Releasing a cache drains its retired
// log, returns its active chunks and frees its slot.
//
// Lock order: anchor -> cache list -> cache log -> class -> free set. No
// lock is held across rcu::synchronize() except an anchor (shared by thread
// exits, exclusive for the heap's destructor), which readers never take.
#include "heap/heap.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "heap/heap_testing.h"
#include "heap/layout.h"
#include "sync/rcu.h"

namespace pmhash::heap {

using layout::HeapHeader;
using layout::kClassCount;
using layout::kSizeClasses;
using layout::SizeClass;
using layout::ThreadLog;

namespace {

constexpr std::uint32_t kNoChunk = ~std::uint32_t{0};
// In place of an intent slot: the block goes in no log and the allocation
// flushes nothing but a run's table entries (allocate_unlogged).
constexpr unsigned kNoIntent = ~0u;

template <typename T>
std::atomic_ref<T> ref(T& x) {
  return std::atomic_ref<T>(x);
}

template <typename T>
T load(const T& x, std::memory_order mo = std::memory_order_acquire) {
  return std::atomic_ref<T>(const_cast<T&>(x)).load(mo);
}

// kPartial and kRoomy are inactive slabs with free blocks, on their class's
// tight or roomy list: roomy when at least a quarter of the blocks are free.
enum class State : std::uint32_t { kFree, kRun, kActive, kFull, kPartial, kRoomy };

constexpr std::uint32_t pack(State s, unsigned cls = 0) {
  return static_cast<std::uint32_t>(s) | (static_cast<std::uint32_t>(cls) << 8);
}
constexpr State state_of(std::uint32_t w) { return static_cast<State>(w & 0xff); }
constexpr unsigned class_of(std::uint32_t w) { return w >> 8; }

struct alignas(64) ChunkInfo {
  std::atomic<std::int64_t> used{0};
  std::atomic<std::uint32_t> state{pack(State::kFree)};
  std::uint32_t prev = kNoChunk;  // partial list, under the class mutex
  std::uint32_t next = kNoChunk;
  bool spare = false;  // formatted ahead, never active (under the class mutex)
};

struct alignas(64) ClassShard {
  std::mutex mu;
  std::uint32_t partial[2] = {kNoChunk, kNoChunk};  // heads: [0] tight, [1] roomy
};

std::atomic<std::uint64_t> g_next_heap_id{1};

std::string num(std::uint64_t v) { return std::to_string(v); }

// An inactive slab with at most this many blocks used is roomy.
std::int64_t roomy_limit(const SizeClass& k) { return k.blocks - k.blocks / 4; }

// The bytes of a slab chunk of class k that no block covers.
std::int64_t slack(const SizeClass& k) { return std::int64_t{kChunkSize} - std::int64_t{k.blocks} * k.size; }

// The state an inactive slab of class k with `used` blocks belongs in.
State slab_state(const SizeClass& k, std::int64_t used) {
  if (used >= k.blocks) return State::kFull;
  return used <= roomy_limit(k) ? State::kRoomy : State::kPartial;
}

// Mask of the valid bits of bitmap word w of class k.
std::uint64_t valid_bits(const SizeClass& k, std::uint32_t w) {
  const std::uint32_t rest = k.blocks - w * 64;
  return rest >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << rest) - 1;
}

[[noreturn]] void contract_violation(const char* what) {
  std::fprintf(stderr, "pmhash heap: %s\n", what);
  std::abort();
}

// Flushes two 8-byte words, once when they share a cache line.
void flush_words(media::Region& r, const std::uint64_t* a, const std::uint64_t* b) {
  const auto line = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) / media::kCacheLineSize;
  };
  r.flush(a, sizeof(*a));
  if (line(a) != line(b)) r.flush(b, sizeof(*b));
}

}  // namespace

class HeapImpl;

// ---------------------------------------------------------------------------
// CacheImpl: one thread's view of one heap.

// Cache-line aligned: no false sharing with another thread's cache.
class alignas(64) CacheImpl final : public ThreadCache {
 public:
  struct Active {
    std::uint32_t chunk = kNoChunk;
    std::uint32_t cursor = 0;  // bitmap word where the last block was found
    std::int64_t allocs = 0;   // blocks allocated since activation
  };

  CacheImpl(HeapImpl* heap, unsigned slot, ThreadLog* log, std::uint64_t serial)
      : heap_(heap), slot_(slot), log_(log), serial_(serial) {}

  unsigned slot() const override { return slot_; }
  Status allocate(std::size_t n, std::uint64_t* off, bool zero, unsigned intent) override;
  Status allocate_unlogged(std::size_t n, std::uint64_t* off, const void** dirty,
                           bool use_reserve) override;
  void clear_intent(unsigned intent) override;
  void free_unpublished(std::uint64_t off) override;
  void free_unlogged(std::uint64_t off, const void** dirty) override;
  void reserve_retire(unsigned n) override;
  void retire(std::uint64_t off) override;
  void drain_retired() override;

  // Owner-only counter update: no other thread writes slab_bytes_.
  void add_bytes(std::int64_t d) {
    slab_bytes_.store(slab_bytes_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  // The slab search of both allocate() and allocate_unlogged() (intent
  // kNoIntent); *word: the bitmap word it set.
  Status allocate_small(std::size_t n, std::uint64_t* off, bool zero, unsigned intent,
                        const void** word, bool use_reserve);

  HeapImpl* const heap_;
  const unsigned slot_;
  ThreadLog* const log_;
  const std::uint64_t serial_;  // unique per heap: tells caches apart after a slot is reused
  std::array<Active, kClassCount> active_{};
  std::atomic<std::int64_t> slab_bytes_{0};  // slab bytes allocated minus freed by the owner
  std::mutex log_mu_;                        // retired[] and retired_count vs drain_all
  std::uint64_t log_gen_ = 0;                // bumped by every drain, under log_mu_
};

// Keeps a thread's cache list away from a destroyed heap.
struct Anchor {
  std::shared_mutex mu;      // shared while thread exits release caches
  HeapImpl* heap = nullptr;  // under mu; null once the heap is being destroyed
  std::atomic<bool> alive{true};
};

// ---------------------------------------------------------------------------
// HeapImpl

class HeapImpl final : public Heap {
 public:
  HeapImpl(media::Region& region, std::uint64_t off, const layout::Layout& l)
      : region_(region),
        off_(off),
        logs_(region.at<ThreadLog>(l.logs_offset)),
        table_(region.at<std::uint64_t>(l.table_offset)),
        chunks_off_(l.chunks_offset),
        nchunks_(static_cast<std::uint32_t>(l.chunk_count)),
        id_(g_next_heap_id.fetch_add(1)),
        info_(new ChunkInfo[l.chunk_count]),
        free_bits_((l.chunk_count + 63) / 64, 0),
        anchor_(std::make_shared<Anchor>()) {
    anchor_->heap = this;
  }

  ~HeapImpl() override;

  Status rebuild();
  void abandon() { abandoned_ = true; }
  Status check_accounting() const;

  // Heap
  void recover(const std::function<bool(std::uint64_t off)>& keep) override;
  ThreadCache* thread(Status* status) override;
  bool is_allocated(std::uint64_t off) const override;
  std::size_t block_size(std::uint64_t off) const override;
  void for_each_allocated(
      const std::function<void(std::uint64_t off, std::size_t size)>& fn) const override;
  std::unique_ptr<AllocationSnapshot> snapshot_allocated() const override;
  std::uint64_t used_bytes() const override;
  void set_reserve(std::uint32_t chunks) override { reserve_.store(chunks); }
  std::uint32_t chunk_count() const override { return nchunks_; }
  std::uint64_t free_bytes() const override;
  void drain_all() override;
  Status check() const override;

  // For CacheImpl.
  media::Region& region() { return region_; }
  std::uint64_t chunk_offset(std::uint32_t i) const { return chunks_off_ + std::uint64_t{i} * kChunkSize; }
  std::uint64_t* bitmap(std::uint32_t i) const { return region_.at<std::uint64_t>(chunk_offset(i)); }
  bool activate(unsigned cls, CacheImpl::Active* a, bool use_reserve);
  void deactivate(unsigned cls, CacheImpl::Active* a);
  Status allocate_run(CacheImpl* c, std::size_t n, std::uint64_t* off, bool zero, unsigned intent,
                      const void** head, bool use_reserve);
  const void* free_block(std::uint64_t off, CacheImpl* owner, bool flush);
  void free_retired(CacheImpl* c, std::uint64_t gen, std::uint64_t n, CacheImpl* owner);
  Status no_space(std::size_t n) const {
    return Status::NoSpace("pool full: cannot allocate " + num(n) + " bytes (" +
                           num(free_bytes()) + " bytes free)");
  }
  void release_at_exit(CacheImpl* c);

 private:
  std::string where() const { return "heap at offset " + num(off_) + " of " + region_.path(); }
  bool locate(std::uint64_t off, std::uint32_t* chunk, std::uint64_t* within) const;
  std::int64_t slab_used() const;  // under caches_mu_

  // Free set, under free_mu_.
  std::uint32_t next_free(std::uint32_t i) const;
  std::uint32_t next_taken(std::uint32_t i) const;
  // use_reserve: may take the last reserve_ free chunks too.
  bool take_chunks(std::uint32_t n, std::uint32_t state, std::uint32_t* first, bool use_reserve);
  void give_chunks(std::uint32_t first, std::uint32_t n);

  // Slabs, under the class mutex.
  void format_slabs(const std::uint32_t* chunks, std::uint32_t n, unsigned cls);
  bool release_spares();
  void settle(ClassShard& sh, std::uint32_t i, unsigned cls);
  void release_slab(std::uint32_t i, unsigned cls);
  void push_partial(ClassShard& sh, std::uint32_t i, State list);
  bool pop_partial(unsigned cls, State list, CacheImpl::Active* a);
  void unlink_partial(ClassShard& sh, std::uint32_t i);

  const void* free_small(std::uint32_t i, unsigned cls, std::uint64_t within, CacheImpl* owner,
                         bool flush);
  void free_run(std::uint32_t head, std::uint32_t len, bool drain);
  void deactivate_all(CacheImpl* c);
  void clear_intents(CacheImpl* c);
  void forget(CacheImpl* c);  // under caches_mu_

  media::Region& region_;
  const std::uint64_t off_;
  ThreadLog* const logs_;
  std::uint64_t* const table_;
  const std::uint64_t chunks_off_;
  const std::uint32_t nchunks_;
  const std::uint64_t id_;  // never reused; thread() compares it on every call
  std::unique_ptr<ChunkInfo[]> info_;
  std::array<ClassShard, kClassCount> classes_;

  std::mutex free_mu_;
  std::vector<std::uint64_t> free_bits_;  // bit i set: chunk i is free
  std::uint32_t free_hint_ = 0;           // no free chunk below word free_hint_
  std::atomic<std::uint64_t> free_chunks_{0};
  std::atomic<std::uint32_t> reserve_{0};  // set_reserve()
  bool reserve_armed_ = true;              // under free_mu_

  std::atomic<std::int64_t> slab_used_base_{0};  // slab bytes counted outside live caches
  std::atomic<std::int64_t> slab_capacity_{0};   // block bytes of all slab chunks
  // Chunk bytes that spares (see activate) hold beyond their blocks: free
  // too, since release_spares returns spares to the free set on demand.
  std::atomic<std::int64_t> spare_slack_{0};
  std::atomic<std::int64_t> run_used_{0};        // bytes of allocated runs

  mutable std::mutex caches_mu_;
  std::array<CacheImpl*, kMaxThreads> slots_{};  // under caches_mu_
  std::uint64_t next_serial_ = 1;                // under caches_mu_

  std::shared_ptr<Anchor> anchor_;
  bool abandoned_ = false;
  // Chunks whose table entries a crash left stale (half-written or
  // half-freed runs, empty slabs): free since open, zeroed by recover().
  std::vector<std::uint32_t> repairs_;
};

// ---------------------------------------------------------------------------
// Thread-local cache lookup.

namespace {

// The fast path of thread(): constant-initialised, so no guard is checked.
thread_local std::uint64_t tls_last_id = 0;
thread_local CacheImpl* tls_last = nullptr;

}  // namespace

struct TlsEntry {
  std::uint64_t heap_id;
  std::shared_ptr<Anchor> anchor;
  CacheImpl* cache;
};

struct TlsCaches {
  std::vector<TlsEntry> entries;

  ~TlsCaches() {
    tls_last_id = 0;
    tls_last = nullptr;
    for (TlsEntry& e : entries) {
      std::shared_lock lock(e.anchor->mu);
      if (e.anchor->heap != nullptr) e.anchor->heap->release_at_exit(e.cache);
    }
  }
};

namespace {

TlsCaches& tls_caches(media::Region& region) {
  // Releasing caches at thread exit flushes, which uses media's per-thread
  // counters: constructing those before this list makes them die after it.
  thread_local const bool counters_first = (region.flush(region.base(), 0), true);
  (void)counters_first;
  thread_local TlsCaches caches;
  return caches;
}

}  // namespace

ThreadCache* HeapImpl::thread(Status* status) {
  if (tls_last_id == id_) return tls_last;
  TlsCaches& t = tls_caches(region_);
  for (const TlsEntry& e : t.entries) {
    if (e.heap_id == id_) {
      tls_last_id = id_;
      tls_last = e.cache;
      return e.cache;
    }
  }
  std::erase_if(t.entries, [](const TlsEntry& e) { return !e.anchor->alive.load(); });
  CacheImpl* c = nullptr;
  {
    std::lock_guard lock(caches_mu_);
    for (unsigned s = 0; s < kMaxThreads; ++s) {
      if (slots_[s] == nullptr) {
        c = new CacheImpl(this, s, &logs_[s], next_serial_++);
        slots_[s] = c;
        break;
      }
    }
  }
  if (c == nullptr) {
    if (status != nullptr) {
      *status = Status::Busy("too many threads (" + num(kMaxThreads) +
                             ") use this store: let some finish before starting more");
    }
    return nullptr;
  }
  t.entries.push_back({id_, anchor_, c});
  tls_last_id = id_;
  tls_last = c;
  return c;
}

void HeapImpl::release_at_exit(CacheImpl* c) {
  // Called by the owner thread, with the anchor held: the heap stays alive.
  c->drain_retired();
  deactivate_all(c);
  clear_intents(c);
  std::lock_guard lock(caches_mu_);
  forget(c);
}

void HeapImpl::deactivate_all(CacheImpl* c) {
  for (unsigned cls = 0; cls < kClassCount; ++cls) {
    if (c->active_[cls].chunk != kNoChunk) deactivate(cls, &c->active_[cls]);
  }
}

// Like clear_intent(): a stale intent is harmless to recovery, so this is
// not flushed here; the heap's destructor flushes the logs before close.
void HeapImpl::clear_intents(CacheImpl* c) {
  for (std::uint64_t& i : c->log_->alloc_intent) ref(i).store(0, std::memory_order_relaxed);
}

void HeapImpl::forget(CacheImpl* c) {
  slab_used_base_.fetch_add(c->slab_bytes_.load(std::memory_order_relaxed));
  slots_[c->slot_] = nullptr;
  delete c;
}

HeapImpl::~HeapImpl() {
  {
    std::unique_lock lock(anchor_->mu);  // waits for thread exits in progress
    anchor_->heap = nullptr;
    anchor_->alive.store(false);
  }
  if (!abandoned_) drain_all();
  std::lock_guard lock(caches_mu_);
  for (CacheImpl*& c : slots_) {
    if (c == nullptr) continue;
    if (!abandoned_) {
      deactivate_all(c);
      clear_intents(c);
      region_.flush(c->log_->alloc_intent, sizeof(c->log_->alloc_intent));
    }
    forget(c);
  }
  // Spares go back to the free set, so that a clean pool holds no empty slab.
  if (!abandoned_) release_spares();
  // Empty logs durable before the pool is marked clean: a clean pool's
  // check() requires every log to be empty or to name allocated blocks.
  if (!abandoned_) region_.drain();
}

// ---------------------------------------------------------------------------
// Free set.

std::uint32_t HeapImpl::next_free(std::uint32_t i) const {
  std::size_t w = i / 64;
  if (w >= free_bits_.size()) return nchunks_;
  std::uint64_t v = free_bits_[w] & (~std::uint64_t{0} << (i % 64));
  while (v == 0) {
    if (++w == free_bits_.size()) return nchunks_;
    v = free_bits_[w];
  }
  return static_cast<std::uint32_t>(w * 64 + std::countr_zero(v));
}

std::uint32_t HeapImpl::next_taken(std::uint32_t i) const {
  std::size_t w = i / 64;
  if (w >= free_bits_.size()) return nchunks_;
  std::uint64_t v = ~free_bits_[w] & (~std::uint64_t{0} << (i % 64));
  while (v == 0) {
    if (++w == free_bits_.size()) return nchunks_;
    v = ~free_bits_[w];
  }
  return std::min(nchunks_, static_cast<std::uint32_t>(w * 64 + std::countr_zero(v)));
}

bool HeapImpl::take_chunks(std::uint32_t n, std::uint32_t state, std::uint32_t* first,
                           bool use_reserve) {
  std::lock_guard lock(free_mu_);
  // The reserve (set_reserve): while armed, only use_reserve takes the last
  // reserve_ free chunks, and taking one disarms it, so that what removes
  // free next is there for everyone; give_chunks arms it again once there
  // is room for it twice over.
  const std::uint64_t reserve = reserve_.load(std::memory_order_relaxed);
  if (reserve_armed_ && free_chunks_.load() < std::uint64_t{n} + reserve) {
    if (!use_reserve) return false;
    reserve_armed_ = false;
  }
  std::uint32_t i = next_free(free_hint_ * 64);
  free_hint_ = std::min<std::uint32_t>(i, nchunks_ - 1) / 64;
  while (i < nchunks_) {
    const std::uint32_t end = next_taken(i);
    if (end - i >= n) {
      for (std::uint32_t k = i; k < i + n; ++k) {
        free_bits_[k / 64] &= ~(std::uint64_t{1} << (k % 64));
        info_[k].used.store(0, std::memory_order_relaxed);
        info_[k].state.store(state);
      }
      free_chunks_.fetch_sub(n);
      *first = i;
      return true;
    }
    i = next_free(end);
  }
  return false;
}

void HeapImpl::give_chunks(std::uint32_t first, std::uint32_t n) {
  std::lock_guard lock(free_mu_);
  for (std::uint32_t k = first; k < first + n; ++k) {
    free_bits_[k / 64] |= std::uint64_t{1} << (k % 64);
    info_[k].state.store(pack(State::kFree));
  }
  free_hint_ = std::min(free_hint_, first / 64);
  free_chunks_.fetch_add(n);
  if (!reserve_armed_ && free_chunks_.load() >= 2 * std::uint64_t{reserve_.load()} + 1) reserve_armed_ = true;
}

// ---------------------------------------------------------------------------
// Slabs.

void HeapImpl::push_partial(ClassShard& sh, std::uint32_t i, State list) {
  std::uint32_t& head = sh.partial[list == State::kRoomy];
  info_[i].prev = kNoChunk;
  info_[i].next = head;
  if (head != kNoChunk) info_[head].prev = i;
  head = i;
}

void HeapImpl::unlink_partial(ClassShard& sh, std::uint32_t i) {
  const std::uint32_t p = info_[i].prev;
  const std::uint32_t n = info_[i].next;
  (p != kNoChunk ? info_[p].next : sh.partial[state_of(info_[i].state.load()) == State::kRoomy]) = n;
  if (n != kNoChunk) info_[n].prev = p;
  info_[i].prev = info_[i].next = kNoChunk;
}

void HeapImpl::format_slabs(const std::uint32_t* chunks, std::uint32_t n, unsigned cls) {
  const SizeClass& k = kSizeClasses[cls];
  for (std::uint32_t c = 0; c < n; ++c) {
    std::uint64_t* bits = bitmap(chunks[c]);
    for (std::uint32_t w = 0; w < k.first / 8; ++w) ref(bits[w]).store(0, std::memory_order_relaxed);
    region_.flush(bits, k.first);
  }
  // The zeroed bitmaps are durable before the table calls the chunks slabs:
  // else a crash could read a chunk's old contents as allocated blocks.
  region_.drain();
  for (std::uint32_t c = 0; c < n; ++c) {
    ref(table_[chunks[c]]).store(layout::slab_entry(cls), std::memory_order_release);
    region_.flush(&table_[chunks[c]], layout::kEntrySize);
  }
  // The entries are durable before any block of the chunks is handed out:
  // else a published block could sit in a chunk that recovery finds free.
  region_.drain();
  slab_capacity_.fetch_add(std::int64_t{n} * k.blocks * k.size);
}

// Empty slabs formatted ahead (spares, see activate) go back to the free set
// when some allocation finds no free chunk; true when any did.
bool HeapImpl::release_spares() {
  bool any = false;
  for (unsigned cls = 0; cls < kClassCount; ++cls) {
    ClassShard& sh = classes_[cls];
    std::lock_guard lock(sh.mu);
    for (std::uint32_t i = sh.partial[1]; i != kNoChunk;) {
      const std::uint32_t next = info_[i].next;
      if (info_[i].spare) {
        info_[i].spare = false;
        unlink_partial(sh, i);
        spare_slack_.fetch_sub(slack(kSizeClasses[cls]));
        release_slab(i, cls);
        any = true;
      }
      i = next;
    }
  }
  return any;
}

bool HeapImpl::pop_partial(unsigned cls, State list, CacheImpl::Active* a) {
  ClassShard& sh = classes_[cls];
  std::lock_guard lock(sh.mu);
  const std::uint32_t i = sh.partial[list == State::kRoomy];
  if (i == kNoChunk) return false;
  unlink_partial(sh, i);
  if (info_[i].spare) spare_slack_.fetch_sub(slack(kSizeClasses[cls]));
  info_[i].spare = false;
  info_[i].state.store(pack(State::kActive, cls));
  *a = CacheImpl::Active{i, 0, 0};
  return true;
}

// Density first: a roomy slab, else a fresh one, and a tight slab (a few
// free blocks scattered over the chunk) only when there is no free chunk
// left outside the reserve. New blocks then land side by side, so a run of
// allocations dirties few pages, which is what a page-granularity epoch
// fence writes back; the space tight slabs hold is still all used before
// the heap reports NoSpace.
//
// A fresh chunk comes with up to kSpareSlabs more, formatted in the same
// two drains and filed as empty roomy slabs: formatting orders the zeroed
// bitmap before the table entry, two drains that on a page region are two
// fdatasyncs, which wait for whatever else the file has in flight (an epoch
// fence's write-back). One format per batch keeps them off most
// allocations. Spares hold at most 1/16 of the free chunks, and go back to
// the free set (release_spares) when an allocation finds none.
bool HeapImpl::activate(unsigned cls, CacheImpl::Active* a, bool use_reserve) {
  constexpr std::uint32_t kSpareSlabs = 31;
  if (pop_partial(cls, State::kRoomy, a)) return true;
  std::uint32_t fresh[kSpareSlabs + 1];
  if (!take_chunks(1, pack(State::kActive, cls), &fresh[0], false)) {
    if (pop_partial(cls, State::kPartial, a)) return true;
    if (!(release_spares() && take_chunks(1, pack(State::kActive, cls), &fresh[0], false)) &&
        !(use_reserve && take_chunks(1, pack(State::kActive, cls), &fresh[0], true))) {
      return false;
    }
  }
  const auto spares = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(kSpareSlabs, free_chunks_.load() / 16));
  std::uint32_t n = 1;
  while (n <= spares && take_chunks(1, pack(State::kActive, cls), &fresh[n], false)) ++n;
  format_slabs(fresh, n, cls);
  if (n > 1) {
    ClassShard& sh = classes_[cls];
    std::lock_guard lock(sh.mu);
    spare_slack_.fetch_add(std::int64_t{n - 1} * slack(kSizeClasses[cls]));
    for (std::uint32_t c = n - 1; c > 0; --c) {  // in file order: the list is LIFO
      info_[fresh[c]].state.store(pack(State::kRoomy, cls));
      info_[fresh[c]].spare = true;
      push_partial(sh, fresh[c], State::kRoomy);
    }
  }
  *a = CacheImpl::Active{fresh[0], 0, 0};
  return true;
}

void HeapImpl::deactivate(unsigned cls, CacheImpl::Active* a) {
  ClassShard& sh = classes_[cls];
  std::lock_guard lock(sh.mu);
  ChunkInfo& ci = info_[a->chunk];
  ci.used.fetch_add(a->allocs);
  ci.state.store(pack(State::kFull, cls));
  settle(sh, a->chunk, cls);
  *a = CacheImpl::Active{};
}

void HeapImpl::settle(ClassShard& sh, std::uint32_t i, unsigned cls) {
  ChunkInfo& ci = info_[i];
  if (ci.spare) return;  // no block yet: nothing to settle
  const std::uint32_t st = ci.state.load();
  const State s = state_of(st);
  if (class_of(st) != cls || (s != State::kFull && s != State::kPartial && s != State::kRoomy)) return;
  const std::int64_t used = ci.used.load();
  if (used == 0) {
    if (s != State::kFull) unlink_partial(sh, i);
    release_slab(i, cls);
    return;
  }
  const State want = slab_state(kSizeClasses[cls], used);
  if (want == s) return;
  if (s != State::kFull) unlink_partial(sh, i);
  if (want != State::kFull) push_partial(sh, i, want);
  ci.state.store(pack(want, cls));
}

void HeapImpl::release_slab(std::uint32_t i, unsigned cls) {
  ref(table_[i]).store(0, std::memory_order_release);
  // Free on media before the chunk is reused: else a crash could pair the
  // slab entry with the next owner's data where the bitmap was.
  region_.persist(&table_[i], layout::kEntrySize);
  const SizeClass& k = kSizeClasses[cls];
  slab_capacity_.fetch_sub(std::int64_t{k.blocks} * k.size);
  give_chunks(i, 1);
}

// ---------------------------------------------------------------------------
// Allocation.

Status CacheImpl::allocate(std::size_t n, std::uint64_t* off, bool zero, unsigned intent) {
  if (n == 0) return Status::InvalidArgument("heap: cannot allocate 0 bytes");
  if (intent >= kIntentSlots) {
    return Status::InvalidArgument("heap: intent slot " + num(intent) + " out of range (" +
                                   num(kIntentSlots) + " slots)");
  }
  const void* word = nullptr;
  if (n > kMaxSmallSize) return heap_->allocate_run(this, n, off, zero, intent, &word, false);
  return allocate_small(n, off, zero, intent, &word, false);
}

Status CacheImpl::allocate_unlogged(std::size_t n, std::uint64_t* off, const void** dirty,
                                    bool use_reserve) {
  if (n == 0) return Status::InvalidArgument("heap: cannot allocate 0 bytes");
  if (n > kMaxSmallSize) return heap_->allocate_run(this, n, off, false, kNoIntent, dirty, use_reserve);
  return allocate_small(n, off, false, kNoIntent, dirty, use_reserve);
}

Status CacheImpl::allocate_small(std::size_t n, std::uint64_t* off, bool zero, unsigned intent,
                                 const void** word, bool use_reserve) {
  const bool logged = intent != kNoIntent;
  const unsigned cls = layout::class_index(n);
  const SizeClass& k = kSizeClasses[cls];
  Active& a = active_[cls];
  media::Region& r = heap_->region();
  for (;;) {
    if (a.chunk != kNoChunk) {
      std::uint64_t* bits = heap_->bitmap(a.chunk);
      for (std::uint32_t step = 0; step < k.words; ++step) {
        std::uint32_t w = a.cursor + step;
        if (w >= k.words) w -= k.words;
        const std::uint64_t free = ~ref(bits[w]).load(std::memory_order_acquire) & valid_bits(k, w);
        if (free == 0) continue;
        a.cursor = w;
        const int b = std::countr_zero(free);
        const std::uint64_t block =
            heap_->chunk_offset(a.chunk) + k.first + (std::uint64_t{w} * 64 + static_cast<unsigned>(b)) * k.size;
        if (logged) {
          // Intent first, then the bit (see "Persist order" above).
          std::uint64_t& slot = log_->alloc_intent[intent];
          ref(slot).store(block, std::memory_order_relaxed);
          r.flush(&slot, sizeof(slot));
          // The intent is durable before the bit can be: on cache-line media
          // the bit's line may otherwise be written back first, and a crash
          // would leave an allocated block that no log names (a leak).
          r.drain();
        }
        ref(bits[w]).fetch_or(std::uint64_t{1} << b, std::memory_order_acq_rel);
        // Unlogged, the caller's epoch fence makes the bit durable.
        if (logged) r.flush(&bits[w], sizeof(std::uint64_t));
        ++a.allocs;
        add_bytes(k.size);
        if (zero) {
          std::memset(r.at(block), 0, k.size);
          r.flush(r.at(block), k.size);
        }
        *word = &bits[w];
        *off = block;
        return Status::OK();
      }
      heap_->deactivate(cls, &a);
    }
    if (!heap_->activate(cls, &a, use_reserve)) return heap_->no_space(n);
  }
}

Status HeapImpl::allocate_run(CacheImpl* c, std::size_t n, std::uint64_t* off, bool zero,
                              unsigned intent, const void** head, bool use_reserve) {
  const std::uint64_t len = (std::uint64_t{n} + kChunkSize - 1) / kChunkSize;
  if (len > nchunks_) {
    return Status::InvalidArgument("heap: cannot allocate " + num(n) +
                                   " bytes: more than the whole heap (" +
                                   num(std::uint64_t{nchunks_} * kChunkSize) + " bytes)");
  }
  const auto nch = static_cast<std::uint32_t>(len);
  std::uint32_t h = 0;
  if (!take_chunks(nch, pack(State::kRun), &h, use_reserve) &&
      !(release_spares() && take_chunks(nch, pack(State::kRun), &h, use_reserve))) {
    return no_space(n);
  }
  const std::uint64_t block = chunk_offset(h);
  if (intent != kNoIntent) {
    // Intent first, then the table entries (see "Persist order" above).
    std::uint64_t& slot = c->log_->alloc_intent[intent];
    ref(slot).store(block, std::memory_order_relaxed);
    region_.flush(&slot, sizeof(slot));
    // The intent is durable before the table entries can be (else a crash
    // could leave a run that no log names: a leak).
    region_.drain();
  }
  for (std::uint32_t k = 1; k < nch; ++k) {
    ref(table_[h + k]).store(layout::body_entry(k), std::memory_order_relaxed);
  }
  ref(table_[h]).store(layout::head_entry(nch), std::memory_order_release);
  region_.flush(&table_[h], std::uint64_t{nch} * layout::kEntrySize);
  // Unlogged (an epoch engine): no later drain of this thread covers these
  // lines, so drain now. Else the head entry could reach media without its
  // body entries, and recovery would read a run over chunks it takes for
  // free. (A crash may still leave the run allocated and unreached: the
  // engine's sweep returns it.)
  if (intent == kNoIntent) region_.drain();
  run_used_.fetch_add(static_cast<std::int64_t>(len * kChunkSize));
  if (zero) {
    std::memset(region_.at(block), 0, len * kChunkSize);
    region_.flush(region_.at(block), len * kChunkSize);
  }
  *head = &table_[h];
  *off = block;
  return Status::OK();
}

void CacheImpl::clear_intent(unsigned intent) {
  if (intent < kIntentSlots) ref(log_->alloc_intent[intent]).store(0, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Free.

bool HeapImpl::locate(std::uint64_t off, std::uint32_t* chunk, std::uint64_t* within) const {
  if (off < chunks_off_) return false;
  const std::uint64_t rel = off - chunks_off_;
  if (rel >= std::uint64_t{nchunks_} * kChunkSize) return false;
  *chunk = static_cast<std::uint32_t>(rel / kChunkSize);
  *within = rel % kChunkSize;
  return true;
}

// Returns the word the free changed (the bitmap word, or the run's head
// entry), or nullptr when `off` is no allocated block. Without `flush` that
// word is left for the caller's epoch fence (free_unlogged).
const void* HeapImpl::free_block(std::uint64_t off, CacheImpl* owner, bool flush) {
  std::uint32_t i = 0;
  std::uint64_t within = 0;
  if (!locate(off, &i, &within)) return nullptr;
  const std::uint64_t e = load(table_[i]);
  switch (layout::entry_kind(e)) {
    case layout::kChunkSlab:
      if (layout::entry_class(e) >= kClassCount) return nullptr;
      return free_small(i, layout::entry_class(e), within, owner, flush);
    case layout::kChunkRunHead:
      if (within != 0) return nullptr;
      // A run's chunks are free for anyone once given back, and a new owner
      // persists its own table entries at once: the free must be durable
      // before that (else a crash could mix the old run's entries with the
      // new ones). So a run is freed durably even when unlogged.
      free_run(i, static_cast<std::uint32_t>(layout::entry_length(e)), /*drain=*/!flush);
      return nullptr;
    default:
      return nullptr;
  }
}

const void* HeapImpl::free_small(std::uint32_t i, unsigned cls, std::uint64_t within,
                                 CacheImpl* owner, bool flush) {
  const SizeClass& k = kSizeClasses[cls];
  if (within < k.first || (within - k.first) % k.size != 0) return nullptr;
  const std::uint64_t b = (within - k.first) / k.size;
  if (b >= k.blocks) return nullptr;
  std::uint64_t* word = bitmap(i) + b / 64;
  const std::uint64_t mask = std::uint64_t{1} << (b % 64);
  // Release: the freeing thread's last writes to the block happen before the
  // next owner's acquire load that sees the bit clear.
  const std::uint64_t prev = ref(*word).fetch_and(~mask, std::memory_order_acq_rel);
  if ((prev & mask) == 0) return nullptr;  // not allocated: a repeated free changes nothing
  if (flush) region_.flush(word, sizeof(*word));
  if (owner != nullptr) {
    owner->add_bytes(-std::int64_t{k.size});
  } else {
    slab_used_base_.fetch_sub(k.size);
  }
  const std::int64_t before = info_[i].used.fetch_sub(1);
  if (before == 1 || before == k.blocks || before == roomy_limit(k) + 1) {
    ClassShard& sh = classes_[cls];
    std::lock_guard lock(sh.mu);
    settle(sh, i, cls);
  }
  return word;
}

void HeapImpl::free_run(std::uint32_t head, std::uint32_t len, bool drain) {
  if (len == 0 || head + std::uint64_t{len} > nchunks_) return;
  ref(table_[head]).store(0, std::memory_order_release);
  for (std::uint32_t k = 1; k < len; ++k) ref(table_[head + k]).store(0, std::memory_order_relaxed);
  region_.flush(&table_[head], std::uint64_t{len} * layout::kEntrySize);
  // With `drain`, the free is durable before the chunks can change hands.
  if (drain) region_.drain();
  run_used_.fetch_sub(static_cast<std::int64_t>(std::uint64_t{len} * kChunkSize));
  give_chunks(head, len);
}

void CacheImpl::free_unpublished(std::uint64_t off) {
  heap_->free_block(off, this, true);
  // The free is durable before this thread's intent slot, which may still
  // name the block, is overwritten by its next allocation: else the new
  // intent could reach media first, and a crash would leave the block
  // allocated with no log naming it (a leak; found by the crash checker).
  heap_->region().drain();
}

void CacheImpl::free_unlogged(std::uint64_t off, const void** dirty) {
  *dirty = heap_->free_block(off, this, false);
}

// ---------------------------------------------------------------------------
// Retired blocks.

void CacheImpl::reserve_retire(unsigned n) {
  if (n > kRetireLogCapacity) contract_violation("reserve_retire beyond the retire log capacity");
  std::uint64_t count = 0;
  {
    std::lock_guard lock(log_mu_);
    count = load(log_->retired_count, std::memory_order_relaxed);
  }
  if (count + n > kRetireLogCapacity) drain_retired();
}

void CacheImpl::retire(std::uint64_t off) {
  std::unique_lock lock(log_mu_);
  const std::uint64_t n = load(log_->retired_count, std::memory_order_relaxed);
  if (n >= kRetireLogCapacity) contract_violation("retire without room (call reserve_retire first)");
  ref(log_->retired[n]).store(off, std::memory_order_relaxed);
  ref(log_->retired_count).store(n + 1, std::memory_order_release);
  // Flushed after the unlock (below), not under the lock: the unlock is a
  // locked instruction, which would wait for these write-backs to complete,
  // and the caller drains right after anyway. A concurrent drain_all that
  // zeroes the count meanwhile flushes the line itself; flushing it again
  // writes back whatever it holds then, which is never older.
  lock.unlock();
  flush_words(heap_->region(), &log_->retired[n], &log_->retired_count);
}

void CacheImpl::drain_retired() {
  std::uint64_t gen = 0;
  std::uint64_t n = 0;
  {
    std::lock_guard lock(log_mu_);
    gen = log_gen_;
    n = load(log_->retired_count, std::memory_order_relaxed);
  }
  if (n == 0) return;
  rcu::synchronize();
  heap_->free_retired(this, gen, n, this);
}

// Frees the n entries of c's log if nobody drained it since generation `gen`
// and no entry was added since. `owner`: c when called by c's thread.
void HeapImpl::free_retired(CacheImpl* c, std::uint64_t gen, std::uint64_t n, CacheImpl* owner) {
  std::lock_guard lock(c->log_mu_);
  ThreadLog* log = c->log_;
  if (c->log_gen_ != gen || load(log->retired_count) != n) return;
  // Every bit is cleared first and the changed words flushed after: a free
  // is a locked RMW, which would wait for the previous free's write-back
  // were the flushes interleaved (one write-back latency per block, the
  // tail latency of the write that drains the log). A word may meanwhile be
  // set again by an allocation; flushing it then writes back that newer
  // content, which its allocator flushes as well.
  const void* words[kRetireLogCapacity];
  std::uint64_t dirty = 0;
  for (std::uint64_t j = 0; j < n && j < kRetireLogCapacity; ++j) {
    if (const void* w = free_block(load(log->retired[j]), owner, false)) words[dirty++] = w;
  }
  for (std::uint64_t j = 0; j < dirty; ++j) {
    if (j > 0 && words[j] == words[j - 1]) continue;
    region_.flush(words[j], sizeof(std::uint64_t));
  }
  // The frees are durable before the log forgets the blocks: else a crash in
  // between leaks them.
  region_.drain();
  ref(log->retired_count).store(0, std::memory_order_release);
  // Flushed, not drained: until the zero is durable a crash only makes
  // recovery look at the freed blocks again, which skips free blocks and
  // asks keep() about reallocated ones.
  region_.flush(&log->retired_count, sizeof(std::uint64_t));
  ++c->log_gen_;
}

void HeapImpl::drain_all() {
  struct Snap {
    CacheImpl* cache;
    std::uint64_t serial;
    std::uint64_t gen;
    std::uint64_t count;
  };
  std::vector<Snap> snaps;
  {
    std::lock_guard lock(caches_mu_);
    for (CacheImpl* c : slots_) {
      if (c == nullptr) continue;
      std::lock_guard log_lock(c->log_mu_);
      const std::uint64_t n = load(c->log_->retired_count);
      if (n != 0) snaps.push_back({c, c->serial_, c->log_gen_, n});
    }
  }
  if (snaps.empty()) return;
  rcu::synchronize();
  std::lock_guard lock(caches_mu_);
  for (const Snap& s : snaps) {
    CacheImpl* c = slots_[s.cache->slot_];
    if (c == s.cache && c->serial_ == s.serial) free_retired(c, s.gen, s.count, nullptr);
  }
}

// ---------------------------------------------------------------------------
// Recovery.

void HeapImpl::recover(const std::function<bool(std::uint64_t off)>& keep) {
  // First the table entries rebuild() found stale (free in DRAM since open;
  // one an allocation took meanwhile has been overwritten by it).
  for (std::uint32_t i : repairs_) {
    if (state_of(info_[i].state.load()) != State::kFree) continue;
    ref(table_[i]).store(0, std::memory_order_relaxed);
    region_.flush(&table_[i], layout::kEntrySize);
  }
  // Repaired entries durable before their chunks are reused: else a crash
  // could pair a stale entry with the next owner's data.
  if (!repairs_.empty()) region_.drain();
  repairs_.clear();
  bool dirty = false;
  auto judge = [&](std::uint64_t off) {
    if (off != 0 && is_allocated(off) && !keep(off)) free_block(off, nullptr, true);
  };
  for (unsigned s = 0; s < kMaxThreads; ++s) {
    const ThreadLog& log = logs_[s];
    for (const std::uint64_t& intent : log.alloc_intent) {
      const std::uint64_t off = load(intent);
      dirty |= off != 0;
      judge(off);
    }
    const std::uint64_t count = load(log.retired_count);
    dirty |= count != 0;
    for (std::uint64_t j = 0; j < std::min<std::uint64_t>(count, kRetireLogCapacity); ++j) {
      judge(load(log.retired[j]));
    }
  }
  if (!dirty) return;
  // The frees are durable before the logs that name the blocks are emptied:
  // else a crash in between leaks them.
  region_.drain();
  for (unsigned s = 0; s < kMaxThreads; ++s) {
    ThreadLog& log = logs_[s];
    bool used = load(log.retired_count) != 0;
    for (const std::uint64_t& intent : log.alloc_intent) used |= load(intent) != 0;
    if (!used) continue;
    for (std::uint64_t& intent : log.alloc_intent) ref(intent).store(0, std::memory_order_relaxed);
    ref(log.retired_count).store(0, std::memory_order_relaxed);
    region_.flush(&log, offsetof(ThreadLog, retired));
  }
  // Empty logs durable before operations write new entries: else after a
  // later crash stale entries beyond the new count could resurface.
  region_.drain();
}

// ---------------------------------------------------------------------------
// Queries.

bool HeapImpl::is_allocated(std::uint64_t off) const { return block_size(off) != 0; }

std::size_t HeapImpl::block_size(std::uint64_t off) const {
  std::uint32_t i = 0;
  std::uint64_t within = 0;
  if (!locate(off, &i, &within)) return 0;
  const std::uint64_t e = load(table_[i]);
  switch (layout::entry_kind(e)) {
    case layout::kChunkSlab: {
      if (layout::entry_class(e) >= kClassCount) return 0;
      const SizeClass& k = kSizeClasses[layout::entry_class(e)];
      if (within < k.first || (within - k.first) % k.size != 0) return 0;
      const std::uint64_t b = (within - k.first) / k.size;
      if (b >= k.blocks) return 0;
      const std::uint64_t word = load(bitmap(i)[b / 64]);
      return (word >> (b % 64)) & 1 ? k.size : 0;
    }
    case layout::kChunkRunHead:
      // A half-written run's head stays in the table from open until
      // recover() zeroes it; its chunks are free meanwhile.
      if (state_of(info_[i].state.load()) != State::kRun) return 0;
      return within == 0 ? layout::entry_length(e) * kChunkSize : 0;
    default:
      return 0;
  }
}

void HeapImpl::for_each_allocated(
    const std::function<void(std::uint64_t off, std::size_t size)>& fn) const {
  for (std::uint32_t i = 0; i < nchunks_; ++i) {
    const std::uint64_t e = load(table_[i]);
    if (layout::entry_kind(e) == layout::kChunkSlab && layout::entry_class(e) < kClassCount) {
      const SizeClass& k = kSizeClasses[layout::entry_class(e)];
      const std::uint64_t* bits = bitmap(i);
      for (std::uint32_t w = 0; w < k.words; ++w) {
        for (std::uint64_t v = load(bits[w]) & valid_bits(k, w); v != 0; v &= v - 1) {
          fn(chunk_offset(i) + k.first + (std::uint64_t{w} * 64 + std::countr_zero(v)) * k.size,
             k.size);
        }
      }
    } else if (layout::entry_kind(e) == layout::kChunkRunHead) {
      const std::uint64_t len = layout::entry_length(e);
      fn(chunk_offset(i), len * kChunkSize);
      if (len > 1) i += static_cast<std::uint32_t>(std::min<std::uint64_t>(len, nchunks_ - i) - 1);
    }
  }
}

namespace {

class SnapshotImpl final : public Heap::AllocationSnapshot {
 public:
  struct Slab {
    std::uint64_t first_block;  // offset of block 0
    unsigned cls;
    std::vector<std::uint64_t> bits;
  };
  std::vector<Slab> slabs;
  std::vector<std::uint64_t> runs;  // block offsets

  void for_each(const std::function<void(std::uint64_t off)>& fn) const override {
    for (const Slab& s : slabs) {
      const SizeClass& k = kSizeClasses[s.cls];
      for (std::uint32_t w = 0; w < s.bits.size(); ++w) {
        for (std::uint64_t v = s.bits[w]; v != 0; v &= v - 1) {
          fn(s.first_block + (std::uint64_t{w} * 64 + std::countr_zero(v)) * k.size);
        }
      }
    }
    for (std::uint64_t off : runs) fn(off);
  }
};

}  // namespace

std::unique_ptr<Heap::AllocationSnapshot> HeapImpl::snapshot_allocated() const {
  auto snap = std::make_unique<SnapshotImpl>();
  for (std::uint32_t i = 0; i < nchunks_; ++i) {
    const std::uint64_t e = load(table_[i]);
    if (layout::entry_kind(e) == layout::kChunkSlab && layout::entry_class(e) < kClassCount) {
      const unsigned cls = layout::entry_class(e);
      const SizeClass& k = kSizeClasses[cls];
      const std::uint64_t* bits = bitmap(i);
      SnapshotImpl::Slab s{chunk_offset(i) + k.first, cls, std::vector<std::uint64_t>(k.words)};
      for (std::uint32_t w = 0; w < k.words; ++w) s.bits[w] = load(bits[w]) & valid_bits(k, w);
      snap->slabs.push_back(std::move(s));
    } else if (layout::entry_kind(e) == layout::kChunkRunHead) {
      snap->runs.push_back(chunk_offset(i));
      const std::uint64_t len = layout::entry_length(e);
      if (len > 1) i += static_cast<std::uint32_t>(std::min<std::uint64_t>(len, nchunks_ - i) - 1);
    }
  }
  return snap;
}

std::int64_t HeapImpl::slab_used() const {
  std::int64_t sum = slab_used_base_.load();
  for (const CacheImpl* c : slots_) {
    if (c != nullptr) sum += c->slab_bytes_.load(std::memory_order_relaxed);
  }
  return sum;
}

std::uint64_t HeapImpl::used_bytes() const {
  std::lock_guard lock(caches_mu_);
  return static_cast<std::uint64_t>(slab_used() + run_used_.load());
}

std::uint64_t HeapImpl::free_bytes() const {
  std::int64_t slab_free = 0;
  {
    std::lock_guard lock(caches_mu_);
    slab_free = slab_capacity_.load() - slab_used();
  }
  slab_free += spare_slack_.load();
  return free_chunks_.load() * kChunkSize + static_cast<std::uint64_t>(std::max<std::int64_t>(slab_free, 0));
}

// ---------------------------------------------------------------------------
// Validation.

Status HeapImpl::check() const {
  auto fail = [&](const std::string& what) {
    return Status::Corruption(where() + ": " + what + " (heap check failed)");
  };
  for (std::uint32_t i = 0; i < nchunks_; ++i) {
    const std::uint64_t e = load(table_[i]);
    const std::string chunk = "chunk " + num(i) + " at offset " + num(chunk_offset(i));
    switch (layout::entry_kind(e)) {
      case layout::kChunkFree:
        if (e != 0) return fail(chunk + ": free entry with stray bits " + num(e));
        break;
      case layout::kChunkSlab: {
        const unsigned cls = layout::entry_class(e);
        if (cls >= kClassCount || (e & ~std::uint64_t{0xffff}) != 0) {
          return fail(chunk + ": bad slab entry " + num(e));
        }
        const SizeClass& k = kSizeClasses[cls];
        const std::uint64_t* bits = bitmap(i);
        for (std::uint32_t w = 0; w < k.words; ++w) {
          if ((load(bits[w]) & ~valid_bits(k, w)) != 0) {
            return fail(chunk + ": bitmap bits set beyond its " + num(k.blocks) + " blocks");
          }
        }
        break;
      }
      case layout::kChunkRunHead: {
        const std::uint64_t len = layout::entry_length(e);
        if (len == 0 || i + len > nchunks_ || (e & layout::kEntryReservedMask) != 0) {
          return fail(chunk + ": run head of " + num(len) + " chunks does not fit the heap");
        }
        for (std::uint64_t k = 1; k < len; ++k) {
          if (load(table_[i + k]) != layout::body_entry(k)) {
            return fail(chunk + ": run of " + num(len) + " chunks lacks its body entry " + num(k));
          }
        }
        i += static_cast<std::uint32_t>(len - 1);
        break;
      }
      case layout::kChunkRunBody:
        return fail(chunk + ": run body entry without its run head");
      default:
        return fail(chunk + ": unknown chunk kind " + num(layout::entry_kind(e)));
    }
  }
  for (unsigned s = 0; s < kMaxThreads; ++s) {
    const ThreadLog& log = logs_[s];
    const std::string name = "thread log " + num(s);
    for (unsigned j = 0; j < kIntentSlots; ++j) {
      const std::uint64_t off = load(log.alloc_intent[j]);
      if (off != 0 && !is_allocated(off)) {
        return fail(name + ": intent " + num(j) + " names offset " + num(off) +
                    ", which is not an allocated block");
      }
    }
    const std::uint64_t count = load(log.retired_count);
    if (count > kRetireLogCapacity) {
      return fail(name + ": " + num(count) + " retired entries, capacity " +
                  num(kRetireLogCapacity));
    }
    for (std::uint64_t j = 0; j < count; ++j) {
      const std::uint64_t off = load(log.retired[j]);
      if (!is_allocated(off)) {
        return fail(name + ": retired entry " + num(j) + " names offset " + num(off) +
                    ", which is not an allocated block");
      }
    }
  }
  return Status::OK();
}

Status HeapImpl::check_accounting() const {
  auto fail = [&](const std::string& what) {
    return Status::Corruption(where() + ": " + what + " (accounting check failed)");
  };
  std::uint64_t used = 0;
  std::uint64_t free_chunks = 0;
  std::uint64_t slab_free = 0;
  for (std::uint32_t i = 0; i < nchunks_; ++i) {
    const std::uint64_t e = load(table_[i]);
    const std::uint32_t st = info_[i].state.load();
    const bool in_free_set = (free_bits_[i / 64] >> (i % 64)) & 1;
    const std::string chunk = "chunk " + num(i);
    switch (layout::entry_kind(e)) {
      case layout::kChunkFree:
        ++free_chunks;
        if (!in_free_set || st != pack(State::kFree)) return fail(chunk + " is free but not in the free set");
        break;
      case layout::kChunkSlab: {
        const unsigned cls = layout::entry_class(e);
        const SizeClass& k = kSizeClasses[cls];
        if (in_free_set) return fail(chunk + " is a slab but in the free set");
        if (class_of(st) != cls || (state_of(st) != State::kActive && state_of(st) != State::kFull &&
                                    state_of(st) != State::kPartial && state_of(st) != State::kRoomy)) {
          return fail(chunk + ": volatile state disagrees with its slab entry");
        }
        std::uint64_t count = 0;
        for (std::uint32_t w = 0; w < k.words; ++w) count += std::popcount(load(bitmap(i)[w]));
        used += count * k.size;
        slab_free += (k.blocks - count) * std::uint64_t{k.size};
        if (info_[i].spare) slab_free += static_cast<std::uint64_t>(slack(k));
        if (state_of(st) != State::kActive && info_[i].used.load() != static_cast<std::int64_t>(count)) {
          return fail(chunk + ": counts " + num(static_cast<std::uint64_t>(info_[i].used.load())) +
                      " blocks, bitmap has " + num(count));
        }
        if (info_[i].spare && (state_of(st) != State::kRoomy || count != 0)) {
          return fail(chunk + ": a spare slab with blocks or off the roomy list");
        }
        if (!info_[i].spare && state_of(st) != State::kActive && count == 0) {
          return fail(chunk + ": empty inactive slab kept");
        }
        bool listed[2] = {false, false};
        for (int r = 0; r < 2; ++r) {
          for (std::uint32_t p = classes_[cls].partial[r]; p != kNoChunk; p = info_[p].next) listed[r] |= p == i;
        }
        if (listed[0] != (state_of(st) == State::kPartial) || listed[1] != (state_of(st) == State::kRoomy)) {
          return fail(chunk + ": partial lists disagree with its state");
        }
        if (state_of(st) != State::kActive && state_of(st) != slab_state(k, static_cast<std::int64_t>(count))) {
          return fail(chunk + ": filed as " + (state_of(st) == State::kFull ? "full" : "partial") +
                      " with " + num(count) + " of " + num(k.blocks) + " blocks used");
        }
        break;
      }
      case layout::kChunkRunHead:
        used += layout::entry_length(e) * kChunkSize;
        [[fallthrough]];
      case layout::kChunkRunBody:
        if (in_free_set || st != pack(State::kRun)) return fail(chunk + " is a run but not marked so");
        break;
      default:
        return fail(chunk + ": unknown kind");
    }
  }
  if (used != used_bytes()) {
    return fail("used_bytes() is " + num(used_bytes()) + ", blocks sum to " + num(used));
  }
  const std::uint64_t free = free_chunks * kChunkSize + slab_free;
  if (free != free_bytes()) {
    return fail("free_bytes() is " + num(free_bytes()) + ", expected " + num(free));
  }
  if (free_chunks != free_chunks_.load()) return fail("free chunk count disagrees");
  return Status::OK();
}

// open(): validates the chunk table and the bitmaps and fills the volatile
// state; chunks of runs a crash left half-written (and empty slabs) are free
// from now on, and recover() zeroes their entries. Writes nothing.
Status HeapImpl::rebuild() {
  auto fail = [&](std::uint32_t i, const std::string& what) {
    return Status::Corruption(where() + ": chunk " + num(i) + " at offset " + num(chunk_offset(i)) +
                              ": " + what + " (the pool is damaged; restore it from a copy)");
  };
  std::vector<std::uint32_t> to_free;  // half-written runs and empty slabs
  for (std::uint32_t i = 0; i < nchunks_;) {
    const std::uint64_t e = load(table_[i]);
    switch (layout::entry_kind(e)) {
      case layout::kChunkFree:
        if (e != 0) return fail(i, "free entry with stray bits " + num(e));
        ++i;
        break;
      case layout::kChunkSlab: {
        const unsigned cls = layout::entry_class(e);
        if (cls >= kClassCount || (e & ~std::uint64_t{0xffff}) != 0) {
          return fail(i, "bad slab entry " + num(e));
        }
        const SizeClass& k = kSizeClasses[cls];
        std::int64_t count = 0;
        for (std::uint32_t w = 0; w < k.words; ++w) {
          const std::uint64_t v = load(bitmap(i)[w]);
          if ((v & ~valid_bits(k, w)) != 0) return fail(i, "bitmap bits set beyond its blocks");
          count += std::popcount(v);
        }
        if (count == 0) {
          to_free.push_back(i);
        } else {
          info_[i].used.store(count);
          slab_used_base_.fetch_add(count * k.size);
          slab_capacity_.fetch_add(std::int64_t{k.blocks} * k.size);
          const State s = slab_state(k, count);
          if (s != State::kFull) push_partial(classes_[cls], i, s);
          info_[i].state.store(pack(s, cls));
        }
        ++i;
        break;
      }
      case layout::kChunkRunHead: {
        const std::uint64_t len = layout::entry_length(e);
        if ((e & layout::kEntryReservedMask) != 0) return fail(i, "bad run head entry " + num(e));
        std::uint64_t k = 1;
        while (k < len && i + k < nchunks_ && load(table_[i + k]) == layout::body_entry(k)) ++k;
        if (len >= 1 && k == len) {
          for (std::uint64_t j = 0; j < len; ++j) info_[i + j].state.store(pack(State::kRun));
          run_used_.fetch_add(static_cast<std::int64_t>(len * kChunkSize));
        } else {
          // A run a crash left half-allocated or half-freed: it was never
          // published (publishing follows the drain that completes it).
          for (std::uint64_t j = 0; j < k; ++j) to_free.push_back(i + static_cast<std::uint32_t>(j));
        }
        i += static_cast<std::uint32_t>(k);
        break;
      }
      case layout::kChunkRunBody:
        to_free.push_back(i);  // left over from a half-freed run
        ++i;
        break;
      default:
        return fail(i, "unknown chunk kind " + num(layout::entry_kind(e)));
    }
  }
  // The entries of to_free are zeroed by recover(), not here: the engine may
  // still reject the pool, which is then left unchanged.
  std::vector<bool> repair(nchunks_, false);
  for (std::uint32_t i : to_free) repair[i] = true;
  std::uint64_t nfree = 0;
  for (std::uint32_t i = 0; i < nchunks_; ++i) {
    if (load(table_[i]) == 0 || repair[i]) {
      free_bits_[i / 64] |= std::uint64_t{1} << (i % 64);
      info_[i].state.store(pack(State::kFree));
      ++nfree;
    }
  }
  free_chunks_.store(nfree);
  repairs_ = std::move(to_free);
  return Status::OK();
}

// ---------------------------------------------------------------------------
// format / open.

namespace {

Status check_area(const media::Region& region, std::uint64_t off, std::uint64_t size) {
  if (off == 0 || off % media::kCacheLineSize != 0) {
    return Status::InvalidArgument("heap offset " + num(off) + " must be a positive multiple of " +
                                   num(media::kCacheLineSize));
  }
  if (off > region.size() || size > region.size() - off) {
    return Status::InvalidArgument("heap [" + num(off) + ", " + num(off + size) +
                                   ") extends beyond the " + num(region.size()) + " bytes of " +
                                   region.path());
  }
  return Status::OK();
}

}  // namespace

Status Heap::format(media::Region& region, std::uint64_t off, std::uint64_t size) {
  if (Status s = check_area(region, off, size); !s.ok()) return s;
  const layout::Layout l = layout::compute_layout(off, size);
  if (l.chunk_count >= kNoChunk) {
    return Status::InvalidArgument("heap of " + num(size) + " bytes has more chunks than " +
                                   num(kNoChunk - 1));
  }
  if (l.chunk_count < layout::kMinChunks) {
    return Status::InvalidArgument("heap of " + num(size) + " bytes holds " + num(l.chunk_count) +
                                   " chunks of " + num(kChunkSize) + " bytes; at least " +
                                   num(layout::kMinChunks) + " are needed (use a larger pool)");
  }
  auto* h = region.at<HeapHeader>(off);
  ref(h->magic).store(0, std::memory_order_relaxed);
  // The old magic is gone before anything else changes: else a crash could
  // leave a valid-looking header over a half-formatted heap.
  region.persist(&h->magic, sizeof(h->magic));
  std::memset(region.at(l.logs_offset), 0, std::uint64_t{kMaxThreads} * layout::kLogSize);
  region.flush(region.at(l.logs_offset), std::uint64_t{kMaxThreads} * layout::kLogSize);
  std::memset(region.at(l.table_offset), 0, l.chunk_count * layout::kEntrySize);
  region.flush(region.at(l.table_offset), l.chunk_count * layout::kEntrySize);
  HeapHeader fresh{};
  fresh.version = layout::kHeapVersion;
  fresh.header_size = sizeof(HeapHeader);
  fresh.heap_offset = off;
  fresh.heap_size = size;
  fresh.chunk_size = kChunkSize;
  fresh.chunk_count = l.chunk_count;
  fresh.max_small_size = kMaxSmallSize;
  fresh.log_count = kMaxThreads;
  fresh.log_size = layout::kLogSize;
  fresh.logs_offset = l.logs_offset;
  fresh.table_offset = l.table_offset;
  fresh.chunks_offset = l.chunks_offset;
  std::memcpy(h, &fresh, sizeof(fresh));
  region.flush(h, sizeof(fresh));
  // Logs, table and header fields durable before the magic that validates them.
  region.drain();
  ref(h->magic).store(layout::kHeapMagic, std::memory_order_release);
  // The heap is valid on media before format() returns and the pool header
  // that names it is written.
  region.persist(&h->magic, sizeof(h->magic));
  return Status::OK();
}

Status Heap::open(media::Region& region, std::uint64_t off, std::uint64_t size,
                  std::unique_ptr<Heap>* out) {
  const std::string where = "heap at offset " + num(off) + " of " + region.path();
  if (Status s = check_area(region, off, size); !s.ok()) {
    return Status::Corruption(where + ": " + s.message());
  }
  if (size < layout::kHeaderSize) {
    return Status::Corruption(where + ": " + num(size) + " bytes cannot hold a heap header");
  }
  const auto* h = region.at<HeapHeader>(off);
  if (h->magic != layout::kHeapMagic) {
    return Status::Corruption(where + ": bad magic: not a formatted heap (the pool was not "
                              "created completely; create it again)");
  }
  const layout::Layout l = layout::compute_layout(off, size);
  struct Field {
    const char* name;
    std::uint64_t got;
    std::uint64_t want;
  };
  const Field fields[] = {
      {"version", h->version, layout::kHeapVersion},
      {"header_size", h->header_size, sizeof(HeapHeader)},
      {"heap_offset", h->heap_offset, off},
      {"heap_size", h->heap_size, size},
      {"chunk_size", h->chunk_size, kChunkSize},
      {"chunk_count", h->chunk_count, l.chunk_count},
      {"max_small_size", h->max_small_size, kMaxSmallSize},
      {"log_count", h->log_count, kMaxThreads},
      {"log_size", h->log_size, layout::kLogSize},
      {"logs_offset", h->logs_offset, l.logs_offset},
      {"table_offset", h->table_offset, l.table_offset},
      {"chunks_offset", h->chunks_offset, l.chunks_offset},
  };
  for (const Field& f : fields) {
    if (f.got != f.want) {
      return Status::Corruption(where + ": header field " + f.name + " is " + num(f.got) +
                                ", expected " + num(f.want) +
                                " (another layout version, or a damaged pool)");
    }
  }
  if (l.chunk_count < layout::kMinChunks || l.chunk_count >= kNoChunk) {
    return Status::Corruption(where + ": " + num(l.chunk_count) + " chunks is outside the supported range");
  }
  auto heap = std::make_unique<HeapImpl>(region, off, l);
  if (Status s = heap->rebuild(); !s.ok()) {
    heap->abandon();
    return s;
  }
  *out = std::move(heap);
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Test hooks.

namespace testing {

void abandon(std::unique_ptr<Heap> heap) {
  if (auto* impl = dynamic_cast<HeapImpl*>(heap.get())) impl->abandon();
  heap.reset();
}

Status check_accounting(const Heap& heap) {
  const auto* impl = dynamic_cast<const HeapImpl*>(&heap);
  if (impl == nullptr) return Status::InvalidArgument("not a pmhash heap");
  return impl->check_accounting();
}

}  // namespace testing

}  // namespace pmhash::heap
