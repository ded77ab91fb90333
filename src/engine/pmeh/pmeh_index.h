// engine/pmeh/pmeh_index.h - the pmeh Index (internal; see pmeh.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "engine/common/item_count.h"
#include "engine/index.h"
#include "engine/pmeh/layout.h"
#include "heap/checked.h"
#include "heap/heap.h"
#include "media/region.h"

namespace pmhash::engine::pmeh {

// Intent slots (heap.h): a caller's item in 0; an owner's segments and
// directories in 1 (the slides' per-thread directory pointer, §1.6).
inline constexpr unsigned kItemIntent = 0;
inline constexpr unsigned kBlockIntent = 1;
inline constexpr unsigned kMaxWorkers = 64;
// SegState bit 63: the segment has been split away; readers restart from
// their zone's directory. Set for good (a block reused for a new segment
// gets a fresh word, §2).
inline constexpr std::uint64_t kSegDead = std::uint64_t{1} << 63;

// Test hook: true while an owner runs a split, a step, a directory fill or
// retirement (outside any read section), so that a crash-point hook knows
// it may recover images on the spot.
inline std::atomic<bool> testing_in_split{false};
// Sets testing_in_split for a scope (nestable).
struct InSplit {
  InSplit() : prev(testing_in_split.exchange(true, std::memory_order_relaxed)) {}
  ~InSplit() { testing_in_split.store(prev, std::memory_order_relaxed); }
  InSplit(const InSplit&) = delete;
  InSplit& operator=(const InSplit&) = delete;
  bool prev;
};

// A live directory, mirroring dir_array[id].
struct Dir {
  std::uint64_t off = 0;
  DirHeader* hdr = nullptr;
  std::atomic<std::uint64_t>* entry = nullptr;
  unsigned depth = 0;  // G
  unsigned id = 0;
};

// Zone modes (§7.1) and the requests that switch them.
enum ZoneMode : std::uint8_t { kOwned = 0, kShared = 1, kToOwned = 2 };
enum ZoneRequest : std::uint8_t { kNoRequest = 0, kRequestShared = 1, kRequestOwned = 2 };
// pmeh.write_mode (pmeh.h, "Write mode").
enum WriteMode : unsigned { kWriteAuto = 0, kWriteDelegated = 1, kWriteDirect = 2 };
// Mailbox::announce when no direct op is in progress.
inline constexpr std::uint32_t kNoZone = ~std::uint32_t{0};
// A zone's split in flight (§5.3): S, its children and the moved bitmap.
// Built at split start (or by open, for a split found MOVING), freed after
// a grace period once the split completed. Everything but `moved` is
// fixed once published.
struct SplitState {
  std::uint64_t s_off = 0;
  SegmentHeader* s = nullptr;
  unsigned depth = 0;  // L, S's depth
  unsigned k = 0;      // S splits into 2^k
  std::uint64_t child_off[8] = {};
  SegmentHeader* child[8] = {};
  // Mirrors S.moved (bit j: bucket j lives in the children); changed only
  // under S's odd version, after the bits are durable.
  std::atomic<std::uint64_t> moved[4] = {};
  unsigned cursor = 0;  // owner only: buckets below it are moved
  unsigned left = 0;    // owner only: buckets not moved yet

