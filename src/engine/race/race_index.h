// engine/race/race_index.h - the race Index (internal; race.h has
// the design, layout.h the bytes).
#pragma once

#include <xxhash.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/index.h"
#include "engine/race/layout.h"
#include "engine/race/race.h"
#include "engine/race/race_testing.h"
#include "engine/remote_common/remote_index.h"
#include "remote/client.h"

namespace pmhash::engine::race {

using remote::Batch;
using remote::Client;
using remote_index::Clock;

inline std::function<bool(SplitStep, bool)>& split_hook() {
  static std::function<bool(SplitStep, bool)> hook;
  return hook;
}

using remote_index::low_mask;

inline std::uint64_t kv_checksum(const std::byte* block, std::uint64_t body_bytes) {
  return XXH3_64bits(block + 8, body_bytes);
}

// A client thread's connections and their fence (remote_index::Link), its
// copy of the directory and its allocation chunks.
struct Session : remote_index::Link {
  unsigned global_depth = 0;
  std::vector<std::uint64_t> dir;  // the first 2^global_depth directory words
  remote_index::Chunks chunks;
};

struct Params {
  unsigned nodes = 0;
  unsigned initial_depth = 0;
  unsigned max_depth = 0;
  unsigned groups = 0;
  std::uint64_t directory = 0;
  std::uint32_t lease_ms = 0;  // kept in the membership stamp (race.h, "Lease")
};

// Where a key lives in any subtable: its two main buckets and fingerprint.
struct Place {
  std::uint64_t h = 0;
  unsigned fp = 0;
  unsigned bucket[2] = {0, 0};
};

// A slot read back: its address and word.
struct Slot {
  unsigned node = 0;
  std::uint64_t off = 0;  // byte offset of the slot word on `node`
  std::uint64_t word = 0;
};

// The key's two combined buckets in one subtable, read consistently.
struct View {
  unsigned node = 0;
  std::uint64_t base = 0;  // the subtable's offset on `node`
  std::uint64_t header = 0;
  std::vector<Slot> slots;  // entry slots of both combined buckets, each once, by address
  bool frozen = false;      // some slot is frozen: a split runs
  // The slot holding a word (frozen or not) equal to `e`, or nullptr.
  const Slot* find(std::uint64_t e) const {
    for (const Slot& s : slots) {
      if (entry_thawed(s.word) == e) return &s;
    }
    return nullptr;
  }
};

// A KV block read back.
struct Kv : remote_index::RecordBytes<KvHeader> {
  Slot slot;
};

// What splits, takeovers and retries did since open (race.h, "Split").
struct SplitCounters {
  std::atomic<std::uint64_t> splits{0}, bytes{0}, moved{0}, retries{0}, takeovers{0};
  // In the descriptor's order (descriptor.cc), after the remote counters.
  void fill(Stats* st) const {
    st->add_property("race.splits", splits.load(std::memory_order_relaxed));
    st->add_property("race.items_moved", moved.load(std::memory_order_relaxed));
    st->add_property("race.split_bytes", bytes.load(std::memory_order_relaxed));
    st->add_property("race.read_retries", retries.load(std::memory_order_relaxed));
    st->add_property("race.lock_takeovers", takeovers.load(std::memory_order_relaxed));
  }
};

class RaceIndex final : public Index {
 public:
  RaceIndex(const Options& options, std::vector<std::string> specs, Params params)
      : options_(options), specs_(std::move(specs)), params_(params), sessions_(specs_, options) {}

  template <class F>
  Status with_session(F&& f) {
    return sessions_.with([&](Session& ss) { return refresh_dir(ss); }, std::forward<F>(f));
  }

  // ---- the Index interface ----
  Status get(const Key& key, std::string* value) override;

  Status insert(const Key& key, std::string_view value) override {
    return with_session([&](Session& ss) { return write(ss, key, value, Op::kInsert); });
  }
  Status update(const Key& key, std::string_view value) override {
    return with_session([&](Session& ss) { return write(ss, key, value, Op::kUpdate); });
  }
  Status upsert(const Key& key, std::string_view value) override {
    return with_session([&](Session& ss) { return write(ss, key, value, Op::kUpsert); });
  }
  Status remove(const Key& key) override {
    return with_session([&](Session& ss) { return write(ss, key, {}, Op::kRemove); });
  }
  // race.h, "Compare and swap".
  Status compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                          std::optional<std::string_view> desired) override {
    const Swap swap{expected, desired};
    return with_session([&](Session& ss) { return write(ss, key, {}, Op::kSwap, &swap); });
  }

