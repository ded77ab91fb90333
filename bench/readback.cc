// bench/readback.cc - pmhash-readback: load an empty pool with N records,
// close it, reopen it and read every record back; the main job of `make run`
// (scripts/run.sh).
//
//   pmhash create ./data/demo.pool --engine clevel --size 1G --force
//   pmhash-readback ./data/demo.pool --records 1000000 --threads 2
//
// Steps, each checked, any failure ending the program with exit status 1:
//
//   1. open POOL, which must hold no keys;
//   2. load: T threads insert the N records of the data set (workload.h),
//      thread t the t-th slice; every insert must return OK; timed;
//   3. wait until no resize is in progress, close the store (a clean
//      shutdown), and reopen it, so the read-back sees what the file holds;
//   4. read back: T threads get all N keys in a shuffled order; every key
//      must be found with the value that was loaded; timed;
//   5. size() must be N; print the table's shape and one sample record, which
//      scripts/run.sh looks up again with `pmhash get`.
//
// The records are those `pmhash load` writes with the same --seed,
// --key-size and --value-size (the decimal records of
// tools/common/records.h); they are printable, so the sample can be passed
// on a command line.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/status.h"
#include "pmhash/store.h"
#include "workload.h"

namespace pmhash::bench {
namespace {

struct Config {
  std::string pool;
  std::uint64_t records = 1'000'000;
  unsigned threads = 2;
  std::size_t key_size = 16;
  std::size_t value_size = 16;
  std::uint64_t seed = 0;  // as `pmhash load`'s
};

constexpr std::chrono::seconds kResizeTimeout{60};

std::string fixed(double x, int decimals = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

// Three significant digits: a page-granularity load runs at 0.00144 Mops/s.
std::string significant(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// How to make an empty pool at `path` with `engine`, for the messages.
std::string create_hint(const std::string& path, std::string_view engine) {
  return "pmhash create " + path + " --engine " + std::string(engine) + " --force";
}

std::unique_ptr<Store> open_store(const std::string& path) {
  Options options;
  options.engine.clear();  // whatever engine the pool holds
  std::unique_ptr<Store> store;
  const Status s = Store::open(path, options, &store);
  // No pool yet: suggest the default engine of a pool file (the registry's).
  expect(s.ok(), "cannot open " + path + ": " + s.to_string() +
                     (s.is_io_error()
                          ? " (create it first: " +
                                create_hint(path, default_engine(Location::kPoolFile)->name) + ")"
                          : ""));
  return store;
}

void wait_for_resize(const Store& store) {
  const auto start = std::chrono::steady_clock::now();
  while (store.stats().resizing) {
    expect(std::chrono::steady_clock::now() - start < kResizeTimeout,
           "a resize is still running " + std::to_string(kResizeTimeout.count()) +
               " s after the load ended");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void print_phase(const char* label, const PhaseResult& r, unsigned threads) {
  std::cout << label << r.ops << " records, " << threads << " thread(s), "
            << fixed(r.seconds, 3) << " s, " << significant(r.mops()) << " Mops/s\n";
}

int run(const Config& config) {
  const Dataset data(config.records, config.key_size, config.value_size, config.seed, false,
                     records::Format::kDecimal);
  const std::uint64_t n = data.records();

  std::unique_ptr<Store> store = open_store(config.pool);
  const std::uint64_t before = store->size();
  expect(before == 0, config.pool + " already holds " + std::to_string(before) +
                          " keys; pmhash-readback loads into an empty pool (re-create it with " +
                          create_hint(config.pool, store->describe().engine) + ")");

  const PhaseResult load = run_phase("load", config.threads, n, [&](auto begin, auto end, Tally& t) {
    for (auto i = begin; i < end; ++i) {
      const Status s = store->insert(data.key(i), data.value(i, 0));
      if (!s.ok()) t.fail("insert '" + std::string(data.key(i)) + "': " + s.to_string());
    }
  });
  print_phase("load:      ", load, config.threads);

  wait_for_resize(*store);
  Status s = store->close();
  expect(s.ok(), "close after the load: " + s.to_string());
  store.reset();

  const auto open_start = std::chrono::steady_clock::now();
  store = open_store(config.pool);
  const double open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - open_start).count();
  const Stats reopened = store->stats();
  std::cout << "reopen:    " << fixed(open_ms, 1) << " ms, clean shutdown: "
            << (reopened.clean_shutdown ? "yes" : "no (recovery ran)") << "\n";
  expect(reopened.clean_shutdown, "the pool was closed cleanly but reopened as crashed");

  const PhaseResult read = run_phase("read back", config.threads, n, [&](auto begin, auto end, Tally& t) {
    std::string value;
    for (auto j = begin; j < end; ++j) {
      const std::uint64_t i = data.shuffled(j);
      const Status st = store->get(data.key(i), &value);
      if (!st.ok()) {
        t.fail("get '" + std::string(data.key(i)) + "': " + st.to_string());
      } else if (value != data.value(i, 0)) {
        t.fail("get '" + std::string(data.key(i)) + "' returned '" + value + "', expected '" +
               std::string(data.value(i, 0)) + "'");
      }
    }
  });
  print_phase("read back: ", read, config.threads);
  std::cout << "           " << n << " of " << n << " keys found with the value loaded\n";

  const Stats stats = store->stats();
  const std::uint64_t size = store->size();
  expect(size == n, "size() after the read-back is " + std::to_string(size) + ", expected " +
                        std::to_string(n));
  std::cout << "table:     " << stats.engine << ", " << stats.items << " keys in " << stats.slots
            << " slots, load factor " << fixed(stats.load_factor, 3) << ", granularity " << stats.granularity << ", heap used "
            << fixed(static_cast<double>(stats.heap_used) / (1 << 20), 1) << " MiB of "
            << fixed(static_cast<double>(stats.pool_size) / (1 << 20), 0) << " MiB\n";
  for (const Property& p : stats.properties) {
    std::cout << "           " << p.name << " " << p.value << "\n";
  }
  std::cout << "sample:    " << data.key(0) << " " << data.value(0, 0) << "\n";

  s = store->close();
  expect(s.ok(), "close after the read-back: " + s.to_string());
  return 0;
}

}  // namespace
}  // namespace pmhash::bench

int main(int argc, char** argv) {
  pmhash::bench::Config config;
  CLI::App app{"pmhash-readback: load N records into an empty pool, reopen it and read them all "
               "back, checking every value"};
  app.add_option("pool", config.pool, "pool file created by `pmhash create`")->required();
  app.add_option("--records", config.records, "records to load and read back")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{UINT32_MAX}))
      ->capture_default_str();
  app.add_option("--threads", config.threads, "threads of the load and of the read-back")
      ->check(CLI::Range(1u, pmhash::kMaxThreads))
      ->capture_default_str();
  app.add_option("--key-size", config.key_size, "bytes per key")
      ->check(CLI::Range(std::size_t{1}, pmhash::kMaxKeySize))
      ->capture_default_str();
  app.add_option("--value-size", config.value_size, "bytes per value")
      ->check(CLI::Range(std::size_t{0}, pmhash::kMaxValueSize))
      ->capture_default_str();
  app.add_option("--seed", config.seed, "seed of the keys and values")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return pmhash::bench::run(config);
  } catch (const pmhash::bench::Failure& e) {
    std::cerr << "pmhash-readback: FAILED: " << e.what() << "\n";
    return 1;
  }
}
