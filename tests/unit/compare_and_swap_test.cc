// tests/unit/compare_and_swap_test.cc - Store::compare_and_swap and
// Store::read_modify_write on every finished engine, in a pool file and on
// memory nodes: what each expectation means (absent, a value, removal),
// that a failed swap changes nothing, that counters incremented from
// several threads while other keys force the index to resize lose no
// increment, and that swapped values survive a close and a reopen.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "pmhash/store.h"
#include "remote/memnode.h"
#include "scratch_file.h"

namespace pmhash {
namespace {

struct Where {
  std::string engine;
  bool remote = false;
};

void PrintTo(const Where& w, std::ostream* os) {
  *os << w.engine << (w.remote ? " on memory nodes" : " in a pool");
}

std::vector<Where> every_engine() {
  std::vector<Where> out;
  for (const std::string& e : Store::engines()) out.push_back({e, false});
  for (const std::string& e : Store::remote_engines()) out.push_back({e, true});
  return out;
}

std::string where_name(const ::testing::TestParamInfo<Where>& info) {
  return info.param.engine + (info.param.remote ? "_on_memnodes" : "_in_a_pool");
}

class CompareAndSwap : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override {
    options_.engine = GetParam().engine;
    if (GetParam().remote) {
      std::string list;
      for (int n = 0; n < 2; ++n) {
        const std::string node = dir_.str() + "/mn" + std::to_string(n);
        const Status s = remote::create_memnode(node, 256u << 20, false);
        ASSERT_TRUE(s.ok()) << s.to_string();
        list += (n == 0 ? "shm:" : ",shm:") + node;
      }
      options_.memnodes = list;
    } else {
      path_ = dir_.str() + "/cas.pool";
      options_.pool_size = 256u << 20;
    }
    const Status s = Store::create(path_, options_, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void TearDown() override {
    if (store_) {
      EXPECT_TRUE(store_->close().ok());
    }
  }

  void reopen() {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    const Status s = Store::open(path_, options_, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  // The key's value, or nullopt when it is absent.
  std::optional<std::string> value_of(std::string_view key) {
    std::string v;
    const Status s = store_->get(key, &v);
    if (s.is_not_found()) return std::nullopt;
    EXPECT_TRUE(s.ok()) << s.to_string();
    return v;
  }

  testing::ScratchDir dir_{"pmhash-cas"};
  std::string path_;
  Options options_;
  std::unique_ptr<Store> store_;
};

using Opt = std::optional<std::string_view>;

TEST_P(CompareAndSwap, AnAbsentKeyIsInsertedOnlyWhenAbsentIsExpected) {
  Status s = store_->compare_and_swap("k", std::string_view("anything"), std::string_view("v"));
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  EXPECT_EQ(value_of("k"), std::nullopt);
  s = store_->compare_and_swap("k", std::nullopt, std::string_view("v1"));
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value_of("k"), "v1");
  EXPECT_EQ(store_->size(), 1u);
  s = store_->compare_and_swap("k", std::nullopt, std::string_view("v2"));
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  EXPECT_EQ(value_of("k"), "v1");
  // Removing an absent key, expecting it absent: a swap from absent to
  // absent, which changes nothing.
  s = store_->compare_and_swap("other", std::nullopt, std::nullopt);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value_of("other"), std::nullopt);
}

TEST_P(CompareAndSwap, APresentKeyChangesOnlyFromTheExpectedValue) {
  ASSERT_TRUE(store_->insert("k", "v1").ok());
  // Values that differ in length, in the last byte, in the first byte.
  for (const std::string& wrong : {std::string("v"), std::string("v2"), std::string("x1"),
                                   std::string("v1 "), std::string()}) {
    const Status s = store_->compare_and_swap("k", std::string_view(wrong), std::string_view("w"));
    EXPECT_TRUE(s.is_conflict()) << "expected '" << wrong << "': " << s.to_string();
    EXPECT_EQ(value_of("k"), "v1");
  }
  Status s = store_->compare_and_swap("k", std::string_view("v1"), std::string_view("v2"));
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value_of("k"), "v2");
  // Long values (beyond any engine's inline slot) compare whole.
  const std::string long1(3000, 'a');
  std::string long2 = long1;
  long2.back() = 'b';
  ASSERT_TRUE(store_->compare_and_swap("k", std::string_view("v2"), std::string_view(long1)).ok());
  s = store_->compare_and_swap("k", std::string_view(long2), std::string_view("short"));
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  EXPECT_EQ(value_of("k"), long1);
  ASSERT_TRUE(store_->compare_and_swap("k", std::string_view(long1), std::string_view(long2)).ok());
  EXPECT_EQ(value_of("k"), long2);
  // An empty value is a value, not absence.
  ASSERT_TRUE(store_->compare_and_swap("k", std::string_view(long2), std::string_view("")).ok());
  EXPECT_EQ(value_of("k"), "");
  s = store_->compare_and_swap("k", std::nullopt, std::string_view("x"));
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  EXPECT_EQ(store_->size(), 1u);
}

TEST_P(CompareAndSwap, RemovesOnlyFromTheExpectedValue) {
  ASSERT_TRUE(store_->insert("k", "v1").ok());
  Status s = store_->compare_and_swap("k", std::string_view("v0"), std::nullopt);
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  EXPECT_EQ(value_of("k"), "v1");
  s = store_->compare_and_swap("k", std::nullopt, std::nullopt);
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  s = store_->compare_and_swap("k", std::string_view("v1"), std::nullopt);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value_of("k"), std::nullopt);
  EXPECT_EQ(store_->size(), 0u);
  s = store_->compare_and_swap("k", std::string_view("v1"), std::nullopt);
  EXPECT_TRUE(s.is_conflict()) << s.to_string();
  // The key can come back.
  ASSERT_TRUE(store_->compare_and_swap("k", std::nullopt, std::string_view("v3")).ok());
  EXPECT_EQ(value_of("k"), "v3");
  EXPECT_TRUE(store_->check().ok());
}

TEST_P(CompareAndSwap, ChecksSizesLikeEveryWrite) {
  const std::string huge(kMaxValueSize + 1, 'x');
  EXPECT_TRUE(store_->compare_and_swap("k", std::nullopt, std::string_view(huge)).is_invalid_argument());
  EXPECT_TRUE(store_->compare_and_swap("k", std::string_view(huge), std::nullopt).is_invalid_argument());
  const std::string long_key(kMaxKeySize + 1, 'k');
  EXPECT_TRUE(store_->compare_and_swap(long_key, std::nullopt, std::string_view("v")).is_invalid_argument());
  EXPECT_EQ(store_->size(), 0u);
}

TEST_P(CompareAndSwap, ReadModifyWriteSeesTheCurrentValueAndKeepsOrRemoves) {
  std::vector<std::optional<std::string>> seen;
  auto record = [&](std::optional<std::string_view> cur) {
    seen.push_back(cur ? std::optional<std::string>(std::string(*cur)) : std::nullopt);
  };
  ASSERT_TRUE(store_
                  ->read_modify_write("k",
                                      [&](std::optional<std::string_view> cur) {
                                        record(cur);
                                        return Modification::set("1");
                                      })
                  .ok());
  ASSERT_TRUE(store_
                  ->read_modify_write("k",
                                      [&](std::optional<std::string_view> cur) {
                                        record(cur);
                                        return Modification::keep();
                                      })
                  .ok());
  EXPECT_EQ(value_of("k"), "1");
  ASSERT_TRUE(store_
                  ->read_modify_write("k",
                                      [&](std::optional<std::string_view> cur) {
                                        record(cur);
                                        return Modification::remove();
                                      })
                  .ok());
  EXPECT_EQ(value_of("k"), std::nullopt);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], std::nullopt);
  EXPECT_EQ(seen[1], "1");
  EXPECT_EQ(seen[2], "1");
}

