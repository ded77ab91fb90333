// engine/remote_index.cc - what the engines on memory nodes share
// (remote_index.h).
#include "engine/remote_index.h"

#include <algorithm>
#include <chrono>

#include "remote/memnode.h"

namespace pmhash::engine::remote_index {

using remote::Batch;

Status split_specs(const std::string& list, std::string_view engine,
                   std::vector<std::string>* out) {
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string one = list.substr(at, comma - at);
    if (one.empty()) {
      return Status::InvalidArgument("memory node list '" + list +
                                     "': an empty entry (expected shm:PATH or tcp:HOST:PORT, "
                                     "separated by commas)");
    }
    out->push_back(std::move(one));
    at = comma + 1;
  }
  if (out->empty() || list.empty()) {
    return Status::InvalidArgument("engine " + std::string(engine) +
                                   " keeps its index on memory nodes: give them in "
                                   "Options::memnodes (--memnodes shm:PATH,tcp:HOST:PORT)");
  }
  if (out->size() > 255) return Status::InvalidArgument("more than 255 memory nodes");
  return Status::OK();
}

remote::ConnectOptions connect_options(const Options& o) {
  remote::ConnectOptions c;
  c.timeout = std::chrono::milliseconds(o.remote_timeout_ms);
  c.shm_latency = std::chrono::nanoseconds(o.remote_latency_ns);
  return c;
}

Status alloc_direct(remote::Client& client, unsigned node, std::uint64_t bytes,
                    std::uint64_t* off) {
  bytes = round64(bytes);
  Batch b;
  b.faa(node, remote::kBumpOffset, bytes);
  if (Status s = client.exec_sync(b); !s.ok()) return s;
  const std::uint64_t at = b.result(0);
  if (at + bytes > client.node_size(node)) {
    return Status::NoSpace("memory node " + client.node_name(node) + " is full (" +
                           std::to_string(client.node_size(node)) + " bytes)");
  }
  *off = at;
  return Status::OK();
}

Status Chunks::alloc(remote::Client& client, unsigned node, std::uint64_t bytes,
                     std::uint64_t* off) {
  bytes = round64(bytes);
  if (bytes > kChunkBytes / 4) return alloc_direct(client, node, bytes, off);
  if (per_node.size() <= node) per_node.resize(node + 1, {0, 0});
  auto& [next, end] = per_node[node];
  if (next + bytes > end) {
    std::uint64_t at = 0;
    if (Status s = alloc_direct(client, node, kChunkBytes, &at); !s.ok()) return s;
    next = at;
    end = at + kChunkBytes;
  }
  *off = next;
  next += bytes;
  return Status::OK();
}

Status check_unclaimed(remote::Client& client, bool force) {
  char magic[8] = {};
  Batch b;
  b.read(0, remote::kIndexRootOffset, magic, sizeof(magic));
  if (Status s = client.exec_sync(b); !s.ok()) return s;
  if (force || std::all_of(magic, magic + 8, [](char c) { return c == 0; })) return Status::OK();
  return Status::AlreadyExists("memory node " + client.node_name(0) + " already holds an index ('" +
                               std::string(magic, 8) + "'; force replaces it)");
}

Status forget_nodes(remote::Client& client, std::uint64_t root_bytes) {
  const std::uint64_t first = remote::kFirstAllocatable;
  const std::vector<std::byte> blank(root_bytes);
  Batch b;
  b.write(0, remote::kIndexRootOffset, blank.data(), static_cast<std::uint32_t>(root_bytes));
  for (unsigned n = 0; n < client.nodes(); ++n) b.write(n, remote::kBumpOffset, &first, 8);
  return client.exec_sync(b);
}

void Counters::add(const remote::ClientCounters& c) {
  round_trips.fetch_add(c.round_trips, std::memory_order_relaxed);
  verbs.fetch_add(c.verbs, std::memory_order_relaxed);
  bytes.fetch_add(c.bytes, std::memory_order_relaxed);
}

void Counters::fill(Stats* st) const {
  st->round_trips = round_trips.load(std::memory_order_relaxed);
  st->remote_verbs = verbs.load(std::memory_order_relaxed);
  st->remote_bytes = bytes.load(std::memory_order_relaxed);
}

}  // namespace pmhash::engine::remote_index
