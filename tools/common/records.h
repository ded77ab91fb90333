// tools/common/records.h - the records of a generated data set, shared by
// `pmhash load` (tools/cli), pmhash-bench and pmhash-readback (bench/).
//
// Record i of a data set is a pure function of (i, seed, key size, value
// size, format): another run, or another program, rebuilds any key a load
// inserted without storing it. Two formats, each a bijection from record
// numbers to keys, so distinct records always have distinct keys:
//
//   decimal  (`pmhash load`, pmhash-readback; printable, any key size >= 1)
//     key(i)      = the w-digit zero-padded decimal of P(i), w = min(key
//                   size, 19), repeated up to key size bytes. P is a seeded
//                   permutation of [0, 10^w) built by cycle walking (Black
//                   and Rogaway, "Ciphers with arbitrary finite domains",
//                   2002): a seeded bijection on b-bit integers, 2^b >= 10^w,
//                   is applied to i until the result falls below 10^w;
//                   since 2^b < 2 * 10^w that takes fewer than two steps on
//                   average. key_space() = 10^w keys.
//     value(i, v) = the 20-digit decimal of mix(s_v + i), s_v = mix((seed +
//                   v) ^ "values"), repeated or cut to value size bytes.
//
//   code     (pmhash-bench; constant cost per key, binary short keys)
//     key(i)      = encode_key(mix(i ^ mix(seed))): from kMinTextKeySize
//                   bytes on, 11 characters of a 64-letter alphabet holding
//                   the 64-bit code, then filler derived from it; from
//                   kMinCodeKeySize to kMinTextKeySize - 1 bytes, the code's
//                   8 bytes (least significant first) and filler bytes, like
//                   the random 8-byte integers of the papers' evaluations.
//                   key_space() = 2^64 (records from 2^40 on serve as keys
//                   that are never inserted).
//     value(i, v) = encode(mix(i ^ mix(seed + v + 1))) cut to value size.
//
// mix is SplitMix64's output function (Steele, Lea, Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014), a bijection on 64-bit
// words. Version v of a value (0 = as inserted, 1 = as updated) lets a
// reader check it got the right record and the right write.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pmhash::records {

inline constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// code format: characters needed to hold a 64-bit code in the 64-letter
// alphabet (the shortest text key), and the shortest key at all.
inline constexpr std::size_t kMinTextKeySize = 11;
inline constexpr std::size_t kMinCodeKeySize = 8;