  Status for_each(const ForEachFn& fn) override {
    return with_session([&](Session& ss) { return scan(ss, fn, /*verify=*/false); });
  }

  // race.h, "Scan": whole subtables from position `cursor` (a reversed
  // h1) on; fn runs once every subtable of the call has been read and the
  // session is back in the pool.
  Status scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
              std::uint64_t* next) override;

  std::uint64_t size() const override {
    return remote_index::count_keys(*const_cast<RaceIndex*>(this));
  }

  Status sync() override { return Status::OK(); }  // every write is durable when it returns

  Status check() override;

  void close() override { sessions_.clear(); }

  void fill_stats(Stats* st) const override {
    sessions_.fill_stats(st, "race");
    counters_.fill(st);
  }

  // ---- create and open ----
  // Create (remote_index.h, "Create"): claim the nodes for a new
  // generation, wait out the old one, forget what they held, then the
  // subtables, the directory and the root, the magic last, then commit.
  Status format(bool force);

  // Open: the nodes verified against node 0's membership record before
  // anything else of the index is read; the timeout checked against the
  // lease the create stored.
  Status attach();

 private:
  // kSwap: compare_and_swap, with its two states in a Swap.
  enum class Op { kInsert, kUpdate, kUpsert, kRemove, kSwap };
  // What a swap expects the key to hold and what it makes it hold
  // (nullopt: absent).
  struct Swap {
    std::optional<std::string_view> expected;
    std::optional<std::string_view> desired;
  };

  // A subtable: its groups, then its trailer (layout.h).
  std::uint64_t bucket_bytes() const { return std::uint64_t{params_.groups} * kGroupBytes; }
  std::uint64_t bucket_words() const { return bucket_bytes() / 8; }
  std::uint64_t table_bytes() const { return bucket_bytes() + kTrailerBytes; }
  // Whether word w of a subtable is an entry slot (not a header, not the trailer).
  bool is_slot(std::uint64_t w) const { return w < bucket_words() && w % kSlotsPerBucket != 0; }

  void set_headers(std::vector<std::uint64_t>* image, std::uint64_t header) const {
    for (std::uint64_t w = 0; w < bucket_words(); w += kSlotsPerBucket) (*image)[w] = header;
  }

  Place place(const Key& key) const;

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::milliseconds(sessions_.timeout_ms());
  }
  // The index's lease, from its membership stamp (race.h, "Lease").
  std::chrono::milliseconds lease() const { return std::chrono::milliseconds(params_.lease_ms); }
  // A wait on a subtable's split gives up only after a lease (when it
  // takes the split over) and the remote timeout (for the takeover's work).
  Clock::duration lock_patience() const {
    return lease() + std::chrono::milliseconds(sessions_.timeout_ms());
  }

  // ---- directory ----
  Status refresh_dir(Session& ss) {
    return remote_index::read_directory(ss, "race", kGlobalDepthOff, params_.directory,
                                        params_.max_depth, &ss.dir, &ss.global_depth);
  }

  // ---- reading a key's buckets ----
  // Adds to `b` the READs of the key's two combined buckets in the subtable
  // of directory word `dw`, then a second READ of each one's first header
  // (a READ copies words in ascending order, and the batch runs in order).
  struct Raw {
    std::uint64_t w[2][kCombinedWords];
    std::uint64_t trail[2];
  };
  static void add_reads(Batch& b, std::uint64_t dw, const Place& p, Raw* raw);

  // What a Raw read shows: kGood (*v filled), kTorn (a split rewrote the
  // buckets meanwhile: read again), kElsewhere (the key belongs to another
  // subtable: refresh the directory).
  enum class Seen { kGood, kTorn, kElsewhere };
  static Seen judge(std::uint64_t dw, const Place& p, const Raw& raw, View* v);

  // Reads the key's view from its subtable (one round trip, more while
  // the directory is stale or a split rewrites the buckets). If `also` is
  // given, its verbs go in the same round trip (before the reads).
  Status read_view(Session& ss, const Place& p, View* v, Batch* also = nullptr);

  // ---- KV blocks ----
  // Reads the KV blocks the slots name (one round trip, a second for blocks
  // longer than their slot says) and checks their checksums; a block that
  // fails is read again until the deadline (then Corruption).
  Status read_kvs(Session& ss, const std::vector<Slot>& slots, std::vector<Kv>* out);

  static std::uint64_t kv_bytes(std::uint64_t key_len, std::uint64_t value_len) {
    return sizeof(KvHeader) + key_len + value_len;
  }

  // The key's entry in `v` (*any false if none): of several (concurrent
  // inserts of one key, race.h), the one at the lowest address.
  Status find_key(Session& ss, const Place& p, const Key& key, const View& v, Kv* found,
                  bool* any);

  // ---- writes ----
  // `value` is the new value of an insert, update or upsert; a swap's
  // states are in *swap (and `value` is unused).
  Status write(Session& ss, const Key& key, std::string_view value, Op op,
               const Swap* swap = nullptr);

  // The steps of a write (race.h, "Writers").
  // Its KV block (none for a remove) and the entry that names it once it
  // has a place.
  struct KvBlock {
    KvBlock(const Key& key, std::optional<std::string_view> value);
    // Adds the block's WRITE to `b` when it was held back (tests: the
    // planted bug kRaceSlotBeforeKvDurable writes the block only in the
    // batch of the CAS that names it, after the CAS) and is placed.
    void add_late_write(Batch& b);
    std::uint64_t bytes;
    std::uint64_t units;
    bool late;
    std::vector<std::byte> block;  // empty for a remove
    std::uint64_t entry = 0;       // names the block once it is placed
  };
  // A block for the KV on the node of the key's subtable, its WRITE added
  // to `b` (round trip 1), and the entry that names it.
  Status place_kv(Session& ss, const Place& p, KvBlock* kv, Batch* b);
  // Update, upsert, remove: CAS the key's slot from `found`'s entry to
  // `desired` (the KV's entry, or 0). *done false: the slot changed meanwhile.
  Status replace_entry(Session& ss, const Kv& found, std::uint64_t desired, KvBlock* kv,
                       bool* done);
  // Insert: CAS the free `slot` of view `v` to the KV's entry and read its
  // bucket header in the same batch. *placed false: the slot was taken, or
  // the entry landed in a subtable the key has left and was taken back.
  Status claim_slot(Session& ss, const Place& p, const View& v, const Slot& slot, KvBlock* kv,
                    bool* placed);

  // The free slot an insert takes: in the combined bucket with more free
  // slots (the first on a tie), the first free slot in address order of
  // its main bucket, else of its overflow bucket. Deterministic, so that
  // two inserters that saw the same buckets race for the same slot.
  const Slot* free_slot(const Place& p, const View& v) const;

  // After an insert's CAS: reads the key's buckets again, and the blocks of
  // other entries whose fingerprint matches. If another entry of the key
  // is at a lower address, ours loses: it is removed and *won is false.
  // race.h argues why exactly one of concurrent inserts wins.
  Status settle(Session& ss, const Place& p, const Key& key, std::uint64_t entry, bool* won);

  // ---- split (race.h, "Split", "Dead splitters") ----
  // A wait gives up after this many leases, and no sooner than
  // kWaitFloor, even while takeovers go on (takers that cannot finish
  // within half a lease, over and over: a lease too short for the
  // machine's load or the network's latency).
  static constexpr unsigned kWaitLeases = 16;
  static constexpr std::chrono::milliseconds kWaitFloor{2000};

  // What a waiter remembers of the split lock it waits on.
  struct LockWatch {
    bool any = false;         // a lock word was seen
    unsigned node = 0;        // the subtable whose word it is
    std::uint64_t base = 0;
    std::uint64_t seen = 0;   // the word
    Clock::time_point since;  // when `seen` was first seen
    Clock::time_point start;  // when the wait began
    Clock::time_point until;  // Busy after this: lock_patience() after the last change seen
    Clock::time_point limit;  // and never later than this
  };
  LockWatch new_watch() const;
  Status stuck(unsigned node, std::uint64_t base, const char* what, const LockWatch& w) const;

  // Reads the lock word of the subtable at (node, base) and observes it.
  Status watch_lock(Session& ss, unsigned node, std::uint64_t base, LockWatch* w,
                    const char* what);

  // A waiter saw lock word `word` of the subtable at (node, base). A word
  // it had not seen gives it another lock_patience() (a split made
  // progress); a locked word seen for a whole lease is taken over (no lock
  // word recurs, layout.h, so that lease was one holder's). Busy, saying
  // the subtable `what`, once it has waited past w->until. Both decisions
  // are made on one clock reading: a waiter that looks late (descheduled)
  // takes over rather than give up.
  Status observe(Session& ss, unsigned node, std::uint64_t base, std::uint64_t word,
                 LockWatch* w, const char* what);

  // A split lock's holder, the splitter or a taker: the subtable, the lock
  // word it holds, and when it locked (its clock read before it sent the
  // lock or takeover CAS, so no later than the lock).
  struct Held {
    unsigned node = 0;
    std::uint64_t base = 0;
    std::uint64_t lock = 0;
    Clock::time_point since;
    bool taker = false;
  };

  // Whether the holder may begin a batch that writes to the subtable, the
  // new subtable, the directory or the global depth: within lease/2 of its
  // lock (a waiter takes over only after it has seen the lock for a lease).
  bool in_lease(const Held& h) const { return remote_index::within_half_lease(h.since, lease()); }
  Status past_half_lease(const Held& h) const;
  // Every batch a holder writes with (race.h, "Fencing").
  Status exec_held(Session& ss, const Held& h, Batch& b) {
    if (!in_lease(h)) return past_half_lease(h);
    return ss.exec(b);
  }
  // The release: the held lock word to unlocked with seq + 1, by CAS (a
  // holder that was taken over changes nothing).
  void add_release(Batch& b, const Held& h) const {
    b.cas(h.node, h.base + bucket_bytes(), h.lock, make_lock(false, lock_seq(h.lock) + 1));
  }

  // Tests: true when the holder is to stop at `step`, as if it died there.
  static bool stop_at(const Held& h, SplitStep step) {
    return split_hook() && split_hook()(step, h.taker);
  }
  static Status stopped() { return Status::IOError("race: a test hook stopped a split"); }

  // A swap from absence (the key absent in view `v`): under the split lock
  // of v's subtable, the view again, then the insert's CAS and settle.
  // *again: look again (the lock was another's, the subtable split, or it
  // was full and has been split).
  Status swap_from_absence(Session& ss, const Place& p, const Key& key, const View& v,
                           KvBlock* kv, LockWatch* watch, bool* again);
  Status swap_from_absence_held(Session& ss, const Held& held, const Place& p, const Key& key,
                                std::uint64_t header, KvBlock* kv, bool* again, bool* full);

  // What is left of a split once its intent stands (steps 4 to 8): the
  // split subtable's depth and suffix before it, the new subtable, and the
  // slots still frozen with the word each gets.
  struct Split {
    unsigned depth = 0;
    std::uint64_t suffix = 0;
    std::uint64_t new_dw = 0;           // the new subtable's directory word (depth d + 1)
    std::vector<std::uint64_t> at;      // word index in the subtable of each frozen slot
    std::vector<std::uint64_t> frozen;  // its frozen word
    std::vector<std::uint64_t> target;  // its word after the split: 0 (moved or free), or the entry
  };

  // The target of every frozen slot of `sp`: 0 for a free slot or an entry
  // whose key has hash bit `depth` set (it moves), the entry thawed
  // otherwise. Reads every entry's KV header (one round trip): blocks never
  // change once named, so the holder and any taker get the same answer.
  Status plan_targets(Session& ss, Split* sp);

  // Splits the subtable of view `v` (its buckets full for some key) by hash
  // bit `depth`. OK also when another client holds its lock (observed in
  // `watch`, the caller's wait) or split it since the view: the caller
  // looks again.
  Status split(Session& ss, const View& v, LockWatch* watch);

  // Split step (1): CASes every entry slot of the held subtable from its
  // word in `old` to that word frozen, again for those that changed (`old`
  // follows them), until all are frozen; their places and frozen words
  // into *sp.
  Status freeze(Session& ss, const Held& held, std::vector<std::uint64_t>& old, Split* sp);
  // Split step (3): the new subtable (suffix `suffix1`, depth sp.depth + 1)
  // whole: the entries that move, each at the slot it had, and a zero
  // trailer; *moved counts them.
  std::vector<std::uint64_t> new_table_image(const Split& sp, std::uint64_t suffix1,
                                             std::uint64_t* moved) const;

  // The split under its lock, from `old`, the subtable read right after the
  // lock CAS. A failure once a slot may be frozen leaves the lock held: a
  // taker finishes or undoes the split after a lease ("Dead splitters").
  Status split_locked(Session& ss, const Held& held, std::uint64_t header,
                      std::vector<std::uint64_t>& old);

  // Steps (4) to (8) of a split whose intent stands, for its holder or a
  // taker; every write is one the holder made or would make, with the same
  // bytes, or a CAS that only a state before it matches (race.h, "Dead
  // splitters"). *dir_words: the directory words it rewrote.
  Status complete_split(Session& ss, const Held& held, const Split& sp, std::uint64_t* dir_words);

  // Steps (4) and (7): every directory word of the half of suffix `start`
  // (start, start + 2^depth1, ...) that names a subtable shallower than
  // depth1 is CASed to `target`; a word of depth1 or deeper stays (this
  // split, or a taker of it, or the new subtable's own splits rewrote it
  // already). Each CAS is first tried from `guess` (the split subtable's
  // word before the split); one that finds another shallow word (an
  // ancestor whose split is not finished yet) is tried again from that.
  // With `global`, each batch also READs the global depth word into it.
  Status fix_half(Session& ss, const Held& held, std::uint64_t start, unsigned depth1,
                  std::uint64_t guess, std::uint64_t target, std::uint64_t* global,
                  std::uint64_t* dir_words);

  // Takes the split lock of the subtable at (node, base), seen as `seen`
  // (locked) for a lease, from its holder: a CAS to seen + kSeqTakeover
  // (one taker wins), then the split finished or undone. OK also when
  // another client won or the lock changed (the caller looks again), and
  // when this taker ran past half its own lease (it stopped in time; the
  // lock stays for the next taker).
  Status take_over(Session& ss, unsigned node, std::uint64_t base, std::uint64_t seen);

  // As the lock's holder after a takeover (`held`), finishes or undoes the
  // split of whoever locked the subtable, from `t`, the subtable (trailer
  // included) read right after the takeover CAS.
  Status finish(Session& ss, const Held& held, const std::vector<std::uint64_t>& t);

  // Waits until the subtable at (node, base) holds no split lock, taking a
  // dead holder's over after a lease.
  Status wait_unlocked(Session& ss, unsigned node, std::uint64_t base);

  // check(), before it reads anything: every subtable's split lock
  // released, waited for or taken over; a split finished so changes the
  // directory, and the subtables it made are looked at too.
  Status wait_all_unlocked(Session& ss);

  // ---- whole-index reads ----
  // Every subtable once (quiescent index: check(); for_each is not a
  // snapshot while splits run). With `verify`, checks the invariants
  // race.h lists, once every split lock is released (dead splitters'
  // taken over).
  Status scan(Session& ss, const ForEachFn& fn, bool verify);

  // One step of Index::scan (race.h, "Scan"): reads the subtable that
  // covers position `pos` whole, under the readers' consistency check
  // (every bucket header and a trailing re-read of the first one equal);
  // of the keys it holds at its depth from position `pos` on (of several
  // entries of a key, the one at the lowest address), appends to *out
  // the first `need` in position order (remote_index::take_in_order).
  // *end: the position of the first key left, or the end of the
  // subtable's range (0 past the last one).
  Status scan_part(Session& ss, std::uint64_t pos, std::size_t need,
                   std::vector<remote_index::ScanPair>* out, std::uint64_t* end);

  Options options_;
  std::vector<std::string> specs_;
  Params params_;
  remote_index::SessionPool<Session> sessions_;
  SplitCounters counters_;
};

}  // namespace pmhash::engine::race
