// engine/remote_index.cc - what the engines on memory nodes share
// (remote_index.h).
#include "engine/remote_common/remote_index.h"

#include "engine/remote_common/remote_index_testing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/remote_common/properties.h"
#include "remote/memnode.h"

namespace pmhash::engine::remote_index {

using remote::Batch;
using remote::Client;

namespace {

// A memory node's root as far as membership needs it: magic, layout
// version and node id (remote/memnode.h, +0 .. +32).
struct RootHead {
  char magic[8];
  std::uint32_t version;
  std::uint32_t zero;
  std::uint8_t node_id[remote::kNodeIdBytes];
};
static_assert(sizeof(RootHead) == 32);
static_assert(offsetof(remote::MemNodeRoot, node_id) == offsetof(RootHead, node_id));

bool same_id(const std::uint8_t* a, const std::uint8_t* b) {
  return std::memcmp(a, b, remote::kNodeIdBytes) == 0;
}

// The first 8 bytes of an id in hex: enough to tell ids apart in a message.
std::string id_text(const std::uint8_t* id) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out += digits[id[i] >> 4];
    out += digits[id[i] & 15];
  }
  return out;
}

const char* state_name(MemberState s) {
  switch (s) {
    case MemberState::kNone:
      return "no index";
    case MemberState::kCreating:
      return "being created";
    case MemberState::kReady:
      return "ready";
  }
  return "unknown state";
}

std::string where(const Client& c, unsigned node) {
  return "memory node " + c.node_name(node) + " (position " + std::to_string(node) + ")";
}

std::string generation_text(std::uint64_t stamp) {
  return "generation " + std::to_string(stamp_generation(stamp)) + ", " +
         state_name(stamp_state(stamp));
}

// Refuses a node id that appears at two positions.
Status check_distinct(const Client& c, const std::vector<RootHead>& heads) {
  for (unsigned i = 0; i < heads.size(); ++i) {
    for (unsigned j = i + 1; j < heads.size(); ++j) {
      if (!same_id(heads[i].node_id, heads[j].node_id)) continue;
      return Status::InvalidArgument(
          "positions " + std::to_string(i) + " and " + std::to_string(j) + " (" +
          c.node_name(i) + ", " + c.node_name(j) + ") are the same memory node (node id " +
          id_text(heads[i].node_id) + "): list each node once");
    }
  }
  return Status::OK();
}

}  // namespace

// ---- the fence ----

void Fence::arm(const Identity& expect, unsigned nodes, bool stamp_only,
                Clock::time_point checked) {
  expect_ = expect;
  armed_ = true;
  stamp_only_ = stamp_only;
  checked_.assign(nodes, checked);
  seen_.assign(nodes, Seen{});
}

Fence::Clock::duration Fence::window() const {
  return std::chrono::microseconds(std::uint64_t{expect_.lease_ms()} * 500);
}

Status Fence::judge(const Client& c, unsigned node) const {
  const Seen& s = seen_[node];
  if (s.stamp != expect_.stamp) {
    if (stamp_only_) {
      return Status::InvalidArgument(where(c, node) + ": another create claimed the memory nodes (" +
                                     generation_text(s.stamp) + ") while this one (generation " +
                                     std::to_string(expect_.generation()) +
                                     ") ran; this create stopped");
    }
    if (stamp_state(s.stamp) == MemberState::kNone) {
      return Status::InvalidArgument(where(c, node) + " no longer holds the index this client "
                                     "opened (generation " + std::to_string(expect_.generation()) +
                                     "): it is a fresh memory node now; open the index again with "
                                     "the right nodes");
    }
    return Status::InvalidArgument(
        where(c, node) + ": memory nodes were created again (generation " +
        std::to_string(stamp_generation(s.stamp)) + ", this client opened generation " +
        std::to_string(expect_.generation()) + "): open the index again");
  }
  if (!stamp_only_ && (s.position != node || s.count != expect_.count ||
                       std::memcmp(s.index_id, expect_.index_id, sizeof(s.index_id)) != 0)) {
    return Status::InvalidArgument(where(c, node) + " is no longer this index's node " +
                                   std::to_string(node) + " (it holds position " +
                                   std::to_string(s.position) + " of " + std::to_string(s.count) +
                                   " of index id " + id_text(s.index_id) +
                                   "): open the index again with the right node list");
  }
  return Status::OK();
}

