// tests/fuzz/memnode_request_fuzzer.cc - libFuzzer target: a memory node's
// handling of one connection's input stream (remote::NodeSession, the
// code the daemon runs per connection: the bootstrap, request parsing,
// validation, execution, responses, memory accounting), without sockets.
//
// Property: for any bytes a client sends, the session never crashes, never
// reads or writes outside the node's region or its own buffers (ASan,
// UBSan), never touches the bytes below remote::kFirstUsable (the pool
// header no verb may reach), never holds more buffer memory than its
// allowance plus what the budget granted, gives every granted byte back
// when it ends, and answers with a well-formed stream: the NodeHello, one
// Verdict, then response frames (magic, a body within wire::kMaxBody, an
// error text within wire::kMaxErrorMessage). libFuzzer's -timeout catches
// a session that loops.
//
// The node is a 64 MiB anonymous region (media::Region::anonymous), the
// size of the node that a 2,080-byte request once destroyed. Before each input
// its pages past the header are dropped (madvise MADV_DONTNEED: they read
// as zeros again, at a cost in proportion to the pages the last input
// touched) and the header page is marked. The session's budget is one
// largest frame (server.h's kMinBufferBudget).
//
// Input format:
//   byte 0     bit 0: the input starts with the client's side of the
//              bootstrap (a ClientHello, or anything); otherwise the
//              harness sends a valid ClientHello first and the input is
//              the request stream
//              bit 1: the node has a secret (a client cannot prove it, so
//              only the refusal path runs)
//   byte 1     the input is handed over in pieces of 2^(byte % 18) bytes
//              at most (as reads of a socket would)
//   the rest   the stream; the peer reads every response at once
//
// Seeds (tests/fuzz/corpus-memnode-request/, made by make_seeds.py): the
// request of 65 READs of 64 MiB - 16 KiB (2,080-byte body) whose lengths
// sum past 2^32 on this node, and the one of 5 READs of 1 GiB - 16 KiB
// (160 bytes) that did so on a 1 GiB node; valid batches of every verb;
// pipelined requests; bad magics, oversized bodies, a raw bootstrap.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "media/region.h"
#include "remote/handshake.h"
#include "remote/memnode.h"
#include "remote/node_session.h"
#include "remote/server.h"
#include "remote/wire.h"

namespace {

using pmhash::remote::NodeSession;
namespace hs = pmhash::remote::handshake;
namespace wire = pmhash::remote::wire;

constexpr std::size_t kRegionSize = 64u << 20;

std::unique_ptr<pmhash::media::Region> g_region;
hs::Secret g_secret;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "memnode_request_fuzzer: %s\n", what);
  std::abort();
}

// Checks the session's output stream as it comes: NodeHello, Verdict,
// then response frames. Skips bodies without storing them.
class OutputChecker {
 public:
  void take(std::span<const char> out) {
    for (std::size_t i = 0; i < out.size();) {
      if (skip_ > 0) {
        const std::size_t n = std::min<std::uint64_t>(skip_, out.size() - i);
        skip_ -= n;
        i += n;
        continue;
      }
      head_.push_back(out[i++]);
      judge();
    }
  }

 private:
  void judge() {
    std::uint32_t magic = 0;
    if (head_.size() < 4) return;
    std::memcpy(&magic, head_.data(), 4);
    if (stage_ == 0) {
      if (magic == hs::kVerdictMagic) {
        stage_ = 1;  // a refusal instead of the hello
        judge();
        return;
      }
      if (magic != hs::kNodeHelloMagic) fail("the first bytes are not a NodeHello");
      if (head_.size() < hs::kNodeHelloBytes) return;
      head_.clear();
      stage_ = 1;
      return;
    }
    if (stage_ == 1) {
      if (magic != hs::kVerdictMagic) fail("no Verdict after the hello");
      if (head_.size() < hs::kVerdictBytes) return;
      std::uint32_t len = 0;
      std::memcpy(&len, head_.data() + 8, 4);
      if (len > hs::kMaxMessage) fail("a Verdict message over kMaxMessage");
      skip_ = len;
      head_.clear();
      stage_ = 2;
      return;
    }
    if (head_.size() < sizeof(wire::FrameHeader)) return;
    wire::FrameHeader h;
    std::memcpy(&h, head_.data(), sizeof(h));
    if (h.magic != wire::kResponseMagic) fail("a response frame without its magic");
    if (h.count == 0 && h.body > wire::kMaxBody) fail("an OK response over kMaxBody");
    if (h.count != 0 && h.body > wire::kMaxErrorMessage) fail("an error text over kMaxErrorMessage");
    skip_ = h.body;
    head_.clear();
  }

