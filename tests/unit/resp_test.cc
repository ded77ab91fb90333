// The Redis protocol of pmhash-server (tools/server/resp.h): requests parsed
// whole and in pieces, hostile counts and lengths refused with Redis's
// error texts, replies encoded in RESP2 and RESP3.
#include "server/resp.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace pmhash::server {
namespace {

using Request = std::vector<std::string>;

// What a connection would see: every request of `bytes`, fed `chunk`
// bytes at a time (0: all at once), the way a server appends reads to its
// input buffer and drops what a request consumed. Ends at the first error
// (its text is the last element of *error) or when the bytes run out.
std::vector<Request> parse_all(std::string_view bytes, std::size_t chunk, std::string* error,
                               RequestLimits limits = {}, bool* ended_in_request = nullptr) {
  RequestParser parser(limits);
  std::vector<Request> out;
  std::string buffer;
  std::size_t fed = 0;
  error->clear();
  for (;;) {
    const RequestParser::Result r = parser.parse(buffer);
    if (r == RequestParser::Result::kError) {
      *error = parser.error();
      break;
    }
    if (r == RequestParser::Result::kRequest) {
      out.emplace_back(parser.args().begin(), parser.args().end());
      buffer.erase(0, parser.consumed());
      continue;
    }
    if (fed == bytes.size()) break;
    const std::size_t n = chunk == 0 ? bytes.size() - fed : std::min(chunk, bytes.size() - fed);
    buffer.append(bytes.substr(fed, n));
    fed += n;
  }
  if (ended_in_request != nullptr) *ended_in_request = parser.in_request();
  return out;
}

std::string multibulk(const Request& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

TEST(RespParser, MultibulkRequestGivesItsArgumentsAndLength) {
  const std::string bytes = multibulk({"SET", "key", "value"});
  RequestParser parser;
  ASSERT_EQ(parser.parse(bytes), RequestParser::Result::kRequest);
  ASSERT_EQ(parser.args().size(), 3u);
  EXPECT_EQ(parser.args()[0], "SET");
  EXPECT_EQ(parser.args()[1], "key");
  EXPECT_EQ(parser.args()[2], "value");
  EXPECT_EQ(parser.consumed(), bytes.size());
}

TEST(RespParser, BinaryArgumentsKeepTheirLineBreaksAndZeroBytes) {
  const std::string value("a\r\nb\0c\r\n", 8);
  std::string error;
  const auto got = parse_all(multibulk({"SET", "k", value}), 0, &error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0][2], value);
}

TEST(RespParser, PipelinedRequestsComeOutInOrder) {
  const std::string bytes =
      multibulk({"SET", "a", "1"}) + "GET a\r\n" + multibulk({"PING"}) + "*0\r\n" + "\r\n" +
      multibulk({"GET", "b"});
  std::string error;
  const auto got = parse_all(bytes, 0, &error);
  ASSERT_EQ(error, "");
  const std::vector<Request> want = {{"SET", "a", "1"}, {"GET", "a"}, {"PING"}, {"GET", "b"}};
  EXPECT_EQ(got, want);
}

TEST(RespParser, EveryChunkingGivesTheSameRequests) {
  std::string big(100000, 'x');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  const std::string bytes = multibulk({"SET", "key", big}) + "*-1\r\n" +
                            "set 'it\\'s' \"a\\x41\\n\"\n" + multibulk({"MGET", "a", "", "c"}) +
                            "   \r\n" + "PING\r\n";
  std::string error;
  const auto whole = parse_all(bytes, 0, &error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(whole.size(), 4u);
  for (std::size_t chunk : {1u, 2u, 3u, 7u, 4096u}) {
    const auto pieces = parse_all(bytes, chunk, &error);
    EXPECT_EQ(error, "") << "chunk " << chunk;
    EXPECT_EQ(pieces, whole) << "chunk " << chunk;
  }
}

TEST(RespParser, InlineRequestsUnquoteAsRedisCliQuotes) {
  std::string error;
  const auto got = parse_all(
      "SET k \"a b\\x41\\n\\t\\\"\"\r\nset 'it\\'s' x\nGET  spaced\t\tk  \r\nab\"c d\"\n", 0, &error);
  ASSERT_EQ(error, "");
  const std::vector<Request> want = {
      {"SET", "k", "a bA\n\t\""}, {"set", "it's", "x"}, {"GET", "spaced", "k"}, {"abc d"}};
  EXPECT_EQ(got, want);
}

TEST(RespParser, UnbalancedQuotesAreAProtocolError) {
  for (const char* line : {"SET k \"abc\r\n", "SET k 'abc\r\n", "SET k \"a\"b\r\n", "GET 'a'b\n"}) {
    std::string error;
    const auto got = parse_all(line, 0, &error);
    EXPECT_TRUE(got.empty()) << line;
    EXPECT_EQ(error, "Protocol error: unbalanced quotes in request") << line;
  }
}

TEST(RespParser, HostileBulkLengthsAreRefusedBeforeAnyByteIsAwaited) {
  const std::vector<std::string> lengths = {
      "9223372036854775808",   // 2^63: does not fit an int64
      "9223372036854775807",   // 2^63 - 1: beyond max_bulk
      "18446744073709551616",  // 2^64
      "-5", "+5", "5 ", "", "abc", std::to_string(kMaxValueSize + 1)};
  for (const std::string& len : lengths) {
    std::string error;
    const auto got = parse_all("*2\r\n$3\r\nGET\r\n$" + len + "\r\n", 0, &error);
    EXPECT_TRUE(got.empty()) << len;
    EXPECT_EQ(error, "Protocol error: invalid bulk length") << len;
  }
}

TEST(RespParser, HostileArgumentCountsAreRefused) {
  RequestLimits limits;
  limits.max_args = 1000;
  for (const std::string count : {"1001", "9223372036854775808", "x", "1x", ""}) {
    std::string error;
    const auto got = parse_all("*" + count + "\r\n", 0, &error, limits);
    EXPECT_TRUE(got.empty()) << count;
    EXPECT_EQ(error, "Protocol error: invalid multibulk length") << count;
  }
  std::string error;
  EXPECT_EQ(parse_all("*1000\r\n", 0, &error, limits).size(), 0u);
  EXPECT_EQ(error, "");
}

TEST(RespParser, EmptyMultibulksAreSkipped) {
  std::string error;
  const auto got = parse_all("*0\r\n*-1\r\n*-9\r\n" + multibulk({"PING"}), 0, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, (std::vector<Request>{{"PING"}}));
}

TEST(RespParser, HeaderLinesWithoutCarriageReturnOrTooLongAreRefused) {
  std::string error;
  parse_all("*1\n$4\r\nPING\r\n", 0, &error);
  EXPECT_EQ(error, "Protocol error: invalid multibulk length");
  parse_all("*1\r\n$4\nPING\r\n", 0, &error);
  EXPECT_EQ(error, "Protocol error: invalid bulk length");

  RequestLimits limits;
  limits.max_inline = 100;
  parse_all("*" + std::string(200, '1'), 0, &error, limits);
  EXPECT_EQ(error, "Protocol error: too big mbulk count string");
  parse_all("*1\r\n$" + std::string(200, '1'), 0, &error, limits);
  EXPECT_EQ(error, "Protocol error: too big bulk count string");
  parse_all("GET " + std::string(200, 'k'), 0, &error, limits);
  EXPECT_EQ(error, "Protocol error: too big inline request");
  // The same inline request, shorter than the limit, is fine.
  EXPECT_EQ(parse_all("GET " + std::string(90, 'k') + "\n", 0, &error, limits).size(), 1u);
  EXPECT_EQ(error, "");
}

TEST(RespParser, AMissingDollarOrTrailingLineBreakIsAProtocolError) {
  std::string error;
  parse_all("*1\r\n:4\r\nPING\r\n", 0, &error);
  EXPECT_EQ(error, "Protocol error: expected '$', got ':'");
  parse_all("*1\r\n$4\r\nPINGxx", 0, &error);
  EXPECT_EQ(error, "Protocol error: expected '\\r\\n' after a bulk string");
}

TEST(RespParser, ARequestBeyondTheRequestLimitIsRefusedAtTheHeaderThatCrossesIt) {
  RequestLimits limits;
  limits.max_request = 1000;
  std::string error;
  // Two 400-byte arguments fit; the third announced one would not.
  const std::string head = "*3\r\n$400\r\n" + std::string(400, 'a') + "\r\n$400\r\n" +
                           std::string(400, 'b') + "\r\n$400\r\n";
  const auto got = parse_all(head, 0, &error, limits);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(error, "Protocol error: request larger than 1000 bytes");
}

TEST(RespParser, AConnectionClosingInsideARequestIsSeenAsSuch) {
  std::string error;
  bool inside = false;
  // A 60 MB argument announced, 10 bytes of it sent.
  parse_all("*2\r\n$3\r\nSET\r\n$60000000\r\n0123456789", 0, &error, {}, &inside);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(inside);
  parse_all(multibulk({"PING"}), 0, &error, {}, &inside);
  EXPECT_FALSE(inside);
  parse_all("GET k", 0, &error, {}, &inside);
  EXPECT_FALSE(inside) << "an inline line is not a request until its line break";
}

std::string resp2(void (*write)(ReplyWriter&)) {
  std::string out;
  ReplyWriter w(&out, Protocol::kResp2);
  write(w);
  return out;
}

std::string resp3(void (*write)(ReplyWriter&)) {
  std::string out;
  ReplyWriter w(&out, Protocol::kResp3);
  write(w);
  return out;
}

// The expected bytes are the protocol's, from its specification.
TEST(RespReplyWriter, ScalarsAreEncodedAsTheProtocolSpecifies) {
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.simple("OK"); }), "+OK\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.simple("a\r\nb"); }), "+a  b\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.error("ERR bad\nthing"); }), "-ERR bad thing\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.integer(-42); }), ":-42\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.integer(std::numeric_limits<std::int64_t>::min()); }),
            ":-9223372036854775808\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.bulk(std::string_view("a\0b", 3)); }),
            std::string("$3\r\na\0b\r\n", 9));
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.bulk(""); }), "$0\r\n\r\n");
}

