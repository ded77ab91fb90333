// engine/clevel/clevel.h - clevel hashing: lock-free level hashing for PM.
//
// Follows "Lock-free Concurrent Level Hashing for Persistent Memory" (Chen
// et al., USENIX ATC'20), §3, with the changes marked DEPARTURE below.
//
// ---------------------------------------------------------------------------
// On-media layout
// ---------------------------------------------------------------------------
//
//   pool root (Root, in the pool's root area)
//   +------------------------------------------------------------------+
//   | magic, creation parameters                                       |
//   | context      one 64-bit word, CASed (see "Context")              |
//   | levels[64]   ring of level offsets, indexed by level id mod 64   |
//   | progress[16] per rehash thread: {level id, next bucket}          |
//   | item_count, count_valid   saved by a clean close                 |
//   +------------------------------------------------------------------+
//
//   level (one heap block)                       bucket: 64 bytes, 8 slots
//   +----------------+-----------+-----------+     +------+------+---+------+
//   | LevelHeader 64 | bucket 0  | bucket 1  | ... |slot 0|slot 1|...|slot 7|
//   +----------------+-----------+-----------+     +------+------+---+------+
//
//   slot (8 bytes, engine/../pool/pptr.h):
//     63..48 tag      the top 16 bits of the key's h1 (a key summary that
//                     filters dereferences; false positives are compared away)
//     47..4  offset   of the item (engine/item.h), 16-byte aligned
//     0      MOVING   set by a rehash thread while it copies the slot's item
//                     to another level; only that thread clears it
//     0 (whole word)  empty
//     MOVING alone    moved out: empty, but the clearing may not be durable
//                     yet (see rehash); writers of the key wait for it
//
//   Candidate buckets of a key in a level of 2^n buckets: h1 mod 2^n and
//   h2 mod 2^n (h1, h2: the two halves of the key's XXH3-128). Adjacent levels
//   differ by a factor two in size; the level with the most buckets is the
//   "first", the one with the fewest the "last" (paper §3.1).
//
// Context (DEPARTURE: the paper CoWs a 17-byte object and CASes a pointer to
// it; here the same information fits one word, so a context change is one
// CAS with no allocation and nothing to reclaim or leak):
//     15..0   first level id        31..16  last level id
//     32      is_resizing           33      shrinking (direction of movement)
//     34      DIRTY: written but maybe not durable yet
//     63..35  version, incremented by every change (no ABA)
//   Live level ids are last, last+1, ..., first (mod 2^16); level id i lives
//   at levels[i mod 64]. At most kMaxLevels levels are live at once.
//
// Item state word (the first word of every item, engine/item.h):
//     2..0  kind: TENTATIVE (0), LIVE (1), OWNED (2), LOSER (3); 7 = non-item
//     63..3 open generation (Pool::generation) when the kind was written
//   TENTATIVE: published by an insert that has not won its race; invisible.
//   LIVE: visible.  OWNED: visible, and a writer of this generation is
//     replacing or removing it; nobody else may.  LOSER: lost an insert race;
//     invisible.  After a crash (older generation) TENTATIVE and LOSER items
//     are garbage and OWNED is plain LIVE (its writer is gone).

// Tag filters (DEPARTURE: not in the paper; Options::clevel_tag_filter). A
// search for an absent key must read both candidate buckets of every level,
// four cache misses with two levels, where a cuckoo table reads two. So each
// live level has a DRAM filter, one 64-bit word per bucket (1/8 of the
// level's size): a Bloom filter, 3 bits per tag, of the tags of every pointer
// stored into the bucket's slots. A search skips a bucket whose word lacks
// the key's bits; usually it then touches DRAM words only, which stay in
// cache far better than the buckets.
//   Invariant: for every level a context names whose filter is ready, every
//   non-empty slot's tag bits are set in its bucket's word. Bits are only
//   ever added (a delete leaves them; the level's next rebuild, i.e. a
//   resize, forgets them), so the filter errs only towards reading a bucket.
//   - A writer adds the tag (seq_cst fetch_or) before its CAS stores the
//     pointer, so a reader that finds the bits missing read the word before
//     the pointer existed. A mover adds to the destination before copying and
//     clears the source after: a reader that saw the source cleared sees the
//     destination's bits (the same order argument as for the slots).
//   - A new level gets an empty, ready filter before any context names it
//     (ensure_filter runs before the context CAS); a level keeps its filter
//     until it is dropped: unhooked once it is empty, freed after the grace
//     period that also guards its ring entry.
//   - After open, filters start empty and not ready; writers add from the
//     start, the first rehash thread adds every slot already there, then
//     marks the filter ready. Until then searches read every bucket. Open
//     itself does not scan the table.
//   - check() completes the filters itself, then verifies the invariant.
//   Updates store a pointer with the same key, hence the same tag: no add.

