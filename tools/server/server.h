// server/server.h - pmhash-server's network side: listening, connections,
// worker threads, limits and shutdown.
//
// Threads. `workers` threads each run an epoll loop over the listening
// socket (registered with EPOLLEXCLUSIVE, so the kernel wakes one worker
// when connections arrive) and over the connections it serves. The worker
// that accepts a connection gives it to the worker with the fewest (its
// inbox, an eventfd); otherwise one worker would take a whole burst while
// the others idle. A connection stays with its worker for its life; the
// worker reads its bytes, parses requests (resp.h), runs them against the
// store one after the other (commands.h) and writes the replies in order.
// The store is thread-safe, so workers need no lock between them; the
// server's counters are atomics.
//
// Group persistence (write_groups). The requests of the connections one
// round of a worker's loop woke (one epoll_wait) run in one write group
// (Store::begin_write_group), and their replies are sent only after the
// group's end, when every write and answer of the round is durable: the
// writes of a pipeline, and of the worker's other connections in the same
// round, share their durability waits where the engine can share them
// (dali, strict: one wait per round instead of one per write). A reply is
// never sent before the write it reports is durable, grouped or not.
//
// How many workers. On persistent memory (and DRAM) a store call computes
// for microseconds: one worker per hardware thread, at most 8. On an
// ordinary file (page granularity) a strict write waits in fdatasync for
// about a millisecond, and the drains of threads that wait together share
// their syncs (media/region.h, "Shared file syncs"): there the default is
// 16 workers, so that that many connections' writes share each sync. Both
// are only defaults (`workers`).
//
// Limits, so that no client can take the server's memory or its other
// clients' service:
//   - max_clients connections at once; the next one is told "-ERR max number
//     of clients reached" and closed.
//   - A request may hold at most RequestLimits::max_request bytes of input;
//     a bigger one is a protocol error (the reply, then the close).
//   - Output: while a client's unsent replies exceed output_pause bytes, the
//     server stops reading and running its requests (pipelined requests wait
//     in the kernel's socket buffer and then the client's), and resumes when
//     they drain. A single reply can still exceed it (KEYS on a large store);
//     a client whose unsent replies exceed output_limit is closed, as Redis
//     closes a client past its client-output-buffer-limit.
//   So a connection holds at most max_request + output_limit bytes.
//
// Access. Without a password the server listens on loopback addresses only
// (start() refuses any other bind address); with one (requirepass), every
// command but AUTH, HELLO and QUIT gets "-NOAUTH Authentication required."
// until the client authenticates.
//
// Shutdown. stop() (SIGTERM, SIGINT, the SHUTDOWN command) makes every
// worker close its connections and return; the caller then closes the
// store, which makes everything durable and marks it cleanly closed, so the
// next start runs no recovery.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/status.h"
#include "pmhash/store.h"
#include "server/keyspace.h"
#include "server/resp.h"

namespace pmhash::server {

struct ServerConfig {
  std::string bind = "127.0.0.1";
  // 0: any free port (tests); port() tells which.
  std::uint16_t port = 6379;
  // 0: the default for the store's media ("How many workers" above).
  unsigned workers = 0;
  unsigned max_clients = 10000;
  // Group persistence: each round of a worker's event loop runs in one
  // write group (Store::begin_write_group), its replies sent after the
  // group's end. Off: every write waits for its own durability.
  bool write_groups = true;
  // Empty: no password, and loopback only.
  std::string requirepass;
  // The store's durability, for INFO and CONFIG GET ("strict" or "epoch").
  std::string durability = "strict";
  RequestLimits limits;
  std::uint64_t output_pause = std::uint64_t{1} << 20;
  std::uint64_t output_limit = std::uint64_t{256} << 20;
  // How often expired keys are swept (server/keyspace.h).
  std::uint64_t expire_sweep_ms = 1000;
  // Milliseconds since the Unix epoch, for expiry; empty: the wall clock.
  Keyspace::Clock clock;
};

// What INFO and CLIENT report about the server.
struct ServerCounters {
  std::atomic<std::uint64_t> connections_received{0};
  std::atomic<std::uint64_t> connections_rejected{0};
  std::atomic<std::uint64_t> connected{0};
  std::atomic<std::uint64_t> commands{0};
  std::atomic<std::uint64_t> protocol_errors{0};
  std::atomic<std::uint64_t> output_limit_closes{0};
  // Times a connection stopped being read because its unsent replies passed
  // output_pause, and the most unsent reply bytes any connection has held.
  std::atomic<std::uint64_t> output_pauses{0};
  std::atomic<std::uint64_t> output_high_water{0};
  std::atomic<std::uint64_t> bytes_in{0};
  std::atomic<std::uint64_t> bytes_out{0};
};

class SessionRegistry;

class Server {
 public:
  // `store` outlives the server.
  Server(Store* store, ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the workers. InvalidArgument for a bind
  // address that is not an address, or not loopback without requirepass;
  // IOError when the socket cannot be bound.
  Status start();
  // The port listened on (after start).
  std::uint16_t port() const { return port_; }
  // Asks every worker to close its connections and return. Safe from any
  // thread, and from a signal handler (it writes an eventfd).
  void stop();
  // Returns when every worker has returned (after stop()).
  void wait();

  const ServerConfig& config() const { return config_; }
  // How many connections each worker serves (accepted connections go to
  // the worker with the fewest).
  std::vector<std::size_t> worker_loads() const;
  ServerCounters& counters() { return counters_; }
  Store& store() { return *store_; }
  Keyspace& keyspace() { return *keyspace_; }
  // Whether the store's engine has transactions (MULTI, WATCH).
  bool transactions() const { return transactions_; }
  std::uint64_t started_unix() const { return started_unix_; }
  // When the store was last made durable by SAVE or BGSAVE (LASTSAVE);
  // the start time before that.
  std::atomic<std::uint64_t>& last_save_unix() { return last_save_unix_; }

 private:
  class Worker;
  friend class Worker;

  Store* store_;
  ServerConfig config_;
  ServerCounters counters_;
  std::unique_ptr<Keyspace> keyspace_;
  bool transactions_ = false;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd every worker watches
  std::uint16_t port_ = 0;
  std::uint64_t started_unix_ = 0;
  std::atomic<std::uint64_t> next_client_id_{1};
  std::atomic<std::uint64_t> last_save_unix_{0};
  std::unique_ptr<SessionRegistry> sessions_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace pmhash::server
