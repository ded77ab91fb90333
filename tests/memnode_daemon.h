// tests/memnode_daemon.h - a pmhash-memnode daemon loop in a forked child,
// for tests that kill, stop or restart a memory node, or watch its memory
// and CPU time.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remote/server.h"

namespace pmhash::testing {

// A memory-node daemon in a forked child (the real loop, in its own
// process, so that the test can kill or stop it).
class Daemon {
 public:
  // Serves `pool` on 127.0.0.1:`port` (0: a free one); port() is the one
  // it took.
  Daemon(const std::string& pool, std::uint16_t port)
      : Daemon(pool, loopback(port)) {}
  // Serves `pool` with `options`; `in_child` runs in the child before the
  // server starts (e.g. to lower a resource limit). port() is 0 if the
  // server did not start.
  Daemon(const std::string& pool, const remote::ServerOptions& options,
         const std::function<void()>& in_child = {}) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      if (in_child) in_child();
      std::unique_ptr<remote::Server> srv;
      const Status s = remote::Server::start(pool, options, &srv);
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
  pid_t pid() const { return pid_; }
  std::string spec() const { return "tcp:127.0.0.1:" + std::to_string(port_); }
  bool alive() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  void signal(int sig) { ::kill(pid_, sig); }
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::uint64_t rss_anon() const { return rss_anon_of(pid_); }
  std::uint64_t cpu_ticks() const { return cpu_ticks_of(pid_); }

  // The anonymous resident memory (RssAnon of /proc/PID/status) of a
  // process in bytes, 0 if it cannot be read.
  static std::uint64_t rss_anon_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
    }
    return 0;
  }
  // A process's CPU time (user + system) in clock ticks.
  static std::uint64_t cpu_ticks_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command name (which may hold spaces): state is 3,
    // utime 14, stime 15.
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    std::uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    return utime + stime;
  }

 private:
  static remote::ServerOptions loopback(std::uint16_t port) {
    remote::ServerOptions o;
    o.listen = "127.0.0.1:" + std::to_string(port);
    return o;
  }

  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

// The pmhash-memnode program serving a pool (a process of its own, with
// nothing inherited from the test's memory: for measuring the daemon's).
class MemnodeProcess {
 public:
  // Starts `program --pool POOL --listen 127.0.0.1:0 args...` and waits
  // (at most 10 s) for its "serving ... on port N" line; port() is 0 if it
  // did not come.
  MemnodeProcess(const std::string& program, const std::string& pool,
                 const std::vector<std::string>& args) {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<std::string> words = {program, "--pool", pool, "--listen", "127.0.0.1:0"};
      words.insert(words.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& w : words) argv.push_back(w.data());
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    std::string line;
    char c = 0;
    pollfd p{out[0], POLLIN, 0};
    while (::poll(&p, 1, 10000) == 1 && ::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(out[0]);
    const auto at = line.find(" on port ");
    if (at != std::string::npos) port_ = static_cast<std::uint16_t>(std::stoul(line.substr(at + 9)));
  }
  ~MemnodeProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  MemnodeProcess(const MemnodeProcess&) = delete;
  MemnodeProcess& operator=(const MemnodeProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string spec() const { return "tcp:127.0.0.1:" + std::to_string(port_); }
  bool alive() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::uint64_t rss_anon() const { return Daemon::rss_anon_of(pid_); }
  std::uint64_t cpu_ticks() const { return Daemon::cpu_ticks_of(pid_); }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace pmhash::testing
