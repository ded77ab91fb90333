// tests/fuzz/tcp_reply_fuzzer.cc - libFuzzer target: the tcp client's
// handling of what a memory node sends back (wire::take_responses, the
// code the tcp transport runs on every read), with batches in flight.
//
// Property: for any bytes, take_responses never reads or writes outside
// the received bytes or the ops' buffers (ASan, UBSan: every READ buffer
// is a heap block of exactly its length), completes batches only in post
// order and only with their own tags, consumes no more than it was given,
// stops for good at the first protocol error, and never leaves the client
// holding more than one partial response (a header it has judged, and a
// body no longer than the front batch's response or an error text) plus
// the last read.
//
// Input format:
//   byte 0     the batches in flight: bits 0-1 their number - 1; bits 2-7
//              pick each one's verbs from kShapes (two bits per batch,
//              rotated)
//   byte 1     the bytes arrive in reads of 2^(byte % 17) at most
//   the rest   what the node sends
//
// Seeds (tests/fuzz/corpus-tcp-reply/, make_seeds.py): the right responses
// to each shape, an error response, responses with another tag, a length
// that disagrees with the batch, a body over kMaxBody, a truncated stream.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "remote/transport.h"
#include "remote/wire.h"

namespace {

using pmhash::remote::Op;
using pmhash::remote::Verb;
namespace wire = pmhash::remote::wire;

// The verbs of a batch in flight: {verb, len} pairs.
struct Shape {
  std::vector<std::pair<Verb, std::uint32_t>> verbs;
};
const Shape kShapes[4] = {
    {{{Verb::kRead, 8}}},
    {{{Verb::kRead, 100}, {Verb::kCas, 8}}},
    {{{Verb::kFaa, 8}, {Verb::kWrite, 16}, {Verb::kRead, 4096}, {Verb::kRead, 0}}},
    {{{Verb::kWrite, 64}}},
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "tcp_reply_fuzzer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const unsigned mode = size > 0 ? data[0] : 0;
  const std::size_t piece = std::size_t{1} << ((size > 1 ? data[1] : 12) % 17);
  const char* stream = reinterpret_cast<const char*>(data) + std::min<std::size_t>(size, 2);
  const std::size_t stream_size = size > 2 ? size - 2 : 0;

  // The batches in flight, each op with a buffer of exactly its length.
  const unsigned batches = (mode & 3) + 1;
  std::vector<std::vector<Op>> ops(batches);
  std::vector<std::unique_ptr<char[]>> buffers;
  std::deque<wire::PendingBatch> pending;
  for (unsigned b = 0; b < batches; ++b) {
    const Shape& shape = kShapes[((mode >> 2) >> (2 * b)) & 3];
    for (const auto& [verb, len] : shape.verbs) {
      Op op{verb, len, 16384, nullptr, 1, 2, 0};
      if (verb == Verb::kRead || verb == Verb::kWrite) {
        buffers.push_back(std::make_unique<char[]>(len == 0 ? 1 : len));
        op.local = buffers.back().get();
      }
      ops[b].push_back(op);
    }
  }
  for (unsigned b = 0; b < batches; ++b) pending.push_back({100 + b, ops[b], {}});

  std::vector<char> in;
  std::vector<pmhash::remote::Completion> done;
  std::string error;
  std::uint64_t next_tag = 100;
  for (std::size_t at = 0; at < stream_size && error.empty();) {
    const std::size_t n = std::min(piece, stream_size - at);
    in.insert(in.end(), stream + at, stream + at + n);
    at += n;
    const std::size_t before = done.size();
    const std::size_t used = wire::take_responses(in, &pending, &done, &error);
    if (used > in.size()) fail("consumed more than was received");
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
    for (std::size_t i = before; i < done.size(); ++i) {
      if (done[i].tag != next_tag++) fail("a completion out of post order");
    }
    if (done.size() + pending.size() != batches) fail("a batch lost or invented");
    // What stays buffered: at most one partial response and the last read.
    std::uint64_t bound = sizeof(wire::FrameHeader) + wire::kMaxErrorMessage + piece;
    if (!pending.empty()) bound += wire::response_body(pending.front().ops);
    if (error.empty() && in.size() > bound) fail("more than one partial response buffered");
  }
  return 0;
}
