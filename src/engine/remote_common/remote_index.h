// engine/remote_common/remote_index.h - what the engines on memory nodes
// (sephash, race) share: remote addresses, the memory-node list and which
// nodes make up an index (membership, generation, the fence), connect
// options and the index's lease, the pool of per-thread sessions with
// their counters, allocation from a node's bump word (directly, or from
// per-client 64 KiB chunks), the create and open steps, and the helpers
// both engines' code uses (masks, the lease clock, records read back).
//
// Nothing here knows an index's layout; error messages name the engine
// they are given.
//
// ---- Membership: which memory nodes make up an index ----
// Every memory node has a random node id (remote/memnode.h) and, at
// remote::kMembershipOffset, a membership record (MemberHead, below):
//   +0    stamp, the word every check reads (one 8-byte word, CAS):
//           63..24 generation (40 bits): 0 on a fresh node; a create makes
//                  it one more than the largest it finds on its nodes, so
//                  a node never shows the same generation for two creates
//           23..4  lease in ms (20 bits; kMaxLeaseMs): see "Fence"
//           3..0   state: 0 none (a fresh node: the whole word is 0),
//                  1 creating (a create claimed the node and has not
//                  finished), 2 ready (the index is complete)
//   +8    position: this node's index in the index's node list (u32)
//   +12   count: how many nodes the index spans (u32)
//   +16   index id: 16 random bytes drawn by the create
//   +32   zero
//   +64   node 0 only: the node ids of positions 0 .. count-1, 16 bytes each
// The record lies outside the engine's index root, so every engine on
// memory nodes keeps it the same way. An index's identity (Identity) is
// node 0's ready stamp, its count and its index id.
//
// Create (begin_create, then the engine's format, then commit_create), in
// this order; each step's batches complete, and so are durable, before the
// next step begins:
//   1. READ every node's node id and membership head, and node 0's index
//      root magic. Refused, with nothing written: a node id twice in the
//      list (InvalidArgument naming both positions); without force, any
//      node that is not fresh (AlreadyExists naming its position and what
//      it holds).
//   2. CLAIM node 0: CAS its stamp from the word read in 1 to creating(g,
//      L), g = 1 + the largest generation read, L = the larger of the new
//      index's lease and the leases of the stamps it replaces. Of two
//      creates that read the same word, one CAS fails: that create writes
//      nothing and says so (AlreadyExists, or Busy with force).
//   3. CLAIM the other nodes: one batch of CASes, each from the word read
//      in 1 to creating(g, L). If one fails (another create took that
//      node), the nodes this create claimed are CASed back and it fails.
//   4. WAIT the largest lease of the stamps replaced (none for fresh
//      nodes): by then every batch that a client of an older generation, or
//      a create this one displaced, began under its fence has executed
//      ("Fence" below).
//   5. FORGET and RECORD (fenced by creating(g, L)): node 0's index root
//      blanked, the engine's magic first; every bump word reset to the
//      first allocatable byte; every node's position, count and index id;
//      node 0's list of node ids.
//   6. The engine's format (fenced the same way): its structures, its
//      root, its magic last.
//   7. COMMIT: CAS every other node's stamp from creating(g, L) to
//      ready(g, lease), then node 0's. Either fails when another create
//      displaced this one meanwhile; this create then reports it.
// Until node 0's stamp is ready, every attach refuses (2.a below): no
// state a crash or a concurrent create can leave is taken for a complete
// index. A create that stops after 2 leaves node 0 "creating": a later
// create needs force (it says so), and attaches say what happened.
//
// Attach (verify_members), before it reads anything else of the index:
//   1. One round trip: node 0's whole membership record, and every node's
//      node id and membership head.
//   2. Refused (InvalidArgument, one line naming the position, its spec and
//      what was found; nothing written), in this order: (a) a node id
//      listed twice; (b) node 0 fresh or still creating, or not the
//      index's node 0 (nodes in another order); (c) another number of nodes
//      than the index spans (the missing or extra position named); (d) per
//      position p: a fresh node, a node of another index, a node of this
//      index at another position (swapped order), or one whose stamp is
//      not node 0's (a create that did not finish there).
//
// ---- Fence: no client of an older generation writes into a newer index ----
// Every batch of a session goes through its Fence, which expects one stamp
// (with position and index id, once the index is complete) on every node.
// Rule: a session posts a batch that visits node n only within W = lease/2
// of posting an earlier batch whose READ of n's membership head (32 bytes:
// stamp, position, count, index id) matched. The check READ rides in an
// ordinary batch to a node it already visits, once W/2 has passed since the
// last check of that node; only a session that has not visited a node for
// W (idle, or slow) pays a round trip of checks first. A mismatch fails the
// call (InvalidArgument: "memory nodes were created again (generation 7,
// this client opened generation 6): open the index again"), before it
// posts anything more.
//   Why nothing lands in the new index. A create replaces node n's stamp
// (its CAS, step 2 or 3, at time tC) and begins its format only a lease
// later (step 4). A stale session's last matching check of n executed
// before tC and was posted before that; its later batches to n were posted
// within W of it, and (ASSUMED, as for the sephash lock lease) each
// executes within lease/2 of its post: so before tC + lease. The lease in
// a "creating" stamp is the largest of those it replaced, so a create that
// displaces an unfinished one also waits out the clients two generations
// back.
//   What stays assumed: the clocks of clients and of the creating process
//   run at the same rate (steady clocks, differences only); a batch
//   executes within lease/2 of its post, including the time a process may
//   be stopped between its clock check and its post, and a tcp request's
//   time in the network. The remote timeout must therefore not exceed
//   lease/2 (effective_timeout refuses it): a client never waits for, and
//   acts on, a batch slower than that.
// Costs: one 32-byte READ per node visited per W/2 (none per call); a
// forced create waits the old lease.

