// engine/remote_index.h - what the engines on memory nodes (sephash, race)
// share: remote addresses, the memory-node list, connect options, the pool
// of per-thread sessions with their counters, allocation from a node's bump
// word (directly, or from per-client 64 KiB chunks), and the step of a
// create that forgets what the nodes held.
//
// Nothing here knows an index's layout; error messages name the engine
// they are given.
#pragma once

#include <atomic>
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
#include "pmhash/store.h"
#include "remote/client.h"
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

// The fields every index root (node 0's remote::kIndexRootOffset) starts with.
struct RootHeader {
  char magic[8];  // the engine's; written last at create, so a torn create has none
  std::uint32_t layout_version;
  std::uint32_t nodes;  // memory nodes the index spans
};
static_assert(sizeof(RootHeader) == 16);

// Splits Options::memnodes ("shm:PATH,tcp:HOST:PORT") into its entries.
// InvalidArgument for an empty entry, no node (the message says that
// `engine` keeps its index on memory nodes) or more than 255 nodes.
Status split_specs(const std::string& list, std::string_view engine,
                   std::vector<std::string>* out);

// The remote layer's options from the store's (timeout, shm latency).
remote::ConnectOptions connect_options(const Options& o);

// Takes `bytes` (rounded up to 64) from `node`'s bump word with one FAA.
// NoSpace naming the node when it is full (the FAA has then moved the bump
// word past the end; nothing else can be allocated there either).
Status alloc_direct(remote::Client& client, unsigned node, std::uint64_t bytes,
                    std::uint64_t* off);

// Per-client allocation chunks: 64 KiB taken from a node's bump word with
// one FAA, carved locally. Blocks above a quarter chunk go to alloc_direct.
inline constexpr std::uint64_t kChunkBytes = 64 * 1024;
struct Chunks {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> per_node;  // next, end
  Status alloc(remote::Client& client, unsigned node, std::uint64_t bytes, std::uint64_t* off);
};

// The first 8 bytes of node 0's index root (all zero: no index), read over
// a connection of its own: how an open that names no engine finds it.
Status read_root_magic(const Options& options, std::string_view engine, char (*magic)[8]);

// Refuses a create (AlreadyExists naming node 0 and what it holds) when
// node 0 holds an index of any engine, unless `force`.
Status check_unclaimed(remote::Client& client, bool force);

// The first step of a create: blanks `root_bytes` of node 0's index root
// (its magic first of all) and resets every node's bump word, so that no
// earlier index is found and all space is free again. One round trip.
Status forget_nodes(remote::Client& client, std::uint64_t root_bytes);

// Index::size() for engines that keep no count: the keys for_each visits
// (0 when it fails).
std::uint64_t count_keys(Index& index);

// Connects a Client to every node of `specs` with the store's options.
Status connect(const std::vector<std::string>& specs, const Options& o,
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
Status read_directory(remote::Client& client, std::string_view engine, std::uint64_t global_off,
                      std::uint64_t dir_off, unsigned max_depth, std::vector<std::uint64_t>* dir,
                      unsigned* depth);

// Raises the global depth word at `global_off` on node 0 to at least
// `depth` (CAS; other clients may raise it meanwhile). `seen` is the value
// last read.
Status raise_global_depth(remote::Client& client, std::uint64_t global_off, std::uint64_t seen,
                          unsigned depth);

// The round trips, verbs and payload bytes of every session, since open.
struct Counters {
  std::atomic<std::uint64_t> round_trips{0}, verbs{0}, bytes{0};
  void add(const remote::ClientCounters& c);
  void fill(Stats* st) const;  // round_trips, remote_verbs, remote_bytes
};

// Sessions (a Client and what the engine caches with it), one per thread
// at a time: with() lends an idle one, or makes one, and takes it back
// with its counters added. `Session` has a member
// std::unique_ptr<remote::Client> client.
template <class Session>
class SessionPool {
 public:
  SessionPool(std::vector<std::string> specs, const Options& options)
      : specs_(std::move(specs)), options_(options) {}

  const std::vector<std::string>& specs() const { return specs_; }

  // A new session, connected to every node (the first one also learns
  // the nodes' sizes, for Stats::pool_size).
  Status make(std::unique_ptr<Session>* out) {
    auto ss = std::make_unique<Session>();
    if (Status s = connect(specs_, options_, &ss->client); !s.ok()) return s;
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

  // The remote counters, the nodes' total size as pool_size, and
  // granularity "remote".
  void fill_stats(Stats* st) const {
    counters_.fill(st);
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
  Counters counters_;
};

// Creates (`create`) or opens the index of an engine on memory nodes:
// IndexT(options, specs, params) then format(force) or attach();
// params(nodes, &p) checks the engine's create options and derives its
// parameters (only for a create, after the remote timeout is checked;
// attach reads them from node 0).
template <class IndexT, class Params, class MakeParams, class Base>
Status start(const Options& options, std::string_view engine, bool create,
             MakeParams&& params, std::unique_ptr<Base>* out) {
  std::vector<std::string> specs;
  if (Status s = split_specs(options.memnodes, engine, &specs); !s.ok()) return s;
  Params p{};
  if (create) {
    if (options.remote_timeout_ms < 1 || options.remote_timeout_ms > 600000) {
      return Status::InvalidArgument("remote timeout must be 1 .. 600000 ms");
    }
    if (Status s = params(static_cast<unsigned>(specs.size()), &p); !s.ok()) return s;
  }
  auto index = std::make_unique<IndexT>(options, std::move(specs), p);
  if (Status s = create ? index->format(options.force) : index->attach(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

}  // namespace pmhash::engine::remote_index
