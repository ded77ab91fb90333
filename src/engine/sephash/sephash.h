// engine/sephash/sephash.h - SepHash: a write-optimised hash index on
// disaggregated memory (docs/design/sephash.md; PVLDB 17(5) 2024, and the
// authors' public code for what the paper's first pages leave out).
//
// The index lives on memory nodes (remote/memnode.h) and is reached only
// with one-sided verbs (remote/client.h); the nodes run no index logic.
// Byte layouts are in layout.h. Any number of client threads, in any number
// of processes on any number of hosts, may use one index at once.
//
// Structure. A directory of 2^max_depth entries on node 0 names, for the
// low hash bits, a segment. A segment is a CurSeg (1 KiB: a meta word, a
// fingerprint bitmap per sign, 104 unsorted slots) and a MainSeg (a sorted,
// immutable array of slots). A segment of local depth d holds the keys whose
// low d hash bits equal its pattern; it lives on node pattern mod nodes, and
// so do its items. All 2^max_depth directory entries are kept current (a
// split rewrites the entries of its new half), so growing the global depth
// copies nothing; clients read the first 2^global_depth entries.
//
// Writes append. Every insert, update, upsert and remove writes a new item
// (key, value, the key's hash, a version from one FAA on node 0) and CASes a
// slot of the key's CurSeg to name it; a remove writes a tombstone. Nothing
// is written in place, so readers never see a torn item. Among the entries
// of one key the largest version is the key's state; a merge keeps only
// that one (and drops it if it is a tombstone). Versions follow real time:
// a write that completes before another begins has the smaller version.
//
// Append (2 round trips): (1) FAA the version on node 0, and in parallel
// READ the CurSeg header and a window of 8 slots, then the meta again; (2)
// WRITE the item, CAS the bitmap word, CAS a free slot, READ the meta. A
// slot is free when it is 0 or its sign differs from the meta's sign.
//
// Merge. The client that finds every slot taken sets the meta's lock bit
// (CAS), reads the slots and the MainSeg, sorts, keeps each key's newest
// entry (reading items only for entries whose 18 filter bits collide),
// writes a new MainSeg, clears the other sign's bitmap and writes the meta
// with the sign flipped and the new MainSeg: one write empties the CurSeg.
// When the MainSeg would exceed main_max_slots it splits instead, by hash
// bit d, into itself and a new segment of depth d+1 (a new CurSeg on its
// node, the directory entries of its half, the global depth raised); at
// depths 4k the slots' four hash bits run out and the split re-reads every
// item's hash.
//
// The stale-sign race (which the authors' code has: there a merge starts
// when the last slot of a window fills, while other slots are still free,
// and a client holding the old sign can claim one that the merge has read
// or that its sign flip frees). Here a merge starts only when a client has
// seen every slot taken in one READ checked against the meta, and a slot
// goes from free to taken only by a CAS on the exact word the appender saw
// free. So no slot is free while a merge runs, and a stale appender's CAS
// finds the word changed and fails. As a second line, the append's second
// batch re-reads the meta after the CAS (the merge sets the lock bit before
// it reads a slot): if it changed, the client appends again; an entry taken
// twice names the same item, and merges keep it once. Stats::read_retries
// counts those appends.
//
// Search (2 round trips for a MainSeg hit, 3 for a CurSeg hit, 1 for most
// misses): (1) READ the header, the MainSeg slots of the key's fingerprint
// (their place comes from the MainSeg's prefix table, cached per segment)
// and the meta again; a snapshot is consistent when both metas are equal
// and unlocked; (2) if the bitmap has the key's bit: READ the slots and the
// meta again, with the MainSeg candidates' items; (3) the CurSeg
// candidates' items. READs copy words in ascending address order (remote
// layer), which the header-then-meta checks rely on.
//
// Directory caching. Each client caches the directory; a segment whose
// pattern does not match the key's hash (it split) sends it to re-read the
// directory.
//
// Durability. Every round trip's writes are durable when it completes
// (remote layer), and a call returns after its last round trip: writes are
// strict. A memory node that restarts from its pool file serves every
// completed write. A node that dies mid-call fails the call with IOError
// (whether its last round trip ran is unknown, as with a lost RDMA
// completion); calls made after the node is back succeed.
//
// What this version does not do yet (issue 8): reclaim the items of
// replaced and removed keys and replaced MainSegs (the epoch scheme in
// docs/design/sephash.md section 5); recover a segment whose merging client
// died with the lock held (calls on that segment return Busy after the
// timeout); and it runs one call per client thread at a time (the remote
// layer's coroutines are for the benchmark clients). Two concurrent inserts
// of one absent key by different clients may both return OK; the one with
// the larger version stands, as if the other had been an upsert.
#pragma once

#include <functional>

#include "engine/index.h"

namespace pmhash::engine::sephash {

extern const EngineInfo kEngineInfo;

// Tests: called in an append between its first round trip (meta and slots
// read) and its second (the slot CAS), on the appending thread.
void set_append_hook_for_testing(std::function<void()> hook);

}  // namespace pmhash::engine::sephash
