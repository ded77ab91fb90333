// engine/dali/dali_index.h - the Dalí Index (internal; the design is in
// dali.h).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/dali/epochs.h"
#include "engine/dali/layout.h"
#include "engine/common/item_count.h"
#include "engine/index.h"
#include "heap/checked.h"
#include "heap/heap.h"
#include "media/region.h"

namespace pmhash::engine::dali {

// A set of pool offsets (16-byte granules) in DRAM, filled concurrently.
class BlockSet {
 public:
  explicit BlockSet(std::uint64_t pool_size);
  ~BlockSet();
  void add(std::uint64_t off);
  // Adds `off`; true if it was not there (exactly one caller wins).
  bool insert(std::uint64_t off);
  bool contains(std::uint64_t off) const;

 private:
  static constexpr unsigned kGranuleShift = 4;
  static constexpr unsigned kPageShift = 18;  // offsets per lazily made page
  static constexpr std::uint64_t kWordsPerPage =
      (std::uint64_t{1} << (kPageShift - kGranuleShift)) / 64;
  std::atomic<std::uint64_t>* page(std::uint64_t off, bool make) const;
  std::vector<std::atomic<std::atomic<std::uint64_t>*>> pages_;
};

class DaliTxn;

class DaliIndex final : public Index {
 public:
  explicit DaliIndex(const Env& env);
  ~DaliIndex() override;

  // Writes an empty table into the pool root (create).
  Status format();
  // Validates the root and runs recovery (open).
  Status recover();
  // Starts the epoch worker and, after a crash, the sweep.
  Status start();

