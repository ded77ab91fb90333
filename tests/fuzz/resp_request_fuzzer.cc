// libFuzzer target: the Redis protocol's request parser (tools/server/resp.h)
// on arbitrary bytes. The first byte picks a chunk size; the rest is what a
// client sends. The bytes are parsed twice - whole, and appended chunk by
// chunk as reads would deliver them - under small limits so that every
// limit is reached. Both must give the same requests and the same error,
// every argument must respect the limits, and no request may claim more
// bytes than it was given. ASan and UBSan (the fuzz preset) catch the rest.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/resp.h"

namespace {

using pmhash::server::RequestLimits;
using pmhash::server::RequestParser;

struct Outcome {
  std::vector<std::vector<std::string>> requests;
  std::string error;
  bool operator==(const Outcome&) const = default;
};

[[noreturn]] void broken() { std::abort(); }

Outcome run(std::string_view bytes, std::size_t chunk, const RequestLimits& limits) {
  RequestParser parser(limits);
  Outcome out;
  std::string buffer;
  std::size_t fed = 0;
  for (;;) {
    const RequestParser::Result r = parser.parse(buffer);
    if (r == RequestParser::Result::kError) {
      out.error = parser.error();
      if (out.error.rfind("Protocol error: ", 0) != 0) broken();
      return out;
    }
    if (r == RequestParser::Result::kRequest) {
      if (parser.consumed() == 0 || parser.consumed() > buffer.size()) broken();
      // A multibulk request has at most max_args arguments; an inline one
      // as many words as its line (at most max_inline bytes) holds.
      if (parser.args().empty() || parser.args().size() > std::max(limits.max_args, limits.max_inline)) {
        broken();
      }
      std::vector<std::string> args;
      for (std::string_view a : parser.args()) {
        if (a.size() > limits.max_bulk) broken();
        args.emplace_back(a);
      }
      out.requests.push_back(std::move(args));
      buffer.erase(0, parser.consumed());
      continue;
    }
    // Incomplete: what is held must stay within the limits' reach.
    if (buffer.size() > limits.max_request + limits.max_inline + 64) broken();
    if (fed == bytes.size()) return out;
    const std::size_t n = std::min(chunk, bytes.size() - fed);
    buffer.append(bytes.substr(fed, n));
    fed += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = static_cast<std::size_t>(data[0] % 16) + 1;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  RequestLimits limits;
  limits.max_bulk = 512;
  limits.max_args = 32;
  limits.max_inline = 128;
  limits.max_request = 2048;
  const Outcome whole = run(bytes, bytes.size() + 1, limits);
  const Outcome pieces = run(bytes, chunk, limits);
  if (!(whole == pieces)) broken();
  return 0;
}
