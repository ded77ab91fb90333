// remote/verbs.cc - what every transport shares: verb validation, the
// execution of a batch on a mapped memory-node region, payload accounting.
#include <atomic>
#include <cstring>

#include "engine/planted.h"
#include "media/region.h"
#include "remote/memnode.h"
#include "remote/transport.h"

namespace pmhash::remote {

namespace {

// Word-wise copies between local memory and the mapped region. Aligned
// words go through 8-byte atomics; a ragged head or tail byte by byte
// (atomics too, so that racing clients are well defined). Every store is a
// release store, so a batch's stores become visible in program order (what
// byte granularity needs of them, execute below); on x86 that is a plain
// store.
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
    std::atomic_ref<std::byte>(dst[i]).store(s[i], std::memory_order_release);
    ++i;
  }
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s + i, 8);
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(dst + i))
        .store(w, std::memory_order_release);
  }
  for (; i < n; ++i) std::atomic_ref<std::byte>(dst[i]).store(s[i], std::memory_order_release);
}

}  // namespace

// The order in which a batch's writes become durable (transport.h,
// "Durability"): a power loss at any instant leaves a prefix of the
// batch's writing verbs durable, the last one possibly in part.
//
// A verb *writes* when it stores: a WRITE of at least one byte, a CAS that
// matches and changes its word, an FAA with a non-zero addend. A CAS is
// first tried with a plain load: a CAS that would fail (or change nothing)
// is answered from that load, which is as good a linearization point as
// the locked instruction, and stores nothing, so it needs no fence.
//
// Where the media may take lines in any order (cache_line: a dirty line can
// be evicted, or a clwb completed, at any moment; page: the kernel writes
// pages back when it likes), a verb's stores must not begin before every
// earlier writing verb is durable: one fence before each writing verb that
// follows another, and one at the end. Where stores reach media in the
// order they become visible (byte: eADR or CXL global persistent flush),
// the stores need only become visible in program order, which they do
// (release stores in copy_out, read-modify-writes for CAS and FAA), and
// one fence at the end makes the batch durable before it completes.
void execute(media::Region& region, std::span<Op> ops) {
  const media::Granularity g = region.granularity();
  const bool reorders = g == media::Granularity::kCacheLine || g == media::Granularity::kPage;
  // With a bug planted for the crash checker: the fence between writing
  // verbs is left out (one fence for the whole batch).
  const bool one_fence = engine::planted::active(engine::planted::kMemnodeOneFencePerBatch);
  std::byte* base = region.base();
  bool unfenced = false;  // an earlier verb's flushed writes await a fence
  // Before a verb stores: every earlier writing verb is durable.
  auto order_before_store = [&] {
    if (!unfenced || !reorders || one_fence) return;
    // Verb k+1's lines must not reach media (by eviction or write-back)
    // while verb k's may still be lost: a crash would keep a later write
    // (a CAS that publishes) without the earlier one it publishes.
    region.drain();
    unfenced = false;
  };
  for (Op& op : ops) {
    std::byte* at = base + op.off;
    switch (op.verb) {
      case Verb::kRead:
        copy_in(op.local, at, op.len);
        break;
      case Verb::kWrite:
        if (op.len == 0) break;
        order_before_store();
        copy_out(at, op.local, op.len);
        region.flush(at, op.len);
        unfenced = true;
        break;
      case Verb::kCas: {
        std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(at));
        const std::uint64_t now = word.load(std::memory_order_acquire);
        if (now != op.arg0 || op.arg0 == op.arg1) {
          op.result = now;  // fails, or succeeds without a change: no store
          break;
        }
        order_before_store();
        std::uint64_t expected = op.arg0;
        word.compare_exchange_strong(expected, op.arg1, std::memory_order_acq_rel);
        op.result = expected;  // the old value, whether or not it matched
        if (expected == op.arg0) {
          region.flush(at, 8);
          unfenced = true;
        }
        break;
      }
      case Verb::kFaa: {
        std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(at));
        if (op.arg0 == 0) {
          op.result = word.load(std::memory_order_acquire);
          break;
        }
        order_before_store();
        op.result = word.fetch_add(op.arg0, std::memory_order_acq_rel);
        region.flush(at, 8);
        unfenced = true;
        break;
      }
    }
  }
  // The last writing verb durable before the batch completes: a completed
  // batch survives any crash of the node.
  if (unfenced) region.drain();
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
