// engine/sephash/sephash_index.h - the sephash Index (internal; sephash.h has
// the design, layout.h the bytes).
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <bitset>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/index.h"
#include "engine/remote_common/remote_index.h"
#include "engine/sephash/layout.h"
#include "engine/sephash/sephash.h"
#include "engine/sephash/sephash_testing.h"
#include "remote/client.h"

namespace pmhash::engine::sephash {

using remote::Batch;
using remote::Client;
using remote_index::Clock;

inline std::function<void()>& append_hook() {
  static std::function<void()> hook;
  return hook;
}
inline std::function<bool(LockStep)>& lock_hook() {
  static std::function<bool(LockStep)> hook;
  return hook;
}
using BlockHook = std::function<void(BlockUse, unsigned, std::uint64_t, std::uint64_t)>;
inline BlockHook& block_hook() {
  static BlockHook hook;
  return hook;
}
// Tests: tells the block hook, if any, that a block was taken or freed.
inline void note(BlockUse use, unsigned node, std::uint64_t off, std::uint64_t bytes) {
  if (block_hook()) block_hook()(use, node, off, bytes);
}

// The tag of a stack head (layout.h, FreeTable): the bits above the offset.
inline constexpr std::uint64_t kTagMask = (std::uint64_t{1} << (64 - kTagShift)) - 1;

using remote_index::low_mask;
using remote_index::round64;

// Runs `f` when the scope ends, however it ends.
template <class F>
class AtScopeEnd {
 public:
  explicit AtScopeEnd(F f) : f_(std::move(f)) {}
  ~AtScopeEnd() { f_(); }
  AtScopeEnd(const AtScopeEnd&) = delete;
  AtScopeEnd& operator=(const AtScopeEnd&) = delete;

 private:
  F f_;
};

// The CurSeg's first 192 bytes as one READ brings them.
struct Header {
  std::uint64_t meta;
  std::uint64_t seq;  // read after meta here: a snapshot's seq is read on its own, before
  std::uint64_t pattern;
  std::uint64_t intent_seq;   // the intent record (layout.h, +24)
  std::uint64_t intent_old;
  std::uint64_t intent_new;
  std::uint64_t intent_seg;
  std::uint64_t swap_floor;  // layout.h, +56
  std::uint64_t bitmap[2][8];
};
static_assert(sizeof(Header) == kHeaderBytes);
static_assert(offsetof(Header, pattern) == kPatternOff && offsetof(Header, seq) == kSeqOff);
static_assert(offsetof(Header, intent_seq) == kIntentOff);
static_assert(offsetof(Header, swap_floor) == kSwapFloorOff);

// What a lock holder writes at kIntentOff before anything destructive.
struct Intent {
  std::uint64_t seq;       // the lock's seq (its first holder's FAA)
  std::uint64_t old_meta;  // the meta it locked, unlocked
  std::uint64_t new_meta;  // the meta its publish writes
  RAddr new_seg;           // a split's new CurSeg; 0 for a merge
};
static_assert(sizeof(Intent) == kIntentBytes);
static_assert(offsetof(Intent, seq) == 0);

// Adds the WRITEs of an intent for the CurSeg at `seg_off` to `b`: its
// last three words, then its seq as a verb of its own. A taker rolls
// forward when the seq and the old meta are this lock's, and a power loss
// may keep any of a WRITE's words without the others (remote/transport.h,
// "Durability"): the seq, which no earlier intent of the segment had, is
// never durable before the new meta and new segment it vouches for.
inline void add_intent(remote::Batch& b, unsigned node, std::uint64_t seg_off, const Intent& intent) {
  b.write(node, seg_off + kIntentOff + 8, &intent.old_meta, kIntentBytes - 8);
  b.write(node, seg_off + kIntentOff, &intent.seq, 8);
}

// What a reader saw of a segment: its meta and merge sequence number, in
// their order on the node (a 16-byte READ at the meta brings the meta
// first, then seq: the check that ends a validated batch).
struct Snap {
  std::uint64_t meta = 0;
  std::uint64_t seq = 0;
};
static_assert(kSeqOff == kMetaOff + 8);

// Whether reads made between the snapshot `then` and the check `now` count
// (sephash.h, "Reclamation"): no lock was taken on the segment meanwhile.
inline bool unchanged(const Snap& then, const Snap& now) {
  return now.meta == then.meta && now.seq == then.seq && (now.meta & kMetaLock) == 0;
}

inline bool bitmap_has(const Header& h, bool sign, unsigned bit) {
  return ((h.bitmap[sign ? 1 : 0][bit / 64] >> (bit % 64)) & 1) != 0;
}
// Where, from a CurSeg's start, the bitmap word of sign `sign` that holds
// bit `bit` is.
inline std::uint64_t bitmap_word_off(bool sign, unsigned bit) {
  return kBitmapOff + (sign ? kBitmapBytes : 0) + (bit / 64) * 8;
}

// One key's entry read back: its slot and its item's bytes.
struct Candidate : remote_index::RecordBytes<ItemHeader> {
  std::uint64_t slot = 0;
};

inline std::uint64_t item_units(std::uint64_t bytes) { return (bytes + 63) / 64; }
// A MainSeg of `slots` slots takes a power of two of 64-byte units, so that
// the blocks replaced MainSegs leave fit later ones.
inline std::uint64_t main_units(unsigned slots) { return std::bit_ceil(item_units(main_bytes(slots))); }

// What one client thread keeps: its connections and their fence
// (remote_index::Link), its copy of the directory, what it knows of
// MainSegs, and its allocation chunks.
struct Session : remote_index::Link {
  unsigned global_depth = 0;
  std::vector<RAddr> dir;
  struct MainCache {
    std::uint64_t main_off = 0;
    std::uint64_t seq = ~std::uint64_t{0};  // the segment's seq when read (~0: never)
    std::vector<std::uint16_t> prefix = std::vector<std::uint16_t>(257, 0);
  };
  std::unordered_map<RAddr, MainCache> mains;
  // Per segment, the header as this session last saw it: the seq, the
  // sign and that sign's bitmap words (a snapshot's, a bitmap CAS's old
  // word since, or what this session's own merge or split published). A
  // hint and nothing more: an append's first round trip CASes the key's
  // bitmap word from the cached word, and trusts the bit only when the
  // snapshot's sign and the CAS's old word confirm it (sephash.h, "Append").
  struct BitmapCache {
    bool known = false;
    bool sign = false;
    std::uint64_t seq = 0;
    std::uint64_t words[kBitmapBytes / 8] = {};
    // What the snapshot (`seq`, header `hd`) shows.
    void take(std::uint64_t snap_seq, const Header& hd) {
      known = true;
      seq = snap_seq;
      sign = meta_sign(hd.meta);
      std::memcpy(words, hd.bitmap[sign ? 1 : 0], sizeof(words));
    }
    // What a publish that began the state (`s`, `new_seq`) left: that
    // sign's bitmap clear.
    void published(bool s, std::uint64_t new_seq) {
      known = true;
      seq = new_seq;
      sign = s;
      std::fill(std::begin(words), std::end(words), 0);
    }
  };
  std::unordered_map<RAddr, BitmapCache> bitmaps;
  remote_index::Chunks chunks;
  // Blocks this client freed (merges, splits) or took from a node's stack,
  // to reuse before its chunks: per node, offsets by length in 64-byte units.
  std::vector<std::unordered_map<std::uint64_t, std::vector<std::uint64_t>>> free;
  // Runs when the session ends (its pool closes): hands `free` back.
  std::function<void(Session&)> on_end;
  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    if (on_end) on_end(*this);
  }
  unsigned window = 0;
  std::mt19937_64 rng{std::random_device{}()};
};

