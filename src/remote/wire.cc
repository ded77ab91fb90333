#include "remote/wire.h"

#include <cstring>

namespace pmhash::remote::wire {

namespace {

void append(std::vector<char>* out, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  out->insert(out->end(), c, c + n);
}

}  // namespace

Status encode_request(std::uint64_t tag, std::span<const Op> ops, std::vector<char>* out) {
  std::uint64_t body = 0;
  for (const Op& op : ops) body += sizeof(WireOp) + (op.verb == Verb::kWrite ? op.len : 0);
  if (body > kMaxBody) {
    return Status::InvalidArgument("a batch of " + std::to_string(body) +
                                   " request bytes: at most " + std::to_string(kMaxBody) +
                                   " go in one tcp frame");
  }
  const FrameHeader h{kRequestMagic, static_cast<std::uint32_t>(body), tag,
                      static_cast<std::uint32_t>(ops.size()), 0};
  append(out, &h, sizeof(h));
  for (const Op& op : ops) {
    const WireOp w{static_cast<std::uint8_t>(op.verb), {}, op.len, op.off, op.arg0, op.arg1};
    append(out, &w, sizeof(w));
    if (op.verb == Verb::kWrite) append(out, op.local, op.len);
  }
  return Status::OK();
}

bool decode_request(std::span<const char> body, std::uint32_t count, std::vector<Op>* ops) {
  ops->clear();
  std::size_t at = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    WireOp w;
    if (body.size() - at < sizeof(w)) return false;
    std::memcpy(&w, body.data() + at, sizeof(w));
    at += sizeof(w);
    if (w.verb > static_cast<std::uint8_t>(Verb::kFaa)) return false;
    Op op{static_cast<Verb>(w.verb), w.len, w.off, nullptr, w.arg0, w.arg1};
    if (op.verb == Verb::kWrite) {
      if (body.size() - at < w.len) return false;
      op.local = const_cast<char*>(body.data() + at);
      at += w.len;
    }
    ops->push_back(op);
  }
  return at == body.size();
}

std::uint64_t response_body(std::span<const Op> ops) {
  std::uint64_t n = 0;
  for (const Op& op : ops) {
    if (op.verb == Verb::kRead) n += op.len;
    if (op.verb == Verb::kCas || op.verb == Verb::kFaa) n += 8;
  }
  return n;
}

std::uint32_t status_code(const Status& s) { return static_cast<std::uint32_t>(s.code()); }

Status status_from(std::uint32_t code, std::string message) {
  using C = Status::Code;
  switch (static_cast<C>(code)) {
    case C::kOk:
      return Status::OK();
    case C::kInvalidArgument:
      return Status::InvalidArgument(std::move(message));
    case C::kNoSpace:
      return Status::NoSpace(std::move(message));
    case C::kCorruption:
      return Status::Corruption(std::move(message));
    case C::kBusy:
      return Status::Busy(std::move(message));
    default:
      return Status::IOError(std::move(message));
  }
}

}  // namespace pmhash::remote::wire