  bool is_moved(unsigned j) const {
    return ((moved[j / 64].load(std::memory_order_acquire) >> (j % 64)) & 1) != 0;
  }
  // The child that holds h1 (§1.3: c(h1) = (h1 << L) >> (64 - k)).
  unsigned child_of(std::uint64_t h1) const {
    return static_cast<unsigned>((h1 << depth) >> (64 - k));
  }
  // The authoritative bucket j for h1: S's until moved, then the child's.
  Bucket* bucket(std::uint64_t h1, unsigned j) const {
    return is_moved(j) ? &segment_buckets(child[child_of(h1)])[j] : &segment_buckets(s)[j];
  }
};

struct alignas(64) Zone {
  std::atomic<Dir*> dir{nullptr};  // the newest directory with the zone's bit set
  std::atomic<SplitState*> split{nullptr};  // the split in flight (§5.3), or none
  unsigned owner = 0;              // z mod W
  std::atomic<std::uint8_t> mode{kOwned};        // written by the owner only (§7.3)
  std::atomic<std::uint8_t> request{kNoRequest};  // set by the monitor, applied by the owner
  std::atomic<std::uint64_t> ops{0};  // writes run on the zone (owner and direct), for the monitor
  // The monitor's view (under monitor_mutex_): ops at the last window,
  // consecutive hot / cold windows, the window of the last switch.
  std::uint64_t seen_ops = 0;
  unsigned hot_streak = 0, cold_streak = 0;
  std::uint64_t switched_at = 0;
  // Test probe (check_regimes): writers inside the zone now, lock-free
  // owner ops and direct ops.
  std::atomic<int> owner_inside{0}, direct_inside{0};
};

// What a scan met that it could not read (a damaged pool): how many slots or
// segments, and the first of them, named.
struct ScanDamage {
  std::uint64_t count = 0;
  std::string first;
  void note(std::string what) {
    if (count++ == 0) first = std::move(what);
  }
};

// A write (or a delegated read or scan) handed to a zone's owner. The
// caller's key, value and output stay valid: the caller waits for `done`.
struct Request {
  // kDrainRetired: the owner frees what it retired (drain_owners_retired).
  // kSwap: compare_and_swap (pmeh.h, "Persist order").
  enum Op : std::uint8_t {
    kGet, kInsert, kUpdate, kUpsert, kRemove, kSwap, kScan, kDrainRetired
  } op = kGet;
  const Key* key = nullptr;
  std::string_view value;
  // kSwap: the value the key must hold (nullopt: the key must be absent),
  // and whether the swap removes the key (else it stores `value`).
  std::optional<std::string_view> expected;
  bool swap_remove = false;
  std::uint64_t item = 0;    // the caller's prepared item (0: the pair is inline)
  std::string* out = nullptr;  // kGet
  std::uint64_t scan_x = 0;    // kScan: a point of the segment to copy
  std::vector<std::pair<std::string, std::string>>* batch = nullptr;  // kScan
  std::uint64_t scan_next = 0;  // kScan result: the end of the segment's range
  bool scan_last = false;       // kScan result: the range ended the hash space
  ScanDamage* scan_damage = nullptr;  // kScan: where the copy notes what it could not read
  bool published = false;       // result: the item is named by a slot now

  // Whether the write, when it finds the key, clears its slot.
  bool removes() const { return op == kRemove || (op == kSwap && swap_remove); }
};

struct alignas(128) Mailbox {
  Request req;
  Status result;
  std::atomic<std::uint32_t> done{1};
  std::atomic<std::uint32_t> parked{0};
  // The zone of this thread's direct (SHARED) op in progress, or kNoZone (§7.3).
  std::atomic<std::uint32_t> announce{kNoZone};
  // The slot's thread has been counted as a caller (write mode auto); only
  // the thread that holds the slot touches it.
  bool counted = false;
};

struct Owner {
  std::thread thread;
  alignas(64) std::atomic<std::uint64_t> doorbell[4] = {};  // bit t: mailbox t rang
  alignas(64) std::atomic<std::uint32_t> sleeping{0};
  std::atomic<std::uint32_t> control{0};  // 1: a zone of this owner has a request (§7)
  // Rung bits served and loop rounds that served any, for the monitor's backlog.
  std::atomic<std::uint64_t> served{0}, busy_rounds{0};
  std::uint64_t seen_served = 0, seen_rounds = 0;  // the monitor's, at the last window
  // A split started in a SHARED zone this round: completed once the round's
  // callers have their answers. The owner thread's only.
  bool finish_pending = false;
  std::atomic<int> started{0};  // 1: running, -1: could not take a heap slot
  Status start_error;           // written before started = -1
};

class PmehIndex final : public Index {
 public:
  explicit PmehIndex(const Env& env);
  ~PmehIndex() override;

