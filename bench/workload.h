// bench/workload.h - keys, values and timed multi-threaded phases shared by
// pmhash-bench's micro workload and pmhash-readback.
//
// Records. A data set holds the records of tools/common/records.h: the
// code format for pmhash-bench (keys of at least 11 bytes are text there,
// so any key can be shown and passed on a command line), the decimal format
// for pmhash-readback (the records `pmhash load` writes). With absent keys
// it holds 2N keys: records [0, N) are inserted by the benchmarks, records
// [N, 2N) are never inserted and serve as the keys of negative searches;
// the formats are bijections, so no absent key equals a present one. Value
// version 0 is the value inserted, version 1 the value an update writes.
//
// Everything is generated before timing and stored in contiguous buffers; the
// timed loops only index them.
//
// Phases. run_phase() starts T threads, lines them up on a std::barrier,
// and times the phase from the first worker's start to the last worker's
// end, each taken by the worker itself. Thread t handles
// the index range [n*t/T, n*(t+1)/T). Each worker counts operations whose
// outcome was not the expected one and keeps the first such message, so a
// benchmark fails loudly instead of measuring a broken table.
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pmhash/options.h"
#include "records.h"

namespace pmhash::bench {

// Thrown for any failed check or refused argument; main() prints it and
// exits non-zero.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The shortest text key of the code format, and its shortest key at all
// (ycsb.h: keys of 8 to 10 bytes are binary).
inline constexpr std::size_t kMinKeySize = records::kMinTextKeySize;
inline constexpr std::size_t kMinBinaryKeySize = records::kMinCodeKeySize;

using records::decode_binary_key;
using records::encode;
using records::encode_key;
using records::mix;

// A key as error messages show it: as is when every byte is printable,
// else "0x" and its bytes in hex (binary keys).
inline std::string printable_key(std::string_view key) {
  const bool text = std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c < 127; });
  if (text) return std::string(key);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  for (char c : key) {
    out += kHex[static_cast<unsigned char>(c) >> 4];
    out += kHex[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

class Dataset {
 public:
  // Generates `records` present keys of `format`, (with_absent) as many
  // absent keys, the inserted and updated value of each record, and a
  // seeded permutation of [0, records) used as the access order of
  // searches, updates and deletes.
  Dataset(std::uint64_t records, std::size_t key_size, std::size_t value_size,
          std::uint64_t seed, bool with_absent, records::Format format = records::Format::kCode)
      : records_(records), key_size_(key_size), value_size_(value_size) {
    if (format == records::Format::kCode && key_size < kMinKeySize) {
      throw Failure("key size " + std::to_string(key_size) + " is too small: keys need at least " +
                    std::to_string(kMinKeySize) + " bytes to be distinct (use --key-size 11 or more)");
    }
    if (records == 0 || records > UINT32_MAX) {
      throw Failure("records must be between 1 and " + std::to_string(UINT32_MAX));
    }
    const std::uint64_t key_count = with_absent ? 2 * records : records;
    const records::RecordGen gen(format, seed, key_size, value_size);
    if (key_count > gen.key_space()) {
      throw Failure(std::to_string(key_count) + " distinct keys do not fit in " +
                    std::to_string(key_size) + "-byte keys (at most " +
                    std::to_string(gen.key_space()) + "); raise --key-size");
    }
    keys_.resize(key_count * key_size);
    for (std::uint64_t i = 0; i < key_count; ++i) gen.key(i, &keys_[i * key_size]);
    for (unsigned v = 0; v < kVersions; ++v) {
      values_[v].resize(records * value_size);
      for (std::uint64_t i = 0; i < records; ++i) {
        gen.value(i, v, values_[v].data() + i * value_size);
      }
    }
    order_.resize(records);
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    std::mt19937_64 rng(seed);
    std::shuffle(order_.begin(), order_.end(), rng);
  }

  std::uint64_t records() const { return records_; }

  // Record i's key; i in [records, 2 * records) are the absent keys.
  std::string_view key(std::uint64_t i) const {
    return {&keys_[i * key_size_], key_size_};
  }
  std::string_view absent_key(std::uint64_t i) const { return key(records_ + i); }

  // version 0: the value inserted; version 1: the value written by update.
  std::string_view value(std::uint64_t i, unsigned version) const {
    return {values_[version].data() + i * value_size_, value_size_};
  }

  // The j-th record of the shuffled access order.
  std::uint64_t shuffled(std::uint64_t j) const { return order_[j]; }

 private:
  static constexpr unsigned kVersions = 2;

  std::uint64_t records_;
  std::size_t key_size_;
  std::size_t value_size_;
  std::vector<char> keys_;
  std::vector<char> values_[kVersions];
  std::vector<std::uint32_t> order_;
};

// One worker's count of operations with an unexpected outcome. Padded so
// workers do not share a cache line.
struct alignas(64) Tally {
  std::uint64_t unexpected = 0;
  std::string first_error;

  void fail(std::string message) {
    if (unexpected++ == 0) first_error = std::move(message);
  }
};

struct PhaseResult {
  std::string name;
  std::uint64_t ops = 0;
  double seconds = 0;

  double mops() const { return seconds > 0 ? static_cast<double>(ops) / seconds / 1e6 : 0; }
};

// Runs fn(begin, end, tally) on `threads` threads over [0, ops), started
// together, and times it. Throws Failure naming the phase and the first
// unexpected outcome if any worker saw one.
template <typename Fn>
PhaseResult run_phase(const std::string& name, unsigned threads, std::uint64_t ops, Fn fn) {
  using Clock = std::chrono::steady_clock;
  std::vector<Tally> tallies(threads);
  // Each worker's start and end: the phase runs from the first start to the
  // last end. Times taken by the workers themselves, so a timing thread that
  // is descheduled when the barrier opens cannot shorten the phase.
  std::vector<Clock::time_point> starts(threads), ends(threads);
  std::barrier sync(static_cast<std::ptrdiff_t>(threads) + 1);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::uint64_t begin = ops * t / threads;
      const std::uint64_t end = ops * (t + 1) / threads;
      sync.arrive_and_wait();  // start line
      starts[t] = Clock::now();
      fn(begin, end, tallies[t]);
      ends[t] = Clock::now();
      sync.arrive_and_wait();  // finish line
    });
  }
  sync.arrive_and_wait();
  sync.arrive_and_wait();
  for (auto& w : workers) w.join();
  const Clock::time_point start = *std::min_element(starts.begin(), starts.end());
  const Clock::time_point stop = *std::max_element(ends.begin(), ends.end());

  std::uint64_t unexpected = 0;
  std::string first;
  for (const Tally& tally : tallies) {
    if (tally.unexpected != 0 && first.empty()) first = tally.first_error;
    unexpected += tally.unexpected;
  }
  if (unexpected != 0) {
    throw Failure(name + ": " + std::to_string(unexpected) + " of " + std::to_string(ops) +
                  " operations had an unexpected outcome; first: " + first);
  }
  return {name, ops, std::chrono::duration<double>(stop - start).count()};
}

// Throws Failure(what) unless `ok`.
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw Failure(what);
}

}  // namespace pmhash::bench
