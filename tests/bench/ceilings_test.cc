// Tests of the machine ceilings (bench/ceilings.h) on small regions and short
// tests: every ceiling comes out positive and finite on each kind of region
// and thread count, the granularity reported is the one forced, the
// region's file does not outlive the call, PMEM2_FORCE_GRANULARITY is put
// back, and bad directories or configurations fail with a message that
// names the problem. Rates are never compared with each other: the machine
// is shared and noisy, so only facts that hold on any machine are asserted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/ceilings.h"

namespace pmhash::bench {
namespace {

constexpr std::uint64_t kSmallRegion = 16ull << 20;
constexpr double kShortTest = 0.05;

std::string temp_dir() {
  std::string dir = ::testing::TempDir();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.empty() ? "/tmp" : dir;
}

// The entries of `dir` that this process's ceilings could have created.
// (Other processes share /dev/shm and /tmp, so the whole listing is not
// stable; the names are unique per process.)
std::vector<std::string> our_region_files(const std::string& dir) {
  const std::string prefix = "pmhash-limits-" + std::to_string(::getpid()) + "-";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

CeilingConfig small_config(const std::string& granularity, const std::string& dir,
                           unsigned threads) {
  CeilingConfig config;
  config.granularity = granularity;
  config.dir = dir;
  config.threads = threads;
  config.region_bytes = kSmallRegion;
  config.seconds_per_test = kShortTest;
  return config;
}

void expect_every_rate_positive_and_finite(const Ceilings& c) {
  const std::pair<const char*, double> rates[] = {
      {"dependent_reads_per_s", c.dependent_reads_per_s},
      {"independent_reads_per_s", c.independent_reads_per_s},
      {"persists_per_s", c.persists_per_s},
      {"seq_read_bytes_per_s", c.seq_read_bytes_per_s},
      {"seq_write_bytes_per_s", c.seq_write_bytes_per_s},
  };
  for (const auto& [name, rate] : rates) {
    EXPECT_TRUE(std::isfinite(rate) && rate > 0) << name << " = " << rate;
  }
}

// Sets PMEM2_FORCE_GRANULARITY (or removes it) for one test and restores it.
class ForcedGranularity {
 public:
  explicit ForcedGranularity(const char* value) {
    if (const char* old = std::getenv(kName)) saved_ = old;
    if (value != nullptr) {
      ::setenv(kName, value, 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ~ForcedGranularity() {
    if (saved_) {
      ::setenv(kName, saved_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  static std::optional<std::string> current() {
    const char* v = std::getenv(kName);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  }

 private:
  static constexpr const char* kName = "PMEM2_FORCE_GRANULARITY";
  std::optional<std::string> saved_;
};

// ---------------------------------------------------------------------------
// One region kind and thread count per case.

struct RegionCase {
  const char* granularity;
  unsigned threads;
};

void PrintTo(const RegionCase& c, std::ostream* os) {
  *os << c.granularity << " x " << c.threads;
}

std::string region_case_name(const ::testing::TestParamInfo<RegionCase>& info) {
  return std::string(info.param.granularity) + "_" + std::to_string(info.param.threads) +
         (info.param.threads == 1 ? "thread" : "threads");
}

class CeilingsOnSmallRegion : public ::testing::TestWithParam<RegionCase> {
 protected:
  // cache_line (and byte) regions live in /dev/shm like the benchmark's
  // pools; page regions on the disk file system of the test's temp dir.
  static std::string dir_for(const std::string& granularity) {
    return granularity == "page" ? temp_dir() : "/dev/shm";
  }
};

TEST_P(CeilingsOnSmallRegion, EveryCeilingIsPositiveAndTheFileIsGoneAfterwards) {
  const RegionCase& param = GetParam();
  const std::string granularity = param.granularity;
  const bool file_backed = granularity != "none";
  const std::string dir = dir_for(granularity);

  const std::vector<std::string> before = our_region_files(dir);
  const Ceilings c = measure_ceilings(small_config(granularity, dir, param.threads));
  const std::vector<std::string> after = our_region_files(dir);

  expect_every_rate_positive_and_finite(c);
  EXPECT_EQ(c.threads, param.threads);
  EXPECT_EQ(c.region_bytes, kSmallRegion);
  EXPECT_EQ(c.granularity, granularity);
  // The non-temporal store + fence figures exist where such a store is a
  // persist (byte, cache_line), and only there.
  const bool nt = granularity == "cache_line" || granularity == "byte";
  for (const double rate : {c.nt_persists_per_s, c.nt16_persists_per_s}) {
    if (nt) {
      EXPECT_TRUE(std::isfinite(rate) && rate > 0) << rate;
    } else {
      EXPECT_EQ(rate, 0);
    }
  }
  // The page size is always said, and agrees with the huge-page share.
  EXPECT_GE(c.huge_page_fraction, 0);
  EXPECT_LE(c.huge_page_fraction, 1);
  if (c.huge_page_fraction == 0) {
    EXPECT_EQ(c.page_size, "4 KiB");
  } else {
    EXPECT_NE(c.page_size.find("2 MiB"), std::string::npos) << c.page_size;
  }
  if (file_backed) {
    const std::string prefix = "file " + dir + "/pmhash-limits-";
    EXPECT_EQ(c.region.rfind(prefix, 0), 0u) << c.region;
  } else {
    EXPECT_EQ(c.region, "anonymous DRAM");
  }
  EXPECT_EQ(before, after) << "a region file of this process was left in " << dir;
}

INSTANTIATE_TEST_SUITE_P(Regions, CeilingsOnSmallRegion,
                         ::testing::Values(RegionCase{"none", 1}, RegionCase{"none", 2},
                                           RegionCase{"cache_line", 1},
                                           RegionCase{"cache_line", 2}, RegionCase{"page", 1},
                                           RegionCase{"page", 2}),
                         region_case_name);

// ---------------------------------------------------------------------------
// Configuration and environment.

TEST(CeilingsTest, RegionIsRoundedUpToWholeHugePages) {
  CeilingConfig config = small_config("none", "", 1);
  config.region_bytes = kSmallRegion + 1;
  const Ceilings c = measure_ceilings(config);
  EXPECT_EQ(c.region_bytes, kSmallRegion + (2ull << 20));
  expect_every_rate_positive_and_finite(c);
}

TEST(CeilingsTest, ForcedGranularityVariableIsRestored) {
  {
    ForcedGranularity env("byte");
    const Ceilings c = measure_ceilings(small_config("cache_line", "/dev/shm", 1));
    EXPECT_EQ(c.granularity, "cache_line");
    EXPECT_EQ(ForcedGranularity::current(), std::optional<std::string>("byte"));
  }
  {
    ForcedGranularity env(nullptr);
    measure_ceilings(small_config("cache_line", "/dev/shm", 1));
    EXPECT_EQ(ForcedGranularity::current(), std::nullopt);
  }
}

TEST(CeilingsTest, MissingDirectoryIsNamedInTheError) {
  const std::string dir = temp_dir() + "/pmhash-limits-no-such-dir-" + std::to_string(::getpid());
  ASSERT_FALSE(std::filesystem::exists(dir));
  try {
    measure_ceilings(small_config("cache_line", dir, 1));
    FAIL() << "a region in a missing directory was created";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(dir), std::string::npos) << message;
    EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(CeilingsTest, BadConfigurationsAreRejectedBeforeMapping) {
  auto message_of = [](const CeilingConfig& config) -> std::string {
    try {
      measure_ceilings(config);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no std::invalid_argument thrown)";
  };

  CeilingConfig unknown = small_config("cacheline", "/dev/shm", 1);
  EXPECT_NE(message_of(unknown).find("'cacheline'"), std::string::npos) << message_of(unknown);

  CeilingConfig tiny = small_config("none", "", 1);
  tiny.region_bytes = 1 << 20;
  EXPECT_NE(message_of(tiny).find("at least 16 MiB"), std::string::npos) << message_of(tiny);

  CeilingConfig no_threads = small_config("none", "", 0);
  EXPECT_NE(message_of(no_threads).find("threads is 0"), std::string::npos)
      << message_of(no_threads);

  CeilingConfig crowded = small_config("none", "", 17);
  EXPECT_NE(message_of(crowded).find("17 threads"), std::string::npos) << message_of(crowded);

  CeilingConfig no_time = small_config("none", "", 1);
  no_time.seconds_per_test = 0;
  EXPECT_NE(message_of(no_time).find("seconds_per_test"), std::string::npos)
      << message_of(no_time);
}

}  // namespace
}  // namespace pmhash::bench
