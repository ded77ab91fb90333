#include "remote/node_session.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "media/region.h"
#include "remote/wire.h"

namespace pmhash::remote {

bool ByteBuffer::reshape(std::size_t cap, std::size_t from, std::size_t to) {
  char* fresh = nullptr;
  if (cap >= kMapBytes) {
    void* p = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    fresh = static_cast<char*>(p);
  } else if (cap > 0) {
    fresh = static_cast<char*>(std::malloc(cap));
    if (fresh == nullptr) return false;
  }
  if (to > from) std::memcpy(fresh, data_ + from, to - from);
  release();
  data_ = fresh;
  cap_ = cap;
  return true;
}

void ByteBuffer::release() {
  if (data_ == nullptr) return;
  if (cap_ >= kMapBytes) {
    ::munmap(data_, cap_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  cap_ = 0;
}

NodeSession::NodeSession(Node* node)
    : node_(node), bootstrap_(node->secret, node->region->size(), node->layout_version) {
  std::vector<char> hello;
  bootstrap_.hello(&hello);
  queue(hello.data(), hello.size());
}

NodeSession::~NodeSession() { node_->budget->give(granted_); }

bool NodeSession::busy() const {
  return stage_ == Stage::kBootstrap || in_end_ > in_begin_ || out_end_ > out_begin_ || done_;
}

bool NodeSession::recharge(std::size_t in_cap, std::size_t out_cap) {
  const std::uint64_t total = static_cast<std::uint64_t>(in_cap) + out_cap;
  const std::uint64_t need = total > allowance() ? total - allowance() : 0;
  if (need > granted_) {
    if (!node_->budget->take(need - granted_)) return false;
  } else {
    node_->budget->give(granted_ - need);
  }
  granted_ = need;
  return true;
}

bool NodeSession::room_for_input(std::size_t total) {
  if (in_.capacity() >= total) {
    if (in_begin_ + total > in_.capacity()) {
      std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    return true;
  }
  const std::size_t old_cap = in_.capacity();
  if (!recharge(total, out_.capacity())) return false;
  if (!in_.reshape(total, in_begin_, in_end_)) {
    recharge(old_cap, out_.capacity());
    return false;
  }
  in_end_ -= in_begin_;
  in_begin_ = 0;
  return true;
}

bool NodeSession::room_for_output(std::uint64_t n) {
  const std::size_t unsent = out_end_ - out_begin_;
  if (out_end_ + n <= out_.capacity()) return true;
  if (unsent + n <= out_.capacity()) {
    std::memmove(out_.data(), out_.data() + out_begin_, unsent);
    out_begin_ = 0;
    out_end_ = unsent;
    return true;
  }
  // n is at most a header plus wire::kMaxBody, so this cannot overflow.
  const std::size_t cap = std::max<std::size_t>(node_->limits.out_allowance, unsent + n);
  const std::size_t old_cap = out_.capacity();
  if (!recharge(in_.capacity(), cap)) return false;
  if (!out_.reshape(cap, out_begin_, out_end_)) {
    recharge(in_.capacity(), old_cap);
    return false;
  }
  out_begin_ = 0;
  out_end_ = unsent;
  return true;
}

void NodeSession::queue(const char* p, std::size_t n) {
  // Only bootstrap messages and error frames come here: a few KiB, within
  // the output allowance unless the budget is gone and the output full;
  // then the connection is closed instead.
  if (!room_for_output(n)) {
    done_ = true;
    if (why_done_.empty()) why_done_ = "no memory for a reply";
    return;
  }
  std::memcpy(out_.data() + out_end_, p, n);
  out_end_ += n;
}

std::size_t NodeSession::want_input() {
  if (done_ || waiting_) return 0;
  // Backpressure: responses the client has not read stop the input.
  if (stage_ == Stage::kServing && out_end_ - out_begin_ >= node_->limits.out_allowance / 2) {
    return 0;
  }
  const std::size_t have = in_end_ - in_begin_;
  std::uint64_t target = node_->limits.in_allowance;
  if (stage_ == Stage::kServing && have >= sizeof(wire::FrameHeader)) {
    wire::FrameHeader h;
    std::memcpy(&h, in_.data() + in_begin_, sizeof(h));
    if (h.magic != wire::kRequestMagic || h.body > wire::kMaxBody) return 0;  // process() ends it
    target = std::max<std::uint64_t>(target, sizeof(h) + std::uint64_t{h.body});
  }
  if (have >= target) return 0;
  if (!room_for_input(static_cast<std::size_t>(target))) {
    waiting_ = true;
    return 0;
  }
  return static_cast<std::size_t>(target) - have;
}

char* NodeSession::input_space() { return in_.data() + in_end_; }

void NodeSession::received(std::size_t n) { in_end_ += n; }

std::span<const char> NodeSession::output() const {
  return {out_.data() + out_begin_, out_end_ - out_begin_};
}

void NodeSession::sent(std::size_t n) {
  out_begin_ += n;
  // A client reading a large response makes progress while it reads.
  sent_since_progress_ += n;
  if (sent_since_progress_ >= node_->limits.out_allowance) {
    sent_since_progress_ = 0;
    ++progress_;
  }
  if (out_begin_ < out_end_) return;
  sent_since_progress_ = 0;
  out_begin_ = out_end_ = 0;
  ++progress_;
  // A large response went out: its buffer goes back to the system and
  // its bytes to the budget.
  if (out_.capacity() > node_->limits.out_allowance &&
      out_.reshape(node_->limits.out_allowance, 0, 0)) {
    recharge(in_.capacity(), out_.capacity());
  }
}

void NodeSession::malformed(std::uint64_t tag, const std::string& why) {
  const std::string text = node_->name + ": " + why + "; closing the connection";
  const std::size_t len = std::min<std::size_t>(text.size(), wire::kMaxErrorMessage);
  const wire::FrameHeader r{wire::kResponseMagic, static_cast<std::uint32_t>(len), tag,
                            wire::status_code(Status::InvalidArgument("")), 0};
  queue(reinterpret_cast<const char*>(&r), sizeof(r));
  queue(text.data(), len);
  done_ = true;
  why_done_ = why;
  in_begin_ = in_end_ = 0;
}

void NodeSession::process() {
  waiting_ = false;
  while (!done_) {
    const std::size_t have = in_end_ - in_begin_;
    const std::span<const char> in(in_.data() + in_begin_, have);
    if (stage_ == Stage::kBootstrap) {
      std::vector<char> verdict_bytes;
      Status verdict;
      const std::size_t used = bootstrap_.on_client_hello(in, &verdict_bytes, &verdict);
      if (used == 0) break;
      in_begin_ += used;
      ++progress_;
      queue(verdict_bytes.data(), verdict_bytes.size());
      if (!verdict.ok()) {
        done_ = true;
        why_done_ = "refused: " + verdict.message();
        in_begin_ = in_end_ = 0;
        break;
      }
      stage_ = Stage::kServing;
      continue;
    }
    if (out_end_ - out_begin_ >= node_->limits.out_allowance / 2) break;  // backpressure
    if (have < sizeof(wire::FrameHeader)) break;
    wire::FrameHeader h;
    std::memcpy(&h, in.data(), sizeof(h));
    if (h.magic != wire::kRequestMagic) {
      malformed(h.tag, "not a request frame (magic " + std::to_string(h.magic) + ")");
      break;
    }
    if (h.body > wire::kMaxBody) {
      malformed(h.tag, "a request body of " + std::to_string(h.body) + " bytes, over the limit of " +
                           std::to_string(wire::kMaxBody));
      break;
    }
    if (have - sizeof(h) < h.body) break;  // the rest is still coming
    if (!run(h.tag, h.count, in.subspan(sizeof(h), h.body))) {
      waiting_ = true;
      break;
    }
  }
  settle_input();
}

void NodeSession::settle_input() {
  if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
  // A large frame has run: back to the allowance once what is left fits.
  const std::size_t left = in_end_ - in_begin_;
  if (in_.capacity() > node_->limits.in_allowance && left <= node_->limits.in_allowance &&
      in_.reshape(node_->limits.in_allowance, in_begin_, in_end_)) {
    in_begin_ = 0;
    in_end_ = left;
    recharge(in_.capacity(), out_.capacity());
  }
}

Status NodeSession::check(std::span<const char> body, std::uint32_t count, std::uint64_t* reply,
                          bool* parsed) {
  const std::uint64_t size = node_->region->size();
  wire::RequestReader reader(body, count);
  std::vector<Op>& piece = node_->scratch;
  piece.clear();
  Status bad;
  std::uint64_t first = 0;  // index of piece[0] in the request
  Op op;
  *reply = 0;
  auto check_piece = [&] {
    if (bad.ok() && !piece.empty()) {
      // remote::validate numbers the verbs of the piece it is given.
      const std::string who =
          first == 0 ? node_->name : node_->name + " (verbs from " + std::to_string(first) + " on)";
      bad = validate(who, size, piece, /*check_buffers=*/false);
    }
    first += piece.size();
    piece.clear();
  };
  while (reader.next(&op)) {
    *reply += wire::response_bytes(op);  // at most 2^21 verbs of < 2^32: no overflow
    piece.push_back(op);
    if (piece.size() == kExecChunk) check_piece();
  }
  check_piece();
  *parsed = reader.parsed();
  if (*reply > wire::kMaxBody) {
    return Status::InvalidArgument(node_->name + ": the response to this batch would be " +
                                   std::to_string(*reply) + " bytes, over the limit of " +
                                   std::to_string(wire::kMaxBody) +
                                   " bytes per frame: split the batch (nothing of it ran)");
  }
  return bad;
}

bool NodeSession::run(std::uint64_t tag, std::uint32_t count, std::span<const char> body) {
  std::uint64_t reply = 0;
  bool parsed = false;
  const Status s = check(body, count, &reply, &parsed);
  if (!parsed) {
    malformed(tag, "a request body that does not parse (" + std::to_string(count) + " verbs in " +
                       std::to_string(body.size()) + " bytes)");
    return true;
  }
  const std::size_t text = s.ok() ? 0 : std::min<std::size_t>(s.message().size(), wire::kMaxErrorMessage);
  const std::uint64_t body_bytes = s.ok() ? reply : text;
  if (!room_for_output(sizeof(wire::FrameHeader) + body_bytes)) return false;
  const wire::FrameHeader r{wire::kResponseMagic, static_cast<std::uint32_t>(body_bytes), tag,
                            wire::status_code(s), 0};
  char* const start = out_.data() + out_end_;
  std::memcpy(start, &r, sizeof(r));
  if (!s.ok()) {
    std::memcpy(start + sizeof(r), s.message().data(), text);
  } else {
    // READs land straight in the response; CAS/FAA results are copied
    // after their piece ran.
    wire::RequestReader reader(body, count);
    std::vector<Op>& piece = node_->scratch;
    char* pos = start + sizeof(r);
    Op op;
    bool more = true;
    while (more) {
      piece.clear();
      while (piece.size() < kExecChunk && (more = reader.next(&op))) piece.push_back(op);
      char* at = pos;
      for (Op& o : piece) {
        if (o.verb == Verb::kRead) o.local = at;
        at += wire::response_bytes(o);
      }
      // Each piece is flushed and fenced by execute(): every write of the
      // request is durable before its response is queued, so a node that
      // loses power never has acknowledged a write it lost.
      execute(*node_->region, piece);
      for (const Op& o : piece) {
        if (o.verb == Verb::kCas || o.verb == Verb::kFaa) std::memcpy(pos, &o.result, 8);
        pos += wire::response_bytes(o);
      }
    }
  }
  out_end_ += sizeof(r) + body_bytes;
  in_begin_ += sizeof(wire::FrameHeader) + body.size();
  ++progress_;
  return true;
}

}  // namespace pmhash::remote
