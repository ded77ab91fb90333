// tests/memnode_daemon.h - a pmhash-memnode daemon loop in a forked child,
// for tests that kill, stop or restart a memory node.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "remote/server.h"

namespace pmhash::testing {

// A memory-node daemon in a forked child (the real loop, in its own
// process, so that the test can kill or stop it).
class Daemon {
 public:
  // Serves `pool` on `port` (0: a free one); port() is the one it took.
  Daemon(const std::string& pool, std::uint16_t port) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      std::unique_ptr<remote::Server> srv;
      const Status s = remote::Server::start(pool, "127.0.0.1:" + std::to_string(port), &srv);
      const std::uint16_t got = s.ok() ? srv->port() : 0;
      [[maybe_unused]] const ssize_t n = ::write(fds[1], &got, sizeof(got));
      ::close(fds[1]);
      if (!s.ok()) ::_exit(1);
      ::_exit(srv->run().ok() ? 0 : 1);
    }
    ::close(fds[1]);
    EXPECT_EQ(::read(fds[0], &port_, sizeof(port_)), static_cast<ssize_t>(sizeof(port_)));
    ::close(fds[0]);
  }
  ~Daemon() { kill(SIGKILL); }
  std::uint16_t port() const { return port_; }
  void signal(int sig) { ::kill(pid_, sig); }
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace pmhash::testing
