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

// Refuses a create (AlreadyExists naming node 0 and what it holds) when
// node 0 holds an index of any engine, unless `force`.
Status check_unclaimed(remote::Client& client, bool force);

// The first step of a create: blanks `root_bytes` of node 0's index root
// (its magic first of all) and resets every node's bump word, so that no
// earlier index is found and all space is free again. One round trip.
Status forget_nodes(remote::Client& client, std::uint64_t root_bytes);

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
  // Runs f(session) on an idle session, or on a new one from
  // make(&std::unique_ptr<Session>) (whose error is returned).
  template <class Make, class F>
  Status with(Make&& make, F&& f) {
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

  void fill_stats(Stats* st) const { counters_.fill(st); }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Session>> idle_;
  Counters counters_;
};

}  // namespace pmhash::engine::remote_index