  // Writes an empty index (create, §14): root, first directory, 2^Z segments.
  Status format();
  // Validates the pool and recovers it (open, §9).
  Status recover();
  // Starts the owner threads (after format or recover).
  Status start_owners();

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
  unsigned workers() const { return static_cast<unsigned>(owners_.size()); }
  unsigned nb() const { return nb_; }
  // Writes the owners ran and reads that were delegated, since open.
  std::uint64_t delegated_ops() const { return delegated_.load(); }
  // Optimistic reads that failed validation and retried, since open.
  std::uint64_t read_retries() const { return read_retries_.load(); }
  // What the last open read and repaired (§9; the split rows of §8.2).
  struct OpenCounters {
    std::uint64_t segments_read = 0;         // segment headers read for split records
    std::uint64_t slot_updates_replayed = 0;
    std::uint64_t splits_not_started = 0;    // R = S, S not MOVING: children freed
    std::uint64_t splits_resumed = 0;        // MOVING, not COMPLETING: SplitState rebuilt
    std::uint64_t splits_completed = 0;      // COMPLETING: the range re-pointed
    std::uint64_t directories_freed = 0;     // no zone used them
  };
  const OpenCounters& open_counters() const { return open_counters_; }
  // The id of the directory zone z lives in now.
  unsigned zone_dir_id(unsigned z) const { return zones_[z].dir.load()->id; }
  // The depth of the segment covering h1, and its directory's depth.
  unsigned segment_depth(std::uint64_t h1) const { return seg(segment_of(h1))->depth; }
  unsigned dir_depth(unsigned id) const { return dirs_[id].load()->depth; }
  // --- the opportunistic switch (§7), for tests ---
  ZoneMode zone_mode(unsigned z) const { return static_cast<ZoneMode>(zones_[z].mode.load()); }
  unsigned zones() const { return 1u << z_; }
  // Asks zone z's owner to switch it to SHARED (or back to OWNED) and waits
  // until it has.
  void force_mode(unsigned z, bool shared);
  // Stops (or restarts) the timed monitor, so that a test drives it alone.
  void enable_monitor(bool on) { monitor_on_.store(on); }
  // The writes a monitor window needs before it decides (default 1024,
  // §7.2): a stress test lowers it, so that a machine too loaded to run
  // 1024 writes in a window's 250 ms still sees its hot spot.
  void set_min_window_ops(std::uint64_t n) { min_window_ops_.store(n); }
  // Runs one monitor window on the given per-zone op counts and per-owner
  // mean backlogs, waits until the owners applied its switches, and
  // returns the zones it switched.
  std::vector<unsigned> run_monitor_window(const std::vector<std::uint64_t>& ops,
                                           const std::vector<double>& backlog);
  // Counts writers inside each zone under each regime; overlaps() counts
  // lock-free owner ops and direct ops seen inside one zone together.
  void check_regimes(bool on) { check_regimes_.store(on); }
  std::uint64_t regime_overlaps() const { return overlaps_.load(); }
  std::uint64_t direct_ops() const;
  // Direct writes that went into a moved window of a split in flight.
  std::uint64_t direct_split_writes() const;
  // Every zone is SHARED for good and the monitor is off (write mode direct,
  // or auto once owners plus callers leave no hardware thread spare).
  bool all_direct() const { return all_direct_.load(); }
  std::uint64_t zone_switches() const { return zone_switches_.load(); }
  // Whether zone z has a split in flight, and its moved bitmap (words of
  // 64 buckets; all 0 when none). Owner state: call while writes are quiet.
  bool split_in_flight(unsigned z) const { return zones_[z].split.load() != nullptr; }
  std::uint64_t split_segment(unsigned z) const {
    const SplitState* sp = zones_[z].split.load();
    return sp == nullptr ? 0 : sp->s_off;
  }
  std::uint64_t moved_word(unsigned z, unsigned w) const {
    const SplitState* sp = zones_[z].split.load();
    return sp == nullptr ? 0 : sp->moved[w].load();
  }
  // Splits completed early because another split was needed first (§5.3).
  std::uint64_t eager_split_completions() const { return eager_.load(); }

 private:
  struct SlotView {
    std::uint16_t meta = 0;
    std::uint64_t w0 = 0, w1 = 0;
  };
  struct Pos {
    Bucket* bucket = nullptr;
    unsigned p = 0;
    explicit operator bool() const { return bucket != nullptr; }
  };

