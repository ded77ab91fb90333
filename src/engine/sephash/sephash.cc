// engine/sephash/sephash.cc - the sephash engine (sephash.h has the design).
#include "engine/sephash/sephash.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <bitset>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/planted.h"
#include "engine/sephash/layout.h"
#include "remote/client.h"

namespace pmhash::engine::sephash {
namespace {

using remote::Batch;
using remote::Client;
using Clock = std::chrono::steady_clock;

std::function<void()>& append_hook() {
  static std::function<void()> hook;
  return hook;
}
std::function<bool(LockStep)>& lock_hook() {
  static std::function<bool(LockStep)> hook;
  return hook;
}
using BlockHook = std::function<void(BlockUse, unsigned, std::uint64_t, std::uint64_t)>;
BlockHook& block_hook() {
  static BlockHook hook;
  return hook;
}
// Tests: tells the block hook, if any, that a block was taken or freed.
inline void note(BlockUse use, unsigned node, std::uint64_t off, std::uint64_t bytes) {
  if (block_hook()) block_hook()(use, node, off, bytes);
}

// The tag of a stack head (layout.h, FreeTable): the bits above the offset.
inline constexpr std::uint64_t kTagMask = (std::uint64_t{1} << (64 - kTagShift)) - 1;

inline std::uint64_t low_mask(unsigned bits) {
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}
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
  std::uint64_t reserved;
  std::uint64_t bitmap[2][8];
};
static_assert(sizeof(Header) == kHeaderBytes);
static_assert(offsetof(Header, pattern) == kPatternOff && offsetof(Header, seq) == kSeqOff);
static_assert(offsetof(Header, intent_seq) == kIntentOff);

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
void add_intent(remote::Batch& b, unsigned node, std::uint64_t seg_off, const Intent& intent) {
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

bool bitmap_has(const Header& h, bool sign, unsigned bit) {
  return ((h.bitmap[sign ? 1 : 0][bit / 64] >> (bit % 64)) & 1) != 0;
}
// Where, from a CurSeg's start, the bitmap word of sign `sign` that holds
// bit `bit` is.
inline std::uint64_t bitmap_word_off(bool sign, unsigned bit) {
  return kBitmapOff + (sign ? kBitmapBytes : 0) + (bit / 64) * 8;
}

// One key's entry read back: its slot and its item's bytes.
struct Candidate {
  std::uint64_t slot = 0;
  std::vector<std::byte> item;  // header, key, value
  const ItemHeader& header() const { return *reinterpret_cast<const ItemHeader*>(item.data()); }
  std::string_view key() const {
    return {reinterpret_cast<const char*>(item.data()) + sizeof(ItemHeader), header().key_len};
  }
  std::string_view value() const {
    return {reinterpret_cast<const char*>(item.data()) + sizeof(ItemHeader) + header().key_len,
            header().value_len};
  }
};

std::uint64_t item_units(std::uint64_t bytes) { return (bytes + 63) / 64; }
// A MainSeg of `slots` slots takes a power of two of 64-byte units, so that
// the blocks replaced MainSegs leave fit later ones.
std::uint64_t main_units(unsigned slots) { return std::bit_ceil(item_units(main_bytes(slots))); }

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
  void prepare(Session& ss) {
    ss.window = static_cast<unsigned>(ss.rng() % (kCurSlots / kWindowSlots)) * kWindowSlots;
    ss.free.resize(specs_.size());
    ss.on_end = [this](Session& me) { (void)hand_back(me); };
  }

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
  Status get(const Key& key, std::string* value) override {
    return with_session([&](Session& ss) {
      Candidate found;
      bool any = false;
      if (Status s = lookup(ss, key, &found, &any); !s.ok()) return s;
      if (!any || slot_tomb(found.slot)) return Status::NotFound("");
      value->assign(found.value());
      return Status::OK();
    });
  }

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

  Status for_each(const ForEachFn& fn) override {
    return with_session([&](Session& ss) { return scan(ss, fn); });
  }

  std::uint64_t size() const override {
    return remote_index::count_keys(*const_cast<SepHashIndex*>(this));
  }

  Status sync() override { return Status::OK(); }  // every write is durable when it returns

  Status check() override {
    return with_session([&](Session& ss) { return verify(ss); });
  }

  void fill_stats(Stats* st) const override {
    sessions_.fill_stats(st);
    st->merges = merges_.load(std::memory_order_relaxed);
    st->read_retries = stale_appends_.load(std::memory_order_relaxed);
    st->expansions = splits_.load(std::memory_order_relaxed);
    st->bytes_moved = split_bytes_.load(std::memory_order_relaxed);
    st->remote_blocks_freed = blocks_freed_.load(std::memory_order_relaxed);
    st->remote_bytes_freed = bytes_freed_.load(std::memory_order_relaxed);
    st->remote_blocks_reused = blocks_reused_.load(std::memory_order_relaxed);
    st->remote_bytes_reused = bytes_reused_.load(std::memory_order_relaxed);
    st->remote_bytes_bumped = bytes_bumped_.load(std::memory_order_relaxed);
    st->lock_takeovers = takeovers_.load(std::memory_order_relaxed);
    st->remote_bytes_leaked = bytes_leaked_.load(std::memory_order_relaxed);
  }

  // Ends every session, which hands its free blocks to the nodes' stacks
  // (a new client may take them). A node that fails keeps what was pushed
  // before; the rest of its blocks are lost (leaked).
  void close() override { sessions_.clear(); }

  ~SepHashIndex() override { close(); }

  // ---- create and open ----
  // Create (remote_index.h, "Create"): claim the nodes for a new
  // generation, wait out the old one, forget what they held, then the
  // segments, the directory and the root, the magic last, then commit.
  Status format(bool force) {
    unsigned timeout = 0;
    if (Status s = remote_index::effective_timeout(options_, params_.lease_ms, "sephash", &timeout);
        !s.ok()) {
      return s;
    }
    sessions_.set_timeout(timeout);
    std::unique_ptr<Session> ss;
    if (Status s = sessions_.make(&ss); !s.ok()) return s;
    // An index of any engine on the nodes stays unless `force`.
    remote_index::Identity made;
    if (Status s = remote_index::begin_create(*ss, force, params_.lease_ms, sizeof(IndexRoot), &made);
        !s.ok()) {
      return s;
    }
    IndexRoot root{};
    Batch b;

    const unsigned depth = params_.initial_depth;
    const std::uint64_t entries = std::uint64_t{1} << params_.max_depth;
    // Every node's first block is its free table, so it has the same
    // offset on all of them; an empty stack.
    b.clear();
    const std::uint64_t zero_table[kFreeTableBytes / 8] = {};
    for (unsigned n = 0; n < specs_.size(); ++n) {
      std::uint64_t table = 0;
      if (Status s = alloc_direct(*ss, n, kFreeTableBytes, &table); !s.ok()) return s;
      if (n != 0 && table != params_.free_table) {
        return Status::Corruption("memory node " + specs_[n] + ": its first block is at " +
                                  std::to_string(table) + ", node 0's at " +
                                  std::to_string(params_.free_table));
      }
      params_.free_table = table;
      b.write(n, table, zero_table, kFreeTableBytes);
    }
    if (Status s = alloc_direct(*ss, 0, entries * 8, &params_.directory); !s.ok()) return s;
    std::vector<RAddr> segs(std::size_t{1} << depth);
    std::vector<std::vector<std::byte>> images;
    images.reserve(segs.size());
    for (std::uint64_t p = 0; p < segs.size(); ++p) {
      const unsigned node = static_cast<unsigned>(p % specs_.size());
      std::uint64_t off = 0;
      if (Status s = alloc_direct(*ss, node, kCurSegBytes, &off); !s.ok()) return s;
      segs[p] = make_raddr(node, off);
      images.push_back(curseg_image(make_meta(true, depth, 0, 0), p));
      b.write(node, off, images.back().data(), kCurSegBytes);
    }
    std::vector<RAddr> dir(entries);
    for (std::uint64_t i = 0; i < entries; ++i) dir[i] = segs[i & low_mask(depth)];
    b.write(0, params_.directory, dir.data(), static_cast<std::uint32_t>(entries * 8));
    root = IndexRoot{};
    root.layout_version = kLayoutVersion;
    root.nodes = static_cast<std::uint32_t>(specs_.size());
    root.initial_depth = depth;
    root.max_depth = params_.max_depth;
    root.main_max_slots = params_.main_max_slots;
    root.directory = params_.directory;
    root.free_table = params_.free_table;
    root.global_depth = depth;
    root.version = 1;
    b.write(0, kRootOff, &root, sizeof(root));
    if (Status s = exec(*ss, b); !s.ok()) return s;
    // Complete and durable: the engine's index exists, for an attach once
    // the membership commits.
    b.clear();
    b.write(0, kRootOff, kMagic, sizeof(kMagic));
    if (Status s = exec(*ss, b); !s.ok()) return s;
    if (Status s = remote_index::commit_create(*ss, made); !s.ok()) return s;
    return sessions_.arm(made, "sephash");
  }

  // Open: the nodes verified against node 0's membership record before
  // anything else of the index is read; the lease is the one the create
  // stored (Options::sephash_lock_lease_ms is not looked at).
  Status attach() {
    std::unique_ptr<Session> ss;
    if (Status s = sessions_.make(&ss); !s.ok()) return s;
    remote_index::Identity id;
    if (Status s = remote_index::verify_members(*ss, "sephash", &id); !s.ok()) return s;
    if (Status s = sessions_.arm(id, "sephash"); !s.ok()) return s;
    IndexRoot root{};
    Batch b;
    b.read(0, kRootOff, &root, sizeof(root));
    if (Status s = exec(*ss, b); !s.ok()) return s;
    if (Status s = remote_index::check_root(*ss->client, "sephash", root.magic, kMagic,
                                            root.layout_version, kLayoutVersion, root.nodes);
        !s.ok()) {
      return s;
    }
    if (root.max_depth > 20 || root.initial_depth > root.max_depth ||
        root.main_max_slots + kCurSlots > kMaxMainSlots || root.global_depth > root.max_depth ||
        root.free_table % 64 != 0 || root.free_table < remote::kFirstAllocatable) {
      return Status::Corruption("memory node " + specs_[0] + ": sephash root is damaged");
    }
    params_ = Params{root.nodes,     root.initial_depth, root.max_depth, root.main_max_slots,
                     root.directory, root.free_table,    id.lease_ms()};
    return Status::OK();
  }

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

  Status locked_too_long(RAddr seg) const {
    return Status::Busy("sephash: segment at node " + std::to_string(raddr_node(seg)) +
                        " offset " + std::to_string(raddr_off(seg)) + " stayed locked for " +
                        std::to_string(params_.lease_ms + sessions_.timeout_ms()) +
                        " ms (lock lease + remote timeout; taking the lock over failed)");
  }

  std::vector<std::byte> curseg_image(std::uint64_t meta, std::uint64_t pattern) const {
    std::vector<std::byte> img(kCurSegBytes);
    std::memcpy(img.data() + kMetaOff, &meta, 8);
    std::memcpy(img.data() + kPatternOff, &pattern, 8);
    return img;
  }

  // ---- allocation: FAA on the node's bump word (remote_index) ----
  Status alloc_direct(Session& ss, unsigned node, std::uint64_t bytes, std::uint64_t* off) {
    if (Status s = remote_index::alloc_direct(ss, node, bytes, off); !s.ok()) return s;
    bytes_bumped_.fetch_add(round64(bytes), std::memory_order_relaxed);
    return Status::OK();
  }

  // The chunk of `node` as (next, end); (0, 0) before the first.
  static std::pair<std::uint64_t, std::uint64_t> chunk_of(const Session& ss, unsigned node) {
    const auto& per = ss.chunks.per_node;
    return node < per.size() ? per[node] : std::pair<std::uint64_t, std::uint64_t>{0, 0};
  }

  Status alloc(Session& ss, unsigned node, std::uint64_t bytes, std::uint64_t* off) {
    bytes = round64(bytes);
    const std::uint64_t end = chunk_of(ss, node).second;
    if (Status s = ss.chunks.alloc(ss, node, bytes, off); !s.ok()) return s;
    // New space: a block too large for chunks, or a new chunk.
    if (bytes > remote_index::kChunkBytes / 4) {
      bytes_bumped_.fetch_add(bytes, std::memory_order_relaxed);
    } else if (chunk_of(ss, node).second != end) {
      bytes_bumped_.fetch_add(remote_index::kChunkBytes, std::memory_order_relaxed);
    }
    return Status::OK();
  }

  // ---- reuse: this client's free blocks, the nodes' stacks ----
  // A block of `units` 64-byte units on `node`: one this client freed or
  // took from the node's stack, else from its chunk or the bump word. Only
  // when the chunk (or, for a large block, the bump word) would be used
  // does it look at the node's stack first, popping records until one has
  // a block of this length (round trips then: one to find the stack empty,
  // three per record; never per item).
  Status alloc_block(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off) {
    if (Status s = find_block(ss, node, units, off); !s.ok()) return s;
    note(BlockUse::kTaken, node, *off, units * 64);
    return Status::OK();
  }

  Status find_block(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off) {
    if (take_free(ss, node, units, off)) return Status::OK();
    const std::uint64_t bytes = units * 64;
    const auto [next, end] = chunk_of(ss, node);
    if (bytes > remote_index::kChunkBytes / 4 || next + bytes > end) {
      // Records until one has a block of this length, or none is left.
      for (bool got = true; got;) {
        if (Status s = pop_record(ss, node, &got); !s.ok()) return s;
        if (got && take_free(ss, node, units, off)) return Status::OK();
      }
    }
    return alloc(ss, node, bytes, off);
  }

  // A block alloc_block gave that was not used after all (never written,
  // or written but named by no slot): this client's again.
  void unused(Session& ss, unsigned node, std::uint64_t off, std::uint64_t units) {
    note(BlockUse::kFreed, node, off, units * 64);
    ss.free[node][units].push_back(off);
  }

  bool take_free(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off) {
    auto it = ss.free[node].find(units);
    if (it == ss.free[node].end() || it->second.empty()) return false;
    *off = it->second.back();
    it->second.pop_back();
    blocks_reused_.fetch_add(1, std::memory_order_relaxed);
    bytes_reused_.fetch_add(units * 64, std::memory_order_relaxed);
    return true;
  }

  // A block no published state names any more (a merge's or split's lock
  // holder calls this only after its publish completed): this client may
  // write it again.
  void release(Session& ss, unsigned node, std::uint64_t off, std::uint64_t units) {
    note(BlockUse::kFreed, node, off, units * 64);
    ss.free[node][units].push_back(off);
    blocks_freed_.fetch_add(1, std::memory_order_relaxed);
    bytes_freed_.fetch_add(units * 64, std::memory_order_relaxed);
  }

  // ---- the nodes' stacks of free records (layout.h, FreeTable) ----
  // Every change of a head adds 1 to its tag (push, pop, and the settling
  // CAS below), so the head after one change from `seen` is:
  static std::uint64_t next_head(std::uint64_t seen, std::uint64_t off) {
    return free_head((head_tag(seen) + 1) & kTagMask, off);
  }

  // What became of a CAS on a stack head whose batch failed without
  // saying whether it ran (sephash.h, "Reclamation": lost replies).
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
  Landed settle(Session& ss, unsigned node, std::uint64_t seen, std::uint64_t ours) {
    for (unsigned attempt = 0; attempt < kSettleTries; ++attempt) {
      Batch b;
      b.cas(node, params_.free_table, seen, next_head(seen, head_off(seen)));
      if (!exec(ss, b).ok()) continue;
      const std::uint64_t now = b.result(0);
      if (now == seen) return Landed::kNo;
      if (head_tag(now) != head_tag(next_head(seen, 0))) return Landed::kUnknown;
      return now == ours ? Landed::kAsOurs : Landed::kNo;
    }
    return Landed::kUnknown;
  }

  // Bytes given up: never reused by this client, never handed back.
  void leak(std::uint64_t bytes) { bytes_leaked_.fetch_add(bytes, std::memory_order_relaxed); }
  static std::uint64_t entries_bytes(const std::uint64_t* e, std::size_t n) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += entry_units(e[i]) * 64;
    return total;
  }

