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
// A peer that sends a frame with a bad magic, a body over kMaxBody, or a
// body that does not parse is dropped (the daemon closes the connection;
// the client fails every batch in flight with IOError).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pmhash/status.h"
#include "remote/transport.h"

namespace pmhash::remote::wire {

inline constexpr std::uint32_t kRequestMagic = 0x51524d50;   // "PMRQ"
inline constexpr std::uint32_t kResponseMagic = 0x53524d50;  // "PMRS"
// The daemon's first frame on a connection: tag = the pool's size, count =
// the memory-node layout version, no body.
inline constexpr std::uint32_t kHelloMagic = 0x49484d50;     // "PMHI"
// The largest body either side accepts (a batch reading or writing more
// must be split by the caller).
inline constexpr std::uint32_t kMaxBody = 64u << 20;

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

// Parses a request body into ops whose WRITE buffers point into `body`
// (READ buffers are left null: the server points them at its response).
// False if the body does not parse.
bool decode_request(std::span<const char> body, std::uint32_t count, std::vector<Op>* ops);

// The body length of the OK response to `ops`.
std::uint64_t response_body(std::span<const Op> ops);

// Status codes on the wire: Status::Code values.
std::uint32_t status_code(const Status& s);
Status status_from(std::uint32_t code, std::string message);

}  // namespace pmhash::remote::wire
