// remote/server.h - the memory-node daemon's loop (pmhash-memnode): serves
// the verbs of remote/transport.h over tcp on one memory-node pool.
//
// One thread, one epoll set: the listening socket, an eventfd that stop()
// signals, and every client connection. Each connection is a NodeSession
// (remote/node_session.h: the bootstrap with its authentication, then
// requests validated, run on the mapped pool with remote::execute() and
// answered in order); the loop only moves bytes between sessions and
// sockets and enforces the limits below. The node runs no index logic.
//
// Who may connect. Without a secret file the daemon listens only on a
// loopback address (127.0.0.0/8): start() refuses any other. With one,
// every client must prove it holds the same secret before any verb runs
// (remote/handshake.h).
//
// Limits, so that no client can crash the daemon or exhaust its memory:
//   - max_connections: a connection beyond it is sent a refusal (Busy,
//     naming the limit) and closed.
//   - Every connection may hold in_allowance + out_allowance bytes of
//     buffers; beyond that (a frame or a response over the allowance) its
//     buffers come from one daemon-wide budget of buffer_budget bytes. A
//     frame that cannot get it waits, and its socket is not read.
//   - Backpressure: a connection whose unsent responses reach half its
//     output allowance is not read, and runs no request, until they drain.
//   - frame_timeout: a connection with unfinished work (the bootstrap, a
//     partial frame, unsent responses) that makes no progress (no frame
//     run, no 64 KiB of output taken by the client) for this long is
//     closed: a frame must arrive whole within it. Time spent waiting
//     for the budget does not count: the frame timeout starts again once
//     the memory is granted.
//   - idle_timeout: a connection with nothing unfinished is closed after
//     this long. Clients reconnect by themselves (tcp transport).
//   - When accept(2) runs out of file descriptors (EMFILE, ENFILE) the
//     listening socket is not watched until a connection closes (or
//     kAcceptRetry passes), so the loop does not spin; waiting clients
//     stay in the kernel's backlog.
//
// Memory bound. The daemon's anonymous memory (RssAnon) stays below
//   kBaseMemory + max_connections * (in_allowance + out_allowance +
//   kConnectionOverhead) + buffer_budget,
// memory_bound() (pmhash/memnode.h); with the defaults (256 connections, 64 KiB +
// 64 KiB each, a 128 MiB budget) about 180 MiB. The pool is a shared file
// mapping and is not part of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "pmhash/memnode.h"
#include "pmhash/status.h"
#include "pool/pool.h"
#include "remote/handshake.h"
#include "remote/node_session.h"

namespace pmhash::remote {

// How long accepting pauses after EMFILE when no connection closes.
inline constexpr std::chrono::milliseconds kAcceptRetry{1000};

// The loop behind the public Server (pmhash/memnode.h), which forwards
// start, port, run and stop to it.
class ServerLoop {
 public:
  // Opens the memory node at `pool_path` exclusively, loads the secret
  // file and listens. Errors: those of open_memnode() and
  // handshake::Secret::load(); InvalidArgument for a bad address, for a
  // non-loopback address without a secret file (the message says how to
  // give one), or for limits out of range; IOError when the address cannot
  // be bound.
  static Status start(const std::string& pool_path, const ServerOptions& options,
                      std::unique_ptr<ServerLoop>* out);
  ~ServerLoop();
  ServerLoop(const ServerLoop&) = delete;
  ServerLoop& operator=(const ServerLoop&) = delete;

  std::uint16_t port() const { return port_; }
  const std::string& pool_path() const { return pool_path_; }

  // Serves until stop(). IOError if epoll itself fails.
  Status run();
  // Makes run() return; async-signal-safe (one write to an eventfd).
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection;
  ServerLoop() = default;
  void accept_all();
  void refuse(int fd, const Status& why);
  void pause_accepting();
  void resume_accepting();
  // Reads, runs and writes what the connection allows; false when it must
  // be closed.
  bool on_readable(Connection& c);
  bool flush(Connection& c);
  // Sets the epoll interest from what the session wants.
  void watch(Connection& c);
  void close_connection(int fd);
  // Closes connections past their timeouts; resumes a paused accept.
  void sweep(Clock::time_point now);
  // Retries frames that waited for the budget after it grew.
  void wake_waiters();
  // Notes the progress of a connection after an event.
  void note(Connection& c, bool was_busy, Clock::time_point now);

  std::string pool_path_;
  ServerOptions options_;
  std::unique_ptr<pool::Pool> pool_;
  handshake::Secret secret_;
  std::unique_ptr<MemoryBudget> budget_;
  NodeSession::Node node_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int epoll_fd_ = -1;
  std::uint16_t port_ = 0;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_at_{};
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
};

}  // namespace pmhash::remote
