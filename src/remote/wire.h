// remote/wire.h - the tcp transport's frames, shared by the client
// (tcp_transport.cc) and the memory-node daemon (server.cc).
//
// Every integer is little-endian (both ends are x86-64 builds of this code;
// the magic catches a peer that is not). A connection carries requests one
// way and responses the other, one response per request, in request order.
//
//   request   FrameHeader{kRequestMagic, body bytes, tag, verb count}
//             then per verb: WireOp, then for WRITE its `len` bytes
//   response  FrameHeader{kResponseMagic, body bytes, tag, status code}
//             status 0: per verb, READ: its `len` bytes; CAS, FAA: the old
//             word (8 bytes); WRITE: nothing
//             otherwise: the error message (body bytes of text); no verb
//             of the request ran
//
// Before the first frame, the connection bootstrap (remote/handshake.h)
// runs; it is not part of this framing.
//
// Bounds. Every length from the wire is checked in 64-bit arithmetic
// before it is used: a body is at most kMaxBody; a request whose OK
// response would exceed kMaxBody is answered with InvalidArgument and not
// run; an error response carries at most kMaxErrorMessage bytes.
//
// A peer that sends a frame with a bad magic, a body over kMaxBody, or a
// body that does not parse is dropped (the daemon answers with an error
// frame and closes the connection; the client fails every batch in flight
// with IOError).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "pmhash/status.h"
#include "remote/transport.h"

namespace pmhash::remote::wire {

inline constexpr std::uint32_t kRequestMagic = 0x51524d50;   // "PMRQ"
inline constexpr std::uint32_t kResponseMagic = 0x53524d50;  // "PMRS"
// The largest body either side accepts (a batch reading or writing more
// must be split by the caller).
inline constexpr std::uint32_t kMaxBody = 64u << 20;
// The longest error message a response carries.
inline constexpr std::uint32_t kMaxErrorMessage = 4096;

struct FrameHeader {
  std::uint32_t magic;
  std::uint32_t body;   // bytes after this header
  std::uint64_t tag;
  std::uint32_t count;  // request: verbs; response: status code (0 = OK)
  std::uint32_t reserved;
};
static_assert(sizeof(FrameHeader) == 24);

struct WireOp {
  std::uint8_t verb;
  std::uint8_t reserved[3];
  std::uint32_t len;
  std::uint64_t off;
  std::uint64_t arg0;
  std::uint64_t arg1;
};
static_assert(sizeof(WireOp) == 32);

// Appends a request frame for `ops` to `out`. InvalidArgument if the body
// would exceed kMaxBody.
Status encode_request(std::uint64_t tag, std::span<const Op> ops, std::vector<char>* out);

// Reads the verbs of a request body one at a time (the daemon checks a
// whole request before it runs any verb, then runs it in pieces, so that
// no per-verb array as large as the body is ever needed).
class RequestReader {
 public:
  RequestReader(std::span<const char> body, std::uint32_t count) : body_(body), left_(count) {}
  // The next verb into *op (a WRITE's `local` points into the body, a
  // READ's is null); false at the end or when the body does not parse.
  bool next(Op* op);
  // After next() returned false: whether the body parsed (`count` verbs,
  // each a known verb with its WRITE bytes inside the body, and nothing
  // left over).
  bool parsed() const { return !bad_ && left_ == 0 && at_ == body_.size(); }
  // Verbs read so far.
  std::uint64_t index() const { return index_; }

 private:
  std::span<const char> body_;
  std::uint32_t left_;
  std::size_t at_ = 0;
  std::uint64_t index_ = 0;
  bool bad_ = false;
};

// The body length of the OK response to one verb, and to `ops`.
std::uint64_t response_bytes(const Op& op);
std::uint64_t response_body(std::span<const Op> ops);

// A batch in flight on a client's connection.
struct PendingBatch {
  std::uint64_t tag;
  std::span<Op> ops;
  std::chrono::steady_clock::time_point deadline;
};

// The client's side of the framing: takes the complete responses at the
// start of `in`, which answer the batches at the front of `pending` in
// order; for each, pops the batch, copies READ bytes and CAS/FAA results
// into its ops (OK) and appends its completion to `done` (OK, or the
// error the node sent). Returns the bytes consumed. A frame that cannot be
// the answer to the front batch (bad magic, another tag, an OK body whose
// length differs from response_body(ops), an error message over
// kMaxErrorMessage, any frame while nothing is pending) sets `*error`,
// which means the connection is out of step and must be dropped; the
// header is judged as soon as it has arrived, before its body, so a peer
// cannot make the client buffer more than one valid response.
std::size_t take_responses(std::span<const char> in, std::deque<PendingBatch>* pending,
                           std::vector<Completion>* done, std::string* error);

// Status codes on the wire: Status::Code values.
std::uint32_t status_code(const Status& s);
Status status_from(std::uint32_t code, std::string message);

}  // namespace pmhash::remote::wire