Status Fence::exec(Client& c, Batch& b, bool check_after) {
  if (!armed_) return c.exec_sync(b);
  const Clock::duration w = window();
  const unsigned nodes = static_cast<unsigned>(std::min<std::size_t>(c.nodes(), checked_.size()));
  // Nodes not checked within the window: a round trip of checks first.
  // (A check slower than the window itself is tried again a few times; a
  // network that slow for this lease gives Busy.)
  for (int attempt = 0;; ++attempt) {
    const Clock::time_point now = Clock::now();
    Batch checks;
    due_.clear();
    for (unsigned n = 0; n < nodes; ++n) {
      if (b.visits(n) && now - checked_[n] >= w) {
        checks.read(n, remote::kMembershipOffset, &seen_[n], kFenceReadBytes);
        due_.push_back(n);
      }
    }
    if (due_.empty()) break;
    if (attempt == 3) {
      return Status::Busy("memory nodes: checking the index's generation took longer than half "
                          "its lease (" + std::to_string(expect_.lease_ms()) +
                          " ms) three times: the nodes answer too slowly for this lease");
    }
    if (Status s = c.exec_sync(checks); !s.ok()) return s;
    for (unsigned n : due_) {
      if (Status s = judge(c, n); !s.ok()) return s;
      checked_[n] = now;
    }
  }
  // The batch, with a check of the nodes checked more than half a window
  // ago riding in it (after its own verbs on that node).
  const Clock::time_point now = Clock::now();
  const std::size_t mark = b.size();
  due_.clear();
  if (check_after) {
    for (unsigned n = 0; n < nodes; ++n) {
      if (b.visits(n) && now - checked_[n] >= w / 2) {
        b.read(n, remote::kMembershipOffset, &seen_[n], kFenceReadBytes);
        due_.push_back(n);
      }
    }
  }
  const Status s = c.exec_sync(b);
  b.truncate(mark);
  if (!s.ok()) return s;
  for (unsigned n : due_) {
    if (Status bad = judge(c, n); !bad.ok()) return bad;
    checked_[n] = now;
  }
  return Status::OK();
}

// ---- options ----

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
  if (out->size() > kMaxNodes) {
    return Status::InvalidArgument("more than " + std::to_string(kMaxNodes) + " memory nodes");
  }
  return Status::OK();
}

remote::ConnectOptions connect_options(const Options& o, unsigned timeout_ms) {
  remote::ConnectOptions c;
  c.timeout = std::chrono::milliseconds(timeout_ms != 0 ? timeout_ms : kBootstrapTimeoutMs);
  c.shm_latency = std::chrono::nanoseconds(o.remote_latency_ns);
  c.secret_file = o.memnode_secret_file;
  return c;
}

Status effective_timeout(const Options& o, std::uint32_t lease_ms, std::string_view engine,
                         unsigned* timeout_ms) {
  const std::string name(engine);
  if (lease_ms == 0 || lease_ms > kMaxLeaseMs) {
    return Status::Corruption("the " + name + " index's lease is " + std::to_string(lease_ms) +
                              " ms, outside 1 .. " + std::to_string(kMaxLeaseMs));
  }
  const unsigned half = std::max<unsigned>(1, lease_ms / 2);
  if (o.remote_timeout_ms == 0) {
    *timeout_ms = half;
    return Status::OK();
  }
  if (o.remote_timeout_ms > half) {
    return Status::InvalidArgument(
        "remote timeout " + std::to_string(o.remote_timeout_ms) + " ms is above half the " + name +
        " index's lease of " + std::to_string(lease_ms) + " ms (a round trip must end within " +
        std::to_string(half) + " ms): give at most " + std::to_string(half) + ", or 0 for " +
        std::to_string(half));
  }
  *timeout_ms = o.remote_timeout_ms;
  return Status::OK();
}

std::uint64_t count_keys(Index& index) {
  std::uint64_t n = 0;
  const Status s = index.for_each([&](std::string_view, std::string_view) {
    ++n;
    return true;
  });
  return s.ok() ? n : 0;
}

Status connect(const std::vector<std::string>& specs, const Options& o, unsigned timeout_ms,
               std::unique_ptr<remote::Client>* out) {
  return remote::Client::connect(specs, connect_options(o, timeout_ms), out);
}

// ---- membership ----