// ---------------------------------------------------------------------------
// Operations and persist order
// ---------------------------------------------------------------------------
// All operations run inside an RCU read-side section (sync/rcu.h); levels and
// items are freed only after a grace period.
//
// search (lock-free, paper §3.2.1): scan the candidate buckets level by level
//   in the direction items move: bottom-to-top (last to first) while
//   expanding, top-to-bottom while shrinking. A mover copies before it
//   clears, and the source level is scanned before the destination, so a
//   moving item is never missed. While nothing moves, top-to-bottom (the
//   first level holds two thirds of the items). If the context changed
//   meanwhile and nothing was found, search again: every move happens under
//   a context that differs from one without a resize. All candidate buckets
//   are prefetched first; a bucket whose tag filter lacks the key is skipped.
//
// insert (context-aware, §3.2.2):
//   1. write the item as TENTATIVE; heap bit + intent + item   -> drain #1
//   2. search; found -> free the item, AlreadyExists
//   3. CAS it into an empty slot of the less loaded candidate bucket, first
//      level first, never into the level being emptied; no room -> expand
//      (below) and retry. Flush the slot. (The tag goes into the bucket's
//      filter word just before the CAS.)
//   4. context-aware (paper §3.2.2): if the level we used is being emptied,
//      or was dropped, since we chose it, a rehash thread may have passed
//      our bucket already: insert the same pointer again somewhere safe
//      (duplicate pointers to one item are harmless).
//   5. same-key race (DEPARTURE: the paper lets two concurrent inserts of one
//      key both succeed and fixes the duplicates later; here exactly one
//      wins). Scan for other items with the key: a visible one -> we lost.
//      A TENTATIVE rival at a lower offset -> wait for it to resolve. At a
//      higher offset -> kill it (CAS its state TENTATIVE -> LOSER). Then
//      claim ourselves: CAS our state TENTATIVE -> LIVE. Every state word
//      changes by CAS exactly once out of TENTATIVE, so one racer wins. A
//      racer that was killed unpublishes itself and answers AlreadyExists
//      only once it has seen a visible item (else it starts over).
//   6. flush the LIVE state                                     -> drain #2
//   A crash before drain #2 completes leaves the item TENTATIVE or
//   unreachable: not visible, reclaimed by recovery.
//   Waits (for a rival, for a rehash thread) happen outside the read-side
//   section, so no thread ever waits for one that waits for a grace period.
//
// update / delete (§3.2.3-4):
//   1. find the item, then OWN it: CAS its state to OWNED. Only the owner
//      changes slots that hold it, so two writers never race on one item.
//   2. update: write the new item (LIVE).  Both: retire the old item in the
//      heap log                                               -> drain #1
//   3. content-conscious find: collect every slot that holds the item; keep
//      the one a search meets last (closest to where items move), clear the
//      others; then CAS the kept slot to the new item (update) or to empty
//      (delete). A slot marked MOVING is waited for (a microsecond: one copy)
//      and the scan repeated, so a rehash can never resurrect an old pointer
//      (DEPARTURE: the paper detects that race afterwards by comparing rehash
//      progress, "rehashing-aware"; freezing the slot excludes it). So is a
//      moved-out candidate slot of the level being emptied: our drain #2
//      covers only our own flushes, and were the copy's new value durable
//      before the source's clearing, a crash would keep the old pointer.
//   4. flush the slots                                       -> drain #2
//
// expand (§3.1.2 steps 1-3, by the inserting worker): allocate a level of
//   twice the first level's buckets, zeroed                  -> drain
//   CAS levels[first+1] from 0 (losers free theirs, use the winner's), persist;
//   CAS the context to {first+1, last, resizing}; persist (DIRTY protocol:
//   the CASer and every reader that sees DIRTY persist the word before
//   depending on it, then DIRTY is cleared).
//
// rehash (§3.1.2 steps 4-5, background threads, default 1): thread j of n
//   takes buckets start+j, start+j+n, ... of the level being emptied. Per
//   slot: set MOVING (CAS), copy the pointer into a candidate bucket of
//   another level (skipped if a copy is already there); drain; mark the
//   sources moved out (MOVING alone), persist; clear them, persist. After
//   each bucket: progress[j] := next bucket, persisted. When
//   every thread is done, the last one retires the level (heap log, durable
//   first) and CASes the context to drop it.
//
// shrink (beyond the paper, as its §5 sketches): when items/slots falls under
//   Options::clevel_shrink_threshold, a level of half the last level's
//   buckets is added below the last, the context becomes {first, last-1,
//   resizing, shrinking}, rehash threads move everything out of the first
//   level top-to-bottom, then the first level is dropped. Searches go
//   top-to-bottom while shrinking.
//
// ---------------------------------------------------------------------------
// Recovery (open), O(rehash threads + levels + heap threads)
// ---------------------------------------------------------------------------
//   0. validate, reading only (a pool that fails is rejected unchanged):
//      the root's magic; the open generation fits the item state; the
//      context names 1..62 levels, each linked, allocated, with its id, and
//      in a block that holds the 2^log2 buckets its header claims. Slots
//      and items are not read: check() validates those, in O(keys)
//   1. clear DIRTY in the context (persisting the word)
//   2. zero every levels[] entry outside [last, first]: a level whose
//      expansion never reached the context (freed, unless the block is a
//      live level by now)
//   3. clear MOVING in the buckets named by progress[] (the only buckets a
//      rehash thread could have been in)
//   4. heap recovery (heap/heap.h) with keep(block): a live level -> keep;
//      an item referenced by a slot -> keep, unless TENTATIVE, then its
//      slots are cleared and it is freed; anything else -> free
//   5. rehash threads resume the resize from min(progress[]) if one was in
//      progress.
//   The item count is saved by a clean close (if it was known: close never
//   scans the table); after a crash it is recounted on first use of size()
//   or stats() (O(keys), outside open).
//
// ---------------------------------------------------------------------------
// check() verifies
// ---------------------------------------------------------------------------
//   context and level ring consistent (ids in range live and allocated,
//   others zero, sizes doubling, 2 levels when not resizing); every live
//   level has a complete tag filter holding the tag of each of its slots; every slot
//   points to an allocated, well-formed, non-TENTATIVE item whose tag and
//   candidate bucket match its key; no MOVING bit; no two different items
//   with one key; the item count; every allocated heap block is a live level
//   or an item in some slot (no leak).
#pragma once

#include "engine/index.h"

namespace pmhash::engine::clevel {

extern const EngineInfo kEngineInfo;

}  // namespace pmhash::engine::clevel
