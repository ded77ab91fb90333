// pmhash/memnode.h - running a memory node: the pool file that holds part
// of an index kept on memory nodes (Options::memnodes, Store::remote_engines),
// and the daemon loop that serves such a file over tcp (pmhash-memnode).
//
//   pmhash::remote::create_memnode("/dev/shm/mn0", 1u << 30, false);
//   pmhash::remote::ServerOptions o;              // loopback, no secret
//   std::unique_ptr<pmhash::remote::Server> server;
//   pmhash::remote::Server::start("/dev/shm/mn0", o, &server);
//   server->run();                                // until server->stop()
//
// A memory node runs no index logic: clients reach its bytes with one-sided
// verbs, by mapping the file themselves (shm:PATH) or through this daemon
// (tcp:HOST:PORT). Its layout and the verbs are internal to pmhash.
//
// Who may connect. Without a secret file the daemon listens only on a
// loopback address (127.0.0.0/8). With one (32 to 4096 bytes, mode 600),
// every client must prove it holds the same secret before any verb runs,
// and clients check the node in turn.
//
// Limits, so that no client can crash the daemon or exhaust its memory:
// max_connections (a connection beyond it is refused with a message); per
// connection, in_allowance + out_allowance bytes of buffers, and beyond
// them a share of one daemon-wide buffer_budget (a frame that cannot get it
// waits unread); frame_timeout (a connection with unfinished work that
// makes no progress this long is closed); idle_timeout (a connection with
// nothing unfinished is closed; clients reconnect by themselves).
//
// Memory bound: the daemon's anonymous memory stays below memory_bound():
//   kBaseMemory + max_connections * (in_allowance + out_allowance +
//   kConnectionOverhead) + buffer_budget
// (about 180 MiB with the defaults). The pool is a shared file mapping and
// is not part of it.
//
// Thread safety: a Server runs on the thread that calls run(); stop() may
// be called from any thread or a signal handler.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pmhash/status.h"

namespace pmhash::remote {

// Buffer bytes every connection may hold without drawing on the budget.
struct NodeLimits {
  std::size_t in_allowance = 64u << 10;   // frames being received (at least 4 KiB)
  std::size_t out_allowance = 64u << 10;  // responses being sent (at least 16 KiB)
};

struct ServerOptions {
  // HOST:PORT to listen on (port 0 picks a free one).
  std::string listen = "127.0.0.1:0";
  // A file of 32 to 4096 bytes, mode 600. Empty: no authentication, and
  // only a loopback address may be listened on.
  std::string secret_file;
  unsigned max_connections = 256;
  std::chrono::milliseconds idle_timeout{300000};
  std::chrono::milliseconds frame_timeout{10000};
  // Buffer bytes beyond the per-connection allowances, for all
  // connections together. At least kMinBufferBudget (one largest frame).
  std::uint64_t buffer_budget = 128u << 20;
  NodeLimits limits;
};

// What the daemon needs besides its buffers: code, libc, stacks, the epoll
// set, session objects.
inline constexpr std::uint64_t kBaseMemory = 16u << 20;
// Per connection, besides its buffer allowance: the session object, the
// map entry, allocator slack.
inline constexpr std::uint64_t kConnectionOverhead = 4096;
// The least budget: one frame of the largest size and its header.
inline constexpr std::uint64_t kMinBufferBudget = (64u << 20) + 4096;

// The bound on the daemon's anonymous memory for these options.
std::uint64_t memory_bound(const ServerOptions& options);

// Creates a memory-node pool of `size` bytes at `path`, with a new random
// node id. Errors: AlreadyExists when `path` exists and !force; Busy when
// force would replace a pool that is open; InvalidArgument for a size below
// 4 MiB or beyond 2^48 bytes; IOError when the file cannot be created,
// sized or mapped, or the system gives no random bytes.
Status create_memnode(const std::string& path, std::uint64_t size, bool force);

class ServerLoop;

class Server {
 public:
  // Opens the memory node at `pool_path` exclusively, loads the secret file
  // and listens. Errors: Busy when the pool is open elsewhere; IOError when
  // it or the secret file cannot be read, or the address cannot be bound;
  // Corruption when the pool is damaged or of another layout version (the
  // message says to create it again); InvalidArgument for a pool of another
  // engine, an unusable secret file (too short or long, or readable by
  // others: the message says how to fix it), a bad address, a non-loopback
  // address without a secret file (the message says how to give one), or
  // limits out of range.
  static Status start(const std::string& pool_path, const ServerOptions& options,
                      std::unique_ptr<Server>* out);
  // start() with default options listening on `listen`.
  static Status start(const std::string& pool_path, const std::string& listen,
                      std::unique_ptr<Server>* out);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The port it listens on (the one picked, for port 0).
  std::uint16_t port() const;
  const std::string& pool_path() const;

  // Serves until stop(). IOError if epoll itself fails.
  Status run();
  // Makes run() return; async-signal-safe (one write to an eventfd).
  void stop();

 private:
  explicit Server(std::unique_ptr<ServerLoop> loop);
  std::unique_ptr<ServerLoop> loop_;
};

}  // namespace pmhash::remote
