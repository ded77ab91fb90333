#include "remote/wire.h"

#include <climits>
#include <cstdint>
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
  if (const std::uint64_t reply = response_body(ops); reply > kMaxBody) {
    return Status::InvalidArgument("a batch of " + std::to_string(reply) +
                                   " response bytes: at most " + std::to_string(kMaxBody) +
                                   " come back in one tcp frame (split the batch)");
  }
  if (ops.size() > UINT32_MAX) return Status::InvalidArgument("a batch of over 2^32 verbs");
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

bool RequestReader::next(Op* op) {
  if (bad_ || left_ == 0) return false;
  WireOp w;
  // at_ <= body_.size() always, so the differences below cannot wrap.
  if (body_.size() - at_ < sizeof(w)) {
    bad_ = true;
    return false;
  }
  std::memcpy(&w, body_.data() + at_, sizeof(w));
  if (w.verb > static_cast<std::uint8_t>(Verb::kFaa)) {
    bad_ = true;
    return false;
  }
  at_ += sizeof(w);
  *op = Op{static_cast<Verb>(w.verb), w.len, w.off, nullptr, w.arg0, w.arg1};
  if (op->verb == Verb::kWrite) {
    if (body_.size() - at_ < w.len) {
      bad_ = true;
      return false;
    }
    op->local = const_cast<char*>(body_.data() + at_);
    at_ += w.len;
  }
  --left_;
  ++index_;
  return true;
}

std::uint64_t response_bytes(const Op& op) {
  switch (op.verb) {
    case Verb::kRead:
      return op.len;
    case Verb::kCas:
    case Verb::kFaa:
      return 8;
    case Verb::kWrite:
      return 0;
  }
  return 0;
}

std::uint64_t response_body(std::span<const Op> ops) {
  // At most 2^32 verbs of at most 2^32 - 1 bytes: no 64-bit overflow.
  std::uint64_t n = 0;
  for (const Op& op : ops) n += response_bytes(op);
  return n;
}

std::size_t take_responses(std::span<const char> in, std::deque<PendingBatch>* pending,
                           std::vector<Completion>* done, std::string* error) {
  std::size_t at = 0;
  while (in.size() - at >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, in.data() + at, sizeof(h));
    if (h.magic != kResponseMagic || pending->empty() || h.tag != pending->front().tag) {
      *error = "a response that matches no request (protocol error)";
      return at;
    }
    const PendingBatch& p = pending->front();
    if (h.count == 0 && h.body != response_body(p.ops)) {
      *error = "a response of " + std::to_string(h.body) + " bytes to a batch expecting " +
               std::to_string(response_body(p.ops)) + " (protocol error)";
      return at;
    }
    if (h.count != 0 && h.body > kMaxErrorMessage) {
      *error = "an error response of " + std::to_string(h.body) + " bytes (protocol error)";
      return at;
    }
    if (in.size() - at - sizeof(h) < h.body) break;  // the rest is still coming
    const char* body = in.data() + at + sizeof(h);
    if (h.count != 0) {
      // The node's text, as one printable line.
      std::string message(body, h.body);
      for (char& c : message) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
      }
      done->push_back({p.tag, status_from(h.count, std::move(message))});
    } else {
      std::size_t pos = 0;
      for (Op& op : p.ops) {
        if (op.verb == Verb::kRead) {
          std::memcpy(op.local, body + pos, op.len);
        } else if (op.verb != Verb::kWrite) {
          std::memcpy(&op.result, body + pos, 8);
        }
        pos += response_bytes(op);
      }
      done->push_back({p.tag, Status::OK()});
    }
    pending->pop_front();
    at += sizeof(h) + h.body;
  }
  return at;
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
