// engine/dali/dali.cc - locks, reads, updates and garbage collection (design
// in dali.h).
#include "engine/dali/dali.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include "engine/dali/dali_index.h"
#include "engine/dali/dali_testing.h"

namespace pmhash::engine::dali {

namespace {
// Paper §3.4: garbage collection runs "occasionally" at the end of an
// update, on the bucket it wrote: at least every kGcEvery-th write of a
// thread (see write()).
constexpr unsigned kGcEvery = 8;
}  // namespace

DaliIndex::DaliIndex(const Env& env)
    : env_(env),
      region_(env.pool->region()),
      heap_(*env.heap),
      view_(env.pool->region(), env.pool->heap_offset(), env.pool->heap_size(), env.heap),
      list_limit_(env.pool->heap_size() / sizeof(RecordHeader) + 1),
      root_(reinterpret_cast<Root*>(env.pool->root())),
      lock_timeout_(Config::from(env.options).lock_timeout_ms),
      strict_(env.options.durability == Durability::kStrict),
      retired_(new RetireList[kMaxThreads]) {}

DaliIndex::~DaliIndex() { close(); }

// ---------------------------------------------------------------------------
// Stripe locks
// ---------------------------------------------------------------------------

bool DaliIndex::try_lock(std::uint32_t stripe) {
  std::atomic<LockWord>& l = locks_[stripe];
  LockWord w = l.load(std::memory_order_relaxed);
  return (w & kLocked) == 0 && l.compare_exchange_strong(w, w | kLocked, std::memory_order_acquire);
}

bool DaliIndex::lock_until(std::uint32_t stripe, std::chrono::milliseconds timeout) {
  if (try_lock(stripe)) return true;
  // Contended: only now is the clock read.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (unsigned spins = 0;; ++spins) {
    if (try_lock(stripe)) return true;
    if (spins % 64 == 63 && std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
}

void DaliIndex::lock(std::uint32_t stripe) {
  while (!try_lock(stripe)) std::this_thread::yield();
}

void DaliIndex::unlock(std::uint32_t stripe) {
  locks_[stripe].fetch_and(~kLocked, std::memory_order_release);
}

void DaliIndex::begin_write(std::uint32_t stripe) {
  // Seqlock writer (we hold the lock: nobody else changes the word). Every
  // store of the change that a reader may see is a release store, so this
  // flag is visible before it (no fence: TSan has none).
  std::atomic<LockWord>& l = locks_[stripe];
  l.store(l.load(std::memory_order_relaxed) | kWriting, std::memory_order_relaxed);
}

void DaliIndex::end_write(std::uint32_t stripe) {
  std::atomic<LockWord>& l = locks_[stripe];
  const LockWord w = l.load(std::memory_order_relaxed);
  l.store((w + kWriteGeneration) & ~kWriting, std::memory_order_release);
}

void DaliIndex::end_write_and_unlock(std::uint32_t stripe) {
  std::atomic<LockWord>& l = locks_[stripe];
  const LockWord w = l.load(std::memory_order_relaxed);
  l.store((w + kWriteGeneration) & ~(kWriting | kLocked), std::memory_order_release);
}

Status DaliIndex::lock_timeout() const {
  return Status::Busy("dali: waited " + std::to_string(lock_timeout_.count()) +
                      " ms for a bucket lock an open transaction holds "
                      "(dali.lock_timeout_ms)");
}

// ---------------------------------------------------------------------------
// Buckets and lists
// ---------------------------------------------------------------------------

Bucket* DaliIndex::bucket(std::uint64_t index) const {
  const std::uint64_t first = std::uint64_t{1} << initial_log2_;
  if (index < first) return segments_[0].load(std::memory_order_relaxed) + index;
  // Segment j >= 1 holds [2^(L0+j-1), 2^(L0+j)).
  const unsigned width = static_cast<unsigned>(std::bit_width(index));
  const unsigned j = width - initial_log2_;
  return segments_[j].load(std::memory_order_acquire) + (index - (std::uint64_t{1} << (width - 1)));
}

void DaliIndex::prefetch_bucket(const Key& key) const {
  // Only a hint, read without the lock: a split may move the key before
  // the probe, which reads the shape again.
  __builtin_prefetch(bucket_of(key.h1, shape()));
}

bool DaliIndex::failed(std::uint64_t epoch) const {
  return std::binary_search(failed_.begin(), failed_.end(), epoch);
}

std::uint64_t DaliIndex::valid_head(const Bucket& b) const {
  const Stat s = Stat::decode(b.status.load(std::memory_order_acquire));
  if (!s.well_formed()) return 0;  // damage (check() reports it): no list
  if (!failed(s.ss)) return b.ptr[s.a].load(std::memory_order_acquire);
  if (s.f != kNoRole && !failed(s.ss - 1)) return b.ptr[s.f].load(std::memory_order_acquire);
  return b.ptr[s.c].load(std::memory_order_acquire);
}

bool DaliIndex::key_equals(const RecordHeader* r, const Key& key) const {
  return r->key_len == key.bytes.size() &&
         std::memcmp(r + 1, key.bytes.data(), key.bytes.size()) == 0;
}

bool DaliIndex::record_in_heap(std::uint64_t off) const {
  const RecordHeader* h = view_.at<const RecordHeader>(off);
  // A value rewritten in place stays within the block the record had, so
  // the lengths read here bound what a reader copies.
  return h != nullptr && off % 16 == 0 &&
         view_.contains(off, record_size(h->key_len, record_value_len(h)));
}

Status DaliIndex::damaged_list(const std::string& bucket) const {
  return Status::Corruption("pool " + env_.pool->path() + ": dali: the list of " + bucket +
                            " leaves the heap or does not end (damaged pool; 'pmhash scan "
                            "--skip-damaged' salvages the rest)");
}

std::uint64_t DaliIndex::find(std::uint64_t head, const Key& key, bool* damaged) const {
  std::uint64_t steps = 0;
  for (std::uint64_t r = head; r != 0; r = rec(r)->next.load(std::memory_order_acquire)) {
    if (!record_in_heap(r) || ++steps > list_limit_) {
      if (damaged != nullptr) *damaged = true;
      return 0;
    }
    if (key_equals(rec(r), key)) return r;
  }
  return 0;
}

std::uint64_t DaliIndex::find_as_of(std::uint64_t head, const Key& key, std::uint64_t snapshot,
                                    bool* damaged) const {
  // Versions of one key decrease along a list: the first one at or below
  // the snapshot is the newest as of it. Records above it may be rewritten
  // in place meanwhile, but only their value and meta, which we skip.
  std::uint64_t steps = 0;
  for (std::uint64_t r = head; r != 0; r = rec(r)->next.load(std::memory_order_acquire)) {
    if (!record_in_heap(r) || ++steps > list_limit_) {
      if (damaged != nullptr) *damaged = true;
      return 0;
    }
    const RecordHeader* h = rec(r);
    if (h->version <= snapshot && key_equals(h, key)) return r;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------

Status DaliIndex::get(const Key& key, std::string* value) {
  // The newest state (linearizable, paper Fig. 4), read optimistically
  // instead of under the bucket's lock (dali.h, "Locks"): a change of the
  // stripe meanwhile makes us read again. Inside an epoch, so that nothing
  // we may reach is freed under us.
  // The bucket's line is the probe's first cache miss: started now, it
  // overlaps the lock word's and the epoch announcement.
  prefetch_bucket(key);
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  const unsigned t = tc->slot();
  std::atomic<LockWord>& l = locks_[stripe_of(key.h1)];
  epochs_->enter(t);
  for (;;) {
    const LockWord w1 = l.load(std::memory_order_acquire);
    if (w1 & (kWriting | kSplitting)) {  // a change is under way: wait it out
      std::this_thread::yield();
      continue;
    }
    const Probe p = probe(key);
    bool present = p.present;
    // The answer (a value, or NotFound from an "absent" record) depends on
    // the newest record of the key, which was written in its version's
    // epoch (split copies keep it; a failed split leaves the original).
    // Records never change version, so this plain read does not race.
    const std::uint64_t depends_on = p.found != 0 ? rec(p.found)->version : 0;
    if (present && value != nullptr) {  // null: "does it exist"
      const RecordHeader* r = rec(p.found);
      const std::uint32_t n = record_value_len(r);
      // A rewrite in place may shrink the value meanwhile; the block holds
      // the larger of the two, and the check below discards the copy.
      value->resize(n);
      load_racy(value->data(), reinterpret_cast<const char*>(r + 1) + r->key_len, n);
    }
    // Every load above was an acquire load: this one cannot come first.
    if (((l.load(std::memory_order_relaxed) ^ w1) & ~kLocked) != 0) continue;
    epochs_->exit(t);
    if (!present && p.damaged) return damaged_list("bucket " + std::to_string(p.index));
    // Strict: never answer from an epoch a crash could still fail (dali.h,
    // "Durable linearizability"). Outside the epoch: waiting inside it
    // would hold up the very advance we wait for.
    if (strict_ && depends_on != 0 && !planted::active(testing::kAnswerBeforeDurable)) {
      epochs_->wait_durable(depends_on);
    }
    return present ? Status::OK() : Status::NotFound();
  }
}

Status DaliIndex::snapshot_get(const Key& key, std::string* value) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  // The latest durable state: as of two epochs before the one the read
  // runs in, every epoch of which is durable (epochs.h). It holds every
  // write acknowledged as durable before the call (a strict write of epoch
  // e returns once e+2 is current).
  return read_as_of(tc->slot(), key, kTwoEpochsBack, value);
}

Status DaliIndex::read_as_of(unsigned t, const Key& key, std::uint64_t snapshot,
                             std::string* value) {
  std::atomic<LockWord>& l = locks_[stripe_of(key.h1)];
  // Inside an epoch: no record we may reach is freed before we leave, and
  // garbage collection keeps every version at or below e-2 visible.
  const std::uint64_t e = epochs_->enter(t);
  if (snapshot == kTwoEpochsBack) snapshot = e - 2;
  for (;;) {
    const LockWord w1 = l.load(std::memory_order_acquire);
    if (w1 & kSplitting) {  // a split moves this stripe's lists: wait it out
      std::this_thread::yield();
      continue;
    }
    bool damaged = false;
    const std::uint64_t r =
        find_as_of(valid_head(*bucket_of(key.h1, shape())), key, snapshot, &damaged);
    const bool present = r != 0 && !record_absent(rec(r));
    if (present && value != nullptr) value->assign(record_value(rec(r)));
    // Seqlock check: no split of the stripe began or ended since w1, so
    // the bucket we read was the key's for the whole read. (Other changes
    // leave the versions we read alone.)
    if (((l.load(std::memory_order_relaxed) ^ w1) & kSplitSequence) != 0) continue;
    epochs_->exit(t);
    if (!present && damaged) {
      return damaged_list("bucket " + std::to_string(shape().bucket_of(key.h1)));
    }
    return present ? Status::OK() : Status::NotFound();
  }
}

// ---------------------------------------------------------------------------
// Updates
// ---------------------------------------------------------------------------

DaliIndex::Probe DaliIndex::probe(const Key& key) const {
  Probe p;
  p.index = shape().bucket_of(key.h1);
  p.bucket = bucket(p.index);
  p.found = find(valid_head(*p.bucket), key, &p.damaged);
  p.present = p.found != 0 && !record_absent(rec(p.found));
  return p;
}

Status DaliIndex::judge(Op op, const Probe& p, const std::string_view* expected) const {
  switch (op) {
    case Op::kInsert:
      return p.present ? Status::AlreadyExists("key exists") : Status::OK();
    case Op::kUpdate:
    case Op::kRemove:
      return p.present ? Status::OK() : Status::NotFound();
    case Op::kUpsert:
      return Status::OK();
    case Op::kSwap:
    case Op::kSwapRemove:
      // The newest record of the key under the lock is its current state
      // (no one rewrites it while we hold the lock).
      if (expected == nullptr ? !p.present
                              : p.present && record_value(rec(p.found)) == *expected) {
        return Status::OK();
      }
      return Status::Conflict();
  }
  return Status::OK();
}

Status DaliIndex::allocate_record(heap::ThreadCache* tc, unsigned t, std::size_t n,
                                  std::uint64_t superseded, std::uint64_t* off) {
  const void* bit = nullptr;
  Status s = tc->allocate_unlogged(n, off, &bit);
  // A full pool still takes removes (dali.h, "Garbage collection"): their
  // "absent" records may use the heap's reserve, or a block of the size the
  // removed record has (garbage collection frees those).
  if (s.is_no_space() && superseded != 0) {
    s = tc->allocate_unlogged(n, off, &bit, /*use_reserve=*/true);
    if (s.is_no_space()) s = tc->allocate_unlogged(heap_.block_size(superseded), off, &bit, true);
  }
  if (!s.ok()) return s;
  // The allocation bit reaches media with the record, by the epoch's fence.
  epochs_->dirty(t, bit, sizeof(std::uint64_t));
  return Status::OK();
}

void DaliIndex::make_room(heap::ThreadCache* tc, unsigned t,
                          const std::unordered_set<std::uint32_t>* held) {
  // (Outside any epoch; no lock held but the stripes in `held`, a
  // committing transaction's.) One thread at a time; the others wait here
  // and then retry their allocation.
  std::lock_guard guard(room_mu_);
  // 1. Three epochs on: every write so far is durable and at or below the
  //    horizon, so garbage collection may drop whatever it supersedes.
  epochs_->wait_durable(epochs_->current() + 1);
  // 2. Garbage collection of every bucket (paper §3.4 runs it occasionally;
  //    a full pool runs it everywhere). A stripe a transaction holds past
  //    the lock timeout is left alone.
  //    The caller's own stripes are collected under the locks it holds
  //    (waiting for them would only time out); collection changes no
  //    key's value, so its reads stay valid.
  for (std::uint32_t stripe = 0; stripe <= stripe_mask_; ++stripe) {
    const bool own = held != nullptr && held->contains(stripe);
    if (!own && !lock_until(stripe, lock_timeout_)) continue;
    begin_write(stripe);
    const std::uint64_t e = epochs_->enter(t);
    for_stripe_buckets(stripe, shape(), [&](Bucket* b) { collect_garbage(t, e, stripe, b); });
    epochs_->exit(t);
    if (own) {
      end_write(stripe);
    } else {
      end_write_and_unlock(stripe);
    }
  }
  // 3. Two more fences, then everything retired is freed.
  reclaim_all(tc, t);
}

void DaliIndex::free_record(heap::ThreadCache* tc, unsigned t, std::uint64_t off) {
  // Noted before it is freed: the sweep never frees a block freed since
  // open, which a new record may have taken.
  if (freed_ && !swept_.load(std::memory_order_acquire)) freed_->add(off);
  const void* bit = nullptr;
  tc->free_unlogged(off, &bit);
  if (bit != nullptr) epochs_->dirty(t, bit, sizeof(std::uint64_t));
}

bool DaliIndex::fits_in_place(std::uint64_t found, std::uint64_t e, std::size_t key_len,
                              std::size_t value_len) const {
  // Paper §3.4: the newest record of the key carries a write of this very
  // epoch. No crash exposes it without exposing its rewrite too (both reach
  // media by e's fence or neither counts), no snapshot reader reads its
  // value (snapshots are older than e), and locking readers wait for us.
  return found != 0 && rec(found)->version == e &&
         heap_.block_size(found) >= record_size(key_len, value_len);
}

void DaliIndex::write_in_place(unsigned t, std::uint64_t e, std::uint64_t found,
                               std::string_view value, bool absent) {
  // Optimistic readers may copy meanwhile (they check the stripe's write
  // generation after): atomic stores.
  RecordHeader* r = rec(found);
  r->meta.store(record_meta(e, absent), std::memory_order_release);
  r->value_len.store(static_cast<std::uint32_t>(value.size()), std::memory_order_release);
  store_racy(reinterpret_cast<char*>(r + 1) + r->key_len, value.data(), value.size());
  epochs_->dirty(t, r, record_size(r->key_len, value.size()));
}

void DaliIndex::prepend(unsigned t, std::uint64_t e, Bucket* b, std::uint64_t off,
                        std::string_view key, std::string_view value, bool absent,
                        std::uint64_t version) {
  RecordHeader* r = rec(off);
  r->next.store(valid_head(*b), std::memory_order_relaxed);
  r->meta.store(record_meta(e, absent), std::memory_order_relaxed);
  r->version = version;
  r->key_len = static_cast<std::uint32_t>(key.size());
  r->value_len.store(static_cast<std::uint32_t>(value.size()), std::memory_order_relaxed);
  std::memcpy(reinterpret_cast<char*>(r + 1), key.data(), key.size());
  if (!value.empty()) std::memcpy(reinterpret_cast<char*>(r + 1) + key.size(), value.data(), value.size());
  // No flush: the record, its allocation bit and the bucket reach media in
  // any order, all by the fence of e (dali.h, "Why any order is safe").
  epochs_->dirty(t, r, record_size(key.size(), value.size()));
  retarget(t, e, b, off);
}

void DaliIndex::retarget(unsigned t, std::uint64_t e, Bucket* b, std::uint64_t head) {
  const Stat s = Stat::decode(b->status.load(std::memory_order_relaxed));
  const Stat n = next_roles(s, e, failed(s.ss), s.f == kNoRole || failed(s.ss - 1));
  // Release, both: a lock-free reader that sees the pointer or the status
  // sees the record behind it complete.
  b->ptr[n.a].store(head, std::memory_order_release);
  b->status.store(n.encode(), std::memory_order_release);
  if (planted::active(testing::kBucketNotFenced)) return;
  epochs_->dirty(t, b, sizeof(Bucket));
}

Status DaliIndex::insert(const Key& key, std::string_view value) { return write(Op::kInsert, key, value); }
Status DaliIndex::update(const Key& key, std::string_view value) { return write(Op::kUpdate, key, value); }
Status DaliIndex::upsert(const Key& key, std::string_view value) { return write(Op::kUpsert, key, value); }
Status DaliIndex::remove(const Key& key) { return write(Op::kRemove, key, {}); }
Status DaliIndex::compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                                   std::optional<std::string_view> desired) {
  return write(desired ? Op::kSwap : Op::kSwapRemove, key, desired.value_or(std::string_view()),
               expected ? &*expected : nullptr);
}

Status DaliIndex::write(Op op, const Key& key, std::string_view value,
                        const std::string_view* expected) {
  prefetch_bucket(key);  // as in get()
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  const unsigned t = tc->slot();
  const std::uint32_t stripe = stripe_of(key.h1);
  const bool absent = op == Op::kRemove || op == Op::kSwapRemove;
  const std::size_t n = record_size(key.bytes.size(), value.size());
  for (int attempt = 0;; ++attempt) {
    // The epoch of the record an answer that writes nothing saw
    // (AlreadyExists, NotFound, Conflict, a swap from absent to absent).
    std::uint64_t depends_on = 0;
    // Lock before the epoch: a thread waiting for a lock must not hold up
    // the end of an epoch (the worker waits for every thread inside one),
    // and a bucket's updates then run in non-decreasing epochs.
    if (!lock_until(stripe, lock_timeout_)) return lock_timeout();
    begin_write(stripe);
    const std::uint64_t e = epochs_->enter(t);
    reclaim(tc, t);
    const Probe p = probe(key);
    s = judge(op, p, expected);
    // A swap from absent to absent is a write that finds nothing to do.
    const bool changes = s.ok() && (p.present || !absent);
    if (!changes && p.found != 0) depends_on = rec(p.found)->version;
    if (changes) {
      if (fits_in_place(p.found, e, key.bytes.size(), value.size())) {
        write_in_place(t, e, p.found, value, absent);
      } else {
        std::uint64_t off = 0;
        s = allocate_record(tc, t, n, absent ? p.found : 0, &off);
        if (s.ok()) prepend(t, e, p.bucket, off, key.bytes, value, absent, e);
      }
    }
    if (changes && s.ok()) {
      if (absent || !p.present) add_count(t, stripe, absent ? -1 : 1);
      // Paper §3.4: "occasionally" after an update. Here: when the write
      // superseded a version with more records behind it (older versions
      // of the key, or of others, may have become garbage), and at every
      // kGcEvery-th write; at most once per epoch and stripe (garbage grows
      // by a version per key and epoch). The bucket is queued, and
      // collected with kGcBatch - 1 others (collect_queued).
      const bool behind = p.found != 0 && rec(p.found)->next.load(std::memory_order_relaxed) != 0;
      std::atomic<std::uint64_t>& last = collected_at_[stripe];
      RetireList& mine = retired_[t];
      if ((behind || ++mine.writes % kGcEvery == 0) && last.load(std::memory_order_relaxed) != e) {
        last.store(e, std::memory_order_relaxed);
        mine.gc_queue[mine.gc_queued++] = p.index;
      }
    }
    epochs_->exit(t);
    end_write_and_unlock(stripe);
    if (retired_[t].gc_queued == kGcBatch) collect_queued(t);
    if (s.is_no_space() && attempt == 0) {
      make_room(tc, t, nullptr);
      continue;
    }
    // Strict: an AlreadyExists, NotFound or Conflict is an answer too, and
    // so is a swap that found nothing to do; it waits for the epoch of the
    // record it saw, like get().
    if (strict_ && depends_on != 0 && !planted::active(testing::kAnswerBeforeDurable)) {
      wait_durable_or_defer(depends_on);
    }
    if (!s.ok() || !changes) return s;
    if (!p.present && !absent) maybe_grow(tc, t);
    if (strict_) wait_durable_or_defer(e);
    return s;
  }
}

void DaliIndex::add_count(unsigned t, std::uint32_t stripe, std::int64_t delta) {
  // (Stripe locked.) While a recount after a crash has not reached this
  // stripe yet, it will count this change itself.
  if (!count_.known() && !counted_[stripe].load(std::memory_order_relaxed)) return;
  count_.add_owned(t, delta);
  // The growth trigger reads one shared approximate counter, fed in batches.
  std::int64_t& unflushed = count_.extra(t).unflushed;
  unflushed += delta;
  if (unflushed >= 64 || unflushed <= -64) {
    approx_items_.fetch_add(unflushed, std::memory_order_relaxed);
    unflushed = 0;
  }
}

// ---------------------------------------------------------------------------
// Garbage collection (paper §3.4)
// ---------------------------------------------------------------------------

std::uint64_t DaliIndex::horizon(std::uint64_t e) const {
  // A lock-free reader in epoch E reads as of E-2, and runs while the
  // writers are in E or E+1: versions at or below e-3 are visible to it.
  // An open read-only transaction may hold an older snapshot.
  const std::uint64_t h = e >= 3 ? e - 3 : 0;
  return std::min(h, oldest_snapshot_.load(std::memory_order_acquire));
}

void DaliIndex::obsolete(const std::vector<std::uint64_t>& list, std::uint64_t e, bool for_split,
                         bool absent_ok, std::vector<char>* drop) const {
  // For each key, its anchor is the newest record that every snapshot
  // reader sees (version <= horizon) and, for garbage collection, that
  // survives every crash (written <= e-2: its epoch can no longer fail).
  // Every older record of the key is obsolete: unlinking any of them alone
  // leaves the anchor in front. An anchor that says "absent" is obsolete
  // too once nothing older of its key is left, but unlinking it is safe only
  // if no older version can come back: a split drops it together with them
  // (the new list replaces the old at once); garbage collection only when
  // no older version is on the list any more and every unlink before was
  // durable (`absent_ok`). (Unlinked in place together, the anchor's unlink
  // could reach media without an older version's, and the key come back.)
  const std::uint64_t h = horizon(e);
  const std::size_t n = list.size();
  drop->assign(n, 0);
  thread_local std::vector<char> done;
  done.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    const RecordHeader* ri = rec(list[i]);
    std::size_t anchor = n;
    for (std::size_t j = i; j < n; ++j) {
      const RecordHeader* rj = rec(list[j]);
      if (j != i && (done[j] || record_key(rj) != record_key(ri))) continue;
      done[j] = 1;
      if (anchor != n) {
        (*drop)[j] = 1;
      } else if (rj->version <= h && (for_split || record_written(rj) + 2 <= e)) {
        anchor = j;
      }
    }
    if (anchor == n || !record_absent(rec(list[anchor]))) continue;
    bool older = false;
    for (std::size_t j = anchor + 1; j < n && !older; ++j) {
      older = (for_split ? (*drop)[j] == 0 : true) && record_key(rec(list[j])) == record_key(ri);
    }
    if (!older && (for_split || absent_ok)) (*drop)[anchor] = 1;
  }
}

void DaliIndex::collect_garbage(unsigned t, std::uint64_t e, std::uint32_t stripe, Bucket* b) {
  thread_local std::vector<std::uint64_t> list;
  list.clear();
  for (std::uint64_t r = valid_head(*b); r != 0; r = rec(r)->next.load(std::memory_order_relaxed)) {
    list.push_back(r);
  }
  collect_list(t, e, stripe, list);
}

void DaliIndex::collect_queued(unsigned t) {
  // Walking a list is a chain of dependent cache misses, one per record,
  // and it is most of what garbage collection costs. Walked one step at a
  // time side by side, with the next record of each prefetched, the lists
  // of a batch miss together instead of one after the other.
  //
  // Each bucket is collected as collect_garbage would have been right after
  // the write that queued it, only later: under its stripe's lock (taken
  // with try_lock, before the epoch is entered, so no one waits on us
  // while we are in it; a stripe busy now, a transaction's maybe, is left
  // for a later write to queue again), inside the epoch e we enter now,
  // which is all obsolete() depends on. A bucket index stays a bucket of
  // the stripe (the table never shrinks; a split keeps the stripe); if it
  // was split meanwhile, its list is the one the split left.
  RetireList& mine = retired_[t];
  const unsigned n = mine.gc_queued;
  mine.gc_queued = 0;
  struct Walk {
    std::uint64_t index;
    std::uint32_t stripe;
    bool owner;  // this entry took the stripe's lock (and releases it)
  };
  Walk walks[kGcBatch];
  unsigned m = 0;
  for (unsigned i = 0; i < n; ++i) {
    const std::uint64_t index = mine.gc_queue[i];
    bool dup = false;
    for (unsigned j = 0; j < m && !dup; ++j) dup = walks[j].index == index;
    if (dup) continue;  // one walk per bucket: a second list would be stale
    walks[m++] = Walk{index, stripe_of(index), false};
    __builtin_prefetch(&locks_[walks[m - 1].stripe]);
  }
  unsigned kept = 0;
  for (unsigned i = 0; i < m; ++i) {
    Walk w = walks[i];
    bool held = false;
    for (unsigned j = 0; j < kept && !held; ++j) held = walks[j].stripe == w.stripe;
    if (!held) {
      if (!try_lock(w.stripe)) continue;
      begin_write(w.stripe);
      w.owner = true;
    }
    walks[kept++] = w;
  }
  if (kept == 0) return;
  const std::uint64_t e = epochs_->enter(t);
  thread_local std::vector<std::uint64_t> lists[kGcBatch];
  Bucket* buckets[kGcBatch];
  for (unsigned i = 0; i < kept; ++i) {
    buckets[i] = bucket(walks[i].index);
    __builtin_prefetch(buckets[i]);
  }
  unsigned active = 0;  // lists not yet walked to their end: [0, active)
  unsigned order[kGcBatch];
  for (unsigned i = 0; i < kept; ++i) {
    lists[i].clear();
    const std::uint64_t head = valid_head(*buckets[i]);
    if (head == 0) continue;
    lists[i].push_back(head);
    __builtin_prefetch(rec(head));
    order[active++] = i;
  }
  while (active > 0) {
    for (unsigned k = 0; k < active;) {
      std::vector<std::uint64_t>& list = lists[order[k]];
      const std::uint64_t next = rec(list.back())->next.load(std::memory_order_relaxed);
      if (next == 0) {
        order[k] = order[--active];
        continue;
      }
      list.push_back(next);
      __builtin_prefetch(rec(next));
      ++k;
    }
  }
  for (unsigned i = 0; i < kept; ++i) collect_list(t, e, walks[i].stripe, lists[i]);
  epochs_->exit(t);
  for (unsigned i = 0; i < kept; ++i) {
    if (walks[i].owner) end_write_and_unlock(walks[i].stripe);
  }
}

void DaliIndex::collect_list(unsigned t, std::uint64_t e, std::uint32_t stripe,
                             const std::vector<std::uint64_t>& list) {
  thread_local std::vector<char> drop;
  if (list.size() < 2) return;
  std::atomic<std::uint64_t>& last_unlink = unlinked_at_[stripe];
  obsolete(list, e, /*for_split=*/false, last_unlink.load(std::memory_order_relaxed) + 2 <= e, &drop);
  // The head is never unlinked (the bucket's active pointer names it). A
  // snapshot reader on an unlinked record still finds the rest of the list
  // through its unchanged next; the record is freed once no one can be on
  // it (retire). Another bucket pointer may still name an unlinked record:
  // it never becomes a valid head again (dali.h, "Garbage collection").
  // Each run of dropped records goes with one store to the next of the kept
  // record before it: every value that store can leave on media is a list
  // that reads right.
  for (std::size_t i = 1; i < list.size();) {
    if (!drop[i]) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < list.size() && drop[end]) ++end;
    RecordHeader* kept = rec(list[i - 1]);
    kept->next.store(rec(list[end - 1])->next.load(std::memory_order_relaxed), std::memory_order_release);
    epochs_->dirty(t, &kept->next, sizeof(std::uint64_t));
    for (; i < end; ++i) {
      retire(t, e, list[i]);
    }
    last_unlink.store(e, std::memory_order_relaxed);
  }
}

