// remote/verbs.cc - what every transport shares: verb validation, the
// execution of a batch on a mapped memory-node region, payload accounting.
#include <atomic>
#include <cstring>

#include "media/region.h"
#include "remote/memnode.h"
#include "remote/transport.h"

namespace pmhash::remote {

namespace {

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

}  // namespace

void execute(media::Region& region, std::span<Op> ops) {
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
}

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

Status validate(const std::string& node, std::uint64_t size, std::span<const Op> ops,
                bool check_buffers) {
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
    if (check_buffers && !atomic && len != 0 && op.local == nullptr) {
      return Status::InvalidArgument(what + ": no local buffer");
    }
  }
  return Status::OK();
}

}  // namespace pmhash::remote