  // --- addressing ---
  unsigned zone_of(std::uint64_t h1) const { return static_cast<unsigned>(top_bits(h1, z_)); }
  // The segment covering h1 in its zone's directory (inside a read section).
  std::uint64_t segment_of(std::uint64_t h1) const;
  SegmentHeader* seg(std::uint64_t off) const { return region_.at<SegmentHeader>(off); }
  // Whether a directory entry names bytes a segment may occupy: 2^s bytes
  // of the heap, 64-byte aligned. Open does not read the entries (instant
  // recovery), so a reader checks each one before seg() or seg_state().
  bool seg_in_heap(std::uint64_t off) const {
    return view_.contains(off, std::uint64_t{1} << s_, 64);
  }
  // Corruption for a directory entry of h1 that fails seg_in_heap().
  Status damaged_segment(std::uint64_t h1, std::uint64_t off) const;
  std::atomic<std::uint64_t>& seg_state(std::uint64_t off) const { return seg_state_[off >> s_]; }

  // --- slots ---
  bool matches(const SlotView& v, const Key& key) const;
  // Owner only (no concurrent writer): where key is in the segment's window.
  Pos find(SegmentHeader* h, const Key& key) const;
  // The first free slot of h1's window (its home bucket, then the next),
  // or none: the window is full.
  Pos free_in_window(SegmentHeader* h, std::uint64_t h1) const;
  SlotView new_view(const Key& key, std::string_view value, std::uint64_t item) const;
  void store_new(const Pos& at, const SlotView& v);
  void update_slot(heap::ThreadCache* tc, const Pos& at, const SlotView& old, const SlotView& fresh);

  // --- operations ---
  // `expected` and `swap_remove`: Request's, for kSwap.
  Status write(Request::Op op, const Key& key, std::string_view value,
               std::optional<std::string_view> expected = std::nullopt, bool swap_remove = false);
  // Whether write r ends at what it found, the key's slot `at` (or none),
  // without writing; then *why is its answer: AlreadyExists, NotFound,
  // Conflict, or OK for a swap that expects the key absent and leaves it
  // so. Called by the zone's writer, with the key's window held (the owner
  // of an OWNED zone, or the segment's version taken by CAS).
  bool refused(const Request& r, const Pos& at, Status* why) const;
  // Hands a request to the zone's owner and waits for its result.
  Status delegate(heap::ThreadCache* tc, unsigned zone, const Request& req, Request* result_req);
  // Has every owner free the blocks in its retire log, after a grace period.
  // Outside any read-side section.
  void drain_owners_retired(heap::ThreadCache* tc);
  // Runs a request on owner thread `tc` (zones.cc dispatches here).
  Status execute(heap::ThreadCache* tc, Request& r);
  Status owner_write(heap::ThreadCache* tc, Request& r);
  // A write run by the caller itself in a SHARED zone (§7.3). False: it
  // needs the owner (a split, a directory fill); nothing was written.
  bool direct_write(heap::ThreadCache* tc, Request& r, Status* result);
  // SHARED mode: takes the segment's version by CAS from even to odd.
  // False if it is odd (a writer inside: leave the read section and retry)
  // or DEAD (split away: locate again).
  static bool try_lock_segment(std::atomic<std::uint64_t>& st);
  // The owner entering a segment for a write or a split: a bump in OWNED
  // mode, the CAS (waiting out direct writers) in SHARED mode.
  void enter_segment(unsigned z, std::atomic<std::uint64_t>& st);
  // The write itself, at `target` (= `at` when the key is there), between
  // two bumps of the segment's version.
  void write_slot(heap::ThreadCache* tc, Request& r, std::atomic<std::uint64_t>& st,
                  const Pos& target, const Pos& at, bool locked = false);
  Status owner_get(const Key& key, std::string* out) const;
  // Copies the VALID pairs of the segment covering x (of S's unmoved
  // buckets and its children's moved ones while it splits), those with
  // h1 >= x when x is inside the segment's range; *next = the end of the
  // range, *last = it ends the hash space. False if a writer moved its
  // version meanwhile, or it is DEAD (optimistic: callers retry).
  // A segment or slot that fails its check (heap/checked.h) is noted in
  // *damage and left out of the batch; a damaged segment header ends the
  // copy at the next directory entry.
  bool copy_segment(std::uint64_t x, bool optimistic,
                    std::vector<std::pair<std::string, std::string>>* batch, std::uint64_t* next,
                    bool* last, ScanDamage* damage) const;
  using Batch = std::vector<std::pair<std::string, std::string>>;
  // One part of a walk in h1 order (for_each, salvage, scan; pmeh.h
  // "Scan"): copy_segment(x) on the caller's thread, retried a few times,
  // then by the zone's owner. *next and *last as copy_segment's; what could
  // not be read is in *damage.
  Status copy_part(std::uint64_t x, Batch* batch, ScanDamage* damage, std::uint64_t* next,
                   bool* last);
  // kDamaged: the key's segment, or an item a slot with the key's hash
  // names, lies outside the heap (a damaged pool).
  enum class Probe { kFound, kNotFound, kRetry, kDamaged };
  Probe probe(SegmentHeader* h, std::atomic<std::uint64_t>& st, std::uint64_t v1, const Key& key,
              std::string* out) const;

