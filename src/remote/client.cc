#include "remote/client.h"

#include <algorithm>
#include <thread>

namespace pmhash::remote {

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
    if (node >= nodes_.size()) {
      s = Status::InvalidArgument("memory node " + std::to_string(node) + " of a batch: only " +
                                  std::to_string(nodes_.size()) + " are connected");
    } else {
      s = nodes_[node]->post(reinterpret_cast<std::uint64_t>(w), ops);
    }
    if (!s.ok()) {
      if (w->status.ok()) w->status = s;
      // The sub-batches already posted still complete before we resume.
      continue;
    }
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
  for (auto& n : nodes_) {
    if (n->in_flight() == 0) continue;
    done_.clear();
    // With one node busy, wait on it; with several, look at each in turn.
    n->poll(&done_, busy == 1 ? std::chrono::nanoseconds(std::chrono::milliseconds(1))
                              : std::chrono::nanoseconds(0));
    progress |= !done_.empty();
    for (Completion& c : done_) {
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
