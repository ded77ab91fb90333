// server/resp.h - the Redis serialization protocol: requests in, replies out.
//
// pmhash-server speaks RESP so that every Redis client and tool can use a
// pmhash store. This file is the protocol alone, with no sockets and no
// store: RequestParser turns a connection's bytes into commands, ReplyWriter
// turns answers into bytes in the protocol version the client chose
// (RESP2, or RESP3 after HELLO 3).
//
// Requests. A client sends either
//   - a multibulk request: "*<n>\r\n" then n bulk strings "$<len>\r\n<len
//     bytes>\r\n" (what client libraries send), or
//   - an inline request: one line of words separated by blanks, ended by
//     "\n" or "\r\n", where a word may be "double quoted" (escapes \n \r \t
//     \b \a \\ \" and \xHH) or 'single quoted' (escape \') - what a person
//     types into telnet or nc.
// Several requests may arrive in one read and one request over many reads
// (pipelining); the parser resumes where it stopped, without scanning the
// bytes it has already taken, so a 64 MiB argument arriving in 4 KiB reads
// costs O(its length), not O(length^2 / 4096).
//
// All input is hostile. Every count and length is parsed in 64-bit
// arithmetic with overflow checks and compared with RequestLimits before it
// is used; the parser allocates nothing in proportion to a length it has
// been told, only to bytes that have arrived (a client announcing a 2^63
// byte argument gets an error, one announcing 60 MiB and sending 10 bytes
// costs 10 bytes). An error is final for the connection: the server sends
// the error text and closes it, as Redis does, because after a framing
// error the next request's start is unknown.
//
// The error texts are Redis's ("Protocol error: invalid bulk length", ...),
// so clients and tools react as they do to a Redis server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/limits.h"

namespace pmhash::server {

struct RequestLimits {
  // Longest argument (bulk string). The largest value an engine stores, and
  // room for a key beside it is not needed: a key is its own argument.
  std::uint64_t max_bulk = kMaxValueSize;
  // Most arguments of one multibulk request (Redis: 1024 * 1024).
  std::uint64_t max_args = 1024 * 1024;
  // Longest inline request, and longest "*<n>" or "$<len>" header line
  // before its "\r\n" (Redis: 64 KiB).
  std::uint64_t max_inline = 64 * 1024;
  // Most bytes of one request, headers included: what a connection may
  // make the server hold for a request not yet complete (Redis's
  // client-query-buffer-limit defaults to 1 GiB; ours is smaller because
  // no command of ours needs more).
  std::uint64_t max_request = 256ull * 1024 * 1024;
};

class RequestParser {
 public:
  enum class Result {
    kIncomplete,  // more bytes are needed; call again with them appended
    kRequest,     // args() holds one request, consumed() its bytes
    kError,       // error() holds the reply text; close the connection
  };

  explicit RequestParser(RequestLimits limits = {}) : limits_(limits) {}

  // Parses the next request from `in`: the connection's bytes not yet
  // consumed, starting with the first byte of a request. After kIncomplete,
  // call again with the same bytes and more after them (`in` may have moved
  // in memory). After kRequest, the caller drops consumed() bytes from the
  // front before the next call; args() stays valid until then, and until
  // `in`'s bytes move. Blank inline lines and empty multibulks ("*0", "*-1")
  // are consumed without producing a request: the parser goes on to the
  // next one in the same call.
  Result parse(std::string_view in);

  std::span<const std::string_view> args() const { return args_; }
  std::size_t consumed() const { return consumed_; }
  // "Protocol error: ..." after kError (without the "-ERR " a reply adds).
  const std::string& error() const { return error_; }
  // True while a request has begun but is not complete: the bytes of a
  // connection that closes now ended inside a request.
  bool in_request() const { return state_ != State::kStart; }

 private:
  enum class State : unsigned char { kStart, kArgCount, kArgHeader, kArgBody };

  Result fail(std::string text);
  Result parse_inline(std::string_view in);
  // Reads a header line "<c><digits>\r\n" at pos_ (the type byte c already
  // checked); kIncomplete until its "\r\n" arrives.
  Result read_header_number(std::string_view in, const char* too_big, const char* invalid,
                            std::int64_t* out);
  void reset();

  RequestLimits limits_;
  State state_ = State::kStart;
  std::size_t pos_ = 0;            // the next byte of `in` to read
  std::size_t request_start_ = 0;  // where the current multibulk request began
  std::size_t scanned_ = 0;      // header or inline bytes already searched for "\n"
  std::uint64_t arg_count_ = 0;  // arguments announced by "*<n>"
  std::uint64_t bulk_len_ = 0;   // length announced by the current "$<len>"
  // Where each complete argument lies in `in` (offset, length): offsets,
  // not views, because `in` may move between calls.
  std::vector<std::pair<std::size_t, std::size_t>> spans_;
  std::vector<std::string_view> args_;
  // Inline arguments, unquoted (their bytes differ from the input's).
  std::vector<std::string> inline_args_;
  std::size_t consumed_ = 0;
  std::string error_;
};

enum class Protocol : unsigned char { kResp2 = 2, kResp3 = 3 };

// Appends replies to a string, in the connection's protocol version.
// Aggregates (array, map, set) are written as their header followed by
// their elements: the caller writes exactly as many elements as it
// announced (a map's count is of pairs, each a key then a value).
class ReplyWriter {
 public:
  ReplyWriter(std::string* out, Protocol protocol) : out_(out), protocol_(protocol) {}

  Protocol protocol() const { return protocol_; }
  void set_protocol(Protocol protocol) { protocol_ = protocol; }

  // "+OK". Bytes \r and \n in `text` become blanks (a simple string is one
  // line).
  void simple(std::string_view text);
  // "-ERR ...": `text` starts with the error code ("ERR", "WRONGTYPE",
  // "NOAUTH", ...). Line breaks become blanks.
  void error(std::string_view text);
  void integer(std::int64_t value);
  void bulk(std::string_view bytes);
  // A missing value: "$-1" in RESP2, "_" in RESP3.
  void null();
  // A missing aggregate: "*-1" in RESP2, "_" in RESP3.
  void null_array();
  void array(std::size_t count);
  // RESP3 "%", RESP2 a flat array of 2 * pairs elements.
  void map(std::size_t pairs);
  // RESP3 "~", RESP2 an array.
  void set(std::size_t count);
  // RESP3 ",", RESP2 a bulk string; the shortest text that reads back as
  // the same double ("inf", "-inf", "nan" for the others).
  void real(double value);
  // RESP3 "#t"/"#f", RESP2 ":1"/":0".
  void boolean(bool value);
  // RESP3 "=" with a three-letter format ("txt"), RESP2 a bulk string.
  void verbatim(std::string_view format, std::string_view text);
  // Replies already written, in this protocol, by another ReplyWriter
  // (EXEC's, once its transaction committed).
  void raw(std::string_view encoded) { out_->append(encoded); }

 private:
  void line(char type, std::string_view text);
  void count(char type, std::uint64_t n);

  std::string* out_;
  Protocol protocol_;
};

// The text of a double as Redis prints it in replies (INCRBYFLOAT, RESP3
// doubles): the shortest decimal that reads back as the same value.
std::string format_double(double value);

}  // namespace pmhash::server