// Threads increment a few shared counters through read_modify_write, and
// as many more threads swap their own keys while one thread inserts keys
// enough for the index to resize several times: no increment is lost, and
// each private key ends at the value of its last successful swap.
TEST_P(CompareAndSwap, ConcurrentIncrementsLoseNothingWhileTheIndexResizes) {
  constexpr unsigned kCounters = 4;
  constexpr unsigned kIncrementers = 3;
  constexpr unsigned kIncrements = 600;
  constexpr unsigned kFill = 20000;
  const auto counter = [](unsigned c) { return "counter-" + std::to_string(c); };
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kIncrementers; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned i = 0; i < kIncrements; ++i) {
        const std::string key = counter((t + i) % kCounters);
        const Status s = store_->read_modify_write(key, [](std::optional<std::string_view> cur) {
          const std::uint64_t n = cur ? std::stoull(std::string(*cur)) : 0;
          return Modification::set(std::to_string(n + 1));
        });
        if (!s.ok()) {
          ADD_FAILURE() << key << ": " << s.to_string();
          failed = true;
          return;
        }
      }
    });
  }
  threads.emplace_back([&] {
    // Private keys: every swap from the value this thread wrote last must
    // succeed (nobody else writes them).
    for (unsigned i = 0; i < kIncrements && !failed; ++i) {
      const std::string key = "own-" + std::to_string(i % 16);
      const std::string next = "round-" + std::to_string(i / 16);
      const std::optional<std::string> before =
          i < 16 ? std::nullopt : std::optional<std::string>("round-" + std::to_string(i / 16 - 1));
      const Status s = store_->compare_and_swap(
          key, before ? Opt(*before) : std::nullopt, std::string_view(next));
      if (!s.ok()) {
        ADD_FAILURE() << key << ": " << s.to_string();
        failed = true;
        return;
      }
    }
  });
  threads.emplace_back([&] {
    for (unsigned i = 0; i < kFill && !failed; ++i) {
      const Status s = store_->insert("fill-" + std::to_string(i), "some value of the fill");
      if (!s.ok()) {
        ADD_FAILURE() << "fill " << i << ": " << s.to_string();
        failed = true;
        return;
      }
    }
  });
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(failed);
  std::uint64_t total = 0;
  for (unsigned c = 0; c < kCounters; ++c) {
    const std::optional<std::string> v = value_of(counter(c));
    ASSERT_TRUE(v.has_value()) << counter(c);
    total += std::stoull(*v);
  }
  EXPECT_EQ(total, std::uint64_t{kIncrementers} * kIncrements);
  for (unsigned k = 0; k < 16; ++k) {
    const unsigned last = (kIncrements - 1 - k) / 16;  // the last i with i % 16 == k
    EXPECT_EQ(value_of("own-" + std::to_string(k)), "round-" + std::to_string(last)) << k;
  }
  EXPECT_EQ(store_->size(), kCounters + 16 + kFill);
  const Status s = store_->check();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_P(CompareAndSwap, SwappedValuesSurviveAReopen) {
  for (unsigned i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(store_->compare_and_swap(key, std::nullopt, std::string_view("a")).ok());
    if (i % 3 == 0) {
      ASSERT_TRUE(store_->compare_and_swap(key, std::string_view("a"), std::nullopt).ok());
    } else if (i % 3 == 1) {
      ASSERT_TRUE(store_->compare_and_swap(key, std::string_view("a"), std::string_view(std::string(200, 'b'))).ok());
    }
  }
  reopen();
  for (unsigned i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    const std::optional<std::string> v = value_of(key);
    if (i % 3 == 0) {
      EXPECT_EQ(v, std::nullopt) << key;
    } else if (i % 3 == 1) {
      EXPECT_EQ(v, std::string(200, 'b')) << key;
    } else {
      EXPECT_EQ(v, "a") << key;
    }
  }
  EXPECT_EQ(store_->size(), 133u);
  EXPECT_TRUE(store_->check().ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, CompareAndSwap, ::testing::ValuesIn(every_engine()), where_name);

}  // namespace
}  // namespace pmhash
