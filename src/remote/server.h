// remote/server.h - the memory-node daemon's loop (pmhash-memnode): serves
// the verbs of remote/transport.h over tcp on one memory-node pool.
//
// One thread, one epoll set: the listening socket, an eventfd that stop()
// signals, and every client connection. On accept the server sends a hello
// (wire.h: the pool's size). A request is validated, run on the mapped pool
// with remote::execute() (writes flushed and fenced before the response
// is queued) and answered in order. The node runs no index logic. A
// connection that sends a malformed frame is closed; the others go on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "pmhash/status.h"
#include "pool/pool.h"

namespace pmhash::remote {

class Server {
 public:
  // Opens the memory node at `pool_path` exclusively and listens on
  // `listen` ("HOST:PORT"; port 0 picks a free one). Errors: those of
  // open_memnode(); InvalidArgument for a bad address; IOError when the
  // address cannot be bound.
  static Status start(const std::string& pool_path, const std::string& listen,
                      std::unique_ptr<Server>* out);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const { return port_; }
  const std::string& pool_path() const { return pool_path_; }

  // Serves until stop(). IOError if epoll itself fails.
  Status run();
  // Makes run() return; async-signal-safe (one write to an eventfd).
  void stop();

 private:
  struct Connection;
  Server() = default;
  void accept_all();
  // Reads what the socket has and answers every complete request; false
  // when the connection must be closed.
  bool serve(Connection& c);
  bool flush_out(Connection& c);
  void close_connection(int fd);

  std::string pool_path_;
  std::unique_ptr<pool::Pool> pool_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int epoll_fd_ = -1;
  std::uint16_t port_ = 0;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
};

}  // namespace pmhash::remote