TEST(RespReplyWriter, NullsBooleansAndDoublesDependOnTheProtocol) {
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.null(); }), "$-1\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.null(); }), "_\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.null_array(); }), "*-1\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.null_array(); }), "_\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.boolean(true); }), ":1\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.boolean(false); }), "#f\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.real(10.5); }), "$4\r\n10.5\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.real(10.5); }), ",10.5\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.real(-1.0 / 0.0); }), ",-inf\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.verbatim("txt", "hi"); }), "$2\r\nhi\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.verbatim("txt", "hi"); }), "=6\r\ntxt:hi\r\n");
}

TEST(RespReplyWriter, AggregatesAnnounceTheirElements) {
  EXPECT_EQ(resp2([](ReplyWriter& w) {
              w.array(2);
              w.bulk("a");
              w.integer(1);
            }),
            "*2\r\n$1\r\na\r\n:1\r\n");
  // A map of one pair: RESP3 counts pairs, RESP2 flattens it to an array.
  EXPECT_EQ(resp3([](ReplyWriter& w) {
              w.map(1);
              w.bulk("k");
              w.bulk("v");
            }),
            "%1\r\n$1\r\nk\r\n$1\r\nv\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) {
              w.map(1);
              w.bulk("k");
              w.bulk("v");
            }),
            "*2\r\n$1\r\nk\r\n$1\r\nv\r\n");
  EXPECT_EQ(resp3([](ReplyWriter& w) { w.set(0); }), "~0\r\n");
  EXPECT_EQ(resp2([](ReplyWriter& w) { w.set(0); }), "*0\r\n");
}

TEST(RespFormatDouble, ReadsBackAsTheSameValue) {
  for (double v : {0.0, 3.0, 10.5, 0.1, 1e21, -2.5e-7, 1.0 / 3.0, 123456789.125}) {
    const std::string text = format_double(v);
    EXPECT_EQ(std::stod(text), v) << text;
  }
  EXPECT_EQ(format_double(3.0), "3");
  EXPECT_EQ(format_double(1.0 / 0.0), "inf");
}

}  // namespace
}  // namespace pmhash::server
