// tests/server_process.h - pmhash-server as a child process: started with
// flags, its port read from the line it prints when ready, stopped by a
// signal of the test's choice.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pmhash::test {

class ServerProcess {
 public:
  // Starts `PMHASH_SERVER_PATH args... --port 0` and waits for its ready
  // line. ok() is false when it exits first; output() has what it printed.
  explicit ServerProcess(std::vector<std::string> args) {
    args.insert(args.begin(), PMHASH_SERVER_PATH);
    args.push_back("--port");
    args.push_back("0");
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_fd_ = out[0];
    // The ready line: "... ready on 127.0.0.1:PORT".
    const std::string marker = "ready on 127.0.0.1:";
    char buf[4096];
    for (;;) {
      const std::size_t at = output_.find(marker);
      if (at != std::string::npos && output_.find('\n', at) != std::string::npos) {
        port_ = static_cast<std::uint16_t>(std::stoul(output_.substr(at + marker.size())));
        return;
      }
      const ssize_t r = ::read(out_fd_, buf, sizeof(buf));
      if (r <= 0) return;  // exited before it was ready
      output_.append(buf, static_cast<std::size_t>(r));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool ok() const { return port_ != 0; }
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Sends `sig` and waits for the exit; the wait status, and the rest of
  // what the server printed in output().
  int stop(int sig) {
    ::kill(pid_, sig);
    return wait();
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    char buf[4096];
    for (;;) {
      const ssize_t r = ::read(out_fd_, buf, sizeof(buf));
      if (r <= 0) break;
      output_.append(buf, static_cast<std::size_t>(r));
    }
    return status;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  std::uint16_t port_ = 0;
  std::string output_;
};

}  // namespace pmhash::test
