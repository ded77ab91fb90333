// engine/clevel/clevel_index.h - the clevel Index (internal; see clevel.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "engine/clevel/clevel.h"
#include "engine/clevel/clevel_testing.h"
#include "engine/clevel/layout.h"
#include "engine/clevel/tag_filter.h"
#include "engine/common/item_count.h"
#include "engine/index.h"
#include "heap/checked.h"
#include "heap/heap.h"
#include "media/region.h"

namespace pmhash::engine::clevel {

// The test hooks of clevel_testing.h, run where they are named; each costs
// one relaxed load while no hook is set.
void run_move_hook(testing::MoveStep step, std::string_view key);
void run_writer_wait_hook();

class ClevelIndex final : public Index {
 public:
  explicit ClevelIndex(const Env& env);
  ~ClevelIndex() override;

  // Writes an empty table into the pool root (create).
  Status format();
  // Validates the root and runs recovery (open).
  Status recover();
  // Starts the rehash threads (after format or recover).
  void start();

  Status get(const Key& key, std::string* value) override;
  Status snapshot_get(const Key& key, std::string* value) override;
  Status insert(const Key& key, std::string_view value) override;
  Status update(const Key& key, std::string_view value) override;
  Status upsert(const Key& key, std::string_view value) override;
  Status remove(const Key& key) override;
  Status compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                          std::optional<std::string_view> desired) override;
  Status for_each(const ForEachFn& fn) override;
  Status scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
              std::uint64_t* next) override;
  std::uint64_t random_cursor(std::uint64_t random) override;
  Status salvage(const ForEachFn& fn, std::uint64_t* skipped) override;
  std::uint64_t size() const override;
  Status sync() override;
  Status check() override;
  void fill_stats(Stats* stats) const override;
  void close() override;

 private:
  // A slot found by a scan, with the level it is in and the value seen.
  struct SlotRef {
    std::atomic<std::uint64_t>* slot;
    std::uint64_t value;
    std::uint16_t level;
  };
  // Outcome of an attempt made inside a read-side section when it must wait
  // for another thread outside of it.
  enum class Attempt { kDone, kRetry, kYield };

  // --- context and levels ---
  Ctx load_ctx() const;
  bool cas_ctx(Ctx expected, Ctx desired);
  LevelHeader* level(std::uint16_t id) const;
  Bucket* candidate(LevelHeader* l, const Key& key, int which) const;
  template <typename Fn>
  void for_levels(Ctx c, bool top_down, Fn&& fn) const;
  // Calls fn(slot, level id) for every slot of the key's candidate buckets,
  // level by level in search order, until fn returns false.
  template <typename Fn>
  void for_candidate_slots(const Key& key, Ctx c, Fn&& fn) const;

  // --- tag filters (DRAM, one per live level; see clevel.h) ---
  // The level's filter if searches may trust it (built and for this level).
  const TagFilter* usable_filter(std::uint16_t id, const LevelHeader* l) const;
  // Makes sure level `id` has a filter before a context names it.
  void ensure_filter(std::uint16_t id);
  // Unhooks level `id`'s filter; the caller frees it after a grace period.
  std::unique_ptr<TagFilter> take_filter(std::uint16_t id);
  // Completes the filters made at open (see recover()): the first rehash
  // thread runs it before anything else, check() runs it too (adding bits
  // twice is harmless) so that it checks complete filters.
  void build_filters();
  // After slot r was cleared: the bucket's filter word sheds the tags no
  // slot holds any more (TagFilter::shed).
  void shed(const SlotRef& r);
  void count_rejection() const;
  // --- searching ---
  // What a search met: the first visible item with the key (0: none), in
  // search direction, whether its slot was PENDING, and an item of the key
  // that a delete of this session marked REMOVED (0: none). A candidate slot
  // with the key's tag whose item fails checked_item() (a damaged pool) is
  // passed over; *damaged, when given, then names it.
  struct Found {
    std::uint64_t off = 0;
    bool pending = false;
    std::uint64_t removed = 0;
  };
  Found find_visible(const Key& key, Ctx c, std::uint64_t* damaged = nullptr) const;
  // Makes what `f` depends on durable (every slot holding f.off, its state,
  // f.removed's state), then clears PENDING on those slots (clevel.h P4/P5).
  void settle(const Key& key, Ctx c, const Found& f) const;
  void prefetch(const Key& key, Ctx c) const;
  static std::vector<SlotRef>& scratch();
  std::uint64_t lookup(const Key& key, Ctx* seen, std::uint64_t* damaged = nullptr) const;
  // Every slot holding offset `off` (with or without MOVING), in search order.
  // False while a candidate slot of the level being emptied is moved out but
  // its clearing is not durable yet (move_bucket): a writer must not act on
  // the copies until it is.
  bool collect(const Key& key, Ctx c, std::uint64_t off, std::vector<SlotRef>* out) const;
  bool key_equals(std::uint64_t off, const Key& key) const;
  // Corruption naming a slot whose item offset `off` fails checked_item().
  Status damaged_item(std::uint64_t off, const std::string& where) const;

  // --- writing ---
  // `slot_out` (optional): the slot the value was stored into.
  Attempt place(heap::ThreadCache* tc, const Key& key, std::uint64_t value, Ctx c,
                bool rehasher, std::uint16_t* level_out, Status* status,
                std::atomic<std::uint64_t>** slot_out = nullptr);
  bool safe_level(Ctx c, std::uint16_t id) const;
  // Where an insert stands; it resumes there after waiting outside the
  // read-side section.
  struct Publishing {
    enum Stage { kSearch, kSafe, kRace, kLive, kRetired, kKilled } stage = kSearch;
    std::uint16_t level = 0;
    // The slots this insert stored its PENDING pointer into, valid only
    // inside the read-side section they were stored in (a level may be
    // freed after it): `stored_here` says they were stored in this one.
    static constexpr unsigned kMaxStored = 4;
    std::atomic<std::uint64_t>* stored[kMaxStored] = {};
    unsigned n_stored = 0;
    bool stored_here = false;
  };
  Attempt publish(heap::ThreadCache* tc, const Key& key, std::uint64_t off, Publishing* p,
                  Status* status);
  enum class Race { kClear, kVisible, kWait };
  // kVisible: *rival is the visible item, made durable if it was PENDING.
  Race same_key_race(const Key& key, std::uint64_t off, Found* rival) const;
  // After the writer's drain: clears PENDING on the slots holding `off`.
  void clear_pending(const Key& key, std::uint64_t off);
  // The same when the writer knows the slots it stored `value` (with
  // PENDING) into during the current read-side section: a CAS on each, no
  // search. A copy a rehash thread made meanwhile keeps its bit until a
  // reader settles it (P4).
  static void clear_pending_at(std::atomic<std::uint64_t>* const* slots, unsigned n,
                               std::uint64_t value);
  void unpublish(const Key& key, std::uint64_t off);
  // Owns the visible item with `key`: 0 when absent.
  std::uint64_t own(const Key& key);
  void release(std::uint64_t off);
  // Returns the slot the replacement was stored into (nullptr for a delete).
  std::atomic<std::uint64_t>* replace_all(const Key& key, std::uint64_t off,
                                          std::uint64_t replacement);
  // update and remove; with `expected` (not nullptr) only when the owned
  // item holds that value, else Conflict with nothing changed
  // (compare_and_swap). NotFound when the key is absent.
  Status update_if(const Key& key, std::string_view value, const std::string_view* expected);
  Status remove_if(const Key& key, const std::string_view* expected);
  // The owned item at `off` holds `expected` (nullptr: any value).
  bool holds(std::uint64_t off, const std::string_view* expected) const;
  Status write_item(heap::ThreadCache* tc, const Key& key, std::string_view value, Kind kind,
                    std::uint64_t* off);

  // --- resizing ---
  Attempt expand(heap::ThreadCache* tc, Ctx c, bool rehasher, Status* status);
  void maybe_shrink(heap::ThreadCache* tc);
  void abandon_level(heap::ThreadCache* tc, std::uint16_t id, std::uint64_t off);
  void rehash_main(unsigned j);
  // Moves this thread's share of the round's buckets; false if it stopped
  // early (close, or a shrink that ran out of room).
  bool rehash_share(heap::ThreadCache* tc, unsigned j, Ctx c, std::uint64_t start);
  Attempt move_bucket(heap::ThreadCache* tc, Bucket* b, std::uint16_t src);
  void finish_round(heap::ThreadCache* tc, Ctx c, bool complete);
  void wake_rehash();
  // Makes the scan epoch's low bit `parity` (1: a shrink moves items down),
  // durably, by one increment if it differs (clevel.h, "Scan").
  void set_scan_epoch_parity(std::uint64_t parity);
  std::uint64_t resume_bucket(std::uint64_t round_key) const;

  // --- scan (clevel_scan.cc) ---
  struct ScanPos;
  struct ScanWait;
  // Under a read-side section, with context c: moves *pos to the first
  // bucket at or after it in scan order that the context's levels hold and
  // sets *l and *id to its level; false when the order has no such bucket.
  bool scan_resolve(Ctx c, bool up, ScanPos* pos, LevelHeader** l, std::uint16_t* id) const;
  // Outside any read-side section: waits while the context still matches
  // `until_changed` for a little longer (ScanWait's budget); false once the
  // budget is spent.
  bool scan_wait(Ctx until_changed, ScanWait* w) const;

  // --- recovery and accounting ---
  bool keep_block(std::uint64_t off);
  // After a crash, before any writer runs: counts the visible items, clears
  // what the crash left PENDING or unlinked half-way (recover()).
  void count_at_open(heap::ThreadCache* tc);
  void add_count(heap::ThreadCache* tc, std::int64_t delta);
  std::uint64_t slots() const;

  Env env_;
  const Config config_;  // the options, read once
  media::Region& region_;
  heap::Heap& heap_;
  heap::PoolView view_;  // checked access to what slots name
  Root* root_;
  std::uint64_t generation_;
  unsigned rehash_threads_;

  // The item count; its base is exact once known (never on a pool whose
  // slots open found damaged: then close() saves nothing and check()
  // reports the damage).
  common::ItemCount<> count_;
  struct alignas(64) Stripe {
    std::atomic<std::int64_t> v{0};
  };
  static constexpr unsigned kRejectStripes = 64;
  mutable Stripe rejections_[kRejectStripes];  // filter rejections (Stats)

  // Rehash threads: a round empties one level; thread j of n takes buckets
  // start+j, start+j+n, ...; the last to finish drops the level.
  std::vector<std::thread> rehashers_;
  // Rehash threads hold this shared while they touch the table or their heap
  // log; check() holds it exclusively, so it sees no move half-done.
  std::shared_mutex pause_;
  std::mutex rehash_mutex_;
  std::condition_variable rehash_cv_;
  std::atomic<bool> stop_{false};
  std::uint64_t wake_seq_ = 0;      // bumped to wake rehash threads
  // The round in progress (under rehash_mutex_): which level it empties in
  // which direction, where it (re)started, which threads are done.
  std::uint64_t round_key_ = 0;
  std::uint64_t round_start_ = 0;
  std::uint64_t round_epoch_ = 0;   // bumped when a round ends
  unsigned round_done_mask_ = 0;
  unsigned round_complete_ = 0;
  bool round_failed_ = false;       // last round stopped early without a shrink to undo
  // A worker found no room while shrinking: rehash threads turn it around.
  std::atomic<bool> shrink_abort_requested_{false};

  // Offset of the level a finishing round is dropping from ring entry i
  // (0: none), from before the context stops naming it until its entry is
  // cleared: an expander must not take that entry for a new level's.
  std::atomic<std::uint64_t> dropping_[kRingSize] = {};

  bool use_filters_;
  std::atomic<TagFilter*> filters_[kRingSize] = {};
  std::mutex filter_mutex_;
  std::vector<std::unique_ptr<TagFilter>> stale_filters_;  // replaced; freed at close
  // Filters made at open, not trusted until build_filters() completes them
  // (written before the rehash threads start, read-only afterwards).
  std::vector<std::pair<std::uint16_t, TagFilter*>> unbuilt_filters_;

  std::atomic<std::uint64_t> expansions_{0};
  std::atomic<std::uint64_t> shrinks_{0};
  std::atomic<std::uint64_t> moved_{0};
  // format() or recover() succeeded. An index whose recovery rejected the
  // pool writes nothing when it is destroyed (the pool stays as it was).
  bool ready_ = false;
  bool closed_ = false;
};

}  // namespace pmhash::engine::clevel
