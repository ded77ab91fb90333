// remote/shm_transport.cc - the shm transport: a memory node is a pool file
// that every client process maps (a CXL-style shared memory pool).
//
// A batch runs at post(): each verb on the mapped bytes, in order, with
// 8-byte atomic loads and stores for the aligned words of READ and WRITE
// (the per-word atomicity of remote/transport.h) and atomic_ref for CAS and
// FAA (remote/verbs.cc, execute). Its writes become durable in verb order
// and all of them before it can complete (remote/transport.h,
// "Durability"). The completion
// becomes visible at post time + shm_latency: with a latency, a client sees
// the round trip an RDMA hop would cost, while the node's bytes have
// already changed (as with a NIC that executed the verbs before its
// completion came back).
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>

#include "pool/pool.h"
#include "remote/memnode.h"
#include "remote/remote_testing.h"
#include "remote/transport.h"

namespace pmhash::remote {

// tcp_transport.cc
Status connect_tcp(const std::string& spec, const std::string& address,
                   const ConnectOptions& options, std::unique_ptr<Transport>* out);

namespace {

using Clock = std::chrono::steady_clock;

class ShmTransport final : public Transport {
 public:
  ShmTransport(std::string name, std::unique_ptr<pool::Pool> pool, const ConnectOptions& o)
      : name_(std::move(name)), pool_(std::move(pool)), latency_(o.shm_latency) {}

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return pool_->region().size(); }

  Status post(std::uint64_t tag, std::span<Op> ops) override {
    if (Status s = validate(name_, size(), ops); !s.ok()) return s;
    execute(pool_->region(), ops);
    pending_.push_back({tag, Clock::now() + latency_});
    return Status::OK();
  }

  void poll(std::vector<Completion>* done, std::chrono::nanoseconds wait) override {
    if (pending_.empty()) return;
    auto now = Clock::now();
    // Nothing due yet: wait for the first one, at most `wait` (a spin: the
    // latencies emulated are microseconds, below a sleep's resolution).
    if (pending_.front().ready > now) {
      const auto until = std::min(pending_.front().ready, now + wait);
      while ((now = Clock::now()) < until) std::this_thread::yield();
    }
    while (!pending_.empty() && pending_.front().ready <= now) {
      done->push_back({pending_.front().tag, Status::OK()});
      pending_.pop_front();
    }
  }

  std::size_t in_flight() const override { return pending_.size(); }

 private:
  struct Pending {
    std::uint64_t tag;
    Clock::time_point ready;
  };
  std::string name_;
  std::unique_ptr<pool::Pool> pool_;
  std::chrono::nanoseconds latency_;
  std::deque<Pending> pending_;
};

std::atomic<ConnectHook> connect_hook{nullptr};

}  // namespace

void testing::set_connect_hook(ConnectHook hook) { connect_hook.store(hook); }

Status connect(const std::string& spec, const ConnectOptions& options,
               std::unique_ptr<Transport>* out) {
  const auto colon = spec.find(':');
  const std::string kind = colon == std::string::npos ? spec : spec.substr(0, colon);
  if (kind == "shm" && colon + 1 < spec.size()) {
    std::unique_ptr<pool::Pool> p;
    if (Status s = open_memnode(spec.substr(colon + 1), /*shared=*/true, &p); !s.ok()) return s;
    *out = std::make_unique<ShmTransport>(spec, std::move(p), options);
    return Status::OK();
  }
  if (kind == "tcp" && colon + 1 < spec.size()) {
    return connect_tcp(spec, spec.substr(colon + 1), options, out);
  }
  if (kind == "sim" && colon + 1 < spec.size()) {
    if (ConnectHook hook = connect_hook.load()) return hook(spec, options, out);
  }
  return Status::InvalidArgument("memory node '" + spec +
                                 "': expected shm:PATH (a memory-node pool file) or "
                                 "tcp:HOST:PORT (a pmhash-memnode daemon)");
}

}  // namespace pmhash::remote
