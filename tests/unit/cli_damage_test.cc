// tests/unit/cli_damage_test.cc - the `pmhash` tool on damaged pools
// (scan, scan --skip-damaged, get, check), put with --value-file, and a
// create that fails leaving nothing under the pool's name.
//
// Each test runs the built binary (PMHASH_CLI_PATH) as a child process, in a
// scratch directory under /dev/shm that is removed afterwards.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pmhash/options.h"
#include "scratch_file.h"
#include "subprocess.h"

extern char** environ;

namespace {

using Result = pmhash::testing::SpawnResult;

Result run_cli(const std::vector<std::string>& args) {
  return pmhash::testing::run_program(PMHASH_CLI_PATH, args);
}

// Runs `pmhash args...` with stdin read from `input`.
Result run_cli_with_stdin(const std::vector<std::string>& args, const std::string& input) {
  Result r;
  std::vector<std::string> words = {PMHASH_CLI_PATH};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int err_fd = ::memfd_create("cli-stderr", 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, input.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, words[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0);
  int status = 0;
  if (rc == 0 && ::waitpid(pid, &status, 0) == pid) {
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  r.err = pmhash::testing::read_all(err_fd);
  ::close(err_fd);
  return r;
}

std::string describe(const std::vector<std::string>& args, const Result& r) {
  std::string cmd = "pmhash";
  for (const std::string& a : args) cmd += " '" + a.substr(0, 80) + "'";
  return cmd + "\n  exit " + std::to_string(r.exit_code) + "\n  stdout: " + r.out.substr(0, 400) +
         "\n  stderr: " + r.err;
}

using pmhash::testing::read_file;
using pmhash::testing::write_file;

bool one_error_line(const std::string& err) {
  return err.rfind("pmhash: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

class CliDamageTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string ok(const std::vector<std::string>& args) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << describe(args, r);
    return r.out;
  }
  pmhash::testing::ScratchDir dir_{"pmhash-cli-damage"};
  std::string pool_ = dir_.str() + "/test.pool";
};

// Three keys; the value length of the second one's item (or record) is set
// far beyond its block. scan stops at it with Corruption naming the pool,
// scan --skip-damaged prints the other two and reports one entry skipped,
// get of the damaged key is an error and of the others works, check fails;
// nothing dies by a signal.
TEST_P(CliDamageTest, ScanSkipDamagedSalvagesEveryReadablePair) {
  ok({"create", pool_, "--engine", GetParam(), "--size", "16M"});
  const std::vector<std::string> keys = {"a-long-key-number-0001", "a-long-key-number-0002",
                                         "a-long-key-number-0003"};
  // Values that do not hold their key, so that each key is in the pool once.
  auto value = [](const std::string& k) { return "a value numbered " + k.substr(k.size() - 4); };
  for (const std::string& k : keys) ok({"put", pool_, k, value(k)});
  // An item (clevel, nehash, pmeh) and a record (dali) both end their
  // header with the 32-bit value length, just before the key bytes.
  std::string bytes = read_file(pool_);
  const std::size_t at = bytes.find(keys[1]);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find(keys[1], at + 1), std::string::npos) << "the key is in the pool twice";
  const std::uint32_t huge = 0xfffffff0u;
  std::memcpy(bytes.data() + at - 4, &huge, 4);
  write_file(pool_, bytes);

  Result r = run_cli({"scan", pool_});
  EXPECT_EQ(r.exit_code, 1) << describe({"scan"}, r);
  EXPECT_TRUE(one_error_line(r.err)) << describe({"scan"}, r);
  EXPECT_NE(r.err.find("pool " + pool_), std::string::npos) << describe({"scan"}, r);
  EXPECT_NE(r.err.find(GetParam()), std::string::npos) << "the message names the engine: " << r.err;

  r = run_cli({"scan", pool_, "--skip-damaged"});
  EXPECT_EQ(r.exit_code, 1) << describe({"scan", "--skip-damaged"}, r);
  EXPECT_NE(r.out.find(keys[0] + "\t" + value(keys[0]) + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(keys[2] + "\t" + value(keys[2]) + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(keys[1]), std::string::npos) << r.out;
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("skipped 1 damaged entry"), std::string::npos) << r.err;

  r = run_cli({"get", pool_, keys[1]});
  EXPECT_EQ(r.exit_code, 1) << describe({"get", keys[1]}, r);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_EQ(ok({"get", pool_, keys[0]}), value(keys[0]) + "\n");

  r = run_cli({"check", pool_});
  EXPECT_EQ(r.exit_code, 1) << describe({"check"}, r);
  r = run_cli({"info", pool_});
  EXPECT_LE(r.exit_code, 1) << describe({"info"}, r);
}

// On an undamaged pool --skip-damaged skips nothing: exit 0, no stderr.
TEST_P(CliDamageTest, ScanSkipDamagedOnAHealthyPoolExitsZero) {
  ok({"create", pool_, "--engine", GetParam(), "--size", "16M"});
  ok({"put", pool_, "k1", "v1"});
  ok({"put", pool_, "k2", "v2"});
  const Result r = run_cli({"scan", pool_, "--skip-damaged"});
  EXPECT_EQ(r.exit_code, 0) << describe({"scan", "--skip-damaged"}, r);
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("k1\tv1\n"), std::string::npos);
  EXPECT_NE(r.out.find("k2\tv2\n"), std::string::npos);
}

// A 1 MiB value, more than the command line takes, from a file and from
// stdin; it reads back whole.
TEST_P(CliDamageTest, PutValueFileTakesAOneMebibyteValue) {
  ok({"create", pool_, "--engine", GetParam(), "--size", "64M"});
  std::string value(1 << 20, '\0');
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>('a' + i * 7 % 26);
  const std::string file = dir_.str() + "/value";
  write_file(file, value);
  ok({"put", pool_, "big", "--value-file", file});
  EXPECT_EQ(ok({"get", pool_, "big"}), value + "\n");
  value[12345] = '#';
  write_file(file, value);
  const Result r = run_cli_with_stdin({"put", pool_, "big", "--value-file", "-"}, file);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ok({"get", pool_, "big"}), value + "\n");
}

INSTANTIATE_TEST_SUITE_P(PoolEngines, CliDamageTest,
                         ::testing::Values("clevel", "nehash", "pmeh", "dali"),
                         [](const auto& info) { return info.param; });

class CliFileTest : public ::testing::Test {
 protected:
  pmhash::testing::ScratchDir dir_{"pmhash-cli-files"};
  std::string pool_ = dir_.str() + "/test.pool";
};

// A value over the store's limit is refused before any pool is opened, in
// one line naming the limit; VALUE and --value-file together are a usage
// error.
TEST_F(CliFileTest, PutValueFileOverTheLimitIsRefused) {
  ASSERT_EQ(run_cli({"create", pool_, "--size", "16M"}).exit_code, 0);
  const std::string file = dir_.str() + "/huge";
  pmhash::testing::create_zero_file(file, pmhash::kMaxValueSize + 1);  // sparse
  const std::string before = read_file(pool_);
  Result r = run_cli({"put", pool_, "k", "--value-file", file});
  EXPECT_EQ(r.exit_code, 2) << describe({"put", "--value-file"}, r);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find(std::to_string(pmhash::kMaxValueSize)), std::string::npos) << r.err;
  EXPECT_TRUE(read_file(pool_) == before);
  r = run_cli({"put", pool_, "k", "v", "--value-file", file});
  EXPECT_EQ(r.exit_code, 2) << describe({"put", "k", "v", "--value-file"}, r);
  r = run_cli({"put", pool_, "k"});
  EXPECT_EQ(r.exit_code, 2) << describe({"put", "k"}, r);
  r = run_cli({"put", pool_, "k", "--value-file", dir_.str() + "/missing"});
  EXPECT_EQ(r.exit_code, 2) << describe({"put", "--value-file missing"}, r);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
}