  int stage_ = 0;
  std::vector<char> head_;
  std::uint64_t skip_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!pmhash::media::Region::anonymous(kRegionSize, &g_region).ok()) fail("no region");
  const std::string path = "/dev/shm/pmhash-fuzz-secret-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && ::write(fd, "0123456789abcdef0123456789abcdef", 32) == 32;
  if (fd >= 0) ::close(fd);
  const bool loaded = written && hs::Secret::load(path, &g_secret).ok();
  ::unlink(path.c_str());
  if (!loaded) fail("cannot make the fuzz secret");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const unsigned mode = size > 0 ? data[0] : 0;
  const std::size_t piece = std::size_t{1} << ((size > 1 ? data[1] : 16) % 18);
  const std::uint8_t* stream = data + std::min<std::size_t>(size, 2);
  const std::size_t stream_size = size > 2 ? size - 2 : 0;

  std::byte* base = g_region->base();
  static_assert(pmhash::remote::kFirstUsable % 4096 == 0);
  std::memset(base, 0xa5, pmhash::remote::kFirstUsable);  // the header verbs may not touch
  if (::madvise(base + pmhash::remote::kFirstUsable, kRegionSize - pmhash::remote::kFirstUsable,
                MADV_DONTNEED) != 0) {
    fail("madvise");
  }

  pmhash::remote::MemoryBudget budget(pmhash::remote::kMinBufferBudget);
  NodeSession::Node node;
  node.region = g_region.get();
  node.name = "memory node fuzz";
  if ((mode & 2) != 0) {
    // A node with a secret: an input cannot hold the proof (it covers the
    // node's fresh random nonce), so only the refusals run.
    node.secret = &g_secret;
  }
  node.layout_version = pmhash::remote::kMemNodeLayoutVersion;
  node.budget = &budget;

  std::vector<char> input;
  if ((mode & 1) == 0) {
    // A valid ClientHello without a proof: the stream is the requests.
    char hello[hs::kClientHelloBytes] = {};
    const std::uint32_t magic = hs::kClientHelloMagic, version = hs::kProtocolVersion;
    std::memcpy(hello, &magic, 4);
    std::memcpy(hello + 4, &version, 4);
    input.assign(hello, hello + sizeof(hello));
  }
  input.insert(input.end(), stream, stream + stream_size);

  {
    NodeSession s(&node);
    OutputChecker checker;
    const std::uint64_t allowance = node.limits.in_allowance + node.limits.out_allowance;
    std::size_t at = 0;
    for (;;) {
      const std::span<const char> out = s.output();
      checker.take(out);
      s.sent(out.size());
      if (s.charged() > allowance + s.granted()) fail("buffers beyond allowance + grant");
      if (budget.used() > budget.limit()) fail("the budget overdrawn");
      if (s.done()) break;
      const std::size_t want = s.want_input();
      if (want == 0) {
        const std::uint64_t before = s.progress();
        s.process();
        if (s.output().empty() && s.progress() == before) break;  // nothing more to do
        continue;
      }
      const std::size_t n = std::min({want, piece, input.size() - at});
      if (n == 0) break;
      std::memcpy(s.input_space(), input.data() + at, n);
      s.received(n);
      at += n;
      s.process();
    }
  }
  if (budget.used() != 0) fail("a grant not given back");
  for (std::size_t i = 0; i < pmhash::remote::kFirstUsable; ++i) {
    if (base[i] != std::byte{0xa5}) fail("a verb wrote below kFirstUsable");
  }
  return 0;
}
