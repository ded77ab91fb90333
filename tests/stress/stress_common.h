// tests/stress/stress_common.h - what the stress tests of every engine share:
// their scale, their keys and values, and how a worker thread reports a
// mismatch.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace pmhash::stress {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kScale = 1;  // sanitizers run the same tests, smaller
#else
inline constexpr int kScale = 4;
#endif

inline std::string key_of(std::uint64_t k) { return "k" + std::to_string(k); }
inline std::string value_of(std::uint64_t k, std::uint64_t version) {
  return std::to_string(k) + ":" + std::to_string(version) + std::string(k % 23, '.');
}

// Mismatches seen by worker threads (non-fatal gtest failures may be added
// from any thread); the first ten are reported in full.
class Mismatches {
 public:
  void report(unsigned thread, const std::string& what) {
    if (count_.fetch_add(1) < 10) ADD_FAILURE() << "thread " << thread << ": " << what;
  }
  int count() const { return count_.load(); }

 private:
  std::atomic<int> count_{0};
};

}  // namespace pmhash::stress