  // --- splits (pmeh_split.cc) and directories (directory.cc), owner only ---
  // Starts splitting segment `off` of zone z into 2^k fresh children and
  // moves the window of h1 (§5.4); with B = 0 the whole split is done at
  // once. A split in flight in the zone is completed first. NoSpace when
  // the pool or kMaxDepth refuses. Outside any read section.
  Status split(heap::ThreadCache* tc, unsigned z, std::uint64_t off, std::uint64_t h1);
  // One gradual step of zone z's split in flight (§5.3): the unmoved
  // buckets of h1's window (when `on_s`) plus up to B from the cursor, as
  // one move batch; completes the split once every bucket is moved.
  // Outside any read section, with room for one retire.
  void split_step(heap::ThreadCache* tc, unsigned z, bool on_s, std::uint64_t h1);
  // Whether a step of zone z's split in flight moves all that is left:
  // B = 0, or the zone is SHARED (pmeh.h, "Writes during a split"). Owner
  // of z only.
  bool splits_at_once(unsigned z) const {
    return split_step_ == 0 || zones_[z].mode.load(std::memory_order_relaxed) == kShared;
  }
  // Owner i after a round of requests: completes the splits its SHARED
  // zones started in that round (rule 1 of "Writes during a split").
  void finish_shared_splits(heap::ThreadCache* tc, unsigned i);
  // Moves everything left and completes zone z's split (§5.5).
  void finish_split(heap::ThreadCache* tc, unsigned z);
  // Copies buckets `m` (a 256-bit set) of S to the children and marks them
  // moved (§5.3 move batch). The caller holds S's version odd.
  void move_batch(SplitState* sp, const std::uint64_t (&m)[4]);
  // Owner i between requests: one split step for a zone of its own, else
  // frees its retired SplitStates after a grace period. True if it did
  // anything.
  bool idle_work(heap::ThreadCache* tc, unsigned i);
  // Makes zone z's directory at least `depth` deep: installs a deeper
  // directory if none exists, and fills the zone into the newest (§6).
  Status ensure_depth(heap::ThreadCache* tc, unsigned z, unsigned depth);
  Status install_dir(heap::ThreadCache* tc, unsigned depth);
  void fill_zone(heap::ThreadCache* tc, unsigned z, Dir* to);
  // Retires the directories every zone has left (§6, last step).
  void retire_old_dirs(heap::ThreadCache* tc);
  // A block that now holds a new segment: its version word restarts even
  // and not DEAD (no reader can hold the block's previous segment: it was
  // freed after a grace period).
  void fresh_segment_state(std::uint64_t off);

  // --- owners (zones.cc) ---
  void owner_loop(unsigned i);
  void stop_owners();
  // Wakes owner o if it sleeps (after a doorbell or control store).
  void wake(Owner& o);
  // Owner i applies the mode requests of its zones (§7.3).
  void apply_requests(unsigned i);
  // The monitor (§7.2): closes a window if one is due.
  void maybe_monitor();
  // One window over per-zone op deltas and per-owner backlogs; posts
  // requests and returns the zones asked to switch. Under monitor_mutex_.
  std::vector<unsigned> monitor_window(const std::vector<std::uint64_t>& delta,
                                       const std::vector<double>& backlog);
  void post_request(unsigned z, ZoneRequest r);
  // Write mode auto: counts the calling thread once, and switches every
  // zone to SHARED when owners plus callers leave no hardware thread spare.
  void note_caller(Mailbox& m);
  // Asks every owner to switch its zones to SHARED for good; stops the
  // monitor.
  void go_direct();

