#include "remote/client.h"
#include "remote/remote_testing.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace pmhash::remote {

namespace {
FateHook& fate_hook() {
  static FateHook hook;
  return hook;
}
Status lost_reply(const std::string& node) {
  return Status::IOError("memory node " + node + ": no reply (lost by a test hook)");
}
}  // namespace

void testing::set_fate_hook(FateHook hook) { fate_hook() = std::move(hook); }

Batch& Batch::add(unsigned node, const Op& op) {
  if (per_node_.size() <= node) per_node_.resize(node + 1);
  where_.push_back({node, per_node_[node].size()});
  per_node_[node].push_back(op);
  return *this;
}

Batch& Batch::read(unsigned node, std::uint64_t off, void* dst, std::uint32_t len) {
  return add(node, Op{Verb::kRead, len, off, dst});
}

Batch& Batch::write(unsigned node, std::uint64_t off, const void* src, std::uint32_t len) {
  return add(node, Op{Verb::kWrite, len, off, const_cast<void*>(src)});
}

Batch& Batch::cas(unsigned node, std::uint64_t off, std::uint64_t expected, std::uint64_t desired) {
  return add(node, Op{Verb::kCas, 8, off, nullptr, expected, desired});
}

Batch& Batch::faa(unsigned node, std::uint64_t off, std::uint64_t add_value) {
  return add(node, Op{Verb::kFaa, 8, off, nullptr, add_value});
}

std::uint64_t Batch::result(std::size_t i) const {
  const Where& w = where_[i];
  return per_node_[w.node][w.index].result;
}

void Batch::truncate(std::size_t n) {
  // A node's verbs are in insertion order, so the last ones added are at
  // the ends of their nodes' lists.
  while (where_.size() > n) {
    per_node_[where_.back().node].pop_back();
    where_.pop_back();
  }
}

void Batch::clear() {
  for (auto& v : per_node_) v.clear();
  where_.clear();
}

Status Client::connect(const std::vector<std::string>& specs, const ConnectOptions& options,
                       std::unique_ptr<Client>* out) {
  if (specs.empty()) return Status::InvalidArgument("no memory node given");
  auto c = std::unique_ptr<Client>(new Client());
  for (const std::string& spec : specs) {
    std::unique_ptr<Transport> t;
    if (Status s = remote::connect(spec, options, &t); !s.ok()) return s;
    c->nodes_.push_back(std::move(t));
  }
  *out = std::move(c);
  return Status::OK();
}

Client::~Client() {
  // Verbs still in flight write into buffers we are about to give up:
  // let every node report them first (each within its timeout).
  for (auto& n : nodes_) {
    while (n->in_flight() != 0) {
      done_.clear();
      n->poll(&done_, std::chrono::milliseconds(1));
    }
  }
}

bool Client::post(Batch& b, Wait* w) {
  if (b.size() == 0) return false;
  ++counters_.round_trips;
  for (unsigned node = 0; node < b.per_node_.size(); ++node) {
    std::vector<Op>& ops = b.per_node_[node];
    if (ops.empty()) continue;
    Status s;
    const Fate fate = node < nodes_.size() ? fate_of(node, ops) : Fate::kDeliver;
    if (node >= nodes_.size()) {
      s = Status::InvalidArgument("memory node " + std::to_string(node) + " of a batch: only " +
                                  std::to_string(nodes_.size()) + " are connected");
    } else if (fate == Fate::kDelay) {
      hold(node, ops);
      s = lost_reply(nodes_[node]->name());
    } else {
      s = nodes_[node]->post(reinterpret_cast<std::uint64_t>(w), ops);
    }
    if (!s.ok()) {
      if (w->status.ok()) w->status = s;
      // The sub-batches already posted still complete before we resume.
      continue;
    }
    if (fate == Fate::kLoseReply) lost_.push_back({w, node, ops});
    if (!held_.empty()) post_held(node);
    ++w->remaining;
    ++counters_.posts;
    counters_.max_in_flight = std::max<std::uint64_t>(counters_.max_in_flight, nodes_[node]->in_flight());
    counters_.verbs += ops.size();
    for (const Op& op : ops) counters_.bytes += payload_bytes(op);
  }
  return w->remaining != 0;
}

