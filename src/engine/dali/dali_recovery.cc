// engine/dali/dali_recovery.cc - create, open (recovery), the sweep, close,
// check and the engine's registration (design in dali.h).
#include <algorithm>
#include <bit>
#include <cstring>
#include <system_error>
#include <unordered_set>

#include "engine/dali/dali.h"
#include "engine/dali/dali_index.h"
#include "engine/dali/dali_testing.h"

namespace pmhash::engine::dali {
namespace {

struct Params {
  std::uint32_t initial_log2;
};

constexpr unsigned kMaxInitialLog2 = 30;

Status validate(const Options& o) {
  if (o.epoch_ms < 1 || o.epoch_ms > 60000) {
    return Status::InvalidArgument("dali: epoch length must be 1 .. 60000 ms, got " +
                                   std::to_string(o.epoch_ms));
  }
  return Status::OK();
}

Status encode_params(const Options& o, std::uint8_t* out) {
  if (Status s = validate(o); !s.ok()) return s;
  // dali.initial_log2 is within 1..kMaxInitialLog2 (the descriptor's range).
  const Params p{Config::from(o).initial_log2};
  std::memcpy(out, &p, sizeof(p));
  return Status::OK();
}

Status create_index(const Env& env, std::unique_ptr<Index>* out) {
  if (Status s = validate(env.options); !s.ok()) return s;
  auto index = std::make_unique<DaliIndex>(env);
  if (Status s = index->format(); !s.ok()) return s;
  if (Status s = index->start(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

Status open_index(const Env& env, std::unique_ptr<Index>* out) {
  if (Status s = validate(env.options); !s.ok()) return s;
  auto index = std::make_unique<DaliIndex>(env);
  if (Status s = index->recover(); !s.ok()) return s;
  if (Status s = index->start(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

unsigned stripe_log2(unsigned initial_log2) { return std::min(initial_log2, kMaxStripeLog2); }

// The valid value of a versioned word set (a bucket, or the root's shape),
// as paper Fig. 4 picks a bucket's valid head.
template <typename Failed>
std::uint64_t valid_value(const Bucket& b, const Failed& failed) {
  const Stat s = Stat::decode(b.status.load(std::memory_order_acquire));
  if (!failed(s.ss)) return b.ptr[s.a].load(std::memory_order_acquire);
  if (s.f != kNoRole && !failed(s.ss - 1)) return b.ptr[s.f].load(std::memory_order_acquire);
  return b.ptr[s.c].load(std::memory_order_acquire);
}

}  // namespace

const EngineInfo kEngineInfo = {&kDescriptor, &encode_params, &create_index, &open_index};

// ---------------------------------------------------------------------------
// BlockSet
// ---------------------------------------------------------------------------

BlockSet::BlockSet(std::uint64_t pool_size) : pages_((pool_size >> kPageShift) + 1) {}

BlockSet::~BlockSet() {
  for (auto& p : pages_) delete[] p.load();
}

std::atomic<std::uint64_t>* BlockSet::page(std::uint64_t off, bool make) const {
  const std::uint64_t i = off >> kPageShift;
  if (i >= pages_.size()) return nullptr;
  auto& slot = const_cast<std::atomic<std::atomic<std::uint64_t>*>&>(pages_[i]);
  std::atomic<std::uint64_t>* p = slot.load(std::memory_order_acquire);
  if (p != nullptr || !make) return p;
  auto* fresh = new std::atomic<std::uint64_t>[kWordsPerPage]();
  if (slot.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return fresh;
  delete[] fresh;
  return p;
}

void BlockSet::add(std::uint64_t off) {
  std::atomic<std::uint64_t>* p = page(off, true);
  if (p == nullptr) return;
  const std::uint64_t g = (off & ((std::uint64_t{1} << kPageShift) - 1)) >> kGranuleShift;
  p[g / 64].fetch_or(std::uint64_t{1} << (g % 64), std::memory_order_relaxed);
}

bool BlockSet::insert(std::uint64_t off) {
  std::atomic<std::uint64_t>* p = page(off, true);
  if (p == nullptr) return false;
  const std::uint64_t g = (off & ((std::uint64_t{1} << kPageShift) - 1)) >> kGranuleShift;
  const std::uint64_t bit = std::uint64_t{1} << (g % 64);
  return (p[g / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) == 0;
}

bool BlockSet::contains(std::uint64_t off) const {
  const std::atomic<std::uint64_t>* p = page(off, false);
  if (p == nullptr) return false;
  const std::uint64_t g = (off & ((std::uint64_t{1} << kPageShift) - 1)) >> kGranuleShift;
  return (p[g / 64].load(std::memory_order_relaxed) >> (g % 64)) & 1;
}

// ---------------------------------------------------------------------------
// Create and open
// ---------------------------------------------------------------------------

Status DaliIndex::format() {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  Params p;
  std::memcpy(&p, env_.pool->header().engine_params, sizeof(p));
  initial_log2_ = p.initial_log2;
  const std::uint64_t n = segment_buckets(initial_log2_, 0);
  std::memset(static_cast<void*>(root_), 0, sizeof(Root));
  std::uint64_t off = 0;
  if (s = tc->allocate(segment_bytes(n), &off); !s.ok()) {
    return Status::NoSpace("pool too small for a table of 2^" + std::to_string(initial_log2_) +
                           " buckets: " + s.message());
  }
  auto* h = region_.at<SegmentHeader>(off);
  h->magic = kSegmentMagic;
  h->index = 0;
  h->buckets = n;
  // Paper §3.1: every bucket starts with ss = 0, null pointers, f = ⊥.
  Bucket* b = segment_buckets_of(h);
  for (std::uint64_t i = 0; i < n; ++i) {
    b[i].status.store(Stat{}.encode(), std::memory_order_relaxed);
    for (auto& ptr : b[i].ptr) ptr.store(0, std::memory_order_relaxed);
  }
  region_.flush(h, segment_bytes(n));
  const Shape first{initial_log2_, 0};
  root_->magic = kRootMagic;
  root_->initial_log2 = initial_log2_;
  root_->stripe_log2 = stripe_log2(initial_log2_);
  root_->epoch.store(2);  // paper §3.1: the counter starts at 2
  root_->shape.status.store(Stat{}.encode());
  for (auto& ptr : root_->shape.ptr) ptr.store(first.encode());
  root_->segments[0].store(off);
  // The table and the root are durable before create returns; a crash
  // before this point leaves a pool that open rejects.
  region_.persist(root_, sizeof(Root));
  tc->clear_intent();
  failed_.clear();
  segments_[0].store(b);
  shape_.store(first.encode());
  stripe_mask_ = (std::uint64_t{1} << root_->stripe_log2) - 1;
  locks_.reset(new std::atomic<LockWord>[stripe_mask_ + 1]());
  unlinked_at_.reset(new std::atomic<std::uint64_t>[stripe_mask_ + 1]());
  collected_at_.reset(new std::atomic<std::uint64_t>[stripe_mask_ + 1]());
  epochs_ = std::make_unique<Epochs>(region_, &root_->epoch,
                                     std::chrono::milliseconds(env_.options.epoch_ms));
  ready_ = true;
  return Status::OK();
}

Status DaliIndex::validate_segments(const Shape& sh) const {
  const std::string& path = env_.pool->path();
  const std::uint64_t last = sh.buckets() - 1;
  const unsigned needed = last < (std::uint64_t{1} << initial_log2_)
                              ? 0
                              : static_cast<unsigned>(std::bit_width(last)) - initial_log2_;
  for (unsigned j = 0; j < kMaxSegments; ++j) {
    const std::uint64_t off = root_->segments[j].load();
    if (off == 0) {
      if (j <= needed) {
        return Status::Corruption("pool " + path + ": dali table segment " + std::to_string(j) +
                                  " is missing, though the table has " +
                                  std::to_string(sh.buckets()) + " buckets");
      }
      continue;
    }
    if (j > kMaxLevel - initial_log2_ + 1) {
      return Status::Corruption("pool " + path + ": dali names a segment beyond the largest table");
    }
    // The block first: only an allocated block of the pool may be read.
    const std::uint64_t n = segment_buckets(initial_log2_, j);
    if (!heap_.is_allocated(off) || heap_.block_size(off) < segment_bytes(n) ||
        region_.at<SegmentHeader>(off)->magic != kSegmentMagic ||
        region_.at<SegmentHeader>(off)->index != j || region_.at<SegmentHeader>(off)->buckets != n) {
      return Status::Corruption("pool " + path + ": dali table segment " + std::to_string(j) +
                                " at offset " + std::to_string(off) + " is damaged");
    }
  }
  return Status::OK();
}

Status DaliIndex::recover() {
  const std::string& path = env_.pool->path();
  // 0. Validation, reading only: a pool this rejects is left unchanged.
  if (root_->magic != kRootMagic) {
    return Status::Corruption("pool " + path + ": dali root is not initialised");
  }
  initial_log2_ = root_->initial_log2;
  if (initial_log2_ < 1 || initial_log2_ > kMaxInitialLog2 ||
      root_->stripe_log2 != stripe_log2(initial_log2_)) {
    return Status::Corruption("pool " + path + ": dali root has a bad table size 2^" +
                              std::to_string(initial_log2_));
  }
  const std::uint64_t f = root_->epoch.load();
  if (f < 2 || f > (std::uint64_t{1} << 57)) {
    return Status::Corruption("pool " + path + ": dali epoch counter " + std::to_string(f) +
                              " is out of range");
  }
  const std::uint64_t count = root_->failed_count;
  if (count > kFailureListCapacity) {
    return Status::Corruption("pool " + path + ": dali failure list claims " +
                              std::to_string(count) + " entries");
  }
  for (std::uint64_t i = 0; i < count; ++i) {
    if ((i > 0 && root_->failed[i] <= root_->failed[i - 1]) || root_->failed[i] > f) {
      return Status::Corruption("pool " + path + ": dali failure list is not sorted below epoch " +
                                std::to_string(f));
    }
  }
  // The failure list as this open will have it: after a crash, F-1 and F
  // fail too (paper §3.4). The shape is judged with it.
  const bool crashed = !env_.pool->was_clean();
  failed_.assign(root_->failed, root_->failed + count);
  if (crashed) {
    for (std::uint64_t e : {f - 1, f}) {
      if (e == f - 1 && planted::active(testing::kOnlyOneEpochFails)) continue;
      if (failed_.empty() || failed_.back() < e) failed_.push_back(e);
    }
  }
  const Stat shape_stat = Stat::decode(root_->shape.status.load());
  if (!shape_stat.well_formed() || shape_stat.ss > f) {
    return Status::Corruption("pool " + path + ": dali table shape has a bad status word");
  }
  const Shape sh = Shape::decode(valid_value(root_->shape, [&](std::uint64_t e) { return failed(e); }));
  if (sh.level < initial_log2_ || sh.level > kMaxLevel || sh.split >= (std::uint64_t{1} << sh.level)) {
    return Status::Corruption("pool " + path + ": dali table shape (level " + std::to_string(sh.level) +
                              ", split " + std::to_string(sh.split) + ") is out of range");
  }
  if (Status s = validate_segments(sh); !s.ok()) return s;

  // Heap logs: only segment allocations ever use one.
  heap_.recover([this](std::uint64_t block) {
    for (const auto& seg : root_->segments) {
      if (seg.load() == block) return true;
    }
    return false;
  });
  for (unsigned j = 0; j < kMaxSegments; ++j) {
    const std::uint64_t off = root_->segments[j].load();
    if (off != 0) segments_[j].store(segment_buckets_of(region_.at<SegmentHeader>(off)));
  }
  shape_.store(sh.encode());
  stripe_mask_ = (std::uint64_t{1} << root_->stripe_log2) - 1;
  locks_.reset(new std::atomic<LockWord>[stripe_mask_ + 1]());

  if (crashed || root_->sweep_pending == 1) {
    // The blocks allocated at the crash, for the sweep (dali.h, Recovery 2):
    // a copy of the heap's bitmaps, taken before any operation allocates.
    crash_blocks_ = heap_.snapshot_allocated();
    marked_ = std::make_unique<BlockSet>(region_.size());
    freed_ = std::make_unique<BlockSet>(region_.size());
    swept_.store(false);
    root_->sweep_pending = 1;
    // Set before anything else changes: a crash in this session still
    // sweeps at the next open, even a clean one.
    region_.persist(&root_->sweep_pending, sizeof(std::uint64_t));
  }
  if (crashed) {
    // 1. Paper §3.4: F and F-1 failed, persisted before anything else.
    if (Status s = append_failures(f); !s.ok()) return s;
  }
  epochs_ = std::make_unique<Epochs>(region_, &root_->epoch,
                                     std::chrono::milliseconds(env_.options.epoch_ms));
  collected_at_.reset(new std::atomic<std::uint64_t>[stripe_mask_ + 1]());
  unlinked_at_.reset(new std::atomic<std::uint64_t>[stripe_mask_ + 1]);
  for (std::uint64_t i = 0; i <= stripe_mask_; ++i) unlinked_at_[i].store(epochs_->current());
  // The saved item count is valid only until the next crash.
  const auto saved = count_.take_saved(region_, root_->item_count, root_->count_valid);
  if (saved && !crashed) {
    approx_items_.store(static_cast<std::int64_t>(*saved));
  } else {
    count_.set_base(0, /*known=*/false);
    counted_.reset(new std::atomic<bool>[stripe_mask_ + 1]());
  }
  ready_ = true;
  return Status::OK();
}

Status DaliIndex::append_failures(std::uint64_t f) {
  std::uint64_t count = root_->failed_count;
  if (count + 2 > kFailureListCapacity) {
    // DEPARTURE (dali.h, "Failure list capacity"): make every bucket
    // independent of the failed epochs, then forget them.
    normalize_all(f + 1);
    count = 0;
  }
  // Entries first, then the count that covers them: a count durable before
  // its entries would name whatever the slots held.
  std::uint64_t at = count;
  for (std::uint64_t e : {f - 1, f}) {
    if (e == f - 1 && planted::active(testing::kOnlyOneEpochFails)) continue;
    if (at == 0 || root_->failed[at - 1] < e) root_->failed[at++] = e;
  }
  region_.persist(&root_->failed[count], (at - count) * sizeof(std::uint64_t));
  root_->failed_count = at;
  region_.persist(&root_->failed_count, sizeof(std::uint64_t));
  failed_.assign(root_->failed, root_->failed + at);
  // Operations run after the failed epochs; the counter is durable first.
  const std::uint64_t next = std::max(root_->epoch.load(), f + 1);
  root_->epoch.store(next);
  region_.persist(&root_->epoch, sizeof(std::uint64_t));
  return Status::OK();
}

void DaliIndex::normalize_all(std::uint64_t e) {
  // Every bucket, and the shape: an update to its own valid value, in epoch
  // e (the role table keeps each safe at every crash), so that its valid
  // value no longer depends on the failure list. Durable, and e two epochs
  // past, before the list is emptied. failed_ already holds the crash
  // being recovered.
  root_->epoch.store(e);
  region_.persist(&root_->epoch, sizeof(std::uint64_t));
  auto normalize = [&](Bucket* b) {
    const std::uint64_t head = valid_head(*b);
    const Stat s = Stat::decode(b->status.load());
    const Stat n = next_roles(s, e, failed(s.ss), s.f == kNoRole || failed(s.ss - 1));
    b->ptr[n.a].store(head);
    b->status.store(n.encode());
    region_.flush(b, sizeof(Bucket));
  };
  const Shape sh = shape();
  for (std::uint64_t i = 0; i < sh.buckets(); ++i) normalize(bucket(i));
  normalize(&root_->shape);
  region_.drain();
  root_->epoch.store(e + 2);
  region_.persist(&root_->epoch, sizeof(std::uint64_t));
  root_->failed_count = 0;
  region_.persist(&root_->failed_count, sizeof(std::uint64_t));
  failed_.clear();
}

Status DaliIndex::start() {
  // Free chunks kept back for the records of removes (dali.h, "Garbage
  // collection"): 1/64 of the heap, at least one chunk.
  heap_.set_reserve(std::max(1u, heap_.chunk_count() / 64));
  // A store that cannot start is closed without another write.
  if (Status s = epochs_->start(); !s.ok()) {
    ready_ = false;
    return s;
  }
  if (!swept_.load() || !count_.known()) {
    try {
      sweeper_ = std::thread([this] { sweep(); });
    } catch (const std::system_error& e) {
      ready_ = false;
      return Status::IOError(std::string("dali: cannot start the sweep thread: ") + e.what());
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// The sweep and the recount (dali.h, Recovery 2)
// ---------------------------------------------------------------------------

bool DaliIndex::plausible_record(std::uint64_t off, std::uint64_t* steps, std::uint64_t limit) const {
  // (check() reports what this stops at.)
  if (off == 0 || ++*steps > limit) return false;
  if (off % 16 != 0 || !heap_.is_allocated(off)) return false;
  const std::size_t size = heap_.block_size(off);
  const RecordHeader* h = rec(off);
  return size >= sizeof(RecordHeader) && record_size(h->key_len, record_value_len(h)) <= size;
}

void DaliIndex::recount() {
  std::lock_guard guard(recount_mu_);
  if (count_.known()) return;
  // Stripe by stripe under its lock. A change in a stripe counted already
  // goes to the per-thread counters; one in a stripe not yet counted is
  // seen here instead (add_count skips it): the total is exact.
  std::int64_t n = 0;
  std::vector<std::string_view> seen;
  const std::uint64_t limit = heap_.used_bytes() / sizeof(RecordHeader) + 1;
  for (std::uint32_t stripe = 0; stripe <= stripe_mask_; ++stripe) {
    lock(stripe);
    for_stripe_buckets(stripe, shape(), [&](const Bucket* b) {
      seen.clear();
      // Right after open, before anyone ran check(): a damaged list is
      // followed only as far as it holds records.
      std::uint64_t steps = 0;
      for (std::uint64_t r = valid_head(*b); plausible_record(r, &steps, limit);
           r = rec(r)->next.load(std::memory_order_relaxed)) {
        const std::string_view k = record_key(rec(r));
        if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
        seen.push_back(k);
        n += record_absent(rec(r)) ? 0 : 1;
      }
    });
    counted_[stripe].store(true, std::memory_order_relaxed);
    unlock(stripe);
  }
  approx_items_.fetch_add(n, std::memory_order_relaxed);
  count_.set_base(n);
}

void DaliIndex::sweep() {
  if (!count_.known()) recount();
  if (swept_.load()) return;
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return;
  const unsigned t = tc->slot();
  // Mark: every record on a valid list now. A noted record that is not is
  // garbage for good: lists gain only new records (not noted), and what
  // leaves a list meanwhile is marked by retire().
  BlockSet& marked = *marked_;
  const std::uint64_t limit = heap_.used_bytes() / sizeof(RecordHeader) + 1;
  for (std::uint32_t stripe = 0; stripe <= stripe_mask_; ++stripe) {
    if (stop_.load(std::memory_order_relaxed)) return;
    lock(stripe);
    for_stripe_buckets(stripe, shape(), [&](const Bucket* b) {
      std::uint64_t steps = 0;
      for (std::uint64_t r = valid_head(*b); plausible_record(r, &steps, limit);
           r = rec(r)->next.load(std::memory_order_relaxed)) {
        marked.add(r);
      }
    });
    unlock(stripe);
  }
  // Free the blocks of the crash that nobody reached, a batch per epoch
  // entry: not a segment, not marked, not freed by anyone since open (and
  // so maybe another record's now). Claiming each in freed_ first keeps
  // it from being freed twice.
  std::vector<std::uint64_t> garbage;
  crash_blocks_->for_each([&](std::uint64_t off) {
    for (const auto& seg : root_->segments) {
      if (seg.load() == off) return;
    }
    if (!marked.contains(off)) garbage.push_back(off);
  });
  constexpr std::size_t kBatch = 256;
  for (std::size_t i = 0; i < garbage.size(); i += kBatch) {
    if (stop_.load(std::memory_order_relaxed)) return;
    epochs_->enter(t);
    for (std::size_t j = i; j < std::min(garbage.size(), i + kBatch); ++j) {
      if (!freed_->insert(garbage[j])) continue;
      const void* bit = nullptr;
      tc->free_unlogged(garbage[j], &bit);
      if (bit != nullptr) epochs_->dirty(t, bit, sizeof(std::uint64_t));
      swept_blocks_.fetch_add(1, std::memory_order_relaxed);
    }
    epochs_->exit(t);
  }
  // The frees are durable before the flag says there is nothing to sweep:
  // else a crash could forget blocks the next open would have swept.
  epochs_->wait_durable(epochs_->current());
  root_->sweep_pending = 0;
  region_.persist(&root_->sweep_pending, sizeof(std::uint64_t));
  swept_.store(true, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Close and check
// ---------------------------------------------------------------------------

void DaliIndex::close() {
  if (closed_) return;
  closed_ = true;
  stop_.store(true);
  if (sweeper_.joinable()) sweeper_.join();
  // A rejected pool is left as it was found.
  if (!ready_ || !epochs_) return;
  // What garbage collection and splits unlinked is freed once no one can
  // reach it.
  {
    Status s;
    if (heap::ThreadCache* tc = heap_.thread(&s); tc != nullptr) reclaim_all(tc, tc->slot());
  }
  // Two fences: every operation so far is durable, and the counter says so.
  epochs_->stop();
  count_.save(region_, root_->item_count, root_->count_valid);
}

Status DaliIndex::check() {
  auto fail = [&](const std::string& what) { return Status::Corruption("dali check: " + what); };
  const std::uint64_t counter = root_->epoch.load();
  const Shape sh = shape();
  if (Shape::decode(valid_value(root_->shape, [&](std::uint64_t e) { return failed(e); })) != sh) {
    return fail("the root's table shape differs from the one in use");
  }
  if (Status s = validate_segments(sh); !s.ok()) return fail(s.message());
  std::unordered_set<std::uint64_t> reached;
  for (unsigned t = 0; t < kMaxThreads; ++t) {  // unlinked, freed later
    std::lock_guard guard(retired_[t].mu);
    for (const Retired& r : retired_[t].list) reached.insert(r.off);
  }
  std::int64_t items = 0;
  const std::uint64_t limit = heap_.used_bytes() / sizeof(RecordHeader) + 1;
  std::vector<std::pair<std::string_view, std::uint64_t>> versions;
  for (std::uint32_t stripe = 0; stripe <= stripe_mask_; ++stripe) {
    lock(stripe);
    std::string problem;
    for (std::uint64_t i = stripe; i < sh.buckets() && problem.empty(); i += stripe_mask_ + 1) {
      const Bucket& b = *bucket(i);
      const Stat st = Stat::decode(b.status.load());
      const std::string where = "bucket " + std::to_string(i);
      if (!st.well_formed()) {
        problem = where + " has malformed pointer roles";
        break;
      }
      if (st.ss > counter) {
        problem = where + " was written in epoch " + std::to_string(st.ss) + ", after the counter " +
                  std::to_string(counter);
        break;
      }
      std::uint64_t prev_written = ~std::uint64_t{0};
      std::uint64_t steps = 0;
      versions.clear();
      for (std::uint64_t r = valid_head(b); r != 0 && problem.empty(); r = rec(r)->next.load()) {
        const std::string at = where + ": record " + std::to_string(r);
        if (++steps > limit) {
          problem = where + ": list does not end";
          break;
        }
        const std::size_t size = heap_.block_size(r);
        if (!heap_.is_allocated(r) || size < sizeof(RecordHeader)) {
          problem = at + " is not an allocated record";
          break;
        }
        const RecordHeader* h = rec(r);
        if (record_size(h->key_len, record_value_len(h)) > size) {
          problem = at + " overruns its block";
          break;
        }
        const std::uint64_t written = record_written(h);
        if (written > prev_written || written > st.ss) problem = at + " is newer than the records before it";
        if (h->version > written) problem = at + " carries a version newer than it was written";
        if (failed(written)) problem = at + " is from failed epoch " + std::to_string(written);
        if (sh.bucket_of(make_key(record_key(h)).h1) != i) problem = at + " holds a key of another bucket";
        if (!reached.insert(r).second) problem = at + " is on two lists";
        prev_written = written;
        const auto same = std::find_if(versions.begin(), versions.end(),
                                       [&](const auto& v) { return v.first == record_key(h); });
        if (same == versions.end()) {
          versions.emplace_back(record_key(h), h->version);
          items += record_absent(h) ? 0 : 1;
        } else if (h->version > same->second) {
          // (Equal versions: a rewrite that did not fit in place.)
          problem = at + " holds a version of its key newer than a newer record's";
        } else {
          same->second = h->version;
        }
      }
    }
    unlock(stripe);
    if (!problem.empty()) return fail(problem);
  }
  if (static_cast<std::uint64_t>(items) != size()) {
    return fail("item count " + std::to_string(size()) + " but " + std::to_string(items) +
                " keys present");
  }
  if (swept_.load(std::memory_order_acquire)) {
    std::string leak;
    heap_.for_each_allocated([&](std::uint64_t off, std::size_t) {
      if (!leak.empty() || reached.contains(off)) return;
      for (const auto& seg : root_->segments) {
        if (seg.load() == off) return;
      }
      leak = "block " + std::to_string(off) + " is allocated but on no valid list (leak)";
    });
    if (!leak.empty()) return fail(leak);
  }
  return Status::OK();
}

}  // namespace pmhash::engine::dali