  // Pops the top record of `node`'s stack into this client's free blocks
  // (the record's own block too); *got false when the stack was empty.
  Status pop_record(Session& ss, unsigned node, bool* got) {
    *got = false;
    const std::uint64_t table = params_.free_table;
    std::uint64_t head = 0;
    Batch b;
    b.read(node, table, &head, 8);
    if (Status s = exec(ss, b); !s.ok()) return s;
    std::vector<std::uint64_t> rec(kFreeRecordBytes / 8);
    for (;;) {
      if (head_off(head) == 0) return Status::OK();
      b.clear();
      b.read(node, head_off(head), rec.data(), static_cast<std::uint32_t>(kFreeRecordBytes));
      if (Status s = exec(ss, b); !s.ok()) return s;
      // The record's bytes count only if the head is still the one read
      // before them: the tag changes with every push and pop.
      const std::uint64_t popped = next_head(head, rec[0]);
      b.clear();
      b.cas(node, table, head, popped);
      if (Status s = exec(ss, b); !s.ok()) {
        // Taken only if it surely ran, which no answer proves: another
        // client popping the same head writes the same word. So nothing
        // is taken; the record stays on the stack (kNo) or, popped by this
        // CAS, is nobody's (leaked, as if this client had died here).
        if (settle(ss, node, head, popped) != Landed::kNo) {
          leak(kFreeRecordBytes +
               (rec[1] <= kFreeRecordEntries ? entries_bytes(rec.data() + 2, rec[1]) : 0));
        }
        return s;
      }
      if (b.result(0) == head) break;
      head = b.result(0);
    }
    const std::uint64_t size = ss.client->node_size(node);
    if (rec[1] > kFreeRecordEntries) {
      return Status::Corruption("sephash: free record at node " + std::to_string(node) +
                                " offset " + std::to_string(head_off(head)) + " counts " +
                                std::to_string(rec[1]) + " blocks");
    }
    for (std::uint64_t i = 0; i < rec[1]; ++i) {
      const std::uint64_t e = rec[2 + i];
      if (entry_off(e) < remote::kFirstAllocatable || entry_units(e) == 0 ||
          entry_off(e) + entry_units(e) * 64 > size) {
        return Status::Corruption("sephash: free record at node " + std::to_string(node) +
                                  " offset " + std::to_string(head_off(head)) +
                                  " names a block outside the node");
      }
      ss.free[node][entry_units(e)].push_back(entry_off(e));
    }
    note(BlockUse::kFreed, node, head_off(head), kFreeRecordBytes);
    ss.free[node][kFreeRecordBytes / 64].push_back(head_off(head));
    *got = true;
    return Status::OK();
  }

  // Pushes every free block of this client, and the rest of its chunks, to
  // the nodes' stacks, in records of up to kFreeRecordEntries blocks.
  Status hand_back(Session& ss) {
    Status first;
    for (unsigned node = 0; node < ss.free.size(); ++node) {
      if (node < ss.chunks.per_node.size()) {
        auto& [next, end] = ss.chunks.per_node[node];
        if (end > next) ss.free[node][(end - next) / 64].push_back(next);
        next = end = 0;
      }
      std::vector<std::uint64_t> entries;
      for (auto& [units, offs] : ss.free[node]) {
        for (std::uint64_t o : offs) entries.push_back(free_entry(units, o));
      }
      ss.free[node].clear();
      if (Status s = push_blocks(ss, node, &entries, true); !s.ok() && first.ok()) first = s;
      // What a failing node did not take is lost with the session.
      leak(entries_bytes(entries.data(), entries.size()));
    }
    return first;
  }

  // A client that frees more than it allocates (it merges more than it
  // writes) gives the surplus of `node` to the node's stack, where clients
  // that allocate more take it before they take new space: one record (2
  // or 3 round trips) when it holds more than kKeepFreeBlocks blocks there.
  static constexpr std::size_t kKeepFreeBlocks = 4 * kFreeRecordEntries;
  void shed_surplus(Session& ss, unsigned node) {
    std::size_t total = 0;
    for (const auto& [units, offs] : ss.free[node]) total += offs.size();
    if (total <= kKeepFreeBlocks) return;
    std::vector<std::uint64_t> entries;
    for (auto& [units, offs] : ss.free[node]) {
      for (std::size_t give = offs.size() / 2; give > 0 && entries.size() < kFreeRecordEntries; --give) {
        entries.push_back(free_entry(units, offs.back()));
        offs.pop_back();
      }
    }
    // The record's block may be new space (4 KiB for up to 510 blocks; the
    // client that pops it reuses it too). What push_blocks leaves in
    // `entries` is still this client's (not pushed, and surely not).
    (void)push_blocks(ss, node, &entries, true);
    for (std::uint64_t e : entries) ss.free[node][entry_units(e)].push_back(entry_off(e));
  }

