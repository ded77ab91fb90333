// The child of the process-kill test (tests/crash/kill_test.cc):
//   pmhash-kill-child POOL SEED FD
// opens POOL and runs the operations of kill_ops.h for SEED forever,
// writing "<index> <changed>" to FD after each one returns. It never ends by
// itself; the parent kills it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "crash/kill_ops.h"
#include "pmhash/store.h"

int main(int argc, char** argv) {
  using namespace pmhash;
  using namespace pmhash::killtest;
  if (argc != 4) {
    std::fprintf(stderr, "usage: pmhash-kill-child POOL SEED FD\n");
    return 2;
  }
  const std::string path = argv[1];
  const std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const int fd = std::atoi(argv[3]);
  std::unique_ptr<Store> store;
  if (Status s = Store::open(path, {}, &store); !s.ok()) {
    std::fprintf(stderr, "kill child: %s\n", s.to_string().c_str());
    return 3;
  }
  for (std::uint64_t i = 0;; ++i) {
    const Op op = op_at(seed, i);
    const std::string key = key_name(op.key);
    Status s;
    switch (op.kind) {
      case Op::kInsert: s = store->insert(key, op.value); break;
      case Op::kUpdate: s = store->update(key, op.value); break;
      case Op::kUpsert: s = store->upsert(key, op.value); break;
      case Op::kRemove: s = store->remove(key); break;
    }
    if (!s.ok() && !s.is_not_found() && !s.is_already_exists()) {
      std::fprintf(stderr, "kill child: op %llu: %s\n", static_cast<unsigned long long>(i),
                   s.to_string().c_str());
      return 4;
    }
    // The ack goes out only after the call returned: the op is durable.
    char ack[32];
    const int n = std::snprintf(ack, sizeof(ack), "%llu %d\n",
                                static_cast<unsigned long long>(i), s.ok() ? 1 : 0);
    if (write(fd, ack, n) != n) return 5;
  }
}