void DaliIndex::retire(unsigned t, std::uint64_t e, std::uint64_t off) {
  // The sweep after a crash must not take it for garbage of the crash.
  if (marked_ && !swept_.load(std::memory_order_acquire)) marked_->add(off);
  RetireList& mine = retired_[t];
  std::lock_guard guard(mine.mu);
  if (mine.list.empty()) mine.front.store(e, std::memory_order_relaxed);
  mine.list.push_back({e, off});
}

void DaliIndex::reclaim(heap::ThreadCache* tc, unsigned t) {
  // (Inside an epoch: the frees' bitmap words go to its fence.) An unlink of
  // epoch u is durable, and no one can be on the record, once quiescent()
  // >= u+1 (epochs.h, "Reclamation").
  // The list is in retirement order, so in epoch order: free from the front.
  RetireList& mine = retired_[t];
  const std::uint64_t q = epochs_->quiescent();
  // (Only this thread adds to the list; another may empty it meanwhile.)
  if (mine.front.load(std::memory_order_relaxed) >= q) return;
  std::lock_guard guard(mine.mu);
  free_due(tc, t, mine, q);
}

void DaliIndex::free_due(heap::ThreadCache* tc, unsigned t, RetireList& list, std::uint64_t q) {
  while (!list.list.empty() && list.list.front().epoch + 1 <= q) {
    free_record(tc, t, list.list.front().off);
    list.list.pop_front();
  }
  list.front.store(list.list.empty() ? ~std::uint64_t{0} : list.list.front().epoch, std::memory_order_relaxed);
}