  // Pushes the blocks `entries` of `node` to its stack, in records whose
  // own blocks come from the entries (one of kFreeRecordBytes, or a piece
  // of a larger one), else (`may_bump`) from the bump word. What stays in
  // *entries is this client's: neither pushed nor given up (a push whose
  // outcome is unknown gives its blocks up, sephash.h "Reclamation").
  Status push_blocks(Session& ss, unsigned node, std::vector<std::uint64_t>* entries,
                     bool may_bump) {
    const std::uint64_t rec_units = kFreeRecordBytes / 64;
    while (!entries->empty()) {
      std::uint64_t rec_off = 0;
      auto fit = std::find_if(entries->begin(), entries->end(),
                              [&](std::uint64_t e) { return entry_units(e) >= rec_units; });
      std::uint64_t fit_entry = 0;
      std::size_t fit_at = 0;
      if (fit != entries->end()) {
        fit_entry = *fit;
        fit_at = static_cast<std::size_t>(fit - entries->begin());
        rec_off = entry_off(*fit);
        if (entry_units(*fit) == rec_units) {
          *fit = entries->back();
          entries->pop_back();
        } else {
          *fit = free_entry(entry_units(*fit) - rec_units, rec_off + kFreeRecordBytes);
        }
      } else if (!may_bump) {
        return Status::OK();
      } else if (Status s = alloc_direct(ss, node, kFreeRecordBytes, &rec_off); !s.ok()) {
        return s;
      }
      note(BlockUse::kTaken, node, rec_off, kFreeRecordBytes);
      const std::size_t n = std::min<std::size_t>(entries->size(), kFreeRecordEntries);
      std::vector<std::uint64_t> rec(kFreeRecordBytes / 8, 0);
      rec[1] = n;
      std::copy(entries->end() - static_cast<std::ptrdiff_t>(n), entries->end(), rec.begin() + 2);
      Unpushed left = Unpushed::kIntact;
      if (Status s = push_record(ss, node, rec_off, &rec, &left); !s.ok()) {
        if (left == Unpushed::kIntact) {
          // Nothing was sent: the record's block is this client's again.
          note(BlockUse::kFreed, node, rec_off, kFreeRecordBytes);
          if (fit_entry == 0) {
            entries->push_back(free_entry(rec_units, rec_off));
          } else if (entry_units(fit_entry) == rec_units) {
            entries->push_back(fit_entry);
          } else {
            (*entries)[fit_at] = fit_entry;  // the piece's rest stood there
          }
          return s;
        }
        // A request that did not answer may still write the record's
        // block: it is given up (a piece's rest stays free).
        leak(kFreeRecordBytes);
        if (left == Unpushed::kUnknown) {
          // The record may be on the stack: its blocks are given up too.
          leak(entries_bytes(rec.data() + 2, n));
          entries->resize(entries->size() - n);
        }
        return s;
      }
      entries->resize(entries->size() - n);
    }
    return Status::OK();
  }

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
                     std::vector<std::uint64_t>* rec, Unpushed* left) {
    *left = Unpushed::kIntact;
    const std::uint64_t table = params_.free_table;
    std::uint64_t head = 0;
    Batch b;
    b.read(node, table, &head, 8);
    if (Status s = exec(ss, b); !s.ok()) return s;
    for (;;) {
      (*rec)[0] = head_off(head);
      const std::uint64_t pushed = next_head(head, rec_off);
      b.clear();
      // The record is complete before the CAS that publishes it (same node,
      // in order).
      b.write(node, rec_off, rec->data(), static_cast<std::uint32_t>(kFreeRecordBytes));
      b.cas(node, table, head, pushed);
      if (Status s = exec(ss, b); !s.ok()) {
        const Landed landed = settle(ss, node, head, pushed);
        // No other change makes `pushed` (the record's block is this
        // client's alone): the push ran, its write before its CAS.
        if (landed == Landed::kAsOurs) return Status::OK();
        *left = landed == Landed::kNo ? Unpushed::kEntries : Unpushed::kUnknown;
        return s;
      }
      if (b.result(1) == head) return Status::OK();
      head = b.result(1);
    }
  }

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
  Status wait_unlocked(Session& ss, RAddr seg, Snap* snap) {
    const auto deadline = lock_deadline();
    LockWatch watch;
    for (;;) {
      Batch b;
      b.read(raddr_node(seg), raddr_off(seg) + kSeqOff, &snap->seq, 8);
      b.read(raddr_node(seg), raddr_off(seg) + kMetaOff, &snap->meta, 8);
      if (Status s = exec(ss, b); !s.ok()) return s;
      if ((snap->meta & kMetaLock) == 0) return Status::OK();
      if (Status s = watch_lock(ss, seg, *snap, &watch); !s.ok()) return s;
      if (Clock::now() > deadline) return locked_too_long(seg);
      std::this_thread::yield();
    }
  }

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
                    bool* retry) {
    const unsigned node = raddr_node(seg);
    *retry = false;
    out->assign(slots.size(), {});
    if (slots.empty()) return Status::OK();
    Snap now;
    Batch b;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const unsigned units = slot_len(slots[i]) == 0 ? kMaxSlotLenUnits : slot_len(slots[i]);
      (*out)[i].slot = slots[i];
      (*out)[i].item.resize(units * 64);
      b.read(node, slot_item(slots[i]), (*out)[i].item.data(), units * 64);
    }
    if (snap != nullptr) add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (snap != nullptr && !unchanged(*snap, now)) {
      *retry = true;
      return Status::OK();
    }
    b.clear();
    for (Candidate& c : *out) {
      const ItemHeader& h = c.header();
      const std::uint64_t total = sizeof(ItemHeader) + std::uint64_t{h.key_len} + h.value_len;
      if (total > sizeof(ItemHeader) + kMaxKeySize + kMaxValueSize) {
        return Status::Corruption("sephash: item at node " + std::to_string(node) + " offset " +
                                  std::to_string(slot_item(c.slot)) + " has a bad length");
      }
      if (total > c.item.size()) {
        const std::size_t had = c.item.size();
        c.item.resize(total);
        b.read(node, slot_item(c.slot) + had, c.item.data() + had,
               static_cast<std::uint32_t>(total - had));
      }
    }
    if (b.size() == 0) return Status::OK();
    if (snap != nullptr) add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (snap != nullptr && !unchanged(*snap, now)) *retry = true;
    return Status::OK();
  }

  // The newest of `items` whose key is `key`: *any false when none is.
  static void newest(const std::vector<Candidate>& items, std::string_view key, Candidate* best,
                     bool* any) {
    for (const Candidate& c : items) {
      if (c.key() != key) continue;
      if (!*any || c.header().version > best->header().version) {
        *best = c;
        *any = true;
      }
    }
  }

  // ---- search ----
  // The newest entry of `key` (*any false when the key has none).
  Status lookup(Session& ss, const Key& key, Candidate* best, bool* any) {
    const std::uint64_t h = key.h1;
    const unsigned fp = hash_fp(h);
    const auto deadline = lock_deadline();
    LockWatch watch;
    for (;;) {
      *any = false;
      const RAddr seg = segment_of(ss, h);
      const unsigned node = raddr_node(seg);
      Session::MainCache& mc = ss.mains[seg];
      Header hd{};
      Snap snap, now;
      const unsigned lo = mc.prefix[fp], hi = mc.prefix[fp + 1];
      std::vector<std::uint64_t> mslots(hi - lo);
      Batch b;
      add_snapshot(b, seg, &snap.seq, &hd);
      if (hi > lo) {
        b.read(node, mc.main_off + kPrefixBytes + lo * 8ull, mslots.data(), (hi - lo) * 8);
      }
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) return s;
      snap.meta = hd.meta;
      ss.bitmaps[seg].take(snap.seq, hd);  // for this session's next append here
      bool go = false;
      if (Status s = check_snapshot(ss, h, seg, hd, snap, now, &mc, deadline, &watch, &go);
          !s.ok()) {
        return s;
      }
      if (!go) continue;
      bool retry = false;
      if (Status s = newest_in_snapshot(ss, key, seg, snap, hd, mslots, nullptr, best, any, &retry);
          !s.ok() || !retry) {
        return s;
      }
      if (Clock::now() > deadline) return locked_too_long(seg);
    }
  }

  // Judges a first round trip's snapshot of segment `seg` (`snap`, with
  // its header `hd`, and the check `now` that ended the batch) for a key of
  // hash `h`: *go when no lock was taken in between, the segment is the
  // key's, and (with `mc`) the MainSeg prefix cache is this snapshot's.
  // Otherwise it waits a little (locked or changed; Busy past the
  // deadline), re-reads the directory or loads the prefix table, and the
  // caller starts over.
  Status check_snapshot(Session& ss, std::uint64_t h, RAddr seg, const Header& hd,
                        const Snap& snap, const Snap& now, Session::MainCache* mc,
                        Clock::time_point deadline, LockWatch* watch, bool* go) {
    *go = false;
    if (!unchanged(snap, now)) {
      // Locked: a holder that keeps it for a lease is taken over.
      if (Status s = watch_lock(ss, seg, (now.meta & kMetaLock) != 0 ? now : snap, watch); !s.ok()) {
        return s;
      }
      if (Clock::now() > deadline) return locked_too_long(seg);
      std::this_thread::yield();
      return Status::OK();
    }
    if ((h & low_mask(meta_depth(hd.meta))) != hd.pattern) return refresh_dir(ss);
    if (mc != nullptr && (meta_main_off(snap.meta) != mc->main_off || snap.seq != mc->seq)) {
      return load_prefix(ss, seg, snap, mc);
    }
    *go = true;
    return Status::OK();
  }

  // The newest entry of `key` in segment `seg`, given a checked snapshot
  // `snap` with its header `hd` and the MainSeg slots of the key's
  // fingerprint (`mslots`): the CurSeg's slots are read only when the
  // bitmap has the key's bit (into `all_slots`, when given, which then
  // holds every slot), then the candidates' items, each round trip checked
  // against `snap`. *retry: a check failed; nothing was decided, the caller
  // starts over.
  Status newest_in_snapshot(Session& ss, const Key& key, RAddr seg, const Snap& snap,
                            const Header& hd, const std::vector<std::uint64_t>& mslots,
                            std::uint64_t* all_slots, Candidate* best, bool* any, bool* retry) {
    const std::uint64_t h = key.h1;
    const unsigned fp = hash_fp(h), fp2 = hash_fp2(h);
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const unsigned dbits = hash_dbits(h, meta_depth(hd.meta));
    auto matches = [&](std::uint64_t s) {
      return slot_fp(s) == fp && slot_fp2(s) == fp2 && slot_dbits(s) == dbits;
    };
    *any = false;
    *retry = false;
    std::vector<std::uint64_t> cands;
    for (std::uint64_t s : mslots) {
      if (matches(s)) cands.push_back(s);
    }
    const bool sign = meta_sign(hd.meta);
    if (bitmap_has(hd, sign, bitmap_bit(fp, fp2))) {
      // The CurSeg may hold the key: its slots, and the check.
      std::uint64_t own[kCurSlots];
      std::uint64_t* slots = all_slots != nullptr ? all_slots : own;
      Snap now;
      Batch b;
      b.read(node, off + kSlotsOff, slots, kCurSlots * 8);
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) return s;
      if (!unchanged(snap, now)) {
        *retry = true;
        return Status::OK();
      }
      for (unsigned i = 0; i < kCurSlots; ++i) {
        const std::uint64_t s = slots[i];
        if (slot_live(s, sign) && matches(s)) cands.push_back(s);
      }
    }
    std::vector<Candidate> items;
    if (Status s = read_items(ss, seg, &snap, cands, &items, retry); !s.ok() || *retry) return s;
    newest(items, key.bytes, best, any);
    return Status::OK();
  }

  // Reads the prefix table of the MainSeg that the checked snapshot `snap`
  // names, checked against it; on a failed check *mc stays unusable (the
  // caller starts over and comes back).
  Status load_prefix(Session& ss, RAddr seg, const Snap& snap, Session::MainCache* mc) {
    const unsigned node = raddr_node(seg);
    mc->seq = ~std::uint64_t{0};
    mc->main_off = meta_main_off(snap.meta);
    if (meta_main_len(snap.meta) == 0) {
      std::fill(mc->prefix.begin(), mc->prefix.end(), 0);
      mc->seq = snap.seq;
      return Status::OK();
    }
    std::vector<std::uint16_t> prefix(257, 0);
    Snap now;
    Batch b;
    b.read(node, mc->main_off, prefix.data(), 257 * 2);
    add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (!unchanged(snap, now)) return Status::OK();
    bool sorted = true;
    for (unsigned f = 0; f < 256; ++f) sorted &= prefix[f] <= prefix[f + 1];
    if (!sorted || prefix[256] != meta_main_len(snap.meta)) {
      return Status::Corruption("sephash: MainSeg at node " + std::to_string(node) + " offset " +
                                std::to_string(mc->main_off) + " does not match its segment's meta");
    }
    mc->prefix = std::move(prefix);
    mc->seq = snap.seq;
    return Status::OK();
  }

  // ---- writes ----
  Status write(const Key& key, std::string_view value, bool tomb, Want want) {
    return with_session([&](Session& ss) -> Status {
      return append(ss, key, value, tomb, want);
    });
  }

  // Appends an entry for `key`. Unless `want` is kAny, first checks that
  // the key is absent (kAbsent) or present (kPresent), from the same round
  // trips: the first one also reads the MainSeg slots of the key's
  // fingerprint, and only a bitmap or fingerprint match costs more.
  Status append(Session& ss, const Key& key, std::string_view value, bool tomb, Want want) {
    const std::uint64_t h = key.h1;
    const unsigned fp = hash_fp(h), fp2 = hash_fp2(h);
    const std::uint64_t bytes = sizeof(ItemHeader) + key.bytes.size() + value.size();
    const std::uint64_t units = item_units(bytes);
    std::vector<std::byte> item(units * 64);
    ItemHeader ih{0, static_cast<std::uint32_t>(key.bytes.size()),
                  static_cast<std::uint32_t>(value.size()), h};
    std::memcpy(item.data() + sizeof(ItemHeader), key.bytes.data(), key.bytes.size());
    if (!value.empty()) {
      std::memcpy(item.data() + sizeof(ItemHeader) + key.bytes.size(), value.data(), value.size());
    }
    unsigned item_node = ~0u;  // where the item's block is, once it has one
    std::uint64_t item_off = 0;
    bool item_written = false;
    bool item_named = false;  // a slot may name the block: it is no longer this client's
    bool item_lost = false;   // a batch that writes it or names it failed: it may land yet
    // However the call ends, the item's block is named (no longer this
    // client's), this client's again (nothing unknown happened to it), or
    // given up (sephash.h, "Reclamation": lost replies).
    const AtScopeEnd settle_item([&] {
      if (item_node == ~0u || item_named) return;
      if (item_lost) {
        leak(units * 64);
      } else {
        unused(ss, item_node, item_off, units);
      }
    });
    const unsigned bit = bitmap_bit(fp, fp2);
    const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
    const auto deadline = lock_deadline();
    LockWatch watch;
    for (;;) {
      const RAddr seg = segment_of(ss, h);
      const unsigned node = raddr_node(seg);
      const std::uint64_t off = raddr_off(seg);
      Header hd{};
      Snap snap, now;
      std::uint64_t slots[kCurSlots];
      const unsigned w = ss.window;
      Session::MainCache& mc = ss.mains[seg];
      const unsigned lo = mc.prefix[fp], hi = mc.prefix[fp + 1];
      std::vector<std::uint64_t> mslots;
      Batch b;
      if (ih.version == 0) b.faa(0, kVersionOff, 1);
      add_snapshot(b, seg, &snap.seq, &hd);
      // The key's bitmap bit, speculatively, from the word this session
      // last saw (sephash.h, "Append"): after the snapshot's READ (same
      // node, in order), so that the snapshot never shows this bit, and
      // before the check, which validates it with the rest. Not while the
      // key's presence is still to be decided with a MainSeg prefix table
      // cached at another seq than the word: if the word is current, the
      // table is not, this pass ends after loading it, and the next
      // pass's snapshot would show the bit (a READ of the slots for
      // nothing, where the bit's own round trip would have cost as much).
      Session::BitmapCache& bc = ss.bitmaps[seg];
      std::size_t spec_op = kNoOp;
      const std::uint64_t spec_word = bc.words[bit / 64];
      const bool spec_sign = bc.sign;
      if (bc.known && (spec_word & mask) == 0 && (want == Want::kAny || mc.seq == bc.seq)) {
        spec_op = b.size();
        b.cas(node, off + bitmap_word_off(spec_sign, bit), spec_word, spec_word | mask);
      }
      if (want != Want::kAny && hi > lo) {
        mslots.resize(hi - lo);
        b.read(node, mc.main_off + kPrefixBytes + lo * 8ull, mslots.data(), (hi - lo) * 8);
      }
      b.read(node, off + kSlotsOff + w * 8ull, slots + w, kWindowSlots * 8);
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) return s;
      if (ih.version == 0) ih.version = b.result(0);
      snap.meta = hd.meta;
      const bool sign = meta_sign(hd.meta);
      // The key's bitmap word in the snapshot's state, as late as this
      // session knows it: the speculative CAS ran after the snapshot, and
      // when it was made on the snapshot's sign its old word is newer (and
      // with the CAS matched, the bit is set, durable once this round trip
      // completed). A CAS on the other sign's bitmap is not looked at: its
      // bit, if set, belongs to no state this append can land in.
      std::uint64_t bitmap_word = hd.bitmap[sign ? 1 : 0][bit / 64];
      if (spec_op != kNoOp && spec_sign == sign) {
        const std::uint64_t old = b.result(spec_op);
        bitmap_word = old == spec_word ? (old | mask) : old;
      }
      bc.take(snap.seq, hd);
      bc.words[bit / 64] = bitmap_word;
      bool go = false;
      if (Status s = check_snapshot(ss, h, seg, hd, snap, now,
                                    want != Want::kAny ? &mc : nullptr, deadline, &watch, &go);
          !s.ok()) {
        return s;
      }
      if (!go) continue;
      const unsigned depth = meta_depth(hd.meta);
      bool all_slots = false;  // slots[] holds every slot, not only the window
      if (want != Want::kAny) {
        Candidate found;
        bool any = false, retry = false;
        // The snapshot's bitmap, read before this pass's speculative CAS:
        // a bit it shows was there before, set for another key of the same
        // bit or by an earlier pass of this append (a false positive: a
        // READ of the slots more, never a wrong answer).
        if (bitmap_has(hd, sign, bit)) all_slots = true;
        if (Status s = newest_in_snapshot(ss, key, seg, snap, hd, mslots,
                                          all_slots ? slots : nullptr, &found, &any, &retry);
            !s.ok()) {
          return s;
        }
        if (retry) {
          if (Clock::now() > deadline) return locked_too_long(seg);
          continue;
        }
        const bool present = any && !slot_tomb(found.slot);
        if (want == Want::kAbsent && present) return Status::AlreadyExists("");
        if (want == Want::kPresent && !present) return Status::NotFound("");
        // The version was taken before the check; a write the check saw
        // may have taken a later one (it ran meanwhile). This append must
        // order after everything it saw, so it takes a new version then.
        if (any && found.header().version >= ih.version) {
          b.clear();
          b.faa(0, kVersionOff, 1);
          if (Status s = exec(ss, b); !s.ok()) return s;
          ih.version = b.result(0);
        }
        // Decided once: a later pass may see this append's own entry.
        want = Want::kAny;
      }
      // A slot is free when it holds this snapshot's free word: the merge
      // that began the snapshot's state wrote it to every slot. An append
      // can thus claim a slot only in the state its snapshot saw.
      const std::uint64_t free_word = free_slot(snap.seq);
      auto is_free = [&](std::uint64_t s) { return s == free_word; };
      std::vector<unsigned> free_slots;
      for (unsigned i = w; i < w + kWindowSlots; ++i) {
        if (is_free(slots[i])) free_slots.push_back(i);
      }
      if (free_slots.empty() && !all_slots) {
        // The window is full: look at every slot before deciding to merge.
        b.clear();
        b.read(node, off + kSlotsOff, slots, sizeof(slots));
        add_check(b, seg, &now);
        if (Status s = exec(ss, b); !s.ok()) return s;
        if (!unchanged(snap, now)) continue;
        all_slots = true;
      }
      if (free_slots.empty()) {  // slots[] holds every slot
        for (unsigned i = 0; i < kCurSlots; ++i) {
          if (is_free(slots[i])) free_slots.push_back(i);
        }
        if (free_slots.empty()) {
          if (Status s = merge(ss, seg, hd.meta); !s.ok()) return s;
          continue;
        }
        ss.window = (free_slots.front() / kWindowSlots) * kWindowSlots;
      }
      if (item_node != node || item_named) {
        // A block no slot names is still this client's to reuse; one a
        // slot may name is never written again (a merge may have freed it).
        if (item_node != ~0u && !item_named) unused(ss, item_node, item_off, units);
        if (Status s = alloc_block(ss, node, units, &item_off); !s.ok()) return s;
        item_node = node;
        item_written = false;
        item_named = false;
      }
      std::memcpy(item.data(), &ih, sizeof(ih));
      const std::uint64_t entry =
          (std::uint64_t{fp} << kFpShift) | (std::uint64_t{fp2} << kFp2Shift) |
          (tomb ? kTombBit : 0) |
          (std::uint64_t{units <= kMaxSlotLenUnits ? units : 0} << kLenShift) |
          (sign ? kSignBit : 0) | (std::uint64_t{hash_dbits(h, depth)} << kDbitsShift) |
          (item_off >> 6);
      if (append_hook()) append_hook()();
      // The bitmap bit before the slot's CAS, so that a slot's entry is
      // never durable without its bit (readers skip a CurSeg whose bitmap
      // lacks the key). When the first round trip's speculative CAS did
      // not set it, it gets a round trip of its own: in one batch with the
      // slot's CAS, a bitmap CAS that failed (another bit of the word set
      // meanwhile) would not stop the slot's CAS, and a node that lost
      // power before the bit followed would keep an entry that scans list
      // and gets miss (until a merge made it visible again).
      bool moved = false;
      while ((bitmap_word & mask) == 0 && !moved) {
        b.clear();
        if (!item_written) b.write(node, item_off, item.data(), static_cast<std::uint32_t>(units * 64));
        const std::size_t bitmap_op = b.size();
        b.cas(node, off + bitmap_word_off(sign, bit), bitmap_word, bitmap_word | mask);
        add_check(b, seg, &now);
        if (Status s = exec(ss, b); !s.ok()) {
          // A write of the item that may still land: the block is given up.
          if (!item_written) item_lost = true;
          return s;
        }
        item_written = true;
        const std::uint64_t old = b.result(bitmap_op);
        bitmap_word = old == bitmap_word ? (old | mask) : old;
        bc.words[bit / 64] = bitmap_word;
        moved = !unchanged(snap, now);
      }
      if (moved) {
        // The segment moved on before any slot named the item: its block
        // is still this client's, and holds the item.
        stale_appends_.fetch_add(1, std::memory_order_relaxed);
        ss.window = (ss.window + kWindowSlots) % kCurSlots;
        continue;
      }
      bool won = false;
      for (unsigned i : free_slots) {
        b.clear();
        // The item is complete before the CAS that names it (same node, in order).
        if (!item_written) b.write(node, item_off, item.data(), static_cast<std::uint32_t>(units * 64));
        const std::size_t slot_op = b.size();
        b.cas(node, off + kSlotsOff + i * 8ull, slots[i], entry);
        add_check(b, seg, &now);
        if (Status s = exec(ss, b); !s.ok()) {
          item_lost = true;
          return s;
        }
        item_written = true;
        won = b.result(slot_op) == slots[i];
        moved = !unchanged(snap, now);
        if (won || moved) break;  // placed, or the segment moved on: start over
      }
      if (moved) stale_appends_.fetch_add(1, std::memory_order_relaxed);
      if (won && moved) {
        // A lock was taken between the snapshot and the check: a merge may
        // have read the slots already (the entry is lost with the sign
        // flip), kept the entry, or dropped it and freed its block, which
        // its client may have written again. Append again, from a fresh
        // copy in a new block; should both entries stand, they carry the
        // same version and the same bytes, and merges keep one.
        item_named = true;
      }
      if (!won || moved) {
        ss.window = (ss.window + kWindowSlots) % kCurSlots;
        continue;
      }
      // The entry stands (its bitmap bit was set before the slot CAS).
      item_named = true;
      return Status::OK();
    }
  }

  // ---- merge and split ----
  // Empties the CurSeg at `seg` (whose meta was `meta`) into a new MainSeg,
  // splitting the segment when that MainSeg would be too large. Returns OK
  // also when another client holds the lock (the caller looks again).
  Status merge(Session& ss, RAddr seg, std::uint64_t meta) {
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const Held held{seg, Clock::now()};  // before the CAS: no later than the lock
    Batch b;
    b.cas(node, off + kMetaOff, meta, meta | kMetaLock);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (b.result(0) != meta) return Status::OK();
    // Locked: no append that re-reads the meta from now on keeps its slot.
    bool restorable = true;
    Status s;
    if (stop_at(LockStep::kLocked)) {
      restorable = false;
      s = stopped();
    } else {
      s = merge_locked(ss, held, meta, &restorable);
    }
    if (!s.ok() && restorable && in_lease(held)) {
      // Leave the segment as it was (unlocked); the entries are all still
      // in the CurSeg and the old MainSeg. A new seq first, so that this
      // lock's (meta, seq) never shows again: a waiter that saw it before
      // must not take a later lock of the same meta for this one.
      b.clear();
      b.faa(node, off + kSeqOff, 1);
      b.write(node, off + kMetaOff, &meta, 8);
      (void)exec(ss, b);
    }
    return s;
  }

  // A block a merge or split drops: its offset on the segment's node and
  // its length in 64-byte units.
  struct Dropped {
    std::uint64_t off;
    std::uint64_t units;
  };

  // *restorable: false once a failure may have left the segment changed
  // (its lock then stays until a waiter takes it over, sephash.h "Dead
  // lock holders"), or the holder stopped past lease/2.
  Status merge_locked(Session& ss, const Held& held, std::uint64_t meta, bool* restorable) {
    const RAddr seg = held.seg;
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const bool sign = meta_sign(meta);
    const unsigned depth = meta_depth(meta);
    const unsigned main_len = meta_main_len(meta);
    std::uint64_t slots[kCurSlots];
    std::uint64_t pattern = 0;
    std::vector<std::uint64_t> main(main_len);
    Batch b;
    // Every batch that writes to the segment, the directory or the global
    // depth begins within lease/2 of the lock (sephash.h, "Dead lock holders").
    if (!in_lease(held)) return gave_up(seg);
    // The seq first, before anything is read: every reader whose snapshot
    // is older than this lock now fails its check (sephash.h, "Reclamation").
    const std::size_t seq_op = b.size();
    b.faa(node, off + kSeqOff, 1);
    b.read(node, off + kSlotsOff, slots, sizeof(slots));
    b.read(node, off + kPatternOff, &pattern, 8);
    if (main_len != 0) {
      b.read(node, meta_main_off(meta) + kPrefixBytes, main.data(), main_len * 8);
    }
    if (Status s = exec(ss, b); !s.ok()) return s;
    const std::uint64_t seq = b.result(seq_op) + 1;  // this lock's, and the next state's
    if (stop_at(LockStep::kRead)) {
      *restorable = false;
      return stopped();
    }
    std::vector<std::uint64_t> all = std::move(main);
    all.reserve(all.size() + kCurSlots);
    for (std::uint64_t s : slots) {
      if (slot_live(s, sign)) all.push_back(slot_entry(s));
    }
    std::vector<std::uint64_t> keep;
    std::vector<Dropped> drop;
    if (Status s = newest_entries(ss, seg, std::move(all), main_len, &keep, &drop); !s.ok()) {
      return s;
    }
    merges_.fetch_add(1, std::memory_order_relaxed);
    if (keep.size() > params_.main_max_slots && depth < params_.max_depth) {
      return split_locked(ss, held, meta, seq, pattern, keep, drop, restorable);
    }
    if (keep.size() > kMaxMainSlots - kCurSlots) {
      return Status::NoSpace("sephash: a segment is full at the maximum depth " +
                             std::to_string(params_.max_depth) +
                             " (create the index with a larger sephash_max_depth)");
    }
    std::uint64_t main_off = 0;
    const std::uint64_t units = main_units(static_cast<unsigned>(keep.size()));
    std::vector<std::byte> image;
    if (!keep.empty()) {
      image = main_image(keep);
      if (Status s = alloc_block(ss, node, units, &main_off); !s.ok()) return s;
    }
    if (stop_at(LockStep::kMergePublish)) {
      *restorable = false;
      return stopped();
    }
    if (!in_lease(held)) {
      if (!keep.empty()) unused(ss, node, main_off, units);  // never written: still ours
      return gave_up(seg);
    }
    const std::uint64_t meta_new =
        make_meta(!sign, depth, static_cast<unsigned>(keep.size()), main_off);
    const Intent intent{seq, meta, meta_new, 0};
    std::uint64_t cleared[kCurSlots];
    std::fill(std::begin(cleared), std::end(cleared), free_slot(seq));
    const std::uint64_t zero[8] = {};
    b.clear();
    // (Tests: a planted bug publishes the meta first, ahead of what it names.)
    const bool meta_first = planted::active(planted::kSephashMetaBeforeMainSegDurable);
    if (meta_first) b.write(node, off + kMetaOff, &meta_new, 8);
    if (!image.empty()) b.write(node, main_off, image.data(), static_cast<std::uint32_t>(image.size()));
    // The intent after the image and before anything destructive (same
    // node, in order): who finds it may finish this publish.
    add_intent(b, node, off, intent);
    *restorable = false;  // from here on the slots may be clear: a taker finishes the publish
    // (Tests: with a lock hook the publish runs as three batches, so that
    // a holder can stop between them as one killed mid-batch would.)
    if (Status s = hook_break(ss, held, &b, LockStep::kMergeIntent); !s.ok()) return s;
    b.write(node, off + kBitmapOff + (!sign ? kBitmapBytes : 0), zero, kBitmapBytes);
    // Every slot gets the next state's free word before the meta that
    // starts that state (sephash.h, "Reclamation": why no stale append can
    // land in a later state).
    b.write(node, off + kSlotsOff, cleared, kCurSlots * 8);
    if (Status s = hook_break(ss, held, &b, LockStep::kMergeSlots); !s.ok()) return s;
    if (!meta_first) b.write(node, off + kMetaOff, &meta_new, 8);
    if (Status s = exec(ss, b); !s.ok() && !published(ss, seg, meta_new, seq)) {
      leak_dropped(drop, meta);
      return s;
    }
    // Published: what the merge dropped is named by no state a reader can
    // still validate.
    free_dropped(ss, node, drop, meta);
    ss.bitmaps[seg].published(!sign, seq);
    return Status::OK();
  }

  // After a publish batch of the lock of seq `seq` failed without saying
  // whether it ran: whether the segment shows it, the meta it wrote last
  // and seq unchanged (sephash.h, "Reclamation": lost replies). Only this
  // publish leaves that pair: a taker's roll-forward writes the same meta
  // after raising seq by kSeqTakeover, and every later lock raises seq.
  bool published(Session& ss, RAddr seg, std::uint64_t meta_new, std::uint64_t seq) {
    Snap now;
    Batch b;
    add_check(b, seg, &now);
    return exec(ss, b).ok() && now.meta == meta_new && now.seq == seq;
  }

  // What a merge or split whose publish is not known to have run
  // dropped, and the MainSeg it replaced: given up, as a dead holder's.
  void leak_dropped(const std::vector<Dropped>& drop, std::uint64_t meta) {
    std::uint64_t bytes = 0;
    for (const Dropped& d : drop) bytes += d.units * 64;
    if (meta_main_len(meta) != 0) bytes += main_units(meta_main_len(meta)) * 64;
    leak(bytes);
  }

  // Gives this client the dropped blocks and the MainSeg `meta` named,
  // after the publish that replaced them completed.
  void free_dropped(Session& ss, unsigned node, const std::vector<Dropped>& drop,
                    std::uint64_t meta) {
    for (const Dropped& d : drop) release(ss, node, d.off, d.units);
    if (meta_main_len(meta) != 0) {
      release(ss, node, meta_main_off(meta), main_units(meta_main_len(meta)));
    }
    shed_surplus(ss, node);
  }

  // Each key's newest entry of `all` (the MainSeg's `main_count` entries,
  // then the CurSeg's), tombstones dropped, into *keep, sorted by filter
  // bits; every other entry's block, once, and none that a kept entry
  // names, into *drop. Items are read only where entries' filter bits
  // collide, and headers of dropped items longer than their slot says. The
  // caller holds the segment's lock.
  Status newest_entries(Session& ss, RAddr seg, std::vector<std::uint64_t> all,
                        std::size_t main_count, std::vector<std::uint64_t>* keep,
                        std::vector<Dropped>* drop) {
    const unsigned node = raddr_node(seg);
    // Filter bits: fingerprint, second fingerprint, hash bits.
    auto key_bits = [](std::uint64_t s) {
      return (std::uint64_t{slot_fp(s)} << 9) | (std::uint64_t{slot_fp2(s)} << 4) | slot_dbits(s);
    };
    auto by_bits = [&](std::uint64_t a, std::uint64_t b) { return key_bits(a) < key_bits(b); };
    // By filter bits, then by word. A MainSeg is written in filter-bit order
    // (keep below), so only the CurSeg's entries need sorting, and one
    // merge orders the whole; a MainSeg a split at a depth 4k re-read has
    // new hash bits and may not be in that order, and is sorted whole.
    const auto mid = all.begin() + static_cast<std::ptrdiff_t>(main_count);
    if (std::is_sorted(all.begin(), mid, by_bits)) {
      std::sort(mid, all.end(), by_bits);
      std::inplace_merge(all.begin(), mid, all.end(), by_bits);
    } else {
      std::sort(all.begin(), all.end(), by_bits);
    }
    for (std::size_t i = 0; i < all.size();) {
      std::size_t j = i + 1;
      while (j < all.size() && key_bits(all[j]) == key_bits(all[i])) ++j;
      if (j - i > 1) std::sort(all.begin() + i, all.begin() + j);
      i = j;
    }
    all.erase(std::unique(all.begin(), all.end()), all.end());  // one entry taken twice
    std::vector<char> kept(all.size(), 0);
    std::vector<std::uint64_t> colliding;
    std::vector<std::size_t> colliding_at;  // each colliding entry's index in `all`
    for (std::size_t i = 0; i < all.size();) {
      std::size_t j = i + 1;
      while (j < all.size() && key_bits(all[j]) == key_bits(all[i])) ++j;
      if (j - i == 1) {
        if (!slot_tomb(all[i])) {
          keep->push_back(all[i]);
          kept[i] = 1;
        }
      } else {
        for (std::size_t k = i; k < j; ++k) {
          colliding.push_back(all[k]);
          colliding_at.push_back(k);
        }
      }
      i = j;
    }
    std::unordered_map<std::uint64_t, std::uint64_t> units_of;  // block -> units, from items read
    const std::size_t singles = keep->size();
    if (!colliding.empty()) {
      std::vector<Candidate> items;
      bool retry = false;
      if (Status s = read_items(ss, seg, nullptr, colliding, &items, &retry); !s.ok()) return s;
      std::vector<bool> taken(items.size(), false);
      for (std::size_t i = 0; i < items.size(); ++i) {
        const ItemHeader& h = items[i].header();
        units_of[slot_item(items[i].slot)] = item_units(sizeof(ItemHeader) + h.key_len + h.value_len);
        if (taken[i]) continue;
        std::size_t best = i;
        for (std::size_t j = i; j < items.size(); ++j) {
          if (taken[j] || key_bits(items[j].slot) != key_bits(items[i].slot) ||
              items[j].key() != items[i].key()) {
            continue;
          }
          taken[j] = true;
          // Equal versions: the same write twice (an append made again
          // after a merge moved under it), in two blocks; keep the first.
          if (items[j].header().version > items[best].header().version) best = j;
        }
        if (!slot_tomb(items[best].slot)) {
          keep->push_back(items[best].slot);
          kept[colliding_at[best]] = 1;
        }
      }
    }
    // Both parts are in filter-bit order (the colliding entries' items are
    // in `colliding`'s order).
    std::inplace_merge(keep->begin(), keep->begin() + static_cast<std::ptrdiff_t>(singles),
                       keep->end(), by_bits);
    // The blocks of the entries not kept, each once, and none that a kept
    // entry names too. They are few (about a CurSeg's worth) against a
    // MainSeg's thousands of kept entries, so they are sorted and each kept
    // entry is looked up among them.
    std::vector<Dropped> gone;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (kept[i]) continue;
      const std::uint64_t blk = slot_item(all[i]);
      std::uint64_t units = slot_len(all[i]);
      if (units == 0) {
        auto it = units_of.find(blk);
        if (it != units_of.end()) units = it->second;
      }
      gone.push_back({blk, units});
    }
    std::sort(gone.begin(), gone.end(), [](const Dropped& a, const Dropped& b) {
      return a.off != b.off ? a.off < b.off : a.units > b.units;  // a known length first
    });
    gone.erase(std::unique(gone.begin(), gone.end(),
                           [](const Dropped& a, const Dropped& b) { return a.off == b.off; }),
               gone.end());
    std::vector<char> named(gone.size(), 0);
    if (!gone.empty()) {
      // A filter of the dropped blocks first: most kept entries miss it.
      std::bitset<4096> maybe;
      auto bit = [](std::uint64_t off) { return ((off >> 6) * 0x9E3779B97F4A7C15ull) >> 52; };
      for (const Dropped& d : gone) maybe.set(bit(d.off));
      for (std::uint64_t k : *keep) {
        if (!maybe.test(bit(slot_item(k)))) continue;
        auto it = std::lower_bound(gone.begin(), gone.end(), slot_item(k),
                                   [](const Dropped& d, std::uint64_t off) { return d.off < off; });
        if (it != gone.end() && it->off == slot_item(k)) named[it - gone.begin()] = 1;
      }
    }
    std::vector<std::size_t> unknown;  // dropped blocks whose length the slot does not give
    for (std::size_t i = 0; i < gone.size(); ++i) {
      if (named[i]) continue;
      if (gone[i].units == 0) unknown.push_back(drop->size());
      drop->push_back(gone[i]);
    }
    if (!unknown.empty()) {
      std::vector<ItemHeader> hs(unknown.size());
      Batch b;
      for (std::size_t i = 0; i < unknown.size(); ++i) {
        b.read(node, (*drop)[unknown[i]].off, &hs[i], sizeof(ItemHeader));
      }
      if (Status s = exec(ss, b); !s.ok()) return s;
      for (std::size_t i = 0; i < unknown.size(); ++i) {
        (*drop)[unknown[i]].units =
            item_units(sizeof(ItemHeader) + std::uint64_t{hs[i].key_len} + hs[i].value_len);
      }
    }
    return Status::OK();
  }

  static std::vector<std::byte> main_image(const std::vector<std::uint64_t>& sorted) {
    std::vector<std::byte> img(main_bytes(static_cast<unsigned>(sorted.size())));
    std::uint16_t prefix[257] = {};
    for (std::uint64_t s : sorted) ++prefix[slot_fp(s) + 1];
    for (unsigned f = 1; f <= 256; ++f) prefix[f] = static_cast<std::uint16_t>(prefix[f] + prefix[f - 1]);
    std::memcpy(img.data(), prefix, sizeof(prefix));
    std::memcpy(img.data() + kPrefixBytes, sorted.data(), sorted.size() * 8);
    return img;
  }

  Status split_locked(Session& ss, const Held& held, std::uint64_t meta, std::uint64_t seq,
                      std::uint64_t pattern,
                      const std::vector<std::uint64_t>& keep, const std::vector<Dropped>& drop,
                      bool* restorable) {
    const RAddr seg = held.seg;
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const bool sign = meta_sign(meta);
    const unsigned depth = meta_depth(meta);
    const unsigned depth1 = depth + 1;
    std::vector<std::uint64_t> half[2];
    if (dbits_base(depth1) == dbits_base(depth)) {
      for (std::uint64_t s : keep) half[(slot_dbits(s) >> (depth - dbits_base(depth))) & 1].push_back(s);
    } else {
      // The slots' four hash bits are used up: re-read every item's hash.
      std::vector<ItemHeader> hs(keep.size());
      Batch b;
      for (std::size_t i = 0; i < keep.size(); ++i) {
        b.read(node, slot_item(keep[i]), &hs[i], sizeof(ItemHeader));
      }
      if (Status s = exec(ss, b); !s.ok()) return s;
      for (std::size_t i = 0; i < keep.size(); ++i) {
        const std::uint64_t e = (keep[i] & ~(std::uint64_t{15} << kDbitsShift)) |
                                (std::uint64_t{hash_dbits(hs[i].hash, depth1)} << kDbitsShift);
        half[(hs[i].hash >> depth) & 1].push_back(e);
      }
      for (auto& hv : half) {
        std::sort(hv.begin(), hv.end(), [](std::uint64_t a, std::uint64_t b) {
          return (a >> kDbitsShift) < (b >> kDbitsShift);
        });
      }
    }
    const std::uint64_t pattern1 = pattern | (std::uint64_t{1} << depth);
    const unsigned node1 = node;  // where the items the new half names are
    std::uint64_t main0 = 0, main1 = 0, cur1 = 0;
    std::vector<std::byte> img0, img1;
    // Blocks taken and not written yet are still this client's.
    auto unwritten = [&] {
      for (unsigned i = 0; i < 2; ++i) {
        if (half[i].empty() || (i ? main1 : main0) == 0) continue;
        unused(ss, node, i ? main1 : main0, main_units(static_cast<unsigned>(half[i].size())));
      }
      if (cur1 != 0) unused(ss, node1, cur1, kCurSegBytes / 64);
    };
    if (!half[0].empty()) {
      img0 = main_image(half[0]);
      if (Status s = alloc_block(ss, node, main_units(static_cast<unsigned>(half[0].size())), &main0);
          !s.ok()) {
        return s;
      }
    }
    if (!half[1].empty()) {
      img1 = main_image(half[1]);
      if (Status s = alloc_block(ss, node1, main_units(static_cast<unsigned>(half[1].size())), &main1);
          !s.ok()) {
        unwritten();
        return s;
      }
    }
    if (Status s = alloc_block(ss, node1, kCurSegBytes / 64, &cur1); !s.ok()) {
      unwritten();
      return s;
    }
    // (1) The new segment, complete, and both MainSegs, then the intent;
    // (2) the directory entries of the new half; (3) the global depth;
    // (4) this segment's bitmap, slots and meta, which unlocks it. Each
    // begins within lease/2 of the lock (sephash.h, "Dead lock holders").
    const std::vector<std::byte> cur_img = curseg_image(
        make_meta(true, depth1, static_cast<unsigned>(half[1].size()), main1), pattern1);
    const RAddr seg1 = make_raddr(node1, cur1);
    const std::uint64_t meta0 =
        make_meta(!sign, depth1, static_cast<unsigned>(half[0].size()), main0);
    const Intent intent{seq, meta, meta0, seg1};
    if (stop_at(LockStep::kSplitFirst)) {
      *restorable = false;
      return stopped();
    }
    if (!in_lease(held)) {
      unwritten();  // nothing written
      return gave_up(seg);
    }
    Batch b;
    if (!img0.empty()) b.write(node, main0, img0.data(), static_cast<std::uint32_t>(img0.size()));
    if (!img1.empty()) b.write(node1, main1, img1.data(), static_cast<std::uint32_t>(img1.size()));
    b.write(node1, cur1, cur_img.data(), kCurSegBytes);
    // The intent after the images (node1 is this node: in order).
    add_intent(b, node, off, intent);
    *restorable = false;  // the intent may stand: a taker finishes the split
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (stop_at(LockStep::kSplitIntent)) return stopped();
    if (!in_lease(held)) return gave_up(seg);
    b.clear();
    std::uint64_t global = 0;
    const std::uint64_t step = std::uint64_t{1} << depth1;
    for (std::uint64_t i = pattern1; i < (std::uint64_t{1} << params_.max_depth); i += step) {
      b.write(0, params_.directory + i * 8, &seg1, 8);
    }
    b.read(0, kGlobalDepthOff, &global, 8);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (stop_at(LockStep::kSplitDirectory)) return stopped();
    if (!in_lease(held)) return gave_up(seg);
    if (Status s = remote_index::raise_global_depth(ss, kGlobalDepthOff, global, depth1);
        !s.ok()) {
      return s;
    }
    if (stop_at(LockStep::kSplitDepth)) return stopped();
    if (!in_lease(held)) return gave_up(seg);
    std::uint64_t cleared[kCurSlots];
    std::fill(std::begin(cleared), std::end(cleared), free_slot(seq));
    const std::uint64_t zero[8] = {};
    b.clear();
    b.write(node, off + kBitmapOff + (!sign ? kBitmapBytes : 0), zero, kBitmapBytes);
    b.write(node, off + kSlotsOff, cleared, kCurSlots * 8);
    if (Status s = hook_break(ss, held, &b, LockStep::kSplitSlots); !s.ok()) return s;
    b.write(node, off + kMetaOff, &meta0, 8);
    if (Status s = exec(ss, b); !s.ok() && !published(ss, seg, meta0, seq)) {
      leak_dropped(drop, meta);
      return s;
    }
    free_dropped(ss, node, drop, meta);
    ss.bitmaps[seg].published(!sign, seq);
    ss.bitmaps[seg1].published(true, 0);  // a new CurSeg's seq is 0
    splits_.fetch_add(1, std::memory_order_relaxed);
    split_bytes_.fetch_add(img0.size() + img1.size() + kCurSegBytes, std::memory_order_relaxed);
    return refresh_dir(ss);
  }

  // ---- lock holders that died or stalled (sephash.h, "Dead lock holders") ----
  // Whether the holder may begin a batch that writes to the segment, the
  // directory or the global depth: within lease/2 of its lock (a waiter
  // takes over only after it has seen the lock for a whole lease).
  bool in_lease(const Held& h) const { return Clock::now() - h.since < lease() / 2; }

  Status gave_up(RAddr seg) const {
    return Status::Busy("sephash: a merge of the segment at node " +
                        std::to_string(raddr_node(seg)) + " offset " +
                        std::to_string(raddr_off(seg)) + " took more than half its lock lease (" +
                        std::to_string(params_.lease_ms) +
                        " ms); it stopped, and another client will finish or undo it");
  }

  // Tests: true when the holder is to stop at `step`, as if it died there.
  static bool stop_at(LockStep step) { return lock_hook() && lock_hook()(step); }
  static Status stopped() { return Status::IOError("sephash: a test hook stopped a lock holder"); }

  // Tests: with a lock hook set, runs `b` now (so that the hook can stop
  // the holder after it, as a holder killed mid-batch would stop), then
  // asks the hook; without one, does nothing (`b` runs with the rest).
  Status hook_break(Session& ss, const Held& held, Batch* b, LockStep step) {
    if (!lock_hook()) return Status::OK();
    if (Status s = exec(ss, *b); !s.ok()) return s;
    b->clear();
    if (stop_at(step)) return stopped();
    if (!in_lease(held)) return gave_up(held.seg);
    return Status::OK();
  }

  // Called by a loop that waits on segment `seg` with what it last read of
  // it, `now` (meta, seq): once it has seen the same locked (meta, seq) for
  // a lease, it takes the lock over.
  Status watch_lock(Session& ss, RAddr seg, const Snap& now, LockWatch* w) {
    if ((now.meta & kMetaLock) == 0) return Status::OK();
    const auto t = Clock::now();
    if (!w->any || w->seg != seg || w->seen.meta != now.meta || w->seen.seq != now.seq) {
      *w = LockWatch{true, seg, now, t};
      return Status::OK();
    }
    if (t - w->since < lease()) return Status::OK();
    w->any = false;
    return take_over(ss, seg, now);
  }

  // Takes the lock of `seg`, seen as `seen` (locked meta, seq) for a
  // lease, from its holder: CAS seq -> seq + kSeqTakeover (one taker
  // wins), then finishes the holder's publish or undoes its lock. OK also
  // when another client won or the segment moved on (the caller looks
  // again).
  Status take_over(Session& ss, RAddr seg, const Snap& seen) {
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const Held held{seg, Clock::now()};
    Header hd{};
    Batch b;
    b.cas(node, off + kSeqOff, seen.seq, seen.seq + kSeqTakeover);
    // After the CAS (same node, in order): the meta, seq and intent it took.
    b.read(node, off, &hd, kHeaderBytes);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (b.result(0) != seen.seq) return Status::OK();  // another taker, or a new lock
    // Unlocked (published) just before the CAS: the raised seq only makes
    // readers and appenders of this state look again (sephash.h).
    if (hd.meta != seen.meta) return Status::OK();
    takeovers_.fetch_add(1, std::memory_order_relaxed);
    return finish(ss, held, seen.meta, hd);
  }

  // As the lock's holder (`held`), finishes or undoes the merge or split
  // of whoever locked meta `locked` (lock bit set), from the header `hd`
  // read once the lock was taken over. The dead holder's dropped blocks
  // and replaced MainSeg are not freed (they leak); the blocks it took
  // for a publish this undoes leak too.
  Status finish(Session& ss, const Held& held, std::uint64_t locked, const Header& hd) {
    const RAddr seg = held.seg;
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const std::uint64_t old_meta = locked & ~kMetaLock;
    Batch b;
    if (hd.intent_old != old_meta || !intent_of_lock(hd.intent_seq, hd.seq)) {
      // No intent of this lock: nothing destructive ran (the slots and the
      // old MainSeg are intact). Back: a new seq (this lock's (meta, seq)
      // must not show again), then the old meta, unlocked.
      if (!in_lease(held)) return Status::OK();
      b.faa(node, off + kSeqOff, 1);
      b.write(node, off + kMetaOff, &old_meta, 8);
      return exec(ss, b);
    }
    // Forward: the intent is this lock's, so the images it names are
    // complete; every write below is one the holder made or would have
    // made, with the same bytes (idempotent).
    const std::uint64_t new_meta = hd.intent_new;
    if (hd.intent_seg != 0) {
      const unsigned depth1 = meta_depth(old_meta) + 1;
      const std::uint64_t pattern1 = hd.pattern | (std::uint64_t{1} << meta_depth(old_meta));
      bool done = false;
      if (Status s = fix_directory(ss, held, hd.intent_seg, pattern1, depth1, &done); !s.ok() || !done) {
        return s;
      }
      if (!in_lease(held)) return Status::OK();
      if (Status s = remote_index::raise_global_depth(ss, kGlobalDepthOff, 0, depth1);
          !s.ok()) {
        return s;
      }
    }
    // The free word of seq now, whose low 22 bits are the intent's: the
    // same words the holder wrote, or would have.
    std::uint64_t cleared[kCurSlots];
    std::fill(std::begin(cleared), std::end(cleared), free_slot(hd.seq));
    const std::uint64_t zero[8] = {};
    if (!in_lease(held)) return Status::OK();
    b.write(node, off + kBitmapOff + (meta_sign(new_meta) ? kBitmapBytes : 0), zero, kBitmapBytes);
    b.write(node, off + kSlotsOff, cleared, kCurSlots * 8);
    b.write(node, off + kMetaOff, &new_meta, 8);
    if (Status s = exec(ss, b); !s.ok()) return s;
    return hd.intent_seg != 0 ? refresh_dir(ss) : Status::OK();
  }

  // A split's roll-forward: the directory entries of the new half
  // (pattern1, step 2^depth1) that still name a segment shallower than
  // depth1 (the parent, or an ancestor whose own split was cut short) are
  // made to name `child`, each by a CAS; entries naming `child` or a
  // deeper segment (the child may have split since the holder wrote
  // some of them) stay. *done false when the lease ran out first.
  Status fix_directory(Session& ss, const Held& held, RAddr child, std::uint64_t pattern1,
                       unsigned depth1, bool* done) {
    *done = false;
    std::vector<RAddr> dir(std::size_t{1} << params_.max_depth);
    Batch b;
    b.read(0, params_.directory, dir.data(), static_cast<std::uint32_t>(dir.size() * 8));
    if (Status s = exec(ss, b); !s.ok()) return s;
    const std::uint64_t step = std::uint64_t{1} << depth1;
    std::unordered_map<RAddr, std::uint64_t> metas;  // segments the entries name
    for (std::uint64_t i = pattern1; i < dir.size(); i += step) {
      if (dir[i] != child) metas.emplace(dir[i], 0);
    }
    b.clear();
    for (auto& [a, m] : metas) b.read(raddr_node(a), raddr_off(a) + kMetaOff, &m, 8);
    if (b.size() != 0) {
      if (Status s = exec(ss, b); !s.ok()) return s;
    }
    b.clear();
    for (std::uint64_t i = pattern1; i < dir.size(); i += step) {
      if (dir[i] != child && meta_depth(metas[dir[i]]) < depth1) {
        b.cas(0, params_.directory + i * 8, dir[i], child);
      }
    }
    if (!in_lease(held)) return Status::OK();
    if (b.size() != 0) {
      if (Status s = exec(ss, b); !s.ok()) return s;
    }
    *done = true;
    return Status::OK();
  }

  // ---- whole-index reads ----
  struct SegmentView {
    Snap snap;  // what the view was checked against
    std::uint64_t pattern = 0;
    std::vector<std::uint64_t> entries;  // live CurSeg slots (sign cleared) and MainSeg slots
    std::vector<std::uint64_t> main;
  };

  // A checked view of one segment's slots.
  Status read_segment(Session& ss, RAddr seg, SegmentView* v) {
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    const auto deadline = lock_deadline();
    for (;;) {
      Snap snap, now;
      if (Status s = wait_unlocked(ss, seg, &snap); !s.ok()) return s;
      Header hd{};
      std::uint64_t slots[kCurSlots];
      v->main.assign(meta_main_len(snap.meta), 0);
      Batch b;
      b.read(node, off, &hd, kHeaderBytes);
      b.read(node, off + kSlotsOff, slots, sizeof(slots));
      if (!v->main.empty()) {
        b.read(node, meta_main_off(snap.meta) + kPrefixBytes, v->main.data(),
               static_cast<std::uint32_t>(v->main.size() * 8));
      }
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) return s;
      if (hd.meta != snap.meta || !unchanged(snap, now)) {
        if (Clock::now() > deadline) return locked_too_long(seg);
        continue;
      }
      v->snap = snap;
      v->pattern = hd.pattern;
      v->entries = v->main;
      for (std::uint64_t s : slots) {
        if (slot_live(s, meta_sign(snap.meta))) v->entries.push_back(slot_entry(s));
      }
      return Status::OK();
    }
  }

  // A checked view of one segment and the items its entries name.
  Status read_segment_items(Session& ss, RAddr seg, SegmentView* v, std::vector<Candidate>* items) {
    const auto deadline = lock_deadline();
    for (;;) {
      if (Status s = read_segment(ss, seg, v); !s.ok()) return s;
      bool retry = false;
      if (Status s = read_items(ss, seg, &v->snap, v->entries, items, &retry); !s.ok() || !retry) {
        return s;
      }
      if (Clock::now() > deadline) return locked_too_long(seg);
    }
  }

  // The distinct segments of the directory, in directory order.
  Status segments(Session& ss, std::vector<RAddr>* out) {
    if (Status s = refresh_dir(ss); !s.ok()) return s;
    std::unordered_set<RAddr> seen;
    for (RAddr a : ss.dir) {
      if (seen.insert(a).second) out->push_back(a);
    }
    return Status::OK();
  }

  // Every segment of the directory, then those that appear in it while
  // the scan runs (a split that this scan finished for a dead holder, in a
  // takeover, or another client's): a new one is read unless a view read
  // before covers its keys (it was read before the split moved them).
  Status scan(Session& ss, const ForEachFn& fn) {
    std::vector<RAddr> segs;
    if (Status s = segments(ss, &segs); !s.ok()) return s;
    std::unordered_set<RAddr> visited;
    std::vector<std::pair<std::uint64_t, unsigned>> covered;  // (pattern, depth) of views read
    auto is_covered = [&](std::uint64_t pattern, unsigned depth) {
      for (const auto& [p, d] : covered) {
        if (d <= depth && (pattern & low_mask(d)) == p) return true;
      }
      return false;
    };
    for (bool fresh = true; fresh;) {
      fresh = false;
      for (RAddr seg : segs) {
        if (!visited.insert(seg).second) continue;
        fresh = true;
        bool stop = false;
        if (Status s = scan_segment(ss, seg, fn, is_covered, &covered, &stop); !s.ok() || stop) {
          return s;
        }
      }
      segs.clear();
      if (Status s = segments(ss, &segs); !s.ok()) return s;
    }
    return Status::OK();
  }

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

  Status verify(Session& ss) {
    std::vector<RAddr> segs;
    if (Status s = segments(ss, &segs); !s.ok()) return s;
    // First every lock released, or taken over from a dead holder (a
    // split finished then changes the directory read below); the new
    // segments such a split made too.
    std::unordered_set<RAddr> waited;
    for (bool fresh = true; fresh;) {
      fresh = false;
      for (RAddr seg : segs) {
        if (!waited.insert(seg).second) continue;
        fresh = true;
        Snap snap;
        if (Status s = wait_unlocked(ss, seg, &snap); !s.ok()) return s;
      }
      segs.clear();
      if (Status s = segments(ss, &segs); !s.ok()) return s;
    }
    auto fail = [&](RAddr seg, const std::string& what) {
      return Status::Corruption("sephash: segment at node " + std::to_string(raddr_node(seg)) +
                                " offset " + std::to_string(raddr_off(seg)) + ": " + what);
    };
    // The full directory: every entry names a segment whose pattern it has.
    std::vector<RAddr> dir(std::size_t{1} << params_.max_depth);
    Batch b;
    b.read(0, params_.directory, dir.data(), static_cast<std::uint32_t>(dir.size() * 8));
    if (Status s = exec(ss, b); !s.ok()) return s;
    std::unordered_map<RAddr, SegmentView> views;
    for (RAddr seg : segs) {
      SegmentView v;
      if (Status s = read_segment(ss, seg, &v); !s.ok()) return s;
      if (meta_depth(v.snap.meta) > ss.global_depth) return fail(seg, "deeper than the global depth");
      views.emplace(seg, std::move(v));
    }
    for (std::size_t i = 0; i < dir.size(); ++i) {
      auto it = views.find(dir[i]);
      if (it == views.end()) {
        // Entries beyond 2^global_depth repeat the ones below it.
        if (i < ss.dir.size() || dir[i] != dir[i & (ss.dir.size() - 1)]) {
          return Status::Corruption("sephash: directory entry " + std::to_string(i) +
                                    " names no segment of the directory's first " +
                                    std::to_string(ss.dir.size()) + " entries");
        }
        continue;
      }
      if ((i & low_mask(meta_depth(it->second.snap.meta))) != it->second.pattern) {
        return fail(dir[i], "directory entry " + std::to_string(i) + " does not match its pattern");
      }
    }
    for (auto& [seg, v] : views) {
      std::vector<Candidate> items;
      // Read again with its items: the segment may have merged since.
      if (Status s = read_segment_items(ss, seg, &v, &items); !s.ok()) return s;
      const unsigned depth = meta_depth(v.snap.meta);
      for (std::size_t i = 1; i < v.main.size(); ++i) {
        if (slot_fp(v.main[i - 1]) > slot_fp(v.main[i])) return fail(seg, "MainSeg not sorted");
      }
      for (const Candidate& c : items) {
        const ItemHeader& h = c.header();
        const Key k = make_key(c.key());
        if (k.h1 != h.hash || slot_fp(c.slot) != hash_fp(h.hash) ||
            slot_fp2(c.slot) != hash_fp2(h.hash) || slot_dbits(c.slot) != hash_dbits(h.hash, depth)) {
          return fail(seg, "an entry's filter bits do not match its item's key");
        }
        if ((h.hash & low_mask(depth)) != v.pattern) {
          return fail(seg, "holds a key of another segment");
        }
        if (slot_tomb(c.slot) && h.value_len != 0) {
          return fail(seg, "a tombstone with a value");
        }
      }
    }
    return Status::OK();
  }

  Options options_;
  std::vector<std::string> specs_;
  Params params_;
  remote_index::SessionPool<Session> sessions_;
  std::atomic<std::uint64_t> merges_{0}, splits_{0}, split_bytes_{0}, stale_appends_{0},
      takeovers_{0};
  std::atomic<std::uint64_t> blocks_freed_{0}, bytes_freed_{0}, blocks_reused_{0},
      bytes_reused_{0}, bytes_bumped_{0}, bytes_leaked_{0};
};

