// pmhash/stats.h - what Store::stats() reports: counters and shape of a
// store, for `pmhash info` and benchmarks.
//
// A field an engine does not keep stays 0 (or empty); each field's comment
// names the engines that fill it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pmhash {

// A copy taken when stats() ran; later operations do not change it.
struct Stats {
  std::string engine;
  std::string granularity;       // byte, cache_line, page or none
  std::uint64_t pool_size = 0;   // bytes of the pool file
  std::uint64_t heap_used = 0;   // bytes of the heap handed out
  std::uint64_t heap_free = 0;   // bytes of the heap still free
  std::uint64_t items = 0;       // live keys
  std::uint64_t slots = 0;       // index capacity (clevel: 8 x buckets)
  double load_factor = 0;        // items / slots
  unsigned levels = 0;           // clevel: levels in the level list
  bool resizing = false;         // a resize is in progress
  bool clean_shutdown = true;    // false: this open ran crash recovery
  std::uint64_t recovery_ns = 0; // time open spent in recovery
  std::uint64_t open_ns = 0;     // time the last open took, clean or not (0 after create)
  std::uint64_t expansions = 0;  // resizes since open
  std::uint64_t shrinks = 0;
  std::uint64_t items_moved = 0; // items moved by resizing since open
  std::uint64_t dram_bytes = 0;  // DRAM the index keeps beside the pool
                                 // (clevel: tag filters, 1/8 of the buckets)
  std::uint64_t filter_rejections = 0;  // clevel: buckets a tag filter spared a
                                        // search since open (approximate)
  // nehash (0 for other engines): bucket groups, group splits since open,
  // full main-directory expansions, and two-time expansion nodes of four
  // entries (Rule 1) and of two (Rule 2) since open.
  std::uint64_t groups = 0;
  std::uint64_t splits = 0;
  std::uint64_t full_expansions = 0;
  std::uint64_t rule1_nodes = 0;
  std::uint64_t rule2_nodes = 0;
  // Engines with segments and delegated writes (pmeh; 0 for the others,
  // but nehash reports bytes_moved too): live segments, bytes split moves
  // copied since open (16-byte slot plus its 2-byte meta per moved pair;
  // items are not copied), operations run
  // by an owner thread on a caller's behalf, and optimistic reads that
  // failed validation and ran again (sephash: appends that ran again because
  // the segment changed under them), since open; splits completed early
  // because another split was needed first (a second split in the zone, a
  // child's window full), since open.
  std::uint64_t segments = 0;
  std::uint64_t bytes_moved = 0;
  std::uint64_t delegated_ops = 0;
  std::uint64_t read_retries = 0;
  std::uint64_t eager_split_completions = 0;
  // pmeh's opportunistic switch: zone mode switches since open (either
  // way), zones in SHARED mode now, and writes callers ran themselves in
  // SHARED zones since open.
  std::uint64_t zone_switches = 0;
  std::uint64_t shared_zones = 0;
  std::uint64_t direct_ops = 0;
  // Engines that persist by epochs (dali); 0 / empty otherwise.
  std::uint64_t epoch = 0;          // the epoch operations run in now
  std::uint64_t durable_epoch = 0;  // every operation of an epoch <= this is durable
  std::vector<std::uint64_t> failed_epochs;  // epochs lost to crashes
  std::uint64_t epoch_fences = 0;   // global fences since open
  bool swept = true;                // false until the post-crash heap sweep ends
  // Engines on memory nodes (sephash; 0 otherwise): remote round trips,
  // verbs and payload bytes (both directions) since open, and CurSeg merges
  // into a MainSeg since open (splits count as expansions, and the bytes a
  // split writes as bytes_moved).
  std::uint64_t round_trips = 0;
  std::uint64_t remote_verbs = 0;
  std::uint64_t remote_bytes = 0;
  std::uint64_t merges = 0;
  // Reuse of memory-node space (sephash; 0 otherwise), since open: blocks
  // (items, MainSegs) that merges and splits freed and their bytes; blocks
  // that allocations took from freed ones (this store's, or ones another
  // client handed back when it closed) instead of new space, and their
  // bytes; and the bytes taken from the nodes' bump words (new space).
  std::uint64_t remote_blocks_freed = 0;
  std::uint64_t remote_bytes_freed = 0;
  std::uint64_t remote_blocks_reused = 0;
  std::uint64_t remote_bytes_reused = 0;
  std::uint64_t remote_bytes_bumped = 0;
  // sephash: bytes of blocks this store gave up since open because a
  // batch failed without saying whether it ran (a lost reply, a dead
  // node): blocks a push or pop may have moved, the rest of a session that
  // could not hand its blocks back, what a merge whose publish could not be
  // confirmed dropped. Never reused, by anyone (an upper bound: some may
  // have reached another client). Space taken by a bump FAA whose reply
  // was lost is not counted (the client cannot tell whether it ran).
  std::uint64_t remote_bytes_leaked = 0;
  // sephash: segment locks this store took over from a holder that kept
  // one past its lease (Options::sephash_lock_lease_ms), since open.
  std::uint64_t lock_takeovers = 0;
  std::uint64_t flushes = 0;     // cache-line flushes issued since open
  std::uint64_t fences = 0;      // drains (store fences) issued since open
};

}  // namespace pmhash