void DaliIndex::reclaim_all(heap::ThreadCache* tc, unsigned t) {
  // Every unlink so far (epoch <= c, the current one) is durable and
  // everyone has moved on: quiescent() >= c+1, set by advance(c+2) before it
  // published c+3, which wait_durable(c+1) waits for.
  epochs_->wait_durable(epochs_->current() + 1);
  epochs_->enter(t);
  const std::uint64_t q = epochs_->quiescent();
  for (unsigned i = 0; i < kMaxThreads; ++i) {
    RetireList& list = retired_[i];
    std::lock_guard guard(list.mu);
    free_due(tc, t, list, q);
  }
  epochs_->exit(t);
}

// ---------------------------------------------------------------------------
// Snapshots of read-only transactions
// ---------------------------------------------------------------------------

std::uint64_t DaliIndex::register_snapshot(unsigned t) {
  // Registered from inside an epoch E: garbage collection running in E or
  // E+1 keeps E-2 visible anyway (horizon), and any later one reads the
  // registration (the epoch worker's wait for us orders it).
  const std::uint64_t e = epochs_->enter(t);
  const std::uint64_t snap = e - 2;
  {
    std::lock_guard guard(snap_mu_);
    snapshots_.insert(snap);
    oldest_snapshot_.store(*snapshots_.begin(), std::memory_order_release);
  }
  epochs_->exit(t);
  return snap;
}

