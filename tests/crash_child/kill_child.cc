// The child of the process-kill test (tests/crash/kill_test.cc):
//   pmhash-kill-child POOL FD SEED THREADS OPS KEYS PERIOD START[,START...]
// opens POOL and runs the crash checker's workload (crash/workload.h), each
// thread t from its operation START_t on, writing "<t> <i>\n" to FD after
// operation i of thread t returned (then it is durable: strict durability).
// It ends by itself only when every thread ran out of operations; the parent
// kills it long before.
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

int main(int argc, char** argv) {
  using namespace pmhash;
  using namespace pmhash::crashtest;
  if (argc != 9) {
    std::fprintf(stderr, "usage: pmhash-kill-child POOL FD SEED THREADS OPS KEYS PERIOD START[,START...]\n");
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
  std::vector<std::uint64_t> start;
  std::stringstream starts(argv[8]);
  for (std::string part; std::getline(starts, part, ',');) start.push_back(std::stoull(part));
  if (start.size() != w.threads) {
    std::fprintf(stderr, "kill child: %zu start indices for %u threads\n", start.size(), w.threads);
    return 2;
  }
  std::unique_ptr<Store> store;
  if (Status s = Store::open(path, Options{.engine = ""}, &store); !s.ok()) {
    std::fprintf(stderr, "kill child: %s\n", s.to_string().c_str());
    return 3;
  }
  auto run = [&](unsigned t) {
    for (std::uint64_t i = start[t]; i < w.ops; ++i) {
      const Op op = op_at(w, t, i);
      std::string value;
      const Status s = run_op(*store, t, op, &value);
      if (!s.ok() && !s.is_not_found() && !s.is_already_exists()) {
        std::fprintf(stderr, "kill child: thread %u op %llu: %s\n", t, static_cast<unsigned long long>(i),
                     s.to_string().c_str());
        std::_Exit(4);
      }
      // The acknowledgement goes out only after the call returned. One
      // write of a short line: atomic on a pipe.
      char ack[48];
      const int n = std::snprintf(ack, sizeof ack, "%u %llu\n", t, static_cast<unsigned long long>(i));
      if (write(fd, ack, static_cast<std::size_t>(n)) != n) std::_Exit(5);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < w.threads; ++t) threads.emplace_back(run, t);
  for (std::thread& th : threads) th.join();
  return 0;
}