// A create that fails midway (the file system cannot hold the size) leaves
// no file at all in the directory: neither the pool nor its temporary.
TEST_F(CliFileTest, FailedCreateLeavesNoFileUnderThePoolsName) {
  const Result r = run_cli({"create", pool_, "--size", "64T"});
  EXPECT_EQ(r.exit_code, 1) << describe({"create", "--size", "64T"}, r);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find(pool_), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".creating-"), std::string::npos) << "the message names the temporary: " << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path())) << "create left a file behind";
}

// A create killed while it builds the pool leaves nothing under the pool's
// name, or a whole pool (killed after the rename): never a partial one. The
// child is killed once its temporary file exists.
TEST_F(CliFileTest, KilledCreateLeavesNoPartialPool) {
  std::vector<std::string> words = {PMHASH_CLI_PATH, "create", pool_, "--size", "256M"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, words[0].c_str(), nullptr, nullptr, argv.data(), environ), 0);
  // Waits for the temporary to appear (or the create to end first).
  bool seen = false, ended = false;
  int status = 0;
  while (!seen && !ended) {
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      seen |= e.path().filename().string().find(".creating-") != std::string::npos;
    }
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
  }
  if (!ended) {
    ::kill(pid, SIGKILL);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  }
  if (std::filesystem::exists(pool_)) {
    const Result r = run_cli({"check", pool_});
    EXPECT_EQ(r.exit_code, 0) << "a killed create left a partial pool: " << describe({"check"}, r);
  }
  EXPECT_TRUE(seen || ended);
}

}  // namespace
