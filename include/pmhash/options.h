// pmhash/options.h - how a Store is created and opened.
#pragma once

#include <cstdint>
#include <string>

// Size limits of keys and values (docs/architecture.md, "Keys and hashing").
#include "pmhash/limits.h"

namespace pmhash {

// When the effect of a call becomes durable.
enum class Durability : unsigned char {
  // When a call returns, its effect survives any crash.
  kStrict,
  // A call's effect survives a crash once its epoch has been made durable;
  // Store::sync() waits for that. Only engines built for it accept it.
  kEpoch,
};

// How Store::get reads.
struct ReadOptions {
  // Read the latest state that is already durable, without taking locks:
  // what the store would recover to after a crash now. dali reads the
  // state as of two epochs ago (with Durability::kEpoch a write acknowledged
  // in the last ~2 epochs may not be seen yet; serializable, not strictly).
  // With Durability::kStrict every engine's plain get already answers only
  // from durable state (Store::get), so a snapshot read also sees every
  // write acknowledged before it.
  bool snapshot = false;
};

struct Options {
  // Engine to create the pool with. On open, empty means "whatever the pool
  // holds"; a name that differs from the pool's is refused.
  std::string engine = "clevel";

  // Size of the pool file to create, in bytes (create only).
  std::uint64_t pool_size = std::uint64_t{1} << 30;

  // Replace an existing file on create. Without it, create refuses to touch
  // an existing file.
  bool force = false;

  Durability durability = Durability::kStrict;
  // Length of an epoch in milliseconds, for engines that persist by epochs
  // (dali): with kEpoch, at most about two epochs of acknowledged work are
  // lost in a crash. 1 .. 60000.
  unsigned epoch_ms = 10;

  // --- clevel ---------------------------------------------------------
  // Buckets of the first level of a new table, as a power of two: the table
  // starts with levels of 2^n and 2^(n-1) buckets of 8 slots.
  unsigned clevel_initial_level_log2 = 10;
  // Background threads that move items during a resize (paper: 1).
  unsigned clevel_rehash_threads = 1;
  // Start a shrink when items / slots falls below this (0 disables).
  double clevel_shrink_threshold = 0.05;
  // Never shrink the first level below 2^n buckets.
  unsigned clevel_min_level_log2 = 4;
  // Keep a DRAM summary of each bucket's tags (8 bytes per 64-byte bucket)
  // so that searches skip buckets that cannot hold the key; rebuilt in the
  // background after open. Costs one atomic OR per insert.
  bool clevel_tag_filter = true;

  // --- nehash ---------------------------------------------------------
  // Bucket-directory bits b (create only; kept in the pool): a bucket group
  // holds 2^b buckets of 16 slots and one conflict bucket. 1 .. 10.
  unsigned nehash_bucket_bits = 6;
  // Main-directory bits of a new index (create only; kept in the pool): the
  // directory starts with 2^n entries, and never has fewer after an open.
  // 0 .. 16.
  unsigned nehash_initial_dir_bits = 4;
  // At open, split physically, in a background thread, every group the
  // rebuild attached to several main entries, until each main entry has its
  // own group (the paper's Step 6). Open does not wait for it and the store
  // serves meanwhile; close stops it after the split in progress. Costs
  // one group of 2^b * 256 bytes per split.
  bool nehash_split_shallow_on_open = false;

  // --- pmeh -----------------------------------------------------------
  // Zone bits Z (create only; kept in the pool): the hash space is cut into
  // 2^Z zones by the top Z bits of the hash, each written by one owner
  // thread. 0 .. 8.
  unsigned pmeh_zone_bits = 6;
  // Segment size in KiB (create only; kept in the pool): 4, 8, 16, 32 or 64.
  unsigned pmeh_segment_kib = 16;
  // Owner threads that run every write, 1 .. 64; 0 = one per two hardware
  // threads (at least one). Not kept in the pool: each open may choose another number.
  unsigned pmeh_workers = 0;
  // A full segment splits into 2^k, k = 1 .. 3.
  unsigned pmeh_split_bits = 1;
  // Buckets a split moves per write in its zone; 0 = the whole split at once.
  unsigned pmeh_split_step = 4;
  // Owners with nothing to do move a step of their zones' splits (tests
  // turn it off so that only operations move buckets).
  bool pmeh_idle_steps = true;
  // Hot zones switch to per-segment locks so that any thread writes them.
  // Off: no zone switches by itself (write mode 0 then always delegates).
  bool pmeh_opportunistic = true;
  // How writes reach a zone: 0 = chosen by the store (delegated to the
  // owners while owners plus calling threads leave a hardware thread
  // spare, then every zone is written by its callers under per-segment
  // locks; src/engine/pmeh/pmeh.h, "Write mode"); 1 = delegated (hot zones
  // may still switch, see pmeh_opportunistic); 2 = direct from the start.
  unsigned pmeh_write_mode = 0;
  // Reads go to the zone's owner too (to measure against optimistic reads).
  bool pmeh_delegate_reads = false;

