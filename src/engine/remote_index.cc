// engine/remote_index.cc - what the engines on memory nodes share
// (remote_index.h).
#include "engine/remote_index.h"

#include <algorithm>
#include <chrono>
#include <cstring>

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
  c.secret_file = o.memnode_secret_file;
  return c;
}

std::uint64_t count_keys(Index& index) {
  std::uint64_t n = 0;
  const Status s = index.for_each([&](std::string_view, std::string_view) {
    ++n;
    return true;
  });
  return s.ok() ? n : 0;
}

Status connect(const std::vector<std::string>& specs, const Options& o,
               std::unique_ptr<remote::Client>* out) {
  return remote::Client::connect(specs, connect_options(o), out);
}

Status check_root(const remote::Client& client, std::string_view engine, const char* magic,
                  const char (&expected)[8], std::uint32_t version, std::uint32_t expected_version,
                  std::uint32_t nodes) {
  const std::string node0 = client.node_name(0);
  const std::string name(engine);
  if (std::memcmp(magic, expected, sizeof(expected)) != 0) {
    return Status::InvalidArgument("memory node " + node0 + " holds no " + name +
                                   " index (create one first)");
  }
  if (version != expected_version) {
    return Status::Corruption("memory node " + node0 + ": " + name + " layout version " +
                              std::to_string(version) + ", this build reads " +
                              std::to_string(expected_version));
  }
  if (nodes != client.nodes()) {
    return Status::InvalidArgument("the " + name + " index on " + node0 + " spans " +
                                   std::to_string(nodes) + " memory nodes, " +
                                   std::to_string(client.nodes()) + " given");
  }
  return Status::OK();
}

Status read_directory(remote::Client& client, std::string_view engine, std::uint64_t global_off,
                      std::uint64_t dir_off, unsigned max_depth, std::vector<std::uint64_t>* dir,
                      unsigned* depth) {
  std::uint64_t global = 0;
  Batch b;
  b.read(0, global_off, &global, 8);
  if (Status s = client.exec_sync(b); !s.ok()) return s;
  if (global > max_depth) {
    return Status::Corruption("memory node " + client.node_name(0) + ": " + std::string(engine) +
                              " global depth " + std::to_string(global) + " beyond the maximum");
  }
  dir->resize(std::size_t{1} << global);
  b.clear();
  b.read(0, dir_off, dir->data(), static_cast<std::uint32_t>(dir->size() * 8));
  if (Status s = client.exec_sync(b); !s.ok()) return s;
  *depth = static_cast<unsigned>(global);
  return Status::OK();
}

Status raise_global_depth(remote::Client& client, std::uint64_t global_off, std::uint64_t seen,
                          unsigned depth) {
  while (seen < depth) {
    Batch b;
    b.cas(0, global_off, seen, depth);
    if (Status s = client.exec_sync(b); !s.ok()) return s;
    seen = b.result(0) == seen ? depth : b.result(0);
  }
  return Status::OK();
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

Status read_root_magic(const Options& options, std::string_view engine, char (*magic)[8]) {
  std::vector<std::string> specs;
  if (Status s = split_specs(options.memnodes, engine, &specs); !s.ok()) return s;
  std::unique_ptr<remote::Client> client;
  if (Status s = connect(specs, options, &client); !s.ok()) return s;
  Batch b;
  b.read(0, remote::kIndexRootOffset, *magic, sizeof(*magic));
  return client->exec_sync(b);
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
