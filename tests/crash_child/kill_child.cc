// The child of the process-kill test (tests/crash/kill_test.cc):
//   pmhash-kill-child POOL FD SEED THREADS OPS KEYS PERIOD TXN DURABILITY
//                     EPOCH_MS START[,START...]
// opens POOL with DURABILITY (strict or epoch, epochs of EPOCH_MS) and runs
// the crash checker's workload (crash/workload.h; with transactions if TXN
// is 1), each thread t from its operation START_t on, writing
// "<t> <i> <e>\n" to FD after operation i of thread t returned: e is the
// epoch the store runs in then (the operation ran in it or before; 0 for
// engines without epochs). It ends by itself only when every thread ran out
// of operations; the parent kills it long before.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "crash/workload.h"
#include "pmhash/store.h"
#include "store/store_testing.h"

int main(int argc, char** argv) {
  using namespace pmhash;
  using namespace pmhash::crashtest;
  if (argc != 12) {
    std::fprintf(stderr,
                 "usage: pmhash-kill-child POOL FD SEED THREADS OPS KEYS PERIOD TXN DURABILITY EPOCH_MS "
                 "START[,START...]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int fd = std::atoi(argv[2]);
  WorkloadSpec w;
  w.seed = std::strtoull(argv[3], nullptr, 10);
  w.threads = static_cast<unsigned>(std::strtoul(argv[4], nullptr, 10));
  w.ops = std::strtoull(argv[5], nullptr, 10);
  w.keys = std::strtoull(argv[6], nullptr, 10);
  w.period = std::strtoull(argv[7], nullptr, 10);
  w.transactions = std::string(argv[8]) == "1";
  Options options;
  options.engine = "";
  options.durability = std::string(argv[9]) == "epoch" ? Durability::kEpoch : Durability::kStrict;
  options.epoch_ms = static_cast<unsigned>(std::strtoul(argv[10], nullptr, 10));
  options.set("dali.lock_timeout_ms", 60000);
  std::vector<std::uint64_t> start;
  std::stringstream starts(argv[11]);
  for (std::string part; std::getline(starts, part, ',');) start.push_back(std::stoull(part));
  if (start.size() != w.threads) {
    std::fprintf(stderr, "kill child: %zu start indices for %u threads\n", start.size(), w.threads);
    return 2;
  }
  std::unique_ptr<Store> store;
  if (Status s = Store::open(path, options, &store); !s.ok()) {
    std::fprintf(stderr, "kill child: %s\n", s.to_string().c_str());
    return 3;
  }
  auto run = [&](unsigned t) {
    for (std::uint64_t i = start[t]; i < w.ops; ++i) {
      const Op op = op_at(w, t, i);
      std::string value;
      const Status s = run_op(*store, t, op, &value);
      if (!s.ok() && !s.is_not_found() && !s.is_already_exists() && !s.is_conflict()) {
        std::fprintf(stderr, "kill child: thread %u op %llu: %s\n", t, static_cast<unsigned long long>(i),
                     s.to_string().c_str());
        std::_Exit(4);
      }
      // The acknowledgement goes out only after the call returned. One
      // write of a short line: atomic on a pipe.
      char ack[64];
      const int n = std::snprintf(ack, sizeof ack, "%u %llu %llu\n", t, static_cast<unsigned long long>(i),
                                  static_cast<unsigned long long>(store::testing::epoch(*store)));
      if (write(fd, ack, static_cast<std::size_t>(n)) != n) std::_Exit(5);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < w.threads; ++t) threads.emplace_back(run, t);
  for (std::thread& th : threads) th.join();
  return 0;
}
