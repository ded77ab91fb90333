// remote/transport.h - one-sided verbs on a memory node, and the transports
// that carry them.
//
// The remote-memory layer gives compute-node code (the sephash engine and
// its baseline) what an RDMA NIC gives: READ, WRITE, CAS and FAA on bytes of
// a memory node's region, executed without any index logic on the node.
// Nothing here knows about hash indexes.
//
// Verbs. A verb names a node-relative byte offset. READ copies `len` bytes
// of the region into local memory, WRITE the other way; CAS and FAA act on
// one 8-byte, 8-byte-aligned word and return its old value. Like RDMA, a
// READ or WRITE is atomic only per aligned 8-byte word: a READ racing a
// WRITE may see some words old and some new, and the index above must
// detect that (SepHash and RACE both do, with checksums or re-reads).
//
// Batches (doorbell batching). A transport takes a batch of verbs for one
// node in one post and runs them in order; their results are valid once
// poll() reports the batch done. A later verb of a batch sees the effects
// of the earlier ones. Batches of one transport complete in post order.
//
// Durability. A memory node's region is a pmhash pool (remote/memnode.h).
// A verb *writes* when it stores: a WRITE of at least one byte, a CAS that
// matches and changes its word, an FAA with a non-zero addend (a CAS that
// fails stores nothing). The node guarantees, for every batch:
//   1. In order. A power loss (or the node's process killed) at any
//      instant during a batch leaves durable a prefix of its writing
//      verbs: verbs 1..k-1 whole, verb k possibly in part (any subset of
//      its aligned 8-byte words, as a WRITE torn by a crash), nothing of
//      verbs k+1.. . So a verb that publishes (a CAS naming an item, a
//      meta naming a MainSeg) is never durable without the writes before it
//      in its batch.
//   2. Complete. When a batch completes, all its writes are durable: a
//      node that restarts from its pool file serves every completed write.
//      Batches of one transport complete in post order, so a later batch's
//      writes are never durable without an earlier one's.
// Nothing is ordered between nodes: the sub-batches of one round trip on
// two nodes become durable independently (remote/client.h).
// What it costs (remote/verbs.cc, execute): where the media may write lines
// back in any order (cache_line, page granularity) one fence per writing
// verb; where stores persist in the order they become visible (byte) one
// fence per batch. Reads, failed CASes and FAAs of 0 cost no fence.
// Visibility comes before durability: on shm, other clients see a verb's
// stores as they are made, before its fence (over tcp, the daemon runs one
// batch at a time). Every earlier writing verb of the batch is durable by
// then, so what a visible word names is durable; only the word itself may
// still be lost to a power loss, taking with it what a reader did with it.
//
// Failure. A batch either completes with OK, or with an error that names the
// node: InvalidArgument for a verb outside the region or a misaligned
// atomic (nothing of the batch ran), IOError when the node is unreachable or
// does not answer within the transport's timeout (whether the batch ran is
// then unknown, as with a lost RDMA completion). No call blocks longer than
// its timeout.
//
// Threads. A Transport is used by one thread at a time, like a queue pair;
// each client thread connects its own (remote/client.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pmhash/status.h"

namespace pmhash::media {
class Region;
}

namespace pmhash::remote {

enum class Verb : std::uint8_t { kRead, kWrite, kCas, kFaa };

struct Op {
  Verb verb = Verb::kRead;
  std::uint32_t len = 0;      // READ/WRITE: bytes; CAS/FAA: 8
  std::uint64_t off = 0;      // byte offset in the node's region
  void* local = nullptr;      // READ: destination; WRITE: source
  std::uint64_t arg0 = 0;     // CAS: expected value; FAA: addend
  std::uint64_t arg1 = 0;     // CAS: desired value
  std::uint64_t result = 0;   // CAS/FAA: the word's old value
};

// The bytes an op moves across the network, counting both directions
// (request payload plus response payload; headers not included).
std::uint64_t payload_bytes(const Op& op);

struct Completion {
  std::uint64_t tag = 0;  // the tag given to post()
  Status status;
};

struct ConnectOptions {
  // A batch not done after this long fails with IOError (tcp).
  std::chrono::milliseconds timeout{2000};
  // shm only: added to every batch's round trip, emulating a network hop
  // (0: the CXL-style direct access).
  std::chrono::nanoseconds shm_latency{0};
  // tcp only: the secret file shared with the memory nodes
  // (remote/handshake.h). Empty: the file named by the environment
  // variable PMHASH_MEMNODE_SECRET_FILE, if it is set, else none. A client
  // with a secret connects only to nodes that prove they hold the same.
  std::string secret_file;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // "shm:/dev/shm/mn0" or "tcp:127.0.0.1:7000": the spec it was connected with.
  virtual const std::string& name() const = 0;
  // Bytes of the node's region (the pool's size); verbs address [0, size).
  virtual std::uint64_t size() const = 0;

  // Starts a batch of verbs (all for this node), identified by `tag` in the
  // completion. The ops must stay valid, and their local buffers untouched,
  // until the completion is reported. Errors (nothing started):
  // InvalidArgument for a verb outside [kFirstUsable, size) or an atomic
  // not on an aligned word; IOError when the node is known to be gone.
  virtual Status post(std::uint64_t tag, std::span<Op> ops) = 0;

  // Appends finished batches to `done`, in post order. If none is finished,
  // waits up to `wait` for one. A batch overdue by the timeout is reported
  // finished with IOError.
  virtual void poll(std::vector<Completion>* done, std::chrono::nanoseconds wait) = 0;

  // Batches posted and not yet reported.
  virtual std::size_t in_flight() const = 0;
};

// Connects to a memory node: "shm:PATH" maps the pool file PATH (shared
// with every other client of it); "tcp:HOST:PORT" connects to a
// pmhash-memnode daemon. Errors: InvalidArgument (a spec of neither form),
// IOError/Corruption/InvalidArgument from opening the pool (shm: missing,
// not a pool, a pool of an engine other than "memnode"), IOError when the
// daemon cannot be reached within the timeout (tcp); for tcp also the
// errors of loading the secret file (handshake::Secret::load) and the
// daemon's refusal (InvalidArgument: no secret, a wrong one, a node that
// cannot prove the client's; Busy: the node's connection cap).
Status connect(const std::string& spec, const ConnectOptions& options,
               std::unique_ptr<Transport>* out);

// The factory a test gives connect() for "sim:..." specs (remote_testing.h).
using ConnectHook = Status (*)(const std::string& spec, const ConnectOptions& options,
                               std::unique_ptr<Transport>* out);

// Runs a validated batch on a memory node's mapped region, in order: READ
// and WRITE word by word with 8-byte atomics, CAS and FAA with atomic_ref
// (the old word into `result`). Every written range is flushed, and fenced
// before the next writing verb stores and at the end, so that its writes
// become durable in order and are all durable when this returns
// ("Durability" above).
void execute(media::Region& region, std::span<Op> ops);

// Validates the verbs of a batch against a region of `size` bytes; the
// message names `node`. `check_buffers`: a READ or WRITE must have a local
// buffer (the daemon validates before it has placed its READ buffers).
Status validate(const std::string& node, std::uint64_t size, std::span<const Op> ops,
                bool check_buffers = true);

}  // namespace pmhash::remote
