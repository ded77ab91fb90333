// tests/subprocess.h - run a built program as a child process and capture what it
// prints, for the tests of the command-line tools (pmhash, pmhash-bench).
//
// stdin is /dev/null; stdout and stderr go to memory files that are read
// back after the child exits.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace pmhash::testing {

struct SpawnResult {
  int exit_code = -1;  // 128 + signal number when the program was killed
  std::string out;
  std::string err;
};

inline std::string read_all(int fd) {
  std::string data;
  if (lseek(fd, 0, SEEK_SET) != 0) return data;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  return data;
}

// Runs `program args...` and waits for it.
inline SpawnResult run_program(const std::string& program, const std::vector<std::string>& args) {
  SpawnResult r;
  const int out_fd = memfd_create("spawn-stdout", 0);
  const int err_fd = memfd_create("spawn-stderr", 0);
  EXPECT_GE(out_fd, 0);
  EXPECT_GE(err_fd, 0);

  std::vector<std::string> argv_strings = {program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  pid_t pid = -1;
  const int spawn_error = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(spawn_error, 0) << "cannot start " << program;
  if (spawn_error == 0) {
    int wstatus = 0;
    EXPECT_EQ(waitpid(pid, &wstatus, 0), pid);
    if (WIFEXITED(wstatus)) r.exit_code = WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) r.exit_code = 128 + WTERMSIG(wstatus);
  }
  r.out = read_all(out_fd);
  r.err = read_all(err_fd);
  close(out_fd);
  close(err_fd);
  return r;
}

}  // namespace pmhash::testing