void Client::drive() {
  // Resume in completion order; a resumed coroutine may post more.
  while (!ready_.empty()) {
    std::vector<std::coroutine_handle<>> now;
    now.swap(ready_);
    for (auto h : now) h.resume();
  }
  unsigned busy = 0;
  for (auto& n : nodes_) busy += n->in_flight() != 0 ? 1 : 0;
  if (busy == 0) return;
  bool progress = false;
  for (unsigned node = 0; node < nodes_.size(); ++node) {
    Transport* n = nodes_[node].get();
    if (n->in_flight() == 0) continue;
    done_.clear();
    // With one node busy, wait on it; with several, look at each in turn.
    n->poll(&done_, busy == 1 ? std::chrono::nanoseconds(std::chrono::milliseconds(1))
                              : std::chrono::nanoseconds(0));
    progress |= !done_.empty();
    for (Completion& c : done_) {
      if ((!lost_.empty() || !late_.empty()) && intercept(node, c)) continue;
      Wait* w = reinterpret_cast<Wait*>(c.tag);
      if (!c.status.ok() && w->status.ok()) w->status = std::move(c.status);
      if (--w->remaining == 0 && w->handle) ready_.push_back(w->handle);
    }
  }
  // Several nodes are looked at without waiting; when none had anything,
  // give the CPU away rather than spin against the daemons that answer.
  if (busy > 1 && !progress) std::this_thread::yield();
}

Status Client::exec_sync(Batch& b) {
  Wait w;
  if (post(b, &w)) {
    while (w.remaining != 0) drive();
  }
  return w.status;
}

Fate Client::fate_of(unsigned node, std::span<const Op> ops) {
  return fate_hook() ? fate_hook()(node, ops) : Fate::kDeliver;
}

void Client::hold(unsigned node, std::span<const Op> ops) {
  auto h = std::make_unique<Held>();
  h->node = node;
  h->ops.assign(ops.begin(), ops.end());
  for (Op& op : h->ops) {
    if (op.verb != Verb::kRead && op.verb != Verb::kWrite) continue;
    std::vector<std::byte>& bytes = h->bytes.emplace_back(op.len);
    if (op.verb == Verb::kWrite) std::memcpy(bytes.data(), op.local, op.len);
    op.local = bytes.data();
  }
  held_.push_back(std::move(h));
}

void Client::post_held(unsigned node) {
  for (auto it = held_.begin(); it != held_.end();) {
    if ((*it)->node != node) {
      ++it;
      continue;
    }
    std::unique_ptr<Held> h = std::move(*it);
    it = held_.erase(it);
    // Its tag is its own address, which no Wait shares; a request the
    // node refuses now is one that never arrived.
    if (nodes_[node]->post(reinterpret_cast<std::uint64_t>(h.get()), h->ops).ok()) {
      late_.push_back(std::move(h));
    }
  }
}

bool Client::intercept(unsigned node, Completion& c) {
  for (auto it = late_.begin(); it != late_.end(); ++it) {
    if (reinterpret_cast<std::uint64_t>(it->get()) == c.tag) {
      late_.erase(it);
      return true;  // nobody waits for it
    }
  }
  for (auto it = lost_.begin(); it != lost_.end(); ++it) {
    if (reinterpret_cast<std::uint64_t>(it->w) != c.tag || it->node != node) continue;
    // What the caller would have of a reply that never came: garbage.
    for (Op& op : it->ops) op.result = 0xdeadbeefdeadbeefull;
    if (c.status.ok()) c.status = lost_reply(nodes_[node]->name());
    lost_.erase(it);
    break;
  }
  return false;
}

void Client::spawn(Task<void> task) {
  task.handle().resume();
  spawned_.push_back(std::move(task));
}

void Client::run() {
  for (;;) {
    std::erase_if(spawned_, [](const Task<void>& t) { return t.done(); });
    if (spawned_.empty()) return;
    drive();
  }
}

}  // namespace pmhash::remote