Status begin_create(Link& link, bool force, std::uint32_t lease_ms, std::uint64_t root_bytes,
                    Identity* made) {
  Client& c = *link.client;
  const unsigned nodes = static_cast<unsigned>(c.nodes());
  const std::uint64_t record = remote::kMembershipOffset;
  // 1. What every node is and holds.
  std::vector<RootHead> heads(nodes);
  std::vector<MemberHead> members(nodes);
  char magic[8] = {};
  Batch b;
  for (unsigned n = 0; n < nodes; ++n) {
    b.read(n, remote::kFirstUsable, &heads[n], sizeof(RootHead));
    b.read(n, record, &members[n], sizeof(MemberHead));
  }
  b.read(0, remote::kIndexRootOffset, magic, sizeof(magic));
  if (Status s = c.exec_sync(b); !s.ok()) return s;
  if (Status s = check_distinct(c, heads); !s.ok()) return s;
  std::uint64_t top = 0;
  std::uint32_t wait_ms = 0;
  for (unsigned n = 0; n < nodes; ++n) {
    const std::uint64_t st = members[n].stamp;
    top = std::max(top, stamp_generation(st));
    wait_ms = std::max(wait_ms, stamp_lease_ms(st));
    if (force || stamp_state(st) == MemberState::kNone) continue;
    if (n == 0 && stamp_state(st) == MemberState::kReady) {
      const bool named = std::any_of(magic, magic + 8, [](char ch) { return ch != 0; });
      return Status::AlreadyExists("memory node " + c.node_name(0) + " already holds an index" +
                                   (named ? " ('" + std::string(magic, 8) + "')" : "") +
                                   "; force replaces it");
    }
    if (stamp_state(st) == MemberState::kCreating) {
      return Status::AlreadyExists(where(c, n) + ": a create (generation " +
                                   std::to_string(stamp_generation(st)) +
                                   ") claimed it and has not finished, or died; force replaces it");
    }
    return Status::AlreadyExists(where(c, n) + " belongs to an index (index id " +
                                 id_text(members[n].index_id) + ", its position " +
                                 std::to_string(members[n].position) + " of " +
                                 std::to_string(members[n].count) + "); force replaces it");
  }
  if (top + 1 >= (std::uint64_t{1} << (64 - kStampGenShift))) {
    return Status::Corruption("memory node " + c.node_name(0) + ": generation " +
                              std::to_string(top) + " is the last one");
  }
  const std::uint64_t claim =
      make_stamp(top + 1, std::max(lease_ms, wait_ms), MemberState::kCreating);
  // The claims: refused without a word written when another create got there first.
  auto lost = [&](unsigned n, std::uint64_t now_there) {
    const std::string what = where(c, n) + " was claimed by another create at the same time (" +
                             generation_text(now_there) + "); nothing was changed";
    return force ? Status::Busy(what + ": try again") : Status::AlreadyExists(what);
  };
  // 2. Node 0.
  const Fence::Clock::time_point claimed = Fence::Clock::now();
  b.clear();
  b.cas(0, record, members[0].stamp, claim);
  if (Status s = c.exec_sync(b); !s.ok()) return s;
  if (b.result(0) != members[0].stamp) return lost(0, b.result(0));
  // 3. The others, in one batch; undone if one was taken.
  if (nodes > 1) {
    b.clear();
    for (unsigned n = 1; n < nodes; ++n) b.cas(n, record, members[n].stamp, claim);
    if (Status s = c.exec_sync(b); !s.ok()) return s;
    for (unsigned n = 1; n < nodes; ++n) {
      if (b.result(n - 1) == members[n].stamp) continue;
      const std::uint64_t there = b.result(n - 1);
      Batch undo;
      undo.cas(0, record, claim, members[0].stamp);
      for (unsigned k = 1; k < nodes; ++k) {
        if (b.result(k - 1) == members[k].stamp) undo.cas(k, record, claim, members[k].stamp);
      }
      (void)c.exec_sync(undo);
      return lost(n, there);
    }
  }
  // 4. Every batch of an older generation's fence has executed.
  if (wait_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  Identity creating;
  creating.stamp = claim;
  creating.count = nodes;
  link.fence.arm(creating, nodes, /*stamp_only=*/true, claimed);
  // 5. Forget what the nodes held; record the membership (the stamps stay
  // "creating" until commit_create).
  Identity id;
  id.stamp = make_stamp(top + 1, lease_ms, MemberState::kReady);
  id.count = nodes;
  if (Status s = remote::random_bytes("index on " + c.node_name(0), id.index_id,
                                      sizeof(id.index_id));
      !s.ok()) {
    return s;
  }
  const std::uint64_t first = remote::kFirstAllocatable;
  const std::vector<std::byte> blank(root_bytes);
  std::vector<MemberHead> tails(nodes);
  std::vector<std::uint8_t> list(std::size_t{nodes} * remote::kNodeIdBytes);
  b.clear();
  // The engine's magic is the root's first bytes: a WRITE copies ascending.
  b.write(0, remote::kIndexRootOffset, blank.data(), static_cast<std::uint32_t>(root_bytes));
  for (unsigned n = 0; n < nodes; ++n) {
    tails[n] = MemberHead{};
    tails[n].position = n;
    tails[n].count = nodes;
    std::memcpy(tails[n].index_id, id.index_id, sizeof(id.index_id));
    std::memcpy(list.data() + std::size_t{n} * remote::kNodeIdBytes, heads[n].node_id,
                remote::kNodeIdBytes);
    b.write(n, remote::kBumpOffset, &first, 8);
    b.write(n, record + 8, reinterpret_cast<const std::byte*>(&tails[n]) + 8,
            sizeof(MemberHead) - 8);
  }
  b.write(0, kMemberListOffset, list.data(), static_cast<std::uint32_t>(list.size()));
  if (Status s = link.exec(b); !s.ok()) return s;
  *made = id;
  return Status::OK();
}

Status commit_create(Link& link, const Identity& made) {
  Client& c = *link.client;
  const unsigned nodes = static_cast<unsigned>(c.nodes());
  const std::uint64_t claim = link.fence.expected().stamp;
  auto displaced = [&](unsigned n, std::uint64_t there) {
    return Status::InvalidArgument(where(c, n) + ": another create claimed it (" +
                                   generation_text(there) + ") while this one (generation " +
                                   std::to_string(stamp_generation(claim)) +
                                   ") ran; this create did not finish");
  };
  const Fence::Clock::time_point committed = Fence::Clock::now();
  Batch b;
  if (nodes > 1) {
    for (unsigned n = 1; n < nodes; ++n) b.cas(n, remote::kMembershipOffset, claim, made.stamp);
    // Checked before (fresh claims), not after: these CASes change the stamps.
    if (Status s = link.fence.exec(c, b, /*check_after=*/false); !s.ok()) return s;
    for (unsigned n = 1; n < nodes; ++n) {
      if (b.result(n - 1) != claim) return displaced(n, b.result(n - 1));
    }
  }
  // Node 0 last: from here on, attaches accept the index.
  b.clear();
  b.cas(0, remote::kMembershipOffset, claim, made.stamp);
  if (Status s = link.fence.exec(c, b, /*check_after=*/false); !s.ok()) return s;
  if (b.result(0) != claim) return displaced(0, b.result(0));
  link.fence.arm(made, nodes, /*stamp_only=*/false, committed);
  return Status::OK();
}

Status verify_members(Link& link, std::string_view engine, Identity* id) {
  Client& c = *link.client;
  const unsigned nodes = static_cast<unsigned>(c.nodes());
  std::vector<std::uint8_t> rec(remote::kMembershipSize);
  std::vector<RootHead> heads(nodes);
  std::vector<MemberHead> members(nodes);
  // 1. Node 0's record and every node's id and head, in one round trip.
  Batch b;
  b.read(0, remote::kMembershipOffset, rec.data(), static_cast<std::uint32_t>(rec.size()));
  for (unsigned n = 0; n < nodes; ++n) {
    b.read(n, remote::kFirstUsable, &heads[n], sizeof(RootHead));
    if (n != 0) b.read(n, remote::kMembershipOffset, &members[n], sizeof(MemberHead));
  }
  const Fence::Clock::time_point read_at = Fence::Clock::now();
  if (Status s = c.exec_sync(b); !s.ok()) return s;
  std::memcpy(&members[0], rec.data(), sizeof(MemberHead));
  const MemberHead& m0 = members[0];
  const std::uint8_t* list = rec.data() + sizeof(MemberHead);
  const std::string name = engine.empty() ? std::string("") : std::string(engine) + " ";
  // 2a. A node listed twice.
  if (Status s = check_distinct(c, heads); !s.ok()) return s;
  // 2b. Node 0: a complete index, and its node 0.
  switch (stamp_state(m0.stamp)) {
    case MemberState::kNone:
      return Status::InvalidArgument(where(c, 0) + " holds no " + name +
                                     "index (create one first)");
    case MemberState::kCreating:
      return Status::InvalidArgument(where(c, 0) + ": the create of generation " +
                                     std::to_string(stamp_generation(m0.stamp)) +
                                     " is still running or did not finish (create the index "
                                     "again with force)");
    case MemberState::kReady:
      break;
    default:
      return Status::Corruption(where(c, 0) + ": membership record in an unknown state " +
                                std::to_string(m0.stamp & 15));
  }
  if (m0.count == 0 || m0.count > kMaxNodes || m0.position >= m0.count) {
    return Status::Corruption(where(c, 0) + ": membership record is damaged (position " +
                              std::to_string(m0.position) + " of " + std::to_string(m0.count) +
                              ")");
  }
  if (m0.position != 0) {
    return Status::InvalidArgument(where(c, 0) + " is node " + std::to_string(m0.position) +
                                   " of the index (index id " + id_text(m0.index_id) +
                                   "), not its node 0: give the nodes in the order of the "
                                   "index's create");
  }
  if (!same_id(list, heads[0].node_id)) {
    return Status::InvalidArgument(where(c, 0) + " has node id " + id_text(heads[0].node_id) +
                                   ", but the index it records lists " + id_text(list) +
                                   " there (a copy of another node's pool?)");
  }
  // 2c. The number of nodes.
  if (m0.count != nodes) {
    const std::string head = "the index on memory node " + c.node_name(0) + " spans " +
                             std::to_string(m0.count) + " memory nodes, " +
                             std::to_string(nodes) + " given: ";
    if (nodes < m0.count) {
      return Status::InvalidArgument(
          head + "position " + std::to_string(nodes) + " (node id " +
          id_text(list + std::size_t{nodes} * remote::kNodeIdBytes) + ") is missing");
    }
    return Status::InvalidArgument(head + where(c, m0.count) + " is not part of it");
  }
  // 2d. Every other position.
  for (unsigned p = 1; p < nodes; ++p) {
    const MemberHead& m = members[p];
    const std::uint8_t* listed = list + std::size_t{p} * remote::kNodeIdBytes;
    if (same_id(heads[p].node_id, listed) && m.stamp == m0.stamp && m.position == p &&
        m.count == m0.count && same_id(m.index_id, m0.index_id)) {
      continue;
    }
    int at = -1;
    for (unsigned q = 0; q < m0.count; ++q) {
      if (same_id(heads[p].node_id, list + std::size_t{q} * remote::kNodeIdBytes)) at = static_cast<int>(q);
    }
    if (at >= 0 && static_cast<unsigned>(at) != p) {
      return Status::InvalidArgument(where(c, p) + " is the index's node " + std::to_string(at) +
                                     ": give the nodes in the order of the index's create");
    }
    if (stamp_state(m.stamp) == MemberState::kNone) {
      return Status::InvalidArgument(where(c, p) + " is a fresh memory node that holds no index "
                                     "(the index on node 0 lists node id " + id_text(listed) +
                                     " there)");
    }
    if (!same_id(m.index_id, m0.index_id)) {
      return Status::InvalidArgument(where(c, p) + " belongs to another index (index id " +
                                     id_text(m.index_id) + ", " + generation_text(m.stamp) +
                                     ", its position " + std::to_string(m.position) + " of " +
                                     std::to_string(m.count) + "), not to the one on node 0 " +
                                     "(index id " + id_text(m0.index_id) + ")");
    }
    if (at < 0) {
      return Status::InvalidArgument(where(c, p) + " holds this index's record but is not the "
                                     "node it lists there (node id " +
                                     id_text(heads[p].node_id) + ", listed " + id_text(listed) +
                                     "; a copy of another node's pool?)");
    }
    return Status::InvalidArgument(where(c, p) + " holds " + generation_text(m.stamp) +
                                   " of this index, node 0 " + generation_text(m0.stamp) +
                                   ": its create did not finish there (create the index again "
                                   "with force)");
  }
  id->stamp = m0.stamp;
  id->count = m0.count;
  std::memcpy(id->index_id, m0.index_id, sizeof(id->index_id));
  link.fence.arm(*id, nodes, /*stamp_only=*/false, read_at);
  return Status::OK();
}

// ---- the index root, directory, allocation ----

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

Status read_directory(Link& link, std::string_view engine, std::uint64_t global_off,
                      std::uint64_t dir_off, unsigned max_depth, std::vector<std::uint64_t>* dir,
                      unsigned* depth) {
  std::uint64_t global = 0;
  Batch b;
  b.read(0, global_off, &global, 8);
  if (Status s = link.exec(b); !s.ok()) return s;
  if (global > max_depth) {
    return Status::Corruption("memory node " + link.client->node_name(0) + ": " +
                              std::string(engine) + " global depth " + std::to_string(global) +
                              " beyond the maximum");
  }
  dir->resize(std::size_t{1} << global);
  b.clear();
  b.read(0, dir_off, dir->data(), static_cast<std::uint32_t>(dir->size() * 8));
  if (Status s = link.exec(b); !s.ok()) return s;
  *depth = static_cast<unsigned>(global);
  return Status::OK();
}

Status raise_global_depth(Link& link, std::uint64_t global_off, std::uint64_t seen,
                          unsigned depth) {
  while (seen < depth) {
    Batch b;
    b.cas(0, global_off, seen, depth);
    if (Status s = link.exec(b); !s.ok()) return s;
    seen = b.result(0) == seen ? depth : b.result(0);
  }
  return Status::OK();
}

Status alloc_direct(Link& link, unsigned node, std::uint64_t bytes, std::uint64_t* off) {
  bytes = round64(bytes);
  Batch b;
  b.faa(node, remote::kBumpOffset, bytes);
  if (Status s = link.exec(b); !s.ok()) return s;
  const std::uint64_t at = b.result(0);
  const std::uint64_t size = link.client->node_size(node);
  if (at > size || bytes > size - at) {
    return Status::NoSpace("memory node " + link.client->node_name(node) + " is full (" +
                           std::to_string(size) + " bytes)");
  }
  *off = at;
  return Status::OK();
}

Status Chunks::alloc(Link& link, unsigned node, std::uint64_t bytes, std::uint64_t* off) {
  bytes = round64(bytes);
  if (bytes > kChunkBytes / 4) return alloc_direct(link, node, bytes, off);
  if (per_node.size() <= node) per_node.resize(node + 1, {0, 0});
  auto& [next, end] = per_node[node];
  if (next + bytes > end) {
    std::uint64_t at = 0;
    if (Status s = alloc_direct(link, node, kChunkBytes, &at); !s.ok()) return s;
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
  Link link;
  if (Status s = connect(specs, options, options.remote_timeout_ms, &link.client); !s.ok()) {
    return s;
  }
  // Nothing of the index is read before its nodes are known to be its own.
  Identity id;
  if (Status s = verify_members(link, "", &id); !s.ok()) return s;
  Batch b;
  b.read(0, remote::kIndexRootOffset, *magic, sizeof(*magic));
  return link.exec(b);
}

void Counters::add(const remote::ClientCounters& c) {
  round_trips.fetch_add(c.round_trips, std::memory_order_relaxed);
  verbs.fetch_add(c.verbs, std::memory_order_relaxed);
  bytes.fetch_add(c.bytes, std::memory_order_relaxed);
}

void Counters::fill(Stats* st, std::string_view engine) const {
  static_assert(kRemoteCounterCount == 3, "one value per entry of kRemoteCounters");
  const std::uint64_t values[kRemoteCounterCount] = {
      round_trips.load(std::memory_order_relaxed),
      verbs.load(std::memory_order_relaxed),
      bytes.load(std::memory_order_relaxed),
  };
  for (std::size_t i = 0; i < kRemoteCounterCount; ++i) {
    st->add_property(std::string(engine) + "." + std::string(kRemoteCounters[i].suffix), values[i]);
  }
}

void take_in_order(std::vector<ScanPair>& found, std::size_t need, std::uint64_t range_end,
                   std::vector<ScanPair>* out, std::uint64_t* end) {
  std::sort(found.begin(), found.end(),
            [](const ScanPair& a, const ScanPair& b) { return a.pos < b.pos; });
  std::size_t n = std::min(need, found.size());
  while (n != 0 && n < found.size() && found[n].pos == found[n - 1].pos) ++n;
  *end = n < found.size() ? found[n].pos : range_end;
  for (std::size_t i = 0; i < n; ++i) out->push_back(std::move(found[i]));
}

}  // namespace pmhash::engine::remote_index

namespace pmhash::engine::remote_index::testing {

void set_lease(std::uint32_t ms) { lease_override.store(ms); }

}  // namespace pmhash::engine::remote_index::testing