#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/index.h"
#include "pmhash/options.h"
#include "pmhash/status.h"
#include "pmhash/stats.h"
#include "remote/client.h"
#include "remote/memnode.h"
#include "remote/transport.h"

namespace pmhash::engine::remote_index {

// A remote address: node in the top 8 bits, byte offset in the low 48.
using RAddr = std::uint64_t;
inline constexpr unsigned kNodeShift = 56;
inline constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << 48) - 1;
inline constexpr RAddr make_raddr(unsigned node, std::uint64_t off) {
  return (std::uint64_t{node} << kNodeShift) | off;
}
inline constexpr unsigned raddr_node(RAddr a) { return static_cast<unsigned>(a >> kNodeShift); }
inline constexpr std::uint64_t raddr_off(RAddr a) { return a & kOffsetMask; }

inline std::uint64_t round64(std::uint64_t n) { return (n + 63) & ~std::uint64_t{63}; }

// The low `bits` bits set (a directory's index mask, a pattern's bits).
inline std::uint64_t low_mask(unsigned bits) {
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

// The clock of leases and lock holders: steady (only differences are used).
using Clock = std::chrono::steady_clock;

// Whether a lock holder that took its clock reading `since` before it sent
// its lock (or takeover) CAS may still begin a batch that writes: within
// lease/2 of it (a waiter takes over only after a whole lease; the
// assumption of "Lease" above covers the batch's flight).
inline bool within_half_lease(Clock::time_point since, std::chrono::milliseconds lease) {
  return Clock::now() - since < lease / 2;
}

// A record read back from a memory node: a header with key_len and
// value_len (the engine's item or KV header), then the key, then the
// value. The lengths are looked at only after the bytes were validated.
template <class Header>
struct RecordBytes {
  std::vector<std::byte> bytes;
  const Header& header() const { return *reinterpret_cast<const Header*>(bytes.data()); }
  std::string_view key() const {
    return {reinterpret_cast<const char*>(bytes.data()) + sizeof(Header), header().key_len};
  }
  std::string_view value() const {
    return {reinterpret_cast<const char*>(bytes.data()) + sizeof(Header) + header().key_len,
            header().value_len};
  }
};

// The fields every index root (node 0's remote::kIndexRootOffset) starts with.
struct RootHeader {
  char magic[8];  // the engine's; written last at create, so a torn create has none
  std::uint32_t layout_version;
  std::uint32_t nodes;  // memory nodes the index spans
};
static_assert(sizeof(RootHeader) == 16);

// ---- membership (see the top of this file) ----
inline constexpr unsigned kMaxNodes = 255;
inline constexpr std::uint32_t kMaxLeaseMs = 600000;  // fits the stamp's 20 bits
// Timeouts: the most a client may give, and what it uses to connect before
// it knows the index's lease (an attach's first round trip).
inline constexpr unsigned kMaxTimeoutMs = kMaxLeaseMs / 2;
inline constexpr unsigned kBootstrapTimeoutMs = 1000;

enum class MemberState : std::uint64_t { kNone = 0, kCreating = 1, kReady = 2 };
inline constexpr unsigned kStampGenShift = 24;
inline constexpr unsigned kStampLeaseShift = 4;
inline constexpr std::uint64_t kStampLeaseMask = (std::uint64_t{1} << 20) - 1;
static_assert(kMaxLeaseMs <= kStampLeaseMask);
inline constexpr std::uint64_t make_stamp(std::uint64_t generation, std::uint32_t lease_ms,
                                          MemberState state) {
  return (generation << kStampGenShift) | (std::uint64_t{lease_ms} << kStampLeaseShift) |
         static_cast<std::uint64_t>(state);
}
inline constexpr std::uint64_t stamp_generation(std::uint64_t s) { return s >> kStampGenShift; }
inline constexpr std::uint32_t stamp_lease_ms(std::uint64_t s) {
  return static_cast<std::uint32_t>((s >> kStampLeaseShift) & kStampLeaseMask);
}
inline constexpr MemberState stamp_state(std::uint64_t s) { return MemberState{s & 15}; }

// The head of a membership record (remote::kMembershipOffset); node 0's is
// followed by the node-id list at kMemberListOffset.
struct MemberHead {
  std::uint64_t stamp;
  std::uint32_t position;
  std::uint32_t count;
  std::uint8_t index_id[16];
  std::uint8_t reserved[32];
};
static_assert(sizeof(MemberHead) == 64);
inline constexpr std::uint64_t kMemberListOffset = remote::kMembershipOffset + sizeof(MemberHead);
static_assert(sizeof(MemberHead) + kMaxNodes * remote::kNodeIdBytes <= remote::kMembershipSize);
// What a fence check reads: the head's first 32 bytes.
inline constexpr std::uint32_t kFenceReadBytes = 32;

// When not 0, the lease every index of this process is used with, whatever
// its create stored; set only by testing::set_lease (remote_index_testing.h).
inline std::atomic<std::uint32_t> lease_override{0};

// An index's identity: node 0's ready stamp (generation, lease), the node
// count and the index id. Every node of the index holds the same, with its
// own position.
struct Identity {
  std::uint64_t stamp = 0;
  std::uint32_t count = 0;
  std::uint8_t index_id[16] = {};
  std::uint64_t generation() const { return stamp_generation(stamp); }
  std::uint32_t lease_ms() const {
    const std::uint32_t forced = lease_override.load(std::memory_order_relaxed);
    return forced != 0 ? forced : stamp_lease_ms(stamp);
  }
};

// A session's fence (see the top of this file): the stamp it expects on
// every node and when it last saw it there. Used by one thread at a time.
class Fence {
 public:
  using Clock = std::chrono::steady_clock;

  // Checks `expect` on each of `nodes` nodes: the stamp, and unless
  // `stamp_only` (a create before its records are written) the position
  // (the node's own index), the count and the index id. `checked` is when
  // a batch that read each node's head, and found it so, was posted (the
  // attach's, or the claim's); Clock::time_point{} for none yet.
  void arm(const Identity& expect, unsigned nodes, bool stamp_only, Clock::time_point checked);
  bool armed() const { return armed_; }
  const Identity& expected() const { return expect_; }

  // Runs `b` on `c` under the fence: first a round trip of checks for the
  // nodes `b` visits that were not checked within the window; then `b`,
  // with a check READ appended for the nodes checked more than half a
  // window ago (unless `check_after` is false: for a batch that itself
  // changes the stamps). Unarmed, runs `b` alone. Errors: those of the
  // round trips; InvalidArgument when a node holds another stamp, position
  // or index than expected (b's verbs may have run: they were posted in
  // time, see the top of this file).
  Status exec(remote::Client& c, remote::Batch& b, bool check_after = true);

 private:
  struct Seen {
    std::uint64_t stamp;
    std::uint32_t position;
    std::uint32_t count;
    std::uint8_t index_id[16];
  };
  static_assert(sizeof(Seen) == kFenceReadBytes);
  Clock::duration window() const;
  Status judge(const remote::Client& c, unsigned node) const;

  Identity expect_;
  bool armed_ = false;
  bool stamp_only_ = false;
  std::vector<Clock::time_point> checked_;  // per node: post time of the last check that matched
  std::vector<Seen> seen_;                  // per node: what the last check read
  std::vector<unsigned> due_;               // nodes checked by the batch in flight
};

// A connection to every node, and the fence its batches go through. The
// engines' sessions derive from it.
struct Link {
  std::unique_ptr<remote::Client> client;
  Fence fence;
  Status exec(remote::Batch& b) { return fence.exec(*client, b); }
};

// Splits Options::memnodes ("shm:PATH,tcp:HOST:PORT") into its entries.
// InvalidArgument for an empty entry, no node (the message says that
// `engine` keeps its index on memory nodes) or more than 255 nodes.
Status split_specs(const std::string& list, std::string_view engine,
                   std::vector<std::string>* out);

// The remote layer's options: the timeout given (the bootstrap timeout for
// 0), the shm latency.
remote::ConnectOptions connect_options(const Options& o, unsigned timeout_ms);

// The remote timeout clients of an index of lease `lease_ms` use: the one
// given, or lease/2 for 0. InvalidArgument, naming both numbers, for one
// above lease/2 (it would break the fence's and the lock lease's
// assumption that a batch executes within lease/2) or above kMaxTimeoutMs.
Status effective_timeout(const Options& o, std::uint32_t lease_ms, std::string_view engine,
                         unsigned* timeout_ms);

// Create, steps 1 to 5 (see the top of this file), on `link` (its fence
// unarmed): claims every node for a new generation of an index of lease
// `lease_ms`, waits out the older generations, blanks `root_bytes` of node
// 0's index root, resets every bump word and records the membership. Then
// `link`'s fence expects this create's claim, and *made is the identity
// commit_create will publish. Errors: InvalidArgument (a node listed twice),
// AlreadyExists (without `force`: a node holds an index or a create, or
// another create claimed the nodes first), Busy (with `force`: another
// create claimed a node at the same time; nothing changed), and those of
// the round trips.
Status begin_create(Link& link, bool force, std::uint32_t lease_ms, std::uint64_t root_bytes,
                    Identity* made);

// Create, step 7: makes every node's stamp ready, node 0's last; then
// `link`'s fence expects `made`. InvalidArgument when another create
// displaced this one meanwhile.
Status commit_create(Link& link, const Identity& made);

// Attach, steps 1 and 2: verifies every node of `link` against node 0's
// membership record; then `link`'s fence expects the index's identity,
// which is *id. Errors: InvalidArgument naming the position (see the top
// of this file), and those of the round trip.
Status verify_members(Link& link, std::string_view engine, Identity* id);

// Takes `bytes` (rounded up to 64) from `node`'s bump word with one FAA.
// NoSpace naming the node when it is full (the FAA has then moved the bump
// word past the end; nothing else can be allocated there either).
Status alloc_direct(Link& link, unsigned node, std::uint64_t bytes, std::uint64_t* off);

// Per-client allocation chunks: 64 KiB taken from a node's bump word with
// one FAA, carved locally. Blocks above a quarter chunk go to alloc_direct.
inline constexpr std::uint64_t kChunkBytes = 64 * 1024;
struct Chunks {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> per_node;  // next, end
  Status alloc(Link& link, unsigned node, std::uint64_t bytes, std::uint64_t* off);
};

// The first 8 bytes of node 0's index root (all zero: no index), read over
// a connection of its own after verify_members: how an open that names no
// engine finds it.
Status read_root_magic(const Options& options, std::string_view engine, char (*magic)[8]);

// Index::size() for engines that keep no count: the keys for_each visits
// (0 when it fails).
std::uint64_t count_keys(Index& index);

// Index::scan of the engines here (race.h and sephash.h, "Scan"). A call
// reads a subtable or segment whole, but passes its keys in position
// order (position: the reversed hash) only as far as the call needs, so
// that a part is a position range of one subtable or segment, ending
// where a key not passed begins.
struct ScanPair {
  std::uint64_t pos = 0;
  std::string key;
  std::string value;
};
// From `found`, the keys of one subtable or segment at positions from the
// call's position on (each key once), moves into *out the first `need`
// (>= 1) in position order, and every further key at the last one's
// position (keys of equal hashes are never parted). *end: the position of
// the first key left, or `range_end` (the end of the subtable's or
// segment's range; 0 for 2^64) when none is left.
void take_in_order(std::vector<ScanPair>& found, std::size_t need, std::uint64_t range_end,
                   std::vector<ScanPair>* out, std::uint64_t* end);

// Index::scan of an engine that reads a part at a time: in one session
// (with_session(body), body taking the engine's Session&), part(session,
// pos, need, out, end) from `cursor` on, each step from the position where
// the last one stopped, until `count` pairs or the end of the hash space;
// then fn on each pair, with no session held (fn may call the store).
template <class WithSession, class Part>
Status scan_by_parts(WithSession&& with_session, Part&& part, std::uint64_t cursor,
                     std::size_t count, const ScanFn& fn, std::uint64_t* next) {
  *next = 0;
  std::vector<ScanPair> out;
  std::uint64_t end = 0;
  const Status s = with_session([&](auto& session) {
    for (std::uint64_t pos = cursor;; pos = end) {
      if (Status r = part(session, pos, count - out.size(), &out, &end); !r.ok()) return r;
      if (end == 0 || out.size() >= count) return Status::OK();
    }
  });
  if (!s.ok()) return s;
  for (const ScanPair& p : out) fn(p.key, p.value);
  *next = end;
  return Status::OK();
}

// Connects a Client to every node of `specs` with the store's options and
// timeout `timeout_ms`.
Status connect(const std::vector<std::string>& specs, const Options& o, unsigned timeout_ms,
               std::unique_ptr<remote::Client>* out);

// The checks every attach makes of the fields an index root starts with
// (magic, layout version, node count): InvalidArgument when node 0 holds
// no `engine` index or the index spans another number of nodes than the
// client names, Corruption for another layout version.
Status check_root(const remote::Client& client, std::string_view engine, const char* magic,
                  const char (&expected)[8], std::uint32_t version, std::uint32_t expected_version,
                  std::uint32_t nodes);

// Reads the global depth word at `global_off` on node 0, then the first
// 2^depth words of the directory at `dir_off` (two round trips).
// Corruption for a depth beyond `max_depth`.
Status read_directory(Link& link, std::string_view engine, std::uint64_t global_off,
                      std::uint64_t dir_off, unsigned max_depth, std::vector<std::uint64_t>* dir,
                      unsigned* depth);

// Raises the global depth word at `global_off` on node 0 to at least
// `depth` (CAS; other clients may raise it meanwhile). `seen` is the value
// last read.
Status raise_global_depth(Link& link, std::uint64_t global_off, std::uint64_t seen,
                          unsigned depth);

// The round trips, verbs and payload bytes of every session, since open.
struct Counters {
  std::atomic<std::uint64_t> round_trips{0}, verbs{0}, bytes{0};
  void add(const remote::ClientCounters& c);
  // Adds "<engine>.round_trips", ".remote_verbs", ".remote_bytes"
  // (properties.h, kRemoteCounters).
  void fill(Stats* st, std::string_view engine) const;
};

// Sessions (a Link and what the engine caches with it), one per thread at
// a time: with() lends an idle one, or makes one, and takes it back with
// its counters added. `Session` derives from Link.
template <class Session>
class SessionPool {
 public:
  SessionPool(std::vector<std::string> specs, const Options& options)
      : specs_(std::move(specs)),
        options_(options),
        timeout_ms_(options.remote_timeout_ms != 0 ? options.remote_timeout_ms
                                                   : kBootstrapTimeoutMs) {}

  const std::vector<std::string>& specs() const { return specs_; }

  // The timeout of the sessions made from now on (a create's, once it
  // knows the lease).
  void set_timeout(unsigned timeout_ms) { timeout_ms_.store(timeout_ms, std::memory_order_relaxed); }
  unsigned timeout_ms() const { return timeout_ms_.load(std::memory_order_relaxed); }

  // After a create or an attach: every session made from now on expects
  // the index `id` (its first batch to each node checks it there) and uses
  // the timeout effective_timeout gives for its lease (its errors).
  Status arm(const Identity& id, std::string_view engine) {
    unsigned timeout = 0;
    if (Status s = effective_timeout(options_, id.lease_ms(), engine, &timeout); !s.ok()) return s;
    std::lock_guard<std::mutex> g(mu_);
    identity_ = id;
    armed_ = true;
    timeout_ms_.store(timeout, std::memory_order_relaxed);
    return Status::OK();
  }

  // A new session, connected to every node (the first one also learns
  // the nodes' sizes, for Stats::pool_size); after arm(), fenced.
  Status make(std::unique_ptr<Session>* out) {
    auto ss = std::make_unique<Session>();
    unsigned timeout = 0;
    bool armed = false;
    Identity id;
    {
      std::lock_guard<std::mutex> g(mu_);
      timeout = timeout_ms_.load(std::memory_order_relaxed);
      armed = armed_;
      id = identity_;
    }
    if (Status s = connect(specs_, options_, timeout, &ss->client); !s.ok()) return s;
    if (armed) {
      ss->fence.arm(id, static_cast<unsigned>(specs_.size()), /*stamp_only=*/false,
                    Fence::Clock::time_point{});
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      if (pool_size_ == 0) {
        for (unsigned n = 0; n < ss->client->nodes(); ++n) pool_size_ += ss->client->node_size(n);
      }
    }
    *out = std::move(ss);
    return Status::OK();
  }

  // Runs f(session) on an idle session, or on a new one, which init(session)
  // prepares first (its error, or make()'s, is returned).
  template <class Init, class F>
  Status with(Init&& init, F&& f) {
    std::unique_ptr<Session> ss;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!idle_.empty()) {
        ss = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!ss) {
      if (Status s = make(&ss); !s.ok()) return s;
      if (Status s = init(*ss); !s.ok()) return s;
    }
    Status s = f(*ss);
    counters_.add(ss->client->counters());
    ss->client->reset_counters();
    std::lock_guard<std::mutex> g(mu_);
    idle_.push_back(std::move(ss));
    return s;
  }

  // Closes every idle session.
  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    idle_.clear();
  }

  // The remote counters as the properties of `engine` (the first ones
  // its descriptor declares), the nodes' total size as pool_size, and
  // granularity "remote".
  void fill_stats(Stats* st, std::string_view engine) const {
    counters_.fill(st, engine);
    std::lock_guard<std::mutex> g(mu_);
    st->pool_size = pool_size_;
    st->granularity = "remote";
  }

 private:
  const std::vector<std::string> specs_;
  const Options options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Session>> idle_;
  std::uint64_t pool_size_ = 0;  // bytes of all nodes
  std::atomic<unsigned> timeout_ms_;
  bool armed_ = false;
  Identity identity_;
  Counters counters_;
};