void DaliIndex::release_snapshot(std::uint64_t snapshot) {
  std::lock_guard guard(snap_mu_);
  snapshots_.erase(snapshots_.find(snapshot));
  oldest_snapshot_.store(snapshots_.empty() ? ~std::uint64_t{0} : *snapshots_.begin(),
                         std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Iteration and counting
// ---------------------------------------------------------------------------

Status DaliIndex::for_each(const ForEachFn& fn) { return salvage(fn, nullptr); }

Status DaliIndex::salvage(const ForEachFn& fn, std::uint64_t* skipped) {
  // Stripe by stripe under its lock; the callback runs outside it. Splits
  // move keys only within a stripe, so each key present throughout is met
  // exactly once.
  std::vector<std::pair<std::string, std::string>> batch;
  std::vector<std::string_view> seen;
  for (std::uint32_t stripe = 0; stripe <= stripe_mask_; ++stripe) {
    batch.clear();
    if (!lock_until(stripe, lock_timeout_)) return lock_timeout();
    bool damaged = false;  // a list that leaves the heap or does not end
    const std::uint64_t limit = heap_.used_bytes() / sizeof(RecordHeader) + 1;
    for_stripe_buckets(stripe, shape(), [&](const Bucket* b) {
      seen.clear();
      // Checked against each record's whole block: a scan is what salvages
      // a damaged pool. A damaged list is followed up to the damage; what
      // lies beyond it cannot be reached.
      std::uint64_t steps = 0;
      for (std::uint64_t r = valid_head(*b); r != 0; r = rec(r)->next.load(std::memory_order_relaxed)) {
        if (!plausible_record(r, &steps, limit)) {
          if (skipped != nullptr) ++*skipped;
          damaged = true;
          break;
        }
        const RecordHeader* h = rec(r);
        const std::string_view k = record_key(h);
        if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
        seen.push_back(k);
        if (!record_absent(h)) batch.emplace_back(std::string(k), std::string(record_value(h)));
      }
    });
    unlock(stripe);
    if (damaged && skipped == nullptr) return damaged_list("a bucket of stripe " + std::to_string(stripe));
    for (const auto& [k, v] : batch) {
      if (!fn(k, v)) return Status::OK();
    }
  }
  return Status::OK();
}

std::uint64_t DaliIndex::size() const {
  if (!count_.known()) const_cast<DaliIndex*>(this)->recount();
  return count_.total();
}

// ---------------------------------------------------------------------------
// Write groups (dali.h)
// ---------------------------------------------------------------------------

namespace {
// The write group open on this thread: its index and the newest epoch a
// deferred wait was for (0: none yet).
struct WriteGroup {
  const DaliIndex* index = nullptr;
  std::uint64_t epoch = 0;
};
thread_local WriteGroup write_group;
}  // namespace

void DaliIndex::begin_write_group() {
  if (write_group.index == nullptr) write_group = WriteGroup{this, 0};
}

void DaliIndex::end_write_group() {
  if (write_group.index != this) return;
  const std::uint64_t e = write_group.epoch;
  write_group = WriteGroup{};
  if (e != 0) epochs_->wait_durable(e);
}

void DaliIndex::wait_durable_or_defer(std::uint64_t e) {
  if (write_group.index == this && !planted::active(testing::kWriteGroupEndsEarly)) {
    write_group.epoch = std::max(write_group.epoch, e);
    return;
  }
  if (write_group.index == this) return;  // planted: the group never waits
  epochs_->wait_durable(e);
}

Status DaliIndex::sync() {
  // Everything acknowledged so far ran in an epoch <= the current one.
  epochs_->wait_durable(epochs_->current());
  return Status::OK();
}

void DaliIndex::fill_stats(Stats* st) const {
  const Shape sh = shape();
  st->items = size();
  st->slots = sh.buckets();
  st->load_factor = static_cast<double>(st->items) / static_cast<double>(st->slots);
  st->dram_bytes = (stripe_mask_ + 1) * sizeof(std::uint32_t);
  st->epoch = epochs_->current();
  st->durable_epoch = epochs_->durable_through();
  st->failed_epochs = failed_;
  st->swept = swept_.load();
  // In the descriptor's order (descriptor.cc).
  st->add_property("dali.level", sh.level);
  st->add_property("dali.splits", splits_.load(std::memory_order_relaxed));
  st->add_property("dali.records_copied", copied_.load(std::memory_order_relaxed));
  st->add_property("dali.epoch_fences", epochs_->fences());
}

}  // namespace pmhash::engine::dali