  // --- sephash (an index on disaggregated memory) --------------------
  // The memory nodes that hold the index: comma-separated "shm:PATH" (a
  // memory-node pool file mapped by this process) or "tcp:HOST:PORT" (a
  // pmhash-memnode daemon). The store's path is then unused: pass "".
  // Node 0 holds the index root and the directory; segments are spread
  // over all nodes. Every client must name the nodes in the same order.
  // Create with an empty `engine` makes sephash; open with an empty one
  // takes whatever engine node 0 holds (Store::remote_engines()).
  std::string memnodes = {};
  // tcp memory nodes started with --secret-file: the same secret file (32
  // to 4096 bytes, mode 600). The client then proves it holds the secret
  // and connects only to nodes that prove it too. Empty: the file named by
  // the environment variable PMHASH_MEMNODE_SECRET_FILE, if set, else
  // none. Errors at open/create: InvalidArgument for a file too short,
  // too long or readable by others, or a node that refuses the client or
  // cannot prove the secret.
  std::string memnode_secret_file = {};
  // A remote round trip not answered in this long fails with IOError. 0
  // (the default): half the index's lease, which is what clients should
  // use. An explicit value may not exceed half the lease (create and open
  // refuse it, naming both numbers), because both the lock lease's and the
  // generation fence's safety assume that a batch executes within lease/2
  // of being posted. 0 .. 300000.
  unsigned remote_timeout_ms = 0;
  // sephash: the lease of a segment's merge lock, in ms (create only; kept
  // with the index, and an open uses the stored one whatever it gives
  // here). A client that has seen a segment locked, with the same merge
  // sequence number, for this long takes the lock over and finishes or
  // undoes the holder's merge or split (the holder died, or its publish
  // failed); a holder stops writing lease/2 after it locked. Callers that
  // wait on a lock give Busy only after lease + the remote timeout. It must
  // exceed twice the longest a merge or split takes (a few round trips;
  // milliseconds even over tcp): a holder slower than lease/2 gives its
  // call Busy. The same lease bounds how long a create with force waits
  // for the old index's clients to stop (the generation fence). The default
  // 2000 with the derived timeout 1000 keeps a round trip within lease/2.
  // 1 .. 600000.
  unsigned sephash_lock_lease_ms = 2000;
  // shm only: injected round-trip latency in nanoseconds (emulates a network
  // hop; 0 is CXL-style direct access).
  unsigned remote_latency_ns = 0;
  // Local depth of a new index's segments (create only; kept on node 0):
  // 2^n segments to start with. 1 .. 12.
  unsigned sephash_initial_depth = 4;
  // Most slots of a segment's sorted MainSeg before it splits (create
  // only): 64 CurSegs' worth by default. 208 .. 16383.
  unsigned sephash_main_max_slots = 64 * 104;
  // The deepest a segment may split to (create only); the directory has
  // 2^n entries. initial depth .. 20.
  unsigned sephash_max_depth = 16;

  // --- race (the RACE-hashing baseline on memory nodes) ---------------
  // Uses memnodes, remote_timeout_ms and remote_latency_ns as sephash does.
  // Its lease (kept with the index: the generation fence's) is twice the
  // remote timeout of its create (2000 ms for the default 0).
  // Local depth of a new index's subtables (create only; kept on node 0):
  // 2^n subtables to start with. 1 .. 12.
  unsigned race_initial_depth = 4;
  // The deepest a subtable may split to (create only); the directory has
  // 2^n entries. initial depth .. 20.
  unsigned race_max_depth = 16;
  // Bucket groups (3 buckets of 64 bytes, 21 entry slots) per subtable
  // (create only): 256 is 48 KiB and 5376 slots. 2 .. 4096.
  unsigned race_groups = 256;

  // --- dali -----------------------------------------------------------
  // Buckets of a new table, as a power of two (32 bytes each). The table
  // grows online, one bucket split at a time (linear hashing), and never
  // below this; it is also the number of bucket locks (at most 2^16).
  unsigned dali_initial_log2 = 12;
  // Longest wait of a single get, insert, update, upsert, remove or
  // for_each for a bucket lock an open transaction holds, before it returns
  // Busy. 1 .. 60000.
  unsigned dali_lock_timeout_ms = 1000;
};

}  // namespace pmhash
