// engine/nehash/nehash_index.h - the nehash Index (internal; see nehash.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/item_count.h"
#include "engine/index.h"
#include "engine/nehash/directory.h"
#include "engine/nehash/layout.h"
#include "heap/checked.h"
#include "heap/heap.h"
#include "media/region.h"

namespace pmhash::engine::nehash {

// Intent slots (heap.h): items in 0, groups, segments and overflow blocks in
// 1, so that an insert holding its item can still split.
inline constexpr unsigned kItemIntent = 0;
inline constexpr unsigned kBlockIntent = 1;

class NehashIndex final : public Index {
 public:
  explicit NehashIndex(const Env& env);
  ~NehashIndex() override;

  // Writes an empty index into the pool root (create).
  Status format();
  // Validates the pool and rebuilds the directory (open, §5).
  Status recover();

  Status get(const Key& key, std::string* value) override;
  Status insert(const Key& key, std::string_view value) override;
  Status update(const Key& key, std::string_view value) override;
  Status upsert(const Key& key, std::string_view value) override;
  Status remove(const Key& key) override;
  Status compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                          std::optional<std::string_view> desired) override;
  Status for_each(const ForEachFn& fn) override;
  Status salvage(const ForEachFn& fn, std::uint64_t* skipped) override;
  Status scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
              std::uint64_t* next) override;
  std::uint64_t size() const override;
  Status sync() override;
  Status check() override;
  void fill_stats(Stats* stats) const override;
  void close() override;

  // --- for tests ---
  Directory& directory() { return *dir_; }
  // What the last open read: groups (one header each) and slots.
  struct OpenCounters {
    std::uint64_t groups_read = 0;
    std::uint64_t slots_read = 0;
    std::uint64_t slot_updates_replayed = 0;
    // The kSplit rows of nehash.h, "Split", by name.
    std::uint64_t splits_not_committed = 0;  // !E1 !B
    std::uint64_t splits_bump_lost = 0;      //  E1 !B: committed, g's bump redone
    std::uint64_t splits_rolled_back = 0;    // !E1  B: the bump reached media alone
    std::uint64_t splits_committed = 0;      //  E1  B
  };
  const OpenCounters& open_counters() const { return open_counters_; }
  // Waits until the background split of shallow groups
  // (nehash.split_shallow_on_open) has finished; returns what stopped it.
  Status wait_shallow_splits();

 private:
  // A slot and the words that guard it: its bucket's lock word, its meta,
  // and its bit in the lock word.
  struct Place {
    std::atomic<std::uint64_t>* lock = nullptr;
    std::atomic<std::uint16_t>* meta = nullptr;
    Slot* slot = nullptr;
    unsigned bit = 0;
    explicit operator bool() const { return slot != nullptr; }
  };
  struct View {
    std::uint16_t meta = 0;
    std::uint64_t w0 = 0, w1 = 0;
  };
  // kSwap: compare_and_swap, with its Swap (nehash.h, "Operations").
  enum class Mode { kInsert, kUpdate, kUpsert, kSwap };
  // What a kSwap write expects to find (nullopt: the key absent) and
  // whether it removes the key (else it stores the write's value).
  struct Swap {
    std::optional<std::string_view> expected;
    bool remove = false;
  };
  // What a write attempt inside a read-side section asks its caller to do
  // outside of it.
  struct Attempt {
    enum Kind { kDone, kRetry, kCreate, kWaitSplit, kSplit } kind = kDone;
    GroupRef* group = nullptr;
    unsigned depth = 0;
    Status status;
  };

  // --- slots ---
  // Slot s of bucket k (k = 2^b: the conflict bucket).
  Place place(GroupRef* g, std::size_t k, unsigned s) const;
  Place conflict(GroupRef* g, unsigned s) const;
  static Place overflow_place(OverflowRef* o, unsigned s);
  std::atomic<std::uint64_t>* conflict_lock(GroupRef* g) const;
  // Sets the conflict counts of g's home lock words from its conflict
  // bucket (open, and a split's new group before it is published).
  void count_conflicts(GroupRef* g) const;
  // A home bucket's lock: all 16 bits of its word, taken and released at
  // once (writers of the bucket's keys, nehash.h "Operations").
  static void lock_bucket(std::atomic<std::uint64_t>* word);
  static void unlock_bucket(std::atomic<std::uint64_t>* word);
  // One slot's lock: a conflict or overflow slot.
  static void lock(const Place& p);
  static bool try_lock(const Place& p);
  static void unlock(const Place& p);
  // A consistent copy of a slot (seqlock; waits while its lock bit is set).
  static View read(const Place& p);
  bool matches(const View& v, const Key& key) const;
  // h1 of a VALID slot (w1, or the inline key rehashed).
  static std::uint64_t slot_h1(const View& v);
  // Whether a VALID slot can be read without a fault (heap/checked.h): inline
  // lengths of at most 8, or an item that lies in the heap (`in_block`:
  // inside its own heap block). False only on a damaged pool.
  bool readable(const View& v, bool in_block = false) const;
  // Where `key` is in g, given that the caller holds its home bucket.
  Place locate(GroupRef* g, const Key& key) const;
  bool has_room(GroupRef* g, std::uint64_t h1) const;

  // --- writing ---
  // `swap`: Mode::kSwap's expectation (nullptr for the other modes).
  Status write(const Key& key, std::string_view value, Mode mode, const Swap* swap = nullptr);
  Attempt write_attempt(heap::ThreadCache* tc, const Key& key, std::string_view value, Mode mode,
                        const Swap* swap, std::uint64_t item, bool* published);
  // Removes the key at `at` of g (remove, and a swap that removes). The
  // caller holds the key's home bucket `home` and, for a conflict or
  // overflow slot, the slot's own lock.
  void erase(heap::ThreadCache* tc, GroupRef* g, std::atomic<std::uint64_t>* home, const Place& at);
  void store_new(const Place& p, const View& v);
  void update_slot(heap::ThreadCache* tc, const Place& p, const View& old, const View& fresh);
  View new_view(const Key& key, std::string_view value, std::uint64_t item) const;

  // --- growing (nehash_split.cc) ---
  Status create_group(heap::ThreadCache* tc, std::uint64_t h1);
  // `force`: split even if the key h1 would fit (the background split of
  // shallow groups); then only a split in the directory's present shape
  // (case A) is made.
  Status split(heap::ThreadCache* tc, GroupRef* g, unsigned d, std::uint64_t h1,
               bool force = false);
  // The background thread of nehash.split_shallow_on_open: splits every
  // group shallower than `bits` until each main entry has its own.
  void split_shallow(unsigned bits);
  void stop_shallow_splits();
  Status add_overflow(heap::ThreadCache* tc, GroupRef* g);
  Status expand_main(Node* seen_main);
  Status take_id(heap::ThreadCache* tc, std::uint32_t* id);
  void release_id(std::uint32_t id);
  std::atomic<std::uint64_t>* table_word(std::uint32_t id) const;
  // Clears VALID in every slot of g outside its range (split step 10, and
  // recovery); returns whether any was cleared. `lock_buckets`: take the
  // buckets' locks (a live index with readers).
  bool clean_stale(GroupRef* g, bool lock_buckets);
  void wait_unlocked(GroupRef* g) const;

  // --- iteration (for_each, salvage, scan; nehash.h "Scan") ---
  using Batch = std::vector<std::pair<std::string, std::string>>;
  // Copies into *batch (cleared first) the keys of the piece that holds x
  // of the group range that holds x (the range cut into 2^sub_bits equal
  // pieces) whose h1 is at least x, read as one consistent state of the
  // group (copied again if a split deepened it meanwhile), and sets *end to
  // the piece's end (0: it ends the hash space). An empty directory entry
  // is one piece with no keys. A damaged slot is passed over and counted in
  // *skipped, or, with skipped == nullptr, makes Corruption.
  Status copy_range(std::uint64_t x, unsigned sub_bits, Batch* batch, std::uint64_t* skipped,
                    std::uint64_t* end);

  // --- recovery and accounting (nehash_recovery.cc) ---
  // After a crash: the VALID slots in range, for the count's base.
  std::int64_t count_items() const;
  void add_count(heap::ThreadCache* tc, std::int64_t delta);
  Status fail(const std::string& what) const;

  Env env_;
  media::Region& region_;
  heap::Heap& heap_;
  heap::PoolView view_;  // checked access to the items slots name
  Root* root_;
  unsigned b_ = 0;
  unsigned g0_ = 0;
  std::unique_ptr<Directory> dir_;

  // dir_mutex_: shared by group creation and splits, exclusive by a full
  // main expansion and check(); gets and writes never take it.
  mutable std::shared_mutex dir_mutex_;
  // table_mutex_: the id counter, its free list and the growth of the table.
  std::mutex table_mutex_;
  std::uint32_t next_id_ = 0;
  std::vector<std::uint32_t> free_ids_;

  common::ItemCount<> count_;

  std::atomic<std::uint64_t> splits_{0};
  std::atomic<std::uint64_t> items_moved_{0};  // slots copied by splits since open
  std::thread shallow_thread_;
  std::atomic<bool> shallow_stop_{false};
  Status shallow_status_;  // written by shallow_thread_, read after join
  OpenCounters open_counters_;
  // format() or recover() succeeded. An index whose recovery rejected the
  // pool writes nothing when it is destroyed.
  bool ready_ = false;
  bool closed_ = false;
};

}  // namespace pmhash::engine::nehash
