// tests/bench/records_test.cc - the shared record generator
// (tools/common/records.h): decimal records are the ones `pmhash load` has
// always written (pinned below), code records the ones pmhash-bench's keys
// and values are made of, and both formats give distinct keys.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "records.h"

namespace {

using pmhash::records::Format;
using pmhash::records::RecordGen;

// `pmhash load --seed 7 --key-size 24 --value-size 30` and `--seed 1
// --key-size 5 --value-size 8`: records 0, 1 and 2.
TEST(Records, DecimalRecordsAreThoseOfPmhashLoad) {
  const RecordGen long_keys(Format::kDecimal, 7, 24, 30);
  EXPECT_EQ(long_keys.key(0), "875142906861803912287514");
  EXPECT_EQ(long_keys.key(1), "259153370235652717025915");
  EXPECT_EQ(long_keys.key(2), "138687044722271777713868");
  std::string value;
  long_keys.value(0, 0, &value);
  EXPECT_EQ(value, "093230823680817792550932308236");
  long_keys.value(2, 0, &value);
  EXPECT_EQ(value, "166907499225154354921669074992");

  const RecordGen short_keys(Format::kDecimal, 1, 5, 8);
  EXPECT_EQ(short_keys.key(0), "32724");
  EXPECT_EQ(short_keys.key(1), "94735");
  EXPECT_EQ(short_keys.key(2), "51190");
  short_keys.value(1, 0, &value);
  EXPECT_EQ(value, "15587261");
}

TEST(Records, DecimalKeysFillTheirSpaceWithoutCollisions) {
  const RecordGen gen(Format::kDecimal, 3, 3, 4);
  ASSERT_EQ(gen.key_space(), 1000u);
  std::set<std::string> keys;
  for (std::uint64_t i = 0; i < gen.key_space(); ++i) keys.insert(gen.key(i));
  EXPECT_EQ(keys.size(), 1000u);
}

TEST(Records, CodeKeysAreTheSeededCodeOfTheRecord) {
  const std::uint64_t seed = 5;
  const RecordGen binary(Format::kCode, seed, 8, 8);
  for (std::uint64_t r : {0u, 1u, 999u}) {
    EXPECT_EQ(pmhash::records::decode_binary_key(binary.key(r)),
              pmhash::records::mix(r ^ pmhash::records::mix(seed)));
  }
  const RecordGen text(Format::kCode, seed, 16, 16);
  std::set<std::string> keys;
  for (std::uint64_t r = 0; r < 10000; ++r) {
    const std::string k = text.key(r);
    ASSERT_EQ(k.size(), 16u);
    EXPECT_NE(k[0], '-');
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), 10000u);
}

TEST(Records, ValueVersionsDiffer) {
  for (Format f : {Format::kDecimal, Format::kCode}) {
    const RecordGen gen(f, 9, 16, 24);
    std::string inserted, updated;
    gen.value(4, 0, &inserted);
    gen.value(4, 1, &updated);
    EXPECT_EQ(inserted.size(), 24u);
    EXPECT_NE(inserted, updated);
  }
}

}  // namespace
