// tests/scratch_file.h - what tests need around a pool-like file: a path
// under /dev/shm unique to the process and the running test, a scratch
// directory removed afterwards, a zero-filled file of a given size, a
// file's bytes read and written whole, and PMEM2_FORCE_GRANULARITY restored
// after a test that forces it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

namespace pmhash::testing {

// "/dev/shm/<prefix>-<pid>-<test name>", with '/' of parameterised test
// names replaced.
inline std::string scratch_path(const std::string& prefix) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return "/dev/shm/" + prefix + "-" + std::to_string(::getpid()) + "-" + name;
}

// A fresh, empty directory "<base>/<prefix>-<pid>-<n>", on /dev/shm when
// there is one (so that syncs are cheap), removed with everything in it when
// the object goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "pmhash-scratch") {
    static std::atomic<unsigned> counter{0};
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::path(::testing::TempDir());
    path_ = base / (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Creates (or truncates) `path` as `size` zero bytes.
inline void create_zero_file(const std::string& path, std::size_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0) << path << ": " << std::strerror(errno);
  ::close(fd);
}

// Restores PMEM2_FORCE_GRANULARITY, set or unset, when it goes out of scope.
class GranularityGuard {
 public:
  GranularityGuard() {
    if (const char* g = std::getenv(kVariable)) saved_ = g;
  }
  ~GranularityGuard() {
    if (saved_) {
      ::setenv(kVariable, saved_->c_str(), 1);
    } else {
      ::unsetenv(kVariable);
    }
  }
  GranularityGuard(const GranularityGuard&) = delete;
  GranularityGuard& operator=(const GranularityGuard&) = delete;

  void force(const char* granularity) { ::setenv(kVariable, granularity, 1); }

 private:
  static constexpr const char* kVariable = "PMEM2_FORCE_GRANULARITY";
  std::optional<std::string> saved_;
};

// Every byte of the file at `path` (empty when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file at `path` with `bytes`; a fatal test failure when the
// write does not complete (call it under ASSERT_NO_FATAL_FAILURE).
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "could not write " << path;
}

}  // namespace pmhash::testing