  Status get(const Key& key, std::string* value) override;
  Status snapshot_get(const Key& key, std::string* value) override;
  Status insert(const Key& key, std::string_view value) override;
  Status update(const Key& key, std::string_view value) override;
  Status upsert(const Key& key, std::string_view value) override;
  Status remove(const Key& key) override;
  Status compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                          std::optional<std::string_view> desired) override;
  Status begin(const TransactionOptions& options, std::unique_ptr<Txn>* txn) override;
  Status for_each(const ForEachFn& fn) override;
  Status salvage(const ForEachFn& fn, std::uint64_t* skipped) override;
  Status scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
              std::uint64_t* next) override;
  std::uint64_t size() const override;
  Status sync() override;
  Status check() override;
  void fill_stats(Stats* stats) const override;
  std::uint64_t current_epoch() const override { return epochs_->current(); }
  // Write groups (dali.h, "Write groups").
  void begin_write_group() override;
  void end_write_group() override;
  void close() override;

 private:
  friend class DaliTxn;

  // A strict write's (or answer's) wait for epoch e to be durable: now, or,
  // inside this thread's write group, at the group's end.
  void wait_durable_or_defer(std::uint64_t e);

  // The writes (dali.h, "update"). kSwap and kSwapRemove are
  // compare_and_swap to a value and to absence: they carry the state they
  // expect (write()'s `expected`).
  enum class Op : unsigned char { kInsert, kUpdate, kUpsert, kRemove, kSwap, kSwapRemove };

  // --- stripe locks (DRAM; dali.h "Locks") ---
  //   bit 0       kLocked     held (an operation, a transaction, a split or
  //                           maintenance)
  //   bit 1       kSplitting  the holder is splitting one of the buckets
  //   bit 2       kWriting    the holder is changing the stripe's lists
  //   bits 31..3  split generation, +1 by every split: the sequence of
  //               snapshot readers, whom only splits concern
  //   bits 63..32 write generation, +1 by every change: the sequence of
  //               optimistic readers of the newest state
  using LockWord = std::uint64_t;
  static constexpr LockWord kLocked = 1;
  static constexpr LockWord kSplitting = 2;
  static constexpr LockWord kWriting = 4;
  static constexpr LockWord kSplitGeneration = 8;
  static constexpr LockWord kSplitSequence = 0xffff'fffe & ~kWriting;  // splitting + split generation
  static constexpr LockWord kWriteGeneration = LockWord{1} << 32;
  std::uint32_t stripe_of(std::uint64_t h) const {
    return static_cast<std::uint32_t>(h & stripe_mask_);
  }
  bool try_lock(std::uint32_t stripe);
  // False when `timeout` passed first.
  bool lock_until(std::uint32_t stripe, std::chrono::milliseconds timeout);
  void lock(std::uint32_t stripe);  // no timeout: maintenance only
  void unlock(std::uint32_t stripe);  // the holder changed nothing
  // The holder is about to change the stripe's lists (readers retry), and
  // is done: a new write generation, unlocked.
  void begin_write(std::uint32_t stripe);
  void end_write_and_unlock(std::uint32_t stripe);
  void end_write(std::uint32_t stripe);  // the holder keeps the lock
  Status lock_timeout() const;

  // --- table (dali.h "Growth") ---
  Shape shape() const { return Shape::decode(shape_.load(std::memory_order_acquire)); }
  Bucket* bucket(std::uint64_t index) const;
  // The bucket of hash h in shape `sh` (stripe locked, or a snapshot read
  // that checks the stripe's generation).
  Bucket* bucket_of(std::uint64_t h, Shape sh) const { return bucket(sh.bucket_of(h)); }
  // Calls fn(bucket) for every bucket of the stripe in shape `sh`.
  template <typename Fn>
  void for_stripe_buckets(std::uint32_t stripe, Shape sh, Fn&& fn) const {
    for (std::uint64_t b = stripe; b < sh.buckets(); b += stripe_mask_ + 1) fn(bucket(b));
  }

  // Starts loading the line of the bucket `key` is in now.
  void prefetch_bucket(const Key& key) const;

  // --- lists ---
  RecordHeader* rec(std::uint64_t off) const { return region_.at<RecordHeader>(off); }
  bool failed(std::uint64_t epoch) const;
  // The head of the bucket's valid list (paper Fig. 4).
  std::uint64_t valid_head(const Bucket& b) const;
  // Whether the record at `off` lies in the heap with its key and value
  // (heap/checked.h), 16-byte aligned; false only on a damaged pool.
  bool record_in_heap(std::uint64_t off) const;
  // The newest record of `key` on the list from `head`; 0 if none. A list
  // that leaves the heap, or runs longer than the heap has records (a
  // cycle), ends there; *damaged, when given, is then set.
  std::uint64_t find(std::uint64_t head, const Key& key, bool* damaged = nullptr) const;
  bool key_equals(const RecordHeader* r, const Key& key) const;
  // The newest version <= `snapshot` of `key`; 0 if none (lock-free).
  // Damage as for find().
  std::uint64_t find_as_of(std::uint64_t head, const Key& key, std::uint64_t snapshot,
                           bool* damaged = nullptr) const;
  // Corruption for a damaged list met by a read of the key's bucket.
  Status damaged_list(const std::string& bucket) const;
  // Copies the value of `key` as of `snapshot` (kTwoEpochsBack: two epochs
  // before the one the read runs in), lock-free (dali.h "Snapshot reads").
  // NotFound when absent then.
  static constexpr std::uint64_t kTwoEpochsBack = ~std::uint64_t{0};
  Status read_as_of(unsigned t, const Key& key, std::uint64_t snapshot, std::string* value);

  // --- updates (stripe locked, inside epoch e) ---
  // What a write of `key` finds, and whether it changes the store.
  struct Probe {
    std::uint64_t index = 0;  // the bucket's index in the shape probed
    Bucket* bucket = nullptr;
    std::uint64_t found = 0;  // newest record of the key, 0 if none
    bool present = false;     // found and not absent
    bool damaged = false;     // the list ended in damage (find())
  };
  Probe probe(const Key& key) const;
  // The answer of `op` given the probe (stripe locked): OK when `op` may
  // go ahead. For kSwap and kSwapRemove, `expected` is the value the key
  // must have, nullptr when it must be absent; values compare byte for
  // byte.
  Status judge(Op op, const Probe& p, const std::string_view* expected) const;
  // A record of `n` bytes (allocate_unlogged; its bitmap word is recorded).
  // The "absent" record of a remove names the record it `superseded`: in a
  // full pool it may use the heap's reserve or a block of that one's size.
  Status allocate_record(heap::ThreadCache* tc, unsigned t, std::size_t n, std::uint64_t superseded,
                         std::uint64_t* off);
  // NoSpace: collects every bucket after three epochs and frees what is
  // retired (outside any epoch and lock).
  // A committing transaction passes the stripes it holds, which are
  // collected under its locks.
  void make_room(heap::ThreadCache* tc, unsigned t,
                 const std::unordered_set<std::uint32_t>* held);
  // Frees a record no durable state reaches (its bitmap word is recorded).
  void free_record(heap::ThreadCache* tc, unsigned t, std::uint64_t off);
  // True when the newest record of the key can be rewritten in place.
  bool fits_in_place(std::uint64_t found, std::uint64_t e, std::size_t key_len,
                     std::size_t value_len) const;
  void write_in_place(unsigned t, std::uint64_t e, std::uint64_t found, std::string_view value,
                      bool absent);
  // Fills the record at `off` and prepends it to the bucket (paper Fig. 5).
  void prepend(unsigned t, std::uint64_t e, Bucket* b, std::uint64_t off, std::string_view key,
               std::string_view value, bool absent, std::uint64_t version);
  // Points the new active pointer at `head` with the roles of Fig. 6.
  void retarget(unsigned t, std::uint64_t e, Bucket* b, std::uint64_t head);
  // Every write of a key (dali.h, "update"); `expected` as for judge().
  Status write(Op op, const Key& key, std::string_view value,
               const std::string_view* expected = nullptr);
  void add_count(unsigned t, std::uint32_t stripe, std::int64_t delta);

  // --- garbage collection (paper §3.4) ---
  // Versions older than this need not stay visible to a snapshot reader.
  std::uint64_t horizon(std::uint64_t e) const;
  // Marks in *drop the records of `list` (newest first) that no crash and
  // no snapshot reader needs (see the definition).
  void obsolete(const std::vector<std::uint64_t>& list, std::uint64_t e, bool for_split,
                bool absent_ok, std::vector<char>* drop) const;
  void collect_garbage(unsigned t, std::uint64_t e, std::uint32_t stripe, Bucket* b);
  // Unlinks and retires the obsolete records of `list`, the valid list of
  // a bucket of `stripe` (newest first), walked under the lock just now.
  void collect_list(unsigned t, std::uint64_t e, std::uint32_t stripe,
                    const std::vector<std::uint64_t>& list);
  // Collects the buckets thread t queued (outside any epoch and lock):
  // their lists are walked side by side (dali.h, "Garbage collection").
  void collect_queued(unsigned t);
  void retire(unsigned t, std::uint64_t e, std::uint64_t off);
  // Frees thread t's retired records that no one can reach any more.
  void reclaim(heap::ThreadCache* tc, unsigned t);
  // Pool full: ends two epochs and frees every thread's retirees.
  void reclaim_all(heap::ThreadCache* tc, unsigned t);

  // --- growth (growth.cc) ---
  void maybe_grow(heap::ThreadCache* tc, unsigned t);
  void split_one(heap::ThreadCache* tc, unsigned t);
  Status ensure_segment(heap::ThreadCache* tc, unsigned j);

  // --- scan (scan.cc; dali.h "Scan") ---
  // The number of low hash bits that select bucket `index` in shape `sh`:
  // L, or L+1 for a bucket split in this round or made by one.
  static unsigned depth_of(Shape sh, std::uint64_t index);
  // What one bucket passes: its present keys with their values, and the
  // newest version any of its answers rests on (strict mode waits for it).
  struct ScanBatch {
    std::vector<std::pair<std::string, std::string>> keys;
    std::uint64_t depends_on = 0;
  };
  // Reads, lock-free and consistently, the bucket that holds position
  // `pos`: its keys at positions >= pos into *batch, and *end = the
  // position after the bucket (0 at the end of the hash space).
  // Corruption for a damaged list.
  Status scan_bucket(unsigned t, std::uint64_t pos, ScanBatch* batch, std::uint64_t* end);

  // --- snapshots of read-only transactions ---
  std::uint64_t register_snapshot(unsigned t);
  void release_snapshot(std::uint64_t snapshot);

  // --- recovery (dali_recovery.cc) ---
  Status validate_segments(const Shape& sh) const;
  Status append_failures(std::uint64_t f);
  void normalize_all(std::uint64_t e);
  void sweep();
  // Counts the present keys after a crash, stripe by stripe (exact: see
  // add_count). Idempotent.
  void recount();
  // For the walks that run at open before check() could (recount, sweep):
  // `off` is an allocated block that holds a whole record, and the walk
  // took at most `limit` steps (the records the heap could hold).
  bool plausible_record(std::uint64_t off, std::uint64_t* steps, std::uint64_t limit) const;

  Env env_;
  media::Region& region_;
  heap::Heap& heap_;
  heap::PoolView view_;  // checked access to records
  // Records a list walk may follow: more than the heap can hold.
  std::uint64_t list_limit_;
  Root* root_;
  unsigned initial_log2_ = 0;
  std::uint64_t stripe_mask_ = 0;
  std::chrono::milliseconds lock_timeout_;
  std::unique_ptr<std::atomic<LockWord>[]> locks_;
  std::atomic<std::uint64_t> shape_{0};
  std::atomic<Bucket*> segments_[kMaxSegments] = {};
  std::vector<std::uint64_t> failed_;  // sorted; fixed after open
  std::unique_ptr<Epochs> epochs_;
  bool strict_;

  // Item count: per thread slot, plus a base; see add_count and recount.
  // A counter stripe has one writer, the thread of its heap slot, hence
  // add_owned (no read-modify-write). After a crash the base is not counted by
  // total_or_count: recount walks the stripes one by one under their locks
  // while writers run, and add_count leaves the changes of a stripe not yet
  // counted to it, so the base is the count found, with nothing to subtract.
  struct Unflushed {
    std::int64_t unflushed = 0;  // owner only: not yet in approx_items_
  };
  common::ItemCount<Unflushed> count_{/*known=*/true};
  std::atomic<std::int64_t> approx_items_{0};  // for growth decisions
  std::unique_ptr<std::atomic<bool>[]> counted_;  // stripes recounted (after a crash)
  std::atomic<bool> recounting_{false};
  std::mutex recount_mu_;

  // Buckets a thread collects together (collect_queued).
  static constexpr unsigned kGcBatch = 8;
  // Records unlinked by garbage collection or a split, per thread slot,
  // freed once no one can reach them (Epochs::quiescent).
  struct Retired {
    std::uint64_t epoch;
    std::uint64_t off;
  };
  struct alignas(64) RetireList {
    std::mutex mu;
    std::deque<Retired> list;  // in retirement (so epoch) order
    // The epoch of the front record, ~0 when empty: lets reclaim() skip
    // the lock when nothing is due.
    std::atomic<std::uint64_t> front{~std::uint64_t{0}};
    unsigned writes = 0;  // owner only: paces garbage collection
    // Owner only: buckets (indices) to collect at the next collect_queued.
    std::uint64_t gc_queue[kGcBatch];
    unsigned gc_queued = 0;
  };
  std::unique_ptr<RetireList[]> retired_;
  // Frees the records of `list` whose epoch + 1 <= q (list.mu held).
  void free_due(heap::ThreadCache* tc, unsigned t, RetireList& list, std::uint64_t q);
  // Per stripe: the epoch of its last unlink (stripe locked); at open, the
  // open's epoch (earlier unlinks may not be durable).
  std::unique_ptr<std::atomic<std::uint64_t>[]> unlinked_at_;
  // Per stripe: the epoch of its last garbage collection after a write.
  std::unique_ptr<std::atomic<std::uint64_t>[]> collected_at_;

  std::mutex room_mu_;  // one make_room at a time

  // Growth.
  std::mutex split_mu_;
  std::atomic<std::uint64_t> grow_blocked_epoch_{0};  // NoSpace: retry next epoch
  std::atomic<std::uint64_t> splits_{0};
  std::atomic<std::uint64_t> copied_{0};

  // Snapshots of open read-only transactions (dali.h "Snapshot reads").
  mutable std::mutex snap_mu_;
  std::multiset<std::uint64_t> snapshots_;
  std::atomic<std::uint64_t> oldest_snapshot_{~std::uint64_t{0}};

  // The sweep after a crash (dali.h, Recovery 2).
  std::unique_ptr<heap::Heap::AllocationSnapshot> crash_blocks_;  // allocated at open
  std::unique_ptr<BlockSet> freed_;  // freed by anyone since open
  // Records on a valid list since the sweep began: what it marks, and what
  // garbage collection and splits unlink meanwhile (so it never frees those).
  std::unique_ptr<BlockSet> marked_;
  std::atomic<bool> swept_{true};     // false from a crash until the sweep ends
  std::atomic<bool> stop_{false};
  std::thread sweeper_;
  std::atomic<std::uint64_t> swept_blocks_{0};

  bool ready_ = false;
  bool closed_ = false;
};

}  // namespace pmhash::engine::dali