  // --- recovery and accounting (pmeh_recovery.cc) ---
  Status map_seg_state();
  // After a crash: every segment's VALID slots, for the count's base.
  std::int64_t count_items() const;
  void add_count(heap::ThreadCache* tc, std::int64_t delta);
  Status fail(const std::string& what) const;

  Env env_;
  media::Region& region_;
  heap::Heap& heap_;
  heap::PoolView view_;  // checked access to segments and items
  Root* root_;
  unsigned z_ = 0;   // Z
  unsigned s_ = 0;   // segment_log2
  unsigned nb_ = 0;  // buckets per segment
  bool delegate_reads_ = false;

  unsigned split_bits_ = 3;  // k (pmeh.split_bits)
  unsigned split_step_ = 4;  // B (pmeh.split_step)
  bool idle_steps_ = true;   // pmeh.idle_steps
  std::atomic<Dir*> dirs_[kMaxDirs] = {};
  std::atomic<Dir*> newest_{nullptr};  // the live directory with the highest id
  std::vector<std::unique_ptr<Dir>> dir_store_;  // owns every Dir
  // Serialises directory installs between owners (DRAM side; §12.22).
  std::mutex install_mutex_;
  unsigned oldest_dir_ = 0;  // the lowest live directory id (under install_mutex_)
  // Taken shared by an owner's idle work, exclusively by check() (§10).
  std::shared_mutex pause_;
  // SplitStates of completed splits, per owner: freed after a grace period.
  std::vector<std::unique_ptr<SplitState>> retired_splits_[kMaxWorkers];
  std::unique_ptr<Zone[]> zones_;
  // One version word per 2^s bytes of pool (§2), in a sparse anonymous
  // mapping: bits 0..62 the version (odd while a writer is inside), bit 63
  // DEAD (the segment has been split away).
  std::atomic<std::uint64_t>* seg_state_ = nullptr;
  std::size_t seg_state_bytes_ = 0;

  std::unique_ptr<Mailbox[]> mailboxes_;
  std::vector<std::unique_ptr<Owner>> owners_;
  std::atomic<bool> stop_{false};
  // The switch (§7): pmeh.opportunistic; the timed monitor running; its
  // state; the test probe of check_regimes.
  bool opportunistic_ = true;
  std::atomic<bool> monitor_on_{true};
  std::atomic<std::uint64_t> min_window_ops_{1024};
  std::mutex monitor_mutex_;
  std::atomic<std::int64_t> next_window_ns_{0};
  std::int64_t window_start_ns_ = 0;
  std::uint64_t windows_ = 0;
  std::atomic<bool> check_regimes_{false};
  std::atomic<std::uint64_t> overlaps_{0};
  std::atomic<std::uint64_t> zone_switches_{0};
  // The write mode (pmeh.write_mode), the hardware threads it is
  // weighed against, the calling threads seen, and whether every zone went
  // SHARED for good.
  unsigned write_mode_ = kWriteAuto;
  unsigned hw_threads_ = 1;
  std::atomic<unsigned> callers_{0};
  std::atomic<bool> all_direct_{false};

  // Per heap slot, in the item count's stripe: direct ops (one counter per
  // thread: a shared one would move its line between the cores per write).
  struct DirectOps {
    std::atomic<std::uint64_t> direct{0};
    std::atomic<std::uint64_t> split_direct{0};  // of them, into a child of a split in flight
  };
  common::ItemCount<DirectOps> count_;

  OpenCounters open_counters_;
  std::atomic<std::uint64_t> delegated_{0};
  std::atomic<std::uint64_t> splits_{0};
  std::atomic<std::uint64_t> items_moved_{0};
  std::atomic<std::uint64_t> expansions_{0};
  std::atomic<std::uint64_t> eager_{0};
  mutable std::atomic<std::uint64_t> read_retries_{0};
  // format() or recover() succeeded. An index whose recovery rejected the
  // pool writes nothing when it is destroyed.
  bool ready_ = false;
  bool closed_ = false;
};

}  // namespace pmhash::engine::pmeh