inline constexpr unsigned kWindowSlots = 8;
inline constexpr std::size_t kNoOp = ~std::size_t{0};  // no such verb in a batch

struct Params {
  unsigned nodes = 0;
  unsigned initial_depth = 0;
  unsigned max_depth = 0;
  unsigned main_max_slots = 0;
  std::uint64_t directory = 0;
  std::uint64_t free_table = 0;
  std::uint32_t lease_ms = 0;  // the lock lease, kept in the membership stamp
};

class SepHashIndex final : public Index {
 public:
  SepHashIndex(const Options& options, std::vector<std::string> specs, Params params)
      : options_(options), specs_(std::move(specs)), params_(params), sessions_(specs_, options) {}

  // ---- sessions ----
  // A new session's own state: its slot window, its free blocks, and the
  // hand-back of those blocks when it ends.
  void prepare(Session& ss);

  template <class F>
  Status with_session(F&& f) {
    return sessions_.with(
        [&](Session& ss) {
          prepare(ss);
          return refresh_dir(ss);
        },
        std::forward<F>(f));
  }

  // ---- the Index interface ----
  Status get(const Key& key, std::string* value) override;

  Status insert(const Key& key, std::string_view value) override {
    return write(key, value, /*tomb=*/false, Want::kAbsent);
  }
  Status update(const Key& key, std::string_view value) override {
    return write(key, value, false, Want::kPresent);
  }
  Status upsert(const Key& key, std::string_view value) override {
    return write(key, value, false, Want::kAny);
  }
  Status remove(const Key& key) override { return write(key, {}, true, Want::kPresent); }
  // sephash_swap.cc (sephash.h, "Compare and swap").
  Status compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                          std::optional<std::string_view> desired) override;

  Status for_each(const ForEachFn& fn) override {
    return with_session([&](Session& ss) { return scan(ss, fn); });
  }

  // sephash.h, "Scan": whole segments (both levels) from position
  // `cursor` (a reversed hash) on; fn runs once every segment of the call
  // has been read and the session is back in the pool.
  Status scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
              std::uint64_t* next) override;

  std::uint64_t size() const override {
    return remote_index::count_keys(*const_cast<SepHashIndex*>(this));
  }

  Status sync() override { return Status::OK(); }  // every write is durable when it returns

  Status check() override {
    return with_session([&](Session& ss) { return verify(ss); });
  }

  void fill_stats(Stats* st) const override;

  // Ends every session, which hands its free blocks to the nodes' stacks
  // (a new client may take them). A node that fails keeps what was pushed
  // before; the rest of its blocks are lost (leaked).
  void close() override { sessions_.clear(); }

  ~SepHashIndex() override { close(); }

  // ---- create and open ----
  // Create (remote_index.h, "Create"): claim the nodes for a new
  // generation, wait out the old one, forget what they held, then the
  // segments, the directory and the root, the magic last, then commit.
  Status format(bool force);

  // Open: the nodes verified against node 0's membership record before
  // anything else of the index is read; the lease is the one the create
  // stored (sephash.lock_lease_ms is not looked at).
  Status attach();

 private:
  enum class Want { kAbsent, kPresent, kAny };

  // A lock holder's clock: when it locked (read before its lock CAS or
  // takeover CAS was sent: no later than the lock).
  struct Held {
    RAddr seg = 0;
    Clock::time_point since;
  };

  // What a waiting loop remembers of the lock it sees.
  struct LockWatch {
    bool any = false;
    RAddr seg = 0;
    Snap seen;
    Clock::time_point since;
  };

  // Every batch goes through the session's fence (remote_index.h, "Fence").
  Status exec(Session& ss, Batch& b) { return ss.exec(b); }

  // A call that waits on a segment's lock waits a lease (after which it
  // takes the lock over) and the remote timeout (for the takeover's work)
  // before it gives Busy.
  Clock::time_point lock_deadline() const {
    return Clock::now() + lease() + std::chrono::milliseconds(sessions_.timeout_ms());
  }
  // The index's lease, from its membership stamp (chosen at create).
  std::chrono::milliseconds lease() const { return std::chrono::milliseconds(params_.lease_ms); }

  Status locked_too_long(RAddr seg) const;

  std::vector<std::byte> curseg_image(std::uint64_t meta, std::uint64_t pattern,
                                      std::uint64_t swap_floor = 0) const;

  // ---- allocation: FAA on the node's bump word (remote_index) ----
  Status alloc_direct(Session& ss, unsigned node, std::uint64_t bytes, std::uint64_t* off);

  // The chunk of `node` as (next, end); (0, 0) before the first.
  static std::pair<std::uint64_t, std::uint64_t> chunk_of(const Session& ss, unsigned node) {
    const auto& per = ss.chunks.per_node;
    return node < per.size() ? per[node] : std::pair<std::uint64_t, std::uint64_t>{0, 0};
  }

  Status alloc(Session& ss, unsigned node, std::uint64_t bytes, std::uint64_t* off);

  // ---- reuse: this client's free blocks, the nodes' stacks ----
  // A block of `units` 64-byte units on `node`: one this client freed or
  // took from the node's stack, else from its chunk or the bump word. Only
  // when the chunk (or, for a large block, the bump word) would be used
  // does it look at the node's stack first, popping records until one has
  // a block of this length (round trips then: one to find the stack empty,
  // three per record; never per item).
  Status alloc_block(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off);

  Status find_block(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off);

  // A block alloc_block gave that was not used after all (never written,
  // or written but named by no slot): this client's again.
  void unused(Session& ss, unsigned node, std::uint64_t off, std::uint64_t units) {
    note(BlockUse::kFreed, node, off, units * 64);
    ss.free[node][units].push_back(off);
  }

  bool take_free(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off);

  // A block no published state names any more (a merge's or split's lock
  // holder calls this only after its publish completed): this client may
  // write it again.
  void release(Session& ss, unsigned node, std::uint64_t off, std::uint64_t units);

  // ---- the nodes' stacks of free records (layout.h, FreeTable) ----
  // Every change of a head adds 1 to its tag (push, pop, and the settling
  // CAS below), so the head after one change from `seen` is:
  static std::uint64_t next_head(std::uint64_t seen, std::uint64_t off) {
    return free_head((head_tag(seen) + 1) & kTagMask, off);
  }

  // What became of a CAS on a stack head whose batch failed without
  // saying whether it ran (sephash.h, "Lost replies").
  enum class Landed {
    kNo,       // it has not run, and never will
    kAsOurs,   // the one change since `seen` made exactly what it would have
    kUnknown,  // it may have run
  };
  static constexpr unsigned kSettleTries = 3;

  // A CAS of `node`'s stack head from `seen` to `ours` was sent in a batch
  // that failed. One CAS settles it: from `seen` to `seen` with its tag
  // raised (the stack unchanged). It finds `seen`: the CAS had not run,
  // and since the tag has now moved on, it never will (kNo). It finds the
  // head one change later: that change is the only one since `seen`;
  // `ours` -> kAsOurs, anything else -> kNo (another change came first,
  // so the CAS failed or will). Anything else, or no answer -> kUnknown.
  // The settling CAS may itself be late or repeated: it changes nothing
  // but a tag that has not moved since `seen`.
  Landed settle(Session& ss, unsigned node, std::uint64_t seen, std::uint64_t ours);

  // Bytes given up: never reused by this client, never handed back.
  void leak(std::uint64_t bytes) { bytes_leaked_.fetch_add(bytes, std::memory_order_relaxed); }
  static std::uint64_t entries_bytes(const std::uint64_t* e, std::size_t n);

  // Pops the top record of `node`'s stack into this client's free blocks
  // (the record's own block too); *got false when the stack was empty.
  Status pop_record(Session& ss, unsigned node, bool* got);

  // Pushes every free block of this client, and the rest of its chunks, to
  // the nodes' stacks, in records of up to kFreeRecordEntries blocks.
  Status hand_back(Session& ss);

  // A client that frees more than it allocates (it merges more than it
  // writes) gives the surplus of `node` to the node's stack, where clients
  // that allocate more take it before they take new space: one record (2
  // or 3 round trips) when it holds more than kKeepFreeBlocks blocks there.
  static constexpr std::size_t kKeepFreeBlocks = 4 * kFreeRecordEntries;
  void shed_surplus(Session& ss, unsigned node);

  // Pushes the blocks `entries` of `node` to its stack, in records whose
  // own blocks come from the entries (one of kFreeRecordBytes, or a piece
  // of a larger one), else (`may_bump`) from the bump word. What stays in
  // *entries is this client's: neither pushed nor given up (a push whose
  // outcome is unknown gives its blocks up, sephash.h "Lost replies").
  Status push_blocks(Session& ss, unsigned node, std::vector<std::uint64_t>* entries,
                     bool may_bump);

  // What a push that failed (push_record) leaves to its caller.
  enum class Unpushed {
    kIntact,   // nothing was sent: the record's block and entries are the caller's
    kEntries,  // not pushed, and never will be: the entries are the caller's;
               // the record's block may still be written by the late request
    kUnknown,  // perhaps pushed: neither is the caller's
  };

  // Writes the record (its next word set here) and makes it the top of
  // `node`'s stack. OK also when the reply of the push was lost but the
  // head shows that it ran. Otherwise *left says what is still the
  // caller's.
  Status push_record(Session& ss, unsigned node, std::uint64_t rec_off,
                     std::vector<std::uint64_t>* rec, Unpushed* left);

  // ---- directory ----
  Status refresh_dir(Session& ss) {
    return remote_index::read_directory(ss, "sephash", kGlobalDepthOff, params_.directory,
                                        params_.max_depth, &ss.dir, &ss.global_depth);
  }

  RAddr segment_of(const Session& ss, std::uint64_t h) const {
    return ss.dir[h & low_mask(ss.global_depth)];
  }

  // Waits until the segment's meta is unlocked; the snapshot (seq read
  // first, then the meta) in *snap.
  Status wait_unlocked(Session& ss, RAddr seg, Snap* snap);

  // Adds to `b` a snapshot of segment `seg`: its seq, then its header
  // (the meta first). The snapshot is (seq, hd->meta).
  static void add_snapshot(Batch& b, RAddr seg, std::uint64_t* seq, Header* hd) {
    b.read(raddr_node(seg), raddr_off(seg) + kSeqOff, seq, 8);
    b.read(raddr_node(seg), raddr_off(seg), hd, kHeaderBytes);
  }
  // Adds to `b` the check that validates the reads before it in `b` (on
  // the segment's node): the meta, then seq.
  static void add_check(Batch& b, RAddr seg, Snap* now) {
    b.read(raddr_node(seg), raddr_off(seg) + kMetaOff, now, sizeof(Snap));
  }

  // ---- items ----
  // Reads the items the slots name (all on the segment's node), in one
  // round trip, and a second for any item longer than its slot says. With
  // a snapshot, each round trip ends with the check, and when it fails
  // *retry is set and nothing was interpreted (the bytes may be a reused
  // block's). Without one the caller holds the segment's lock.
  Status read_items(Session& ss, RAddr seg, const Snap* snap,
                    const std::vector<std::uint64_t>& slots, std::vector<Candidate>* out,
                    bool* retry);

  // The newest of `items` whose key is `key`: *any false when none is.
  static void newest(const std::vector<Candidate>& items, std::string_view key, Candidate* best,
                     bool* any);

  // ---- search ----
  // The newest entry of `key` (*any false when the key has none).
  Status lookup(Session& ss, const Key& key, Candidate* best, bool* any);

  // Judges a first round trip's snapshot of segment `seg` (`snap`, with
  // its header `hd`, and the check `now` that ended the batch) for a key of
  // hash `h`: *go when no lock was taken in between, the segment is the
  // key's, and (with `mc`) the MainSeg prefix cache is this snapshot's.
  // Otherwise it waits a little (locked or changed; Busy past the
  // deadline), re-reads the directory or loads the prefix table, and the
  // caller starts over.
  Status check_snapshot(Session& ss, std::uint64_t h, RAddr seg, const Header& hd,
                        const Snap& snap, const Snap& now, Session::MainCache* mc,
                        Clock::time_point deadline, LockWatch* watch, bool* go);

  // The newest entry of `key` in segment `seg`, given a checked snapshot
  // `snap` with its header `hd` and the MainSeg slots of the key's
  // fingerprint (`mslots`): the CurSeg's slots are read only when the
  // bitmap has the key's bit (into `all_slots`, when given, which then
  // holds every slot), then the candidates' items, each round trip checked
  // against `snap`. *retry: a check failed; nothing was decided, the caller
  // starts over.
  Status newest_in_snapshot(Session& ss, const Key& key, RAddr seg, const Snap& snap,
                            const Header& hd, const std::vector<std::uint64_t>& mslots,
                            std::uint64_t* all_slots, Candidate* best, bool* any, bool* retry);

  // Reads the prefix table of the MainSeg that the checked snapshot `snap`
  // names, checked against it; on a failed check *mc stays unusable (the
  // caller starts over and comes back).
  Status load_prefix(Session& ss, RAddr seg, const Snap& snap, Session::MainCache* mc);

  // ---- writes ----
  Status write(const Key& key, std::string_view value, bool tomb, Want want);

  // Appends an entry for `key`. Unless `want` is kAny, first checks that
  // the key is absent (kAbsent) or present (kPresent), from the same round
  // trips: the first one also reads the MainSeg slots of the key's
  // fingerprint, and only a bitmap or fingerprint match costs more.
  Status append(Session& ss, const Key& key, std::string_view value, bool tomb, Want want);

  // The steps of an append (sephash.h, "Append").
  // Its item: the bytes, and whose the block is (sephash.h, "Lost
  // replies").
  struct AppendItem {
    AppendItem(const Key& key, std::string_view value);
    std::uint64_t h;
    unsigned fp, fp2;
    unsigned bit;        // the key's bitmap bit
    std::uint64_t mask;  // that bit in its bitmap word
    std::uint64_t units;
    ItemHeader header;  // version 0 until the first round trip's FAA
    std::vector<std::byte> bytes;  // header, key, value
    unsigned node = ~0u;  // where the item's block is, once it has one
    std::uint64_t off = 0;
    bool written = false;
    bool named = false;  // a slot may name the block: it is no longer this client's
    bool lost = false;   // a batch that writes it or names it failed: it may land yet
  };
  // One pass: the snapshot of the key's segment and what came with it.
  struct AppendPass {
    explicit AppendPass(RAddr s) : seg(s), node(raddr_node(s)), off(raddr_off(s)) {}
    RAddr seg;
    unsigned node;
    std::uint64_t off;
    Header hd{};
    Snap snap, now;
    unsigned window = 0;  // the first slot of the window read
    std::uint64_t slots[kCurSlots];  // the window's slots, or all (all_slots)
    bool all_slots = false;
    std::vector<std::uint64_t> mslots;  // the MainSeg slots of the key's fingerprint
    bool sign = false;                  // the snapshot's
    std::uint64_t bitmap_word = 0;      // the key's bitmap word, as late as known
    std::vector<unsigned> free_slots;
  };
  // Round trip 1: the version FAA (first pass), the snapshot, the
  // speculative bitmap CAS, the MainSeg slots of the key's fingerprint
  // (unless `want` is kAny), the window, the check.
  Status read_for_append(Session& ss, Want want, Session::MainCache* mc, AppendItem* it,
                         AppendPass* p);
  // Whether the key is present in the checked snapshot; AlreadyExists or
  // NotFound where `want` forbids the append; a new version when the key's
  // newest entry has one as large. *again: a check failed, start over.
  Status decide_presence(Session& ss, const Key& key, Want want, AppendItem* it,
                         AppendPass* p, bool* again);
  // The slots free in the snapshot's state: the window's, else every
  // slot's (one more checked READ); none: merges (or waits for the lock's
  // holder) and sets *again.
  Status find_free_slots(Session& ss, AppendPass* p, bool* again);
  // A block on `node` for the item, unless it has one there that no slot
  // may name.
  Status place_item(Session& ss, unsigned node, AppendItem* it);
  // The slot word that names the item in the snapshot's state.
  static std::uint64_t make_entry(const AppendItem& it, bool tomb, const AppendPass& p);
  static void add_item_write(Batch& b, unsigned node, const AppendItem& it) {
    b.write(node, it.off, it.bytes.data(), static_cast<std::uint32_t>(it.units * 64));
  }
  // Round trip 1b: the key's bitmap bit before any slot names the item,
  // so that a slot's entry is never durable without its bit (readers skip
  // a CurSeg whose bitmap lacks the key). When round trip 1's speculative
  // CAS did not set it, it gets a round trip of its own: in one batch with
  // the slot's CAS, a bitmap CAS that failed (another bit of the word set
  // meanwhile) would not stop the slot's CAS, and a node that lost power
  // before the bit followed would keep an entry that scans list and gets
  // miss. *moved: a lock was taken since the snapshot.
  Status set_bitmap_bit(Session& ss, AppendItem* it, AppendPass* p, bool* moved);
  // Round trip 2: the item (unless written) and a CAS of a free slot to
  // `entry`, with the check; the next free slot while CASes fail.
  Status claim_slot(Session& ss, std::uint64_t entry, AppendItem* it, AppendPass* p, bool* won,
                    bool* moved);

  // ---- merge and split ----
  // Empties the CurSeg at `seg` (whose meta was `meta`) into a new MainSeg,
  // splitting the segment when that MainSeg would be too large. Returns OK
  // also when another client holds the lock, or when an append landed in a
  // slot it fenced (undone; the caller looks again).
  Status merge(Session& ss, RAddr seg, std::uint64_t meta);

  // ---- compare_and_swap (sephash.h, "Compare and swap") ----
  // What a swap expects the key to hold and what it makes it hold
  // (nullopt: absent).
  struct Swap {
    std::optional<std::string_view> expected;
    std::optional<std::string_view> desired;
  };
  // Whether the key's newest entry (any false: it has none) is the state
  // the swap expects (a tombstone is absence).
  static bool as_expected(const Swap& w, const Candidate& newest, bool any);
  // Steps (2) to (6) under the lock of the key's segment. *again: start
  // over (the lock was another's first, the directory was stale, or the
  // segment was full and has been merged).
  Status swap_locked(Session& ss, const Key& key, const Swap& w, bool* again);
  // The lock held, on `meta` (unlocked). *locked false once the unlock was
  // sent, or must be left to a taker (a test hook stopped the holder).
  Status swap_held(Session& ss, const Held& held, const Key& key, const Swap& w,
                   std::uint64_t meta, bool* again, bool* locked);
  // seq + 1, then `meta` (the locked one, unlocked), in one batch.
  Status unlock_swap(Session& ss, const Held& held, std::uint64_t meta);

  // A block a merge or split drops: its offset on the segment's node and
  // its length in 64-byte units.
  struct Dropped {
    std::uint64_t off;
    std::uint64_t units;
  };

  // *restorable: false once a failure may have left the segment changed
  // (its lock then stays until a waiter takes it over, sephash.h "Dead
  // lock holders"), or the holder stopped past lease/2.
  // *stale: an append landed in a slot fence_loose_slots fenced; nothing
  // else written, to be undone.
  Status merge_locked(Session& ss, const Held& held, std::uint64_t meta, bool* restorable,
                      bool* stale);
  // Merge step (2), under the lock of `seg` (whose meta was `meta`): FAA
  // seq, READ the slots, the pattern, the swap floor and the MainSeg, in
  // one batch, the FAA first. *seq: the lock's seq; *all: the MainSeg's
  // entries, then the CurSeg's live ones (sign cleared); slots: the
  // kCurSlots slot words read.
  Status read_locked(Session& ss, RAddr seg, std::uint64_t meta, std::uint64_t* seq,
                     std::uint64_t* pattern, std::uint64_t* floor,
                     std::vector<std::uint64_t>* all, std::uint64_t* slots);
  // Merge step (2b), under the lock of seq `seq`: CASes every slot read
  // that names no item (a free word of an earlier state whose merge was
  // undone; none when every slot was taken) to free_slot(seq), so that no
  // append lands after the READ unseen. *landed: one did (its CAS failed).
  Status fence_loose_slots(Session& ss, const Held& held, std::uint64_t seq,
                           const std::uint64_t* slots, bool* landed);
  // Merge steps (4) and (5): the publish batch (the MainSeg `image` at
  // `main_off`, the intent, the bitmap clear, the slots' free words, the
  // meta `meta_new`), then the frees of `drop` and of the MainSeg `meta`
  // named, once the publish is known to have run.
  Status publish_merge(Session& ss, const Held& held, std::uint64_t meta, std::uint64_t seq,
                       std::uint64_t meta_new, const std::vector<std::byte>& image,
                       std::uint64_t main_off, const std::vector<Dropped>& drop,
                       bool* restorable);

  // After a publish batch of the lock of seq `seq` failed without saying
  // whether it ran: whether the segment shows it, the meta it wrote last
  // and seq unchanged (sephash.h, "Lost replies"). Only this
  // publish leaves that pair: a taker's roll-forward writes the same meta
  // after raising seq by kSeqTakeover, and every later lock raises seq.
  bool published(Session& ss, RAddr seg, std::uint64_t meta_new, std::uint64_t seq);

  // What a merge or split whose publish is not known to have run
  // dropped, and the MainSeg it replaced: given up, as a dead holder's.
  void leak_dropped(const std::vector<Dropped>& drop, std::uint64_t meta);

  // Gives this client the dropped blocks and the MainSeg `meta` named,
  // after the publish that replaced them completed.
  void free_dropped(Session& ss, unsigned node, const std::vector<Dropped>& drop,
                    std::uint64_t meta);

  // Each key's newest entry of `all` (the MainSeg's `main_count` entries,
  // then the CurSeg's), tombstones dropped, into *keep, sorted by filter
  // bits; every other entry's block, once, and none that a kept entry
  // names, into *drop. Items are read only where entries' filter bits
  // collide, and headers of dropped items longer than their slot says. The
  // caller holds the segment's lock.
  Status newest_entries(Session& ss, RAddr seg, std::vector<std::uint64_t> all,
                        std::size_t main_count, std::vector<std::uint64_t>* keep,
                        std::vector<Dropped>* drop);

  // The steps of newest_entries.
  // An entry's filter bits: fingerprint, second fingerprint, hash bits.
  static std::uint64_t filter_bits(std::uint64_t s) {
    return (std::uint64_t{slot_fp(s)} << 9) | (std::uint64_t{slot_fp2(s)} << 4) | slot_dbits(s);
  }
  static bool by_filter_bits(std::uint64_t a, std::uint64_t b) {
    return filter_bits(a) < filter_bits(b);
  }
  // Sorts *all (the MainSeg's `main_count` entries, then the CurSeg's) by
  // filter bits, then by word, and drops an entry taken twice.
  static void sort_by_filter_bits(std::vector<std::uint64_t>* all, std::size_t main_count);
  // Of the entries whose filter bits collide (`colliding`, at
  // `colliding_at` in the sorted entries), each key's newest, unless a
  // tombstone, appended to *keep and marked in *kept; their items are read
  // (the caller holds the lock), and every length found goes to *units_of.
  Status newest_of_colliding(Session& ss, RAddr seg, const std::vector<std::uint64_t>& colliding,
                             const std::vector<std::size_t>& colliding_at,
                             std::vector<std::uint64_t>* keep, std::vector<char>* kept,
                             std::unordered_map<std::uint64_t, std::uint64_t>* units_of);
  // The blocks of the entries of `all` not `kept`, each once, and none
  // that a `keep` entry names too, into *drop; the headers of those whose
  // length neither the slot nor `units_of` gives are read.
  Status dropped_blocks(Session& ss, unsigned node, const std::vector<std::uint64_t>& all,
                        const std::vector<char>& kept,
                        const std::unordered_map<std::uint64_t, std::uint64_t>& units_of,
                        const std::vector<std::uint64_t>& keep, std::vector<Dropped>* drop);

  static std::vector<std::byte> main_image(const std::vector<std::uint64_t>& sorted);

  // The entries `keep` of a segment of depth `depth` on `node`, by hash
  // bit `depth`: from the slots' hash bits, or, when they are used up (at
  // depths 4k), from every item's hash, read again (and the slots' hash
  // bits set from it, each half sorted by them).
  Status split_halves(Session& ss, unsigned node, unsigned depth,
                      const std::vector<std::uint64_t>& keep,
                      std::vector<std::uint64_t> (*halves)[2]);

  Status split_locked(Session& ss, const Held& held, std::uint64_t meta, std::uint64_t seq,
                      std::uint64_t pattern, std::uint64_t floor,
                      const std::vector<std::uint64_t>& keep, const std::vector<Dropped>& drop,
                      bool* restorable);

  // ---- lock holders that died or stalled (sephash.h, "Dead lock holders") ----
  // Whether the holder may begin a batch that writes to the segment, the
  // directory or the global depth: within lease/2 of its lock (a waiter
  // takes over only after it has seen the lock for a whole lease).
  bool in_lease(const Held& h) const { return remote_index::within_half_lease(h.since, lease()); }

  Status gave_up(RAddr seg) const;

  // Tests: true when the holder is to stop at `step`, as if it died there.
  static bool stop_at(LockStep step) { return lock_hook() && lock_hook()(step); }
  static Status stopped() { return Status::IOError("sephash: a test hook stopped a lock holder"); }

  // Tests: with a lock hook set, runs `b` now (so that the hook can stop
  // the holder after it, as a holder killed mid-batch would stop), then
  // asks the hook; without one, does nothing (`b` runs with the rest).
  Status hook_break(Session& ss, const Held& held, Batch* b, LockStep step);

  // Called by a loop that waits on segment `seg` with what it last read of
  // it, `now` (meta, seq): once it has seen the same locked (meta, seq) for
  // a lease, it takes the lock over.
  Status watch_lock(Session& ss, RAddr seg, const Snap& now, LockWatch* w);

  // Takes the lock of `seg`, seen as `seen` (locked meta, seq) for a
  // lease, from its holder: CAS seq -> seq + kSeqTakeover (one taker
  // wins), then finishes the holder's publish or undoes its lock. OK also
  // when another client won or the segment moved on (the caller looks
  // again).
  Status take_over(Session& ss, RAddr seg, const Snap& seen);

  // As the lock's holder (`held`), finishes or undoes the merge or split
  // of whoever locked meta `locked` (lock bit set), from the header `hd`
  // read once the lock was taken over. The dead holder's dropped blocks
  // and replaced MainSeg are not freed (they leak); the blocks it took
  // for a publish this undoes leak too.
  Status finish(Session& ss, const Held& held, std::uint64_t locked, const Header& hd);

  // A split's roll-forward: the directory entries of the new half
  // (pattern1, step 2^depth1) that still name a segment shallower than
  // depth1 (the parent, or an ancestor whose own split was cut short) are
  // made to name `child`, each by a CAS; entries naming `child` or a
  // deeper segment (the child may have split since the holder wrote
  // some of them) stay. *done false when the lease ran out first.
  Status fix_directory(Session& ss, const Held& held, RAddr child, std::uint64_t pattern1,
                       unsigned depth1, bool* done);

  // ---- whole-index reads ----
  struct SegmentView {
    Snap snap;  // what the view was checked against
    std::uint64_t pattern = 0;
    std::vector<std::uint64_t> entries;  // live CurSeg slots (sign cleared) and MainSeg slots
    std::vector<std::uint64_t> main;
  };

  // A checked view of one segment's slots.
  Status read_segment(Session& ss, RAddr seg, SegmentView* v);

  // A checked view of one segment and the items its entries name.
  Status read_segment_items(Session& ss, RAddr seg, SegmentView* v, std::vector<Candidate>* items);

  // The distinct segments of the directory, in directory order.
  Status segments(Session& ss, std::vector<RAddr>* out);

  // Every segment of the directory, then those that appear in it while
  // the scan runs (a split that this scan finished for a dead holder, in a
  // takeover, or another client's): a new one is read unless a view read
  // before covers its keys (it was read before the split moved them).
  Status scan(Session& ss, const ForEachFn& fn);

  // One step of Index::scan (sephash.h, "Scan"): reads the segment that
  // covers position `pos` (its CurSeg slots, its MainSeg and their items,
  // all under one snapshot and its checks); of its keys from position
  // `pos` on whose newest entry is not a tombstone, appends to *out the
  // first `need` in position order (remote_index::take_in_order). *end:
  // the position of the first key left, or the end of the segment's
  // range (0 past the last one).
  Status scan_part(Session& ss, std::uint64_t pos, std::size_t need,
                   std::vector<remote_index::ScanPair>* out, std::uint64_t* end);

  template <class Covered>
  Status scan_segment(Session& ss, RAddr seg, const ForEachFn& fn, const Covered& is_covered,
                      std::vector<std::pair<std::uint64_t, unsigned>>* covered, bool* stop) {
    {
      SegmentView v;
      std::vector<Candidate> items;
      if (Status s = read_segment_items(ss, seg, &v, &items); !s.ok()) return s;
      if (is_covered(v.pattern, meta_depth(v.snap.meta))) return Status::OK();
      covered->emplace_back(v.pattern, meta_depth(v.snap.meta));
      // Newest entry per key.
      std::unordered_map<std::string_view, const Candidate*> best;
      for (const Candidate& c : items) {
        auto [it, fresh] = best.try_emplace(c.key(), &c);
        if (!fresh && c.header().version > it->second->header().version) it->second = &c;
      }
      for (const auto& [k, c] : best) {
        if (slot_tomb(c->slot)) continue;
        if (!fn(k, c->value())) {
          *stop = true;
          return Status::OK();
        }
      }
    }
    return Status::OK();
  }

  Status verify(Session& ss);

  Options options_;
  std::vector<std::string> specs_;
  Params params_;
  remote_index::SessionPool<Session> sessions_;
  std::atomic<std::uint64_t> merges_{0}, splits_{0}, split_bytes_{0}, stale_appends_{0},
      takeovers_{0};
  std::atomic<std::uint64_t> blocks_freed_{0}, bytes_freed_{0}, blocks_reused_{0},
      bytes_reused_{0}, bytes_bumped_{0}, bytes_leaked_{0};
};

}  // namespace pmhash::engine::sephash