// Writes `size` characters for `code` to `out`: the 11 code characters
// first (fewer if size < 11), then filler. The alphabet [0-9A-Za-z_.] is
// printable, shell-safe and never starts a key with '-', so a key can be
// passed to `pmhash get POOL KEY` as is.
inline void encode(std::uint64_t code, char* out, std::size_t size) {
  static constexpr char kAlphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.";
  static_assert(sizeof(kAlphabet) == 64 + 1);
  std::uint64_t bits = code;
  std::size_t i = 0;
  for (; i < size && i < kMinTextKeySize; ++i) {
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

// A key of `size` bytes for `code`: text from kMinTextKeySize bytes on,
// binary below (see the top of the file).
inline void encode_key(std::uint64_t code, char* out, std::size_t size) {
  if (size >= kMinTextKeySize) {
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

// The code encode_key(code, ...) wrote into a binary key.
inline std::uint64_t decode_binary_key(std::string_view key) {
  std::uint64_t code = 0;
  for (std::size_t i = 0; i < 8 && i < key.size(); ++i) {
    code |= std::uint64_t{static_cast<unsigned char>(key[i])} << (8 * i);
  }
  return code;
}

enum class Format { kDecimal, kCode };

class RecordGen {
 public:
  // decimal format: digits of the permuted number; longer keys repeat them.
  static constexpr std::size_t kMaxDigits = 19;

  // Distinct decimal keys of `key_size` bytes: 10^min(key_size, 19).
  static std::uint64_t decimal_key_space(std::size_t key_size) {
    std::uint64_t n = 1;
    for (std::size_t d = 0; d < std::min(key_size, kMaxDigits); ++d) n *= 10;
    return n;
  }

  // key_size: at least 1 (decimal) or kMinCodeKeySize (code); the caller
  // checks, as each front end words its own error.
  RecordGen(Format format, std::uint64_t seed, std::size_t key_size, std::size_t value_size)
      : format_(format), seed_(seed), key_size_(key_size), value_size_(value_size) {
    if (format_ == Format::kCode) {
      key_salt_ = mix(seed);
      return;
    }
    digits_ = std::min(key_size, kMaxDigits);
    domain_ = decimal_key_space(key_size);
    while (bits_ < 64 && (std::uint64_t{1} << bits_) < domain_) ++bits_;
    mask_ = bits_ == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits_) - 1;
    shift_ = (bits_ + 1) / 2;
    for (std::size_t r = 0; r < kRounds; ++r) {
      multiplier_[r] = mix(~r) | 1;  // odd: a bijection modulo 2^bits
      addend_[r] = mix(seed + r);
    }
  }

  Format format() const { return format_; }
  std::size_t key_size() const { return key_size_; }
  std::size_t value_size() const { return value_size_; }

  // Records with distinct keys: i must stay below this.
  std::uint64_t key_space() const {
    return format_ == Format::kCode ? ~std::uint64_t{0} : domain_;
  }

  // Writes record i's key to out[0, key_size).
  void key(std::uint64_t i, char* out) const {
    if (format_ == Format::kCode) {
      encode_key(mix(i ^ key_salt_), out, key_size_);
    } else {
      decimal_repeated(permute(i), digits_, key_size_, out);
    }
  }
  void key(std::uint64_t i, std::string* out) const {
    out->resize(key_size_);
    key(i, out->data());
  }
  std::string key(std::uint64_t i) const {
    std::string k;
    key(i, &k);
    return k;
  }

  // Writes version `version` of record i's value to out[0, value_size).
  void value(std::uint64_t i, unsigned version, char* out) const {
    if (format_ == Format::kCode) {
      encode(mix(i ^ mix(seed_ + version + 1)), out, value_size_);
    } else {
      decimal_repeated(mix(mix((seed_ + version) ^ kValueSalt) + i), 20, value_size_, out);
    }
  }
  void value(std::uint64_t i, unsigned version, std::string* out) const {
    out->resize(value_size_);
    value(i, version, out->data());
  }

 private:
  static constexpr std::size_t kRounds = 3;
  // Separates the decimal value stream from the key permutation of the same
  // seed.
  static constexpr std::uint64_t kValueSalt = 0x76616c7565730000ULL;  // "values\0\0"

  // A bijection on bits_-bit integers: each step (multiply by an odd number,
  // add, xor with a right shift of itself) is one.
  std::uint64_t mix_bits(std::uint64_t x) const {
    for (std::size_t r = 0; r < kRounds; ++r) {
      x = (x * multiplier_[r] + addend_[r]) & mask_;
      x ^= x >> shift_;
    }
    return x;
  }

  // Cycle walking: the first value of mix_bits^k(i), k >= 1, inside
  // [0, domain_) is a permutation of [0, domain_).
  std::uint64_t permute(std::uint64_t i) const {
    std::uint64_t x = i;
    do {
      x = mix_bits(x);
    } while (x >= domain_);
    return x;
  }

  // `width` zero-padded decimal digits of n, repeated or cut to `size` bytes.
  static void decimal_repeated(std::uint64_t n, std::size_t width, std::size_t size, char* out) {
    char digits[20];
    for (std::size_t d = width; d-- > 0;) {
      digits[d] = static_cast<char>('0' + n % 10);
      n /= 10;
    }
    for (std::size_t k = 0; k < size; ++k) out[k] = digits[k % width];
  }

  Format format_;
  std::uint64_t seed_;
  std::size_t key_size_;
  std::size_t value_size_;
  std::uint64_t key_salt_ = 0;  // code
  // decimal: the permutation of [0, domain_).
  std::size_t digits_ = 0;
  std::uint64_t domain_ = 0;
  unsigned bits_ = 1;
  std::uint64_t mask_ = 0;
  unsigned shift_ = 1;
  std::uint64_t multiplier_[kRounds] = {};
  std::uint64_t addend_[kRounds] = {};
};

}  // namespace pmhash::records
