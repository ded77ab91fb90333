#include "remote/memnode.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace pmhash::remote {

namespace {

MemNodeRoot* root_of(pool::Pool& p) { return reinterpret_cast<MemNodeRoot*>(p.root()); }

}  // namespace

Status create_memnode(const std::string& path, std::uint64_t size, bool force) {
  pool::CreateParams params;
  params.engine = kMemNodeEngine;
  params.size = size;
  params.force = force;
  std::unique_ptr<pool::Pool> p;
  if (Status s = pool::Pool::create(path, params, &p); !s.ok()) return s;
  // Pool::create formatted a heap over the allocatable bytes; a memory
  // node hands them out zeroed instead. Only the pages the format wrote
  // are cleared (Pool::create allocated the whole file already, so reading
  // the others costs no space).
  media::Region& region = p->region();
  constexpr std::size_t kPage = 4096;
  static const std::byte zero[kPage] = {};
  for (std::uint64_t off = kFirstAllocatable; off < region.size(); off += kPage) {
    const std::size_t n = std::min<std::uint64_t>(kPage, region.size() - off);
    std::byte* page = region.base() + off;
    if (std::memcmp(page, zero, n) == 0) continue;
    std::memset(page, 0, n);
    region.flush(page, n);
  }
  region.drain();
  MemNodeRoot* r = root_of(*p);
  r->layout_version = kMemNodeLayoutVersion;
  r->bump = kFirstAllocatable;
  std::memset(r->index_root, 0, sizeof(r->index_root));
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
                              std::to_string(kMemNodeLayoutVersion));
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