// Creates (`create`) or opens the index of an engine on memory nodes:
// IndexT(options, specs, params) then format(force) or attach();
// params(nodes, &p) checks the engine's create options and derives its
// parameters, the index's lease among them (only for a create, after the
// remote timeout's range is checked; attach reads them from node 0).
template <class IndexT, class Params, class MakeParams, class Base>
Status start(const Options& options, std::string_view engine, bool create,
             MakeParams&& params, std::unique_ptr<Base>* out) {
  std::vector<std::string> specs;
  if (Status s = split_specs(options.memnodes, engine, &specs); !s.ok()) return s;
  if (options.remote_timeout_ms > kMaxTimeoutMs) {
    return Status::InvalidArgument("remote timeout must be 1 .. " + std::to_string(kMaxTimeoutMs) +
                                   " ms, or 0 for half the index's lease; got " +
                                   std::to_string(options.remote_timeout_ms));
  }
  Params p{};
  if (create) {
    if (Status s = params(static_cast<unsigned>(specs.size()), &p); !s.ok()) return s;
  }
  auto index = std::make_unique<IndexT>(options, std::move(specs), p);
  if (Status s = create ? index->format(options.force) : index->attach(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

// ---- Create and open, the steps every engine on memory nodes shares ----
// Create's first steps (steps 1 to 5 above): the remote timeout of an
// index of lease `lease_ms` set on `pool`, a session, then begin_create.
// The engine then writes its structures and its root, magic clear, in one
// batch that finish_create runs.
template <class Session>
Status start_create(SessionPool<Session>& pool, const Options& o, std::uint32_t lease_ms,
                    std::string_view engine, bool force, std::uint64_t root_bytes,
                    std::unique_ptr<Session>* ss, Identity* made) {
  unsigned timeout = 0;
  if (Status s = effective_timeout(o, lease_ms, engine, &timeout); !s.ok()) return s;
  pool.set_timeout(timeout);
  if (Status s = pool.make(ss); !s.ok()) return s;
  return begin_create(**ss, force, lease_ms, root_bytes, made);
}

// Create's last steps: runs `b` (the index's structures and root, without
// the magic); then, once they are complete and durable, WRITEs the magic
// alone (a root with a magic names a whole index); then commits the
// membership (step 7) and arms `pool`'s fence with it.
template <class Session>
Status finish_create(SessionPool<Session>& pool, Session& ss, remote::Batch& b,
                     const char (&magic)[8], const Identity& made, std::string_view engine) {
  if (Status s = ss.exec(b); !s.ok()) return s;
  b.clear();
  b.write(0, remote::kIndexRootOffset, magic, sizeof(magic));
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (Status s = commit_create(ss, made); !s.ok()) return s;
  return pool.arm(made, engine);
}

// Open's first steps: a session, its nodes verified against node 0's
// membership record (verify_members) before anything else of the index
// is read, `pool`'s fence armed with the index's identity *id, then
// `root_bytes` of node 0's index root READ into `root` for the engine to
// check (check_root and its own fields).
template <class Session>
Status open_root(SessionPool<Session>& pool, std::string_view engine, void* root,
                 std::uint32_t root_bytes, std::unique_ptr<Session>* ss, Identity* id) {
  if (Status s = pool.make(ss); !s.ok()) return s;
  if (Status s = verify_members(**ss, engine, id); !s.ok()) return s;
  if (Status s = pool.arm(*id, engine); !s.ok()) return s;
  remote::Batch b;
  b.read(0, remote::kIndexRootOffset, root, root_bytes);
  return (*ss)->exec(b);
}

}  // namespace pmhash::engine::remote_index
