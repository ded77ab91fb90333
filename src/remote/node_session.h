// remote/node_session.h - one client connection of a memory node, without
// its socket: the connection bootstrap (remote/handshake.h), then request
// frames in and responses out (remote/wire.h), under a memory bound. The
// daemon (remote/server.h) moves the bytes between a NodeSession and its
// socket; the fuzz target drives one with arbitrary bytes.
//
// Life of a connection:
//   1. The NodeHello is queued at construction.
//   2. The ClientHello is awaited; the Verdict is queued. A refusal (no
//      proof, a wrong one, another protocol) makes the session done():
//      the connection is closed once the Verdict is sent, and no verb of
//      that connection ever runs.
//   3. Request frames are run in order, each answered by one response.
//
// A request frame is judged before anything of it runs, from its header
// and then its whole body, in 64-bit arithmetic:
//   - a bad magic or a body over wire::kMaxBody: an error response, then
//     the connection is closed (the stream is out of step);
//   - a body that does not parse (wire::RequestReader): the same;
//   - an OK response that would exceed wire::kMaxBody: an InvalidArgument
//     response naming the bound; nothing runs, the connection stays;
//   - a verb outside the region or a misaligned atomic (remote::validate):
//     an InvalidArgument response; nothing runs, the connection stays.
// Then the verbs run on the region in pieces of kExecChunk (each piece
// flushed and fenced by remote::execute, so the whole request is durable
// before its response is queued), READs straight into the response.
//
// Memory. A session holds two buffers, each of an exact capacity:
//   input   [in_begin, in_end) received, not yet run. Its capacity is
//           in_allowance, or exactly one frame (header + body) while a
//           frame larger than that is being received.
//   output  [out_begin, out_end) queued, not yet sent. Its capacity is
//           out_allowance, or exactly what the unsent bytes and the next
//           response need.
// Bytes of capacity up to in_allowance + out_allowance (the allowance) are
// always granted, so a client with small requests that reads its
// responses is always served. Capacity beyond that is taken from the
// node's MemoryBudget before it is allocated and given back when the
// buffer shrinks; when the budget cannot grant it, the frame waits
// (waiting_for_memory(): the socket is not read meanwhile). Buffers of
// kMapBytes or more are mmap(2)ed, so freeing one returns it to the
// system at once. Backpressure: while the unsent output is half the
// output allowance or more, no further request runs and no input is
// taken. So a session holds at most allowance + its grant, and the grants
// of all sessions are at most the budget. The daemon closes a session
// that makes no progress (remote/server.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pmhash/memnode.h"  // NodeLimits
#include "pmhash/status.h"
#include "remote/handshake.h"
#include "remote/transport.h"

namespace pmhash::media {
class Region;
}

namespace pmhash::remote {

// The daemon-wide bytes of buffer capacity beyond the sessions'
// allowances. All-or-nothing grants; one thread.
class MemoryBudget {
 public:
  explicit MemoryBudget(std::uint64_t limit) : limit_(limit) {}
  // Takes n bytes if that many are left; false (nothing taken) if not.
  bool take(std::uint64_t n) {
    if (n > limit_ - used_) return false;
    used_ += n;
    return true;
  }
  void give(std::uint64_t n) { used_ -= n; }
  std::uint64_t used() const { return used_; }
  std::uint64_t limit() const { return limit_; }

 private:
  std::uint64_t limit_;
  std::uint64_t used_ = 0;
};

// A buffer of an exact capacity (no growth policy of its own).
class ByteBuffer {
 public:
  ByteBuffer() = default;
  ~ByteBuffer() { release(); }
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;

  char* data() const { return data_; }
  std::size_t capacity() const { return cap_; }
  // Replaces the storage by one of exactly `cap` bytes holding the old
  // bytes [from, to) at its start (to - from <= cap). False if the memory
  // cannot be had (the buffer is then unchanged).
  bool reshape(std::size_t cap, std::size_t from, std::size_t to);

 private:
  void release();
  char* data_ = nullptr;
  std::size_t cap_ = 0;
};

// Buffers of at least this many bytes are mmap(2)ed.
inline constexpr std::size_t kMapBytes = 128u << 10;
// Verbs run per remote::execute call.
inline constexpr std::size_t kExecChunk = 4096;

class NodeSession {
 public:
  // What the sessions of one memory node share. One thread.
  struct Node {
    media::Region* region = nullptr;
    std::string name;                             // "memory node PATH", for messages
    const handshake::Secret* secret = nullptr;    // null: no authentication
    std::uint32_t layout_version = 0;             // sent in the hello
    MemoryBudget* budget = nullptr;
    NodeLimits limits;
    std::vector<Op> scratch;                      // verbs of the piece being run
  };

  // Queues the NodeHello. `node` must outlive the session.
  explicit NodeSession(Node* node);
  ~NodeSession();
  NodeSession(const NodeSession&) = delete;
  NodeSession& operator=(const NodeSession&) = delete;

  // Input: want_input() is how many bytes the session takes now (0: do not
  // read; see the class comment); input_space() then has room for them,
  // and received(n) commits the first n.
  std::size_t want_input();
  char* input_space();
  void received(std::size_t n);

  // Runs every complete frame the output bound and the budget allow.
  void process();

  // Output: the bytes to send next (empty: none), and how many were sent.
  std::span<const char> output() const;
  void sent(std::size_t n);

  // Close the connection once output() is empty (refused or malformed).
  bool done() const { return done_; }
  const std::string& why_done() const { return why_done_; }
  // Something is unfinished: the bootstrap, received bytes not yet run,
  // or unsent output.
  bool busy() const;
  // A frame waits for the budget (for its input or its response).
  bool waiting_for_memory() const { return waiting_; }
  // Counts frames run, output drained, and every out_allowance bytes of
  // output sent: the daemon's measure of progress.
  std::uint64_t progress() const { return progress_; }
  // Bytes of buffer capacity held, and the part granted by the budget.
  std::uint64_t charged() const { return in_.capacity() + out_.capacity(); }
  std::uint64_t granted() const { return granted_; }
  bool admitted() const { return stage_ == Stage::kServing; }

 private:
  enum class Stage { kBootstrap, kServing };

  std::size_t allowance() const { return node_->limits.in_allowance + node_->limits.out_allowance; }
  // Settles the budget grant for buffers of these capacities; false if
  // the budget cannot grant it (nothing changed).
  bool recharge(std::size_t in_cap, std::size_t out_cap);
  bool room_for_input(std::size_t total);
  // Room for n more output bytes at out_end; false: wait for memory.
  bool room_for_output(std::uint64_t n);
  void queue(const char* p, std::size_t n);
  // Runs one whole request frame; false if it must wait for memory.
  bool run(std::uint64_t tag, std::uint32_t count, std::span<const char> body);
  // Answers with an error response and closes after it.
  void malformed(std::uint64_t tag, const std::string& why);
  void settle_input();
  Status check(std::span<const char> body, std::uint32_t count, std::uint64_t* reply,
               bool* parsed);

  Node* node_;
  handshake::NodeSide bootstrap_;
  Stage stage_ = Stage::kBootstrap;
  ByteBuffer in_;
  std::size_t in_begin_ = 0, in_end_ = 0;
  ByteBuffer out_;
  std::size_t out_begin_ = 0, out_end_ = 0;
  std::uint64_t granted_ = 0;
  std::uint64_t progress_ = 0;
  std::uint64_t sent_since_progress_ = 0;
  bool waiting_ = false;
  bool done_ = false;
  std::string why_done_;
};

}  // namespace pmhash::remote
