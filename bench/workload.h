// bench/workload.h - keys, values and timed multi-threaded phases shared by
// the benchmark programs (pmhash-microbench, pmhash-readback).
//
// Keys. Record i of a data set with seed s has the key
//
//     encode(mix(i ^ mix(s)))  padded to key_size
//
// where mix is the SplitMix64 finaliser, a bijection on 64-bit words, so
// distinct records have distinct 64-bit codes and therefore distinct keys.
// encode writes the code as 11 characters of a 64-letter alphabet (6 bits
// each, 66 >= 64 bits); key_size must be at least kMinKeySize. The alphabet
// is [0-9A-Za-z_.]: printable, shell-safe, and never a leading '-', so a key
// can be passed to `pmhash get POOL KEY` as is. The remaining key_size - 11
// characters are filler derived from the code, so keys sharing a prefix are
// not artificially common. pmhash-bench (ycsb.h) also takes keys of 8 to 10
// bytes, which are binary (encode_key): the code's 8 bytes, then filler.
//
// A data set holds 2N keys: records [0, N) are inserted by the benchmarks,
// records [N, 2N) are never inserted and serve as the keys of negative
// searches. Because mix is a bijection, no absent key equals a present one.
//
// Values. Version v (0 = inserted, 1 = updated) of record i is encoded the
// same way from mix(i ^ mix(s + v + 1)), padded or truncated to value_size,
// so a reader can check it got the value of the right record and version.
//
// Everything is generated before timing and stored in contiguous buffers; the
// timed loops only index them.
//
// Phases. run_phase() starts T threads, lines them up on a std::barrier with
// the timing thread, takes the time when the barrier opens, and stops the
// clock when the last worker arrives at the closing barrier. Thread t handles
// the index range [n*t/T, n*(t+1)/T). Each worker counts operations whose
// outcome was not the expected one and keeps the first such message, so a
// benchmark fails loudly instead of measuring a broken table.
#pragma once

#include <CLI/CLI.hpp>
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

namespace pmhash::bench {

// Thrown for any failed check or refused argument; main() prints it and
// exits non-zero.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Characters needed to hold a 64-bit code in the 64-letter alphabet: the
// shortest text key.
inline constexpr std::size_t kMinKeySize = 11;
// The shortest key of pmhash-bench (ycsb.h): keys of kMinBinaryKeySize to
// kMinKeySize - 1 bytes are binary (encode_key).
inline constexpr std::size_t kMinBinaryKeySize = 8;

// The --key-size and --value-size flags, the same in every bench program.
inline void add_item_size_options(CLI::App& app, std::size_t* key_size, std::size_t* value_size) {
  app.add_option("--key-size", *key_size, "bytes per key (at least 11)")
      ->check(CLI::Range(kMinKeySize, pmhash::kMaxKeySize))
      ->capture_default_str();
  app.add_option("--value-size", *value_size, "bytes per value")
      ->check(CLI::Range(std::size_t{0}, pmhash::kMaxValueSize))
      ->capture_default_str();
}

inline constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Writes `size` characters for `code` to `out`: the 11 code characters first
// (fewer if size < 11), then filler.
inline void encode(std::uint64_t code, char* out, std::size_t size) {
  static constexpr char kAlphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.";
  static_assert(sizeof(kAlphabet) == 64 + 1);
  std::uint64_t bits = code;
  std::size_t i = 0;
  for (; i < size && i < kMinKeySize; ++i) {
    out[i] = kAlphabet[bits & 63];
    bits >>= 6;
  }
  std::uint64_t filler = code;
  for (; i < size; ++i) {
    if (i % 10 == 1) filler = mix(filler);
    out[i] = kAlphabet[filler & 63];
    filler >>= 6;
  }
}

// Writes a key of `size` bytes for `code`. From kMinKeySize bytes on, the
// text encoding above. Shorter keys (kMinBinaryKeySize and up) are binary:
// the code's 8 bytes, least significant first, then filler bytes derived
// from the code; distinct codes still give distinct keys, and since the code
// is a SplitMix64 image the keys are spread uniformly, like the random
// 8-byte integers of the papers' evaluations.
inline void encode_key(std::uint64_t code, char* out, std::size_t size) {
  if (size >= kMinKeySize) {
    encode(code, out, size);
    return;
  }
  std::uint64_t bits = code;
  std::uint64_t filler = mix(code);
  for (std::size_t i = 0; i < size; ++i) {
    if (i < 8) {
      out[i] = static_cast<char>(bits & 0xff);
      bits >>= 8;
    } else {
      out[i] = static_cast<char>(filler & 0xff);
      filler >>= 8;
    }
  }
}

// The code encode_key(code, ...) wrote into a binary key (size below
// kMinKeySize).
inline std::uint64_t decode_binary_key(std::string_view key) {
  std::uint64_t code = 0;
  for (std::size_t i = 0; i < 8 && i < key.size(); ++i) {
    code |= std::uint64_t{static_cast<unsigned char>(key[i])} << (8 * i);
  }
  return code;
}

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
  // Generates `records` present keys, (with_absent) as many absent keys, the
  // inserted and updated value of each record, and a seeded permutation of
  // [0, records) used as the access order of searches, updates and deletes.
  Dataset(std::uint64_t records, std::size_t key_size, std::size_t value_size,
          std::uint64_t seed, bool with_absent)
      : records_(records), key_size_(key_size), value_size_(value_size) {
    if (key_size < kMinKeySize) {
      throw Failure("key size " + std::to_string(key_size) + " is too small: keys need at least " +
                    std::to_string(kMinKeySize) + " bytes to be distinct (use --key-size 11 or more)");
    }
    if (records == 0 || records > UINT32_MAX) {
      throw Failure("records must be between 1 and " + std::to_string(UINT32_MAX));
    }
    const std::uint64_t key_count = with_absent ? 2 * records : records;
    keys_.resize(key_count * key_size);
    const std::uint64_t key_salt = mix(seed);
    for (std::uint64_t i = 0; i < key_count; ++i) {
      encode(mix(i ^ key_salt), &keys_[i * key_size], key_size);
    }
    for (unsigned v = 0; v < kVersions; ++v) {
      values_[v].resize(records * value_size);
      const std::uint64_t value_salt = mix(seed + v + 1);
      for (std::uint64_t i = 0; i < records; ++i) {
        encode(mix(i ^ value_salt), values_[v].data() + i * value_size, value_size);
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
  std::vector<Tally> tallies(threads);
  std::barrier sync(static_cast<std::ptrdiff_t>(threads) + 1);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::uint64_t begin = ops * t / threads;
      const std::uint64_t end = ops * (t + 1) / threads;
      sync.arrive_and_wait();  // start line
      fn(begin, end, tallies[t]);
      sync.arrive_and_wait();  // finish line
    });
  }
  sync.arrive_and_wait();
  const auto start = std::chrono::steady_clock::now();
  sync.arrive_and_wait();
  const auto stop = std::chrono::steady_clock::now();
  for (auto& w : workers) w.join();

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