Status check_create_options(const Options& o) {
  if (o.sephash_initial_depth < 1 || o.sephash_initial_depth > 12) {
    return Status::InvalidArgument("sephash initial depth must be 1 .. 12, got " +
                                   std::to_string(o.sephash_initial_depth));
  }
  if (o.sephash_max_depth < o.sephash_initial_depth || o.sephash_max_depth > 20) {
    return Status::InvalidArgument("sephash maximum depth must be initial depth .. 20, got " +
                                   std::to_string(o.sephash_max_depth));
  }
  if (o.sephash_main_max_slots < 2 * kCurSlots ||
      o.sephash_main_max_slots > kMaxMainSlots - kCurSlots) {
    return Status::InvalidArgument("sephash MainSeg slots must be " + std::to_string(2 * kCurSlots) +
                                   " .. " + std::to_string(kMaxMainSlots - kCurSlots) + ", got " +
                                   std::to_string(o.sephash_main_max_slots));
  }
  return Status::OK();
}

Status make_index(const Options& options, bool create, std::unique_ptr<Index>* out) {
  // The lease is chosen here, at create, and kept with the index (the
  // membership stamp); an open takes the stored one.
  auto params = [&](unsigned nodes, Params* p) {
    *p = Params{nodes, options.sephash_initial_depth, options.sephash_max_depth,
                options.sephash_main_max_slots, 0, 0, options.sephash_lock_lease_ms};
    if (options.sephash_lock_lease_ms < 1 || options.sephash_lock_lease_ms > remote_index::kMaxLeaseMs) {
      return Status::InvalidArgument("sephash lock lease must be 1 .. " +
                                     std::to_string(remote_index::kMaxLeaseMs) + " ms, got " +
                                     std::to_string(options.sephash_lock_lease_ms));
    }
    return check_create_options(options);
  };
  return remote_index::start<SepHashIndex, Params>(options, "sephash", create, params, out);
}

Status create_remote(const Options& options, std::unique_ptr<Index>* out) {
  return make_index(options, true, out);
}
Status open_remote(const Options& options, std::unique_ptr<Index>* out) {
  return make_index(options, false, out);
}

Status no_params(const Options&, std::uint8_t*) { return Status::OK(); }

}  // namespace

void set_append_hook_for_testing(std::function<void()> hook) { append_hook() = std::move(hook); }
void set_lock_hook_for_testing(std::function<bool(LockStep)> hook) {
  lock_hook() = std::move(hook);
}
void set_block_hook_for_testing(
    std::function<void(BlockUse, unsigned, std::uint64_t, std::uint64_t)> hook) {
  block_hook() = std::move(hook);
}

const EngineInfo kEngineInfo = {"sephash",     &no_params,    nullptr,      nullptr,
                                /*in_progress=*/false, &create_remote, &open_remote, kMagic};

}  // namespace pmhash::engine::sephash
