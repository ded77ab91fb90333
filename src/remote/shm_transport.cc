// remote/shm_transport.cc - the shm transport: a memory node is a pool file
// that every client process maps (a CXL-style shared memory pool).
//
// A batch runs at post(): each verb on the mapped bytes, in order, with
// 8-byte atomic loads and stores for the aligned words of READ and WRITE
// (the per-word atomicity of remote/transport.h) and atomic_ref for CAS and
// FAA. Every written line is flushed as it is written and one fence ends
// the batch, so a batch is durable before it can complete. The completion
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
#include "remote/transport.h"

namespace pmhash::remote {

namespace {

using Clock = std::chrono::steady_clock;

// Word-wise copies between local memory and the mapped region. Aligned
// words go through 8-byte atomics; a ragged head or tail byte by byte
// (relaxed atomics too, so that racing clients are well defined).
void copy_in(void* dst, const std::byte* src, std::size_t n) {
  auto* d = static_cast<std::byte*>(dst);
  std::size_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(src + i) & 7) != 0) {
    d[i] = std::atomic_ref<std::byte>(const_cast<std::byte&>(src[i])).load(std::memory_order_relaxed);
    ++i;
  }
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t w = std::atomic_ref<std::uint64_t>(
        *reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(src + i))).load(std::memory_order_acquire);
    std::memcpy(d + i, &w, 8);
  }
  for (; i < n; ++i) {
    d[i] = std::atomic_ref<std::byte>(const_cast<std::byte&>(src[i])).load(std::memory_order_relaxed);
  }
}

void copy_out(std::byte* dst, const void* src, std::size_t n) {
  const auto* s = static_cast<const std::byte*>(src);
  std::size_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 7) != 0) {
    std::atomic_ref<std::byte>(dst[i]).store(s[i], std::memory_order_relaxed);
    ++i;
  }
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s + i, 8);
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(dst + i))
        .store(w, std::memory_order_release);
  }
  for (; i < n; ++i) std::atomic_ref<std::byte>(dst[i]).store(s[i], std::memory_order_relaxed);
}

class ShmTransport final : public Transport {
 public:
  ShmTransport(std::string name, std::unique_ptr<pool::Pool> pool, const ConnectOptions& o)
      : name_(std::move(name)), pool_(std::move(pool)), latency_(o.shm_latency) {}

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return pool_->region().size(); }

  Status post(std::uint64_t tag, std::span<Op> ops) override {
    if (Status s = validate(name_, size(), ops); !s.ok()) return s;
    media::Region& region = pool_->region();
    std::byte* base = region.base();
    bool wrote = false;
    for (Op& op : ops) {
      std::byte* at = base + op.off;
      switch (op.verb) {
        case Verb::kRead:
          copy_in(op.local, at, op.len);
          break;
        case Verb::kWrite:
          copy_out(at, op.local, op.len);
          region.flush(at, op.len);
          wrote = true;
          break;
        case Verb::kCas: {
          std::uint64_t expected = op.arg0;
          std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at))
              .compare_exchange_strong(expected, op.arg1, std::memory_order_acq_rel);
          op.result = expected;  // the old value, whether or not it matched
          region.flush(at, 8);
          wrote = true;
          break;
        }
        case Verb::kFaa:
          op.result = std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at))
                          .fetch_add(op.arg0, std::memory_order_acq_rel);
          region.flush(at, 8);
          wrote = true;
          break;
      }
    }
    // One fence for the batch: its writes are durable before it completes.
    if (wrote) region.drain();
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

}  // namespace

std::uint64_t payload_bytes(const Op& op) {
  switch (op.verb) {
    case Verb::kRead:
    case Verb::kWrite:
      return op.len;
    case Verb::kCas:
      return 16 + 8;  // expected and desired out, the old value back
    case Verb::kFaa:
      return 8 + 8;
  }
  return 0;
}

Status validate(const std::string& node, std::uint64_t size, std::span<const Op> ops) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const bool atomic = op.verb == Verb::kCas || op.verb == Verb::kFaa;
    const std::uint64_t len = atomic ? 8 : op.len;
    const std::string what = node + ": verb " + std::to_string(i) + " of the batch";
    if (op.off < kFirstUsable || op.off > size || len > size - op.off) {
      return Status::InvalidArgument(what + " addresses [" + std::to_string(op.off) + ", +" +
                                     std::to_string(len) + "), outside the node's usable bytes [" +
                                     std::to_string(kFirstUsable) + ", " + std::to_string(size) + ")");
    }
    if (atomic && (op.off & 7) != 0) {
      return Status::InvalidArgument(what + ": an atomic needs an 8-byte-aligned offset, got " +
                                     std::to_string(op.off));
    }
    if (!atomic && len != 0 && op.local == nullptr) {
      return Status::InvalidArgument(what + ": no local buffer");
    }
  }
  return Status::OK();
}

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
  return Status::InvalidArgument("memory node '" + spec +
                                 "': expected shm:PATH (a memory-node pool file)");
}

}  // namespace pmhash::remote
