#include "remote/memnode.h"

#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace pmhash::remote {

namespace {

MemNodeRoot* root_of(pool::Pool& p) { return reinterpret_cast<MemNodeRoot*>(p.root()); }

}  // namespace

// Fills `out` from getrandom(2) (blocking until the kernel's pool is
// initialised, as it is on any running system).
Status random_bytes(const std::string& who, std::uint8_t* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return Status::IOError(who + ": no random bytes (getrandom: " +
                             std::strerror(errno) + ")");
    }
    got += static_cast<std::size_t>(r);
  }
  return Status::OK();
}

Status create_memnode(const std::string& path, std::uint64_t size, bool force) {
  pool::CreateParams params;
  params.engine = kMemNodeEngine;
  params.size = size;
  params.force = force;
  std::unique_ptr<pool::Pool> p;
  if (Status s = pool::Pool::create(path, params, &p); !s.ok()) return s;
  // No format_heap: the allocatable bytes stay as the new file has them,
  // zeroed, which is how a memory node hands them out.
  MemNodeRoot* r = root_of(*p);
  std::uint8_t id[kNodeIdBytes];
  // An all-zero id would read as "no node": draw again (2^-128).
  do {
    if (Status s = random_bytes("memory node " + path, id, sizeof(id)); !s.ok()) return s;
  } while (std::all_of(id, id + sizeof(id), [](std::uint8_t b) { return b == 0; }));
  std::memset(r, 0, sizeof(*r));
  r->layout_version = kMemNodeLayoutVersion;
  std::memcpy(r->node_id, id, sizeof(id));
  r->bump = kFirstAllocatable;
  p->region().persist(r, sizeof(*r));
  // The magic last: a root with it is complete.
  std::memcpy(r->magic, kMemNodeMagic, sizeof(kMemNodeMagic));
  p->region().persist(r->magic, sizeof(r->magic));
  p->mark_clean_shutdown();
  return Status::OK();
}

Status open_memnode(const std::string& path, bool shared, std::unique_ptr<pool::Pool>* out) {
  std::unique_ptr<pool::Pool> p;
  const Status s = shared ? pool::Pool::open_shared(path, kMemNodeEngine, &p)
                          : pool::Pool::open(path, kMemNodeEngine, &p);
  if (!s.ok()) return s;
  MemNodeRoot* r = root_of(*p);
  const std::string who = "memory node " + path;
  if (std::memcmp(r->magic, kMemNodeMagic, sizeof(kMemNodeMagic)) != 0) {
    return Status::Corruption(who + ": blank memory-node root (its create did not finish); " +
                              "create it again with --force");
  }
  if (r->layout_version != kMemNodeLayoutVersion) {
    return Status::Corruption(who + ": memory-node layout version " +
                              std::to_string(r->layout_version) + ", this build reads " +
                              std::to_string(kMemNodeLayoutVersion) +
                              ": create the node again (pmhash-memnode --create --force; "
                              "what it holds is lost)");
  }
  if (std::all_of(r->node_id, r->node_id + kNodeIdBytes, [](std::uint8_t b) { return b == 0; })) {
    return Status::Corruption(who + ": memory-node root has no node id: create the node again "
                              "(pmhash-memnode --create --force)");
  }
  const std::uint64_t bump = std::atomic_ref<std::uint64_t>(r->bump).load();
  if (bump < kFirstAllocatable) {
    return Status::Corruption(who + ": allocation word " + std::to_string(bump) +
                              " below the allocatable area at " + std::to_string(kFirstAllocatable));
  }
  *out = std::move(p);
  return Status::OK();
}

}  // namespace pmhash::remote
