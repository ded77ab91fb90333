// engine/clevel/clevel.h - clevel hashing: level hashing for PM with
// lock-free searches.
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
//   | scan_epoch   odd while a shrink moves items down (see "Scan")    |
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
//     3..2   unused (zero)
//     1      PENDING  the change this pointer makes visible (an insert's
//                     item, an update's new item) may not be durable yet;
//                     see "Durable linearizability"
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
//     2..0  kind: TENTATIVE (0), LIVE (1), OWNED (2), LOSER (3), REMOVED (4);
//           7 = non-item
//     63..3 open generation (Pool::generation) when the kind was written
//   TENTATIVE: published by an insert that has not won its race; invisible.
//   LIVE: visible.  OWNED: visible, and a writer of this generation is
//     replacing or removing it; nobody else may.  LOSER: lost an insert race;
//     invisible.  REMOVED: deleted by its owner, which is unlinking it;
//     invisible.  After a crash (older generation) TENTATIVE, LOSER and
//     REMOVED items are garbage and OWNED is plain LIVE (its writer is gone).
//   Root magic "CLEVELR2" (PENDING and REMOVED exist); open takes an R1 pool,
//   which has neither, and rewrites its magic first.

// Tag filters (DEPARTURE: not in the paper; clevel.tag_filter). A
// search for an absent key must read both candidate buckets of every level,
// four cache misses with two levels, where a cuckoo table reads two. So each
// live level has a DRAM filter, one 64-bit word per bucket (1/8 of the
// level's size): a Bloom filter, 3 bits per tag, of the tags of every pointer
// stored into the bucket's slots. A search skips a bucket whose word lacks
// the key's bits; usually it then touches DRAM words only, which stay in
// cache far better than the buckets.
//   Invariant: for every level a context names whose filter is ready, every
//   non-empty slot's tag bits are set in its bucket's word. Bits of tags no
//   slot holds any more are shed when a slot is cleared, so under churn the
//   word stays close to the bucket's contents; it errs only towards reading
//   a bucket. The word (tag_filter.h): Bloom bits 63..10, LOCK bit 9, and
//   ADDERS 8..0, a count of writers between adding their bits and their CAS.
//   - A writer that will CAS a pointer into an empty slot of the bucket
//     (place(): inserts, context-aware copies, movers) first adds its bits
//     and increments ADDERS in one CAS of the word (waiting while LOCK is
//     set), then CASes the slot, then decrements ADDERS. So a reader that
//     finds the bits missing read the word before the pointer existed. A
//     mover adds to the destination before copying and clears the source
//     after: a reader that saw the source cleared sees the destination's
//     bits (the same order argument as for the slots).
//   - Shedding (a delete, or an unpublished insert, after its slot CAS to
//     0): CAS the word from a value with ADDERS = 0 and LOCK clear to the
//     same with LOCK (else skip: extra bits are safe); read the 8 slots; store
//     the bits of their tags (clearing LOCK). While LOCK is held no pointer
//     with a new tag can enter the bucket (ADDERS was 0, so every adder's CAS
//     is done, and new adders wait for LOCK); the other slot changes keep a
//     slot's tag (MOVING, PENDING, an update's same-key replacement) or
//     empty a slot. So the stored word covers every pointer in the bucket.
//     An adder waits for LOCK only across those eight loads.
//   - A new level gets an empty, ready filter before any context names it
//     (ensure_filter runs before the context CAS); a level keeps its filter
//     until it is dropped: unhooked once it is empty, freed after the grace
//     period that also guards its ring entry.
//   - After open, filters start empty and not ready; writers add from the
//     start, the first rehash thread adds every slot already there, then
//     marks the filter ready. Until then searches read every bucket. Open
//     does not build them (after a crash it scans the slots to count, but
//     the filters are not ready before the rehash thread's pass).
//   - check() completes the filters itself, then verifies the invariant.
//   Updates store a pointer with the same key, hence the same tag: no add.
//   The property clevel.filter_rejections counts the buckets filters spared (striped
//   per thread, plain adds: approximate).

// ---------------------------------------------------------------------------
// Operations and persist order
// ---------------------------------------------------------------------------
// All operations run inside an RCU read-side section (sync/rcu.h); levels and
// items are freed only after a grace period.
//
// search (lock-free, paper §3.2.1, apart from the PENDING slow path below,
//   which flushes and drains but waits for no thread): scan the candidate buckets level by level
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
//   3. CAS it, PENDING, into an empty slot of the less loaded candidate bucket, first
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
//   7. clear PENDING (CAS) in the slots step 3-4 stored, when they were
//      stored in the current read-side section (else a search finds them)
//   A crash before drain #2 completes leaves the item TENTATIVE or
//   unreachable: not visible, reclaimed by recovery.
//   Losing paths (killed, or lost to a visible item): unpublish (slots CASed
//   to 0, flushed), retire the item (entry flushed)           -> drain
//   then clear the intent. The intent shares a line with retired_count and
//   may reach media at once; without the drain a crash could keep the
//   cleared intent and lose both the retire entry and the slot clears: a
//   TENTATIVE or LOSER item in a slot no log names. (Every other path that
//   clears an intent drains first too: free_unpublished drains, an expansion
//   persists its context, abandon_level drains its retire entry.)
//   Waits (for a rival, for a rehash thread) happen outside the read-side
//   section, so no thread ever waits for one that waits for a grace period.
//
// update / delete (§3.2.3-4):
//   1. find the item, then OWN it: CAS its state to OWNED. Only the owner
//      changes slots that hold it, so two writers never race on one item.
//   2. update: write the new item (LIVE).  Both: retire the old item in the
//      heap log. Delete: store REMOVED into the state (the delete takes
//      effect), flush it                                      -> drain #1
//   3. content-conscious find: collect every slot that holds the item; keep
//      the one a search meets last (closest to where items move), clear the
//      others; then CAS the kept slot to the new item (update) or to empty
//      (delete); the update's new pointer is PENDING. A slot marked MOVING is waited for (a microsecond: one copy)
//      and the scan repeated, so a rehash can never resurrect an old pointer
//      (DEPARTURE: the paper detects that race afterwards by comparing rehash
//      progress, "rehashing-aware"; freezing the slot excludes it). So is a
//      moved-out candidate slot of the level being emptied: our drain #2
//      covers only our own flushes, and were the copy's new value durable
//      before the source's clearing, a crash would keep the old pointer.
//   4. flush the slots                                       -> drain #2
//   5. update: clear PENDING (CAS) in the slot step 3 stored; a copy a
//      rehash thread made meanwhile keeps its bit until a reader settles it
//
// compare_and_swap (not in the paper): each case runs as the write it
//   becomes, and its expectation is checked where that write decides
//   "present" or "absent", by the same search and the same ownership; so it
//   persists in that write's order (P8) and recovery knows nothing new.
//   - expecting a value, to a value: update; to absent: delete. Between
//     step 1 and step 2 the owner compares the item's value with the
//     expected one, byte for byte. Different: it stores LIVE back into the
//     state (OWNED was never flushed, and a crash reads a stale OWNED as
//     LIVE anyway), frees its unpublished new item, answers Conflict. The
//     key absent (nothing to own): Conflict where update/delete answer
//     NotFound. Atomic: from its CAS to OWNED until its last slot CAS no
//     other writer replaces or removes the item (step 1), no insert of the
//     key wins while the item is visible (insert 2 and 5), and an item's
//     value never changes after it is published; a rehash thread only
//     copies the pointer, and step 3 waits for its slots as it does for
//     update and delete.
//   - expecting absent, to a value: insert; AlreadyExists is Conflict. Two
//     such swaps (or one and an insert) are decided by the same-key race
//     (insert 5): exactly one wins.
//   - absent to absent: a search, as get; found -> Conflict. Writes nothing.
//
// ---------------------------------------------------------------------------
// Persist budget: the fewest drains the crash argument allows, and met
// ---------------------------------------------------------------------------
// A drain is needed wherever one write must be durable before another may
// reach media, and before a write is acknowledged. Per operation of one
// small item (no resize, no race; flushes counted in cache lines):
//   insert  3 drains: the heap's intent before its bitmap bit (heap/heap.h:
//           else a crash leaks an allocated block no log names); item + bit
//           before the slot (drain #1: else a durable slot names garbage);
//           slot + LIVE state before the answer (drain #2).
//           Flushes: intent, bit, item (1, or 2 when it spans two lines),
//           slot, state: 5-6.
//   update  3 drains: the heap's intent drain; item + bit + retire entry
//           before the slot (drain #1: the entry, else a crash after the
//           swap leaks the old item); slot before the answer (drain #2).
//           Flushes: intent, bit, item, retire entry (entry and count, 1-2),
//           slot: 5-7.
//   delete  2 drains: retire entry + REMOVED before the slot is cleared
//           (drain #1: else a crash after the unlink leaks the item, and a
//           reader that saw the slot empty relied on a delete a crash takes
//           back); the cleared slot before the answer (drain #2).
//           Flushes: retire entry (1-2), state, slot: 3-4.
//   compare_and_swap: the budget of the write it becomes (insert, update,
//           delete); absent to absent is a get. A Conflict of a swap to a
//           value costs what update's NotFound costs (the new item written
//           and freed unpublished); of a swap to absent, a search, the
//           CAS to OWNED and the store back to LIVE.
//   get     0 drains, 0 flushes (a PENDING slot or a REMOVED item of this
//           session costs the reader one drain, P4/P5 below).
// Amortised on top: each thread's retire log (125 entries) is freed after a
// grace period, one bitmap flush per block and one drain per log.
//   Nothing here can merge two of these drains: each orders writes that
//   recovery reads independently (a slot and the item it names; a slot and
//   the log that frees what it no longer names). Clearing PENDING after
//   drain #2 is a CAS with no flush (a PENDING bit on media costs a reader
//   one drain, never an answer). So the operations above meet their budget;
//   what remains is how long each drain waits, and a locked instruction
//   (CAS, a mutex) after a flush waits for that flush like a drain: the
//   writers clear PENDING on the very slots they stored (no second search),
//   and the heap flushes its retire entries after releasing the log's lock.
//
// ---------------------------------------------------------------------------
// Durable linearizability (strict durability, link-and-persist)
// ---------------------------------------------------------------------------
// Every answer depends only on writes that are durable when it is given: a
// crash right after a call returns never takes back what the call saw. Only
// the pointers that make a change visible are published with PENDING, and a
// reader pays only when it meets one; its fast path is one load and one bit
// test per candidate slot, as before.
//   The durable writes answers depend on, in persist order per writer:
//   P1 insert: item, heap bit, intent (drain #1) < slot(s) with PENDING,
//      LIVE state (drain #2) < PENDING cleared (a CAS: a rehash thread or an
//      owner may have changed the word since; no flush, see R below).
//   P2 update: new item LIVE, retire entry (drain #1) < dropped copies of
//      the old pointer (drained before the replacement when there were
//      several) < replacement with PENDING (drain #2) < PENDING cleared.
//   P3 delete: retire entry, REMOVED state (drain #1) < slots emptied
//      (drain #2).
//   Answers and what each depends on:
//   P4 a value (get), AlreadyExists (insert: its search, or a visible rival
//      in the same-key race), "found" (update/delete take ownership): the
//      item's contents (drained by its writer before it was published), its
//      LIVE state and a slot holding it. Seen through a slot without PENDING:
//      the writer (or a reader, or recovery) cleared the bit after a drain
//      that made all of these durable. Seen through a PENDING slot: the
//      reader flushes every slot holding the item (a copy in the level being
//      emptied alone would be dropped with it by recovery) and the state's
//      line itself (another thread's flushes are not ordered by our drain),
//      drains, and only then answers; then it CASes PENDING away.
//   P5 NotFound (get, update, delete) and the absence an insert relies on:
//      the delete of the last item with the key. A search that meets the
//      item REMOVED (this generation) flushes its state and drains before it
//      goes on; one that meets no slot holding it at all saw the slots
//      emptied, which the deleter did only after drain #1 made REMOVED
//      durable (P3). Recovery reads a durable REMOVED as deleted.
//   P6 an update's new value: P4 applied to the new item (the slot is the
//      PENDING one); the dropped copies of the old pointer were drained
//      before the replacement could be seen (P2).
//   P7 the writers' own answers: each returns after its last drain (P1-P3).
//   P8 compare_and_swap: a swap that writes follows P1 (from absent), P2 (to
//      a value) or P3 (to absent) and answers by P7. Its comparison, equal
//      or not, is made on what the write's own search returned, after P4
//      (the item it compares: contents, LIVE state and a slot durable) or
//      P5 (the key absent): so a Conflict, like a success, depends only on
//      durable writes. A failed swap writes nothing that recovery reads: its
//      unpublished item is freed, and OWNED back to LIVE needs no flush.
//   R  Recovery: after a crash, open's count scan clears every PENDING bit
//      (what is on media then is what there is) and unlinks REMOVED items
//      whose retire entry did not reach media. After a clean close a bit
//      may remain (a clearing CAS that lost to a rehash thread); the first
//      reader treats it as above, harmlessly.
//   ReadOptions::snapshot ("the latest state already durable") is get():
//   by P4-P6 get() answers only from durable state.
//   for_each (scan) reads without this protocol: it may report an item whose
//   insert has not returned yet.
//
// Progress (what is lock-free and what waits):
//   - get, and the searches inside writes, are lock-free: a search retries
//     only when the context changed, i.e. a resize made progress. A PENDING
//     slot costs the reader flushes and a drain, never a wait for a thread.
//   - Writers (compare_and_swap among them, as the write it becomes) are
//     not lock-free. They wait (yield in a loop, outside the
//     read-side section where the wait is for another thread's progress)
//     for: another writer's OWNED item of the same key (update, delete);
//     a TENTATIVE rival at a lower offset in the same-key race (insert); a
//     slot frozen MOVING or moved out, i.e. one bucket copy and one drain of
//     a rehash thread (update, delete, the losing paths of insert); a bucket
//     filter word's LOCK, i.e. eight loads of a deleter (insert); while a
//     shrink runs out of room, the rehash threads turning it around (insert);
//     a dropping level's ring entry (expansion). A writer delayed in any of
//     these holds up only writers of the same key or bucket, or the resize.
//   - Expansion never blocks searches or writers of other keys; the shrink
//     too, except that an insert finding no room while shrinking waits for
//     the rehash threads (above).
//   - check() and for_each take no lock that writers wait for; check() pauses
//     the rehash threads.
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
//   clevel.shrink_threshold, a level of half the last level's
//   buckets is added below the last, the context becomes {first, last-1,
//   resizing, shrinking}, rehash threads move everything out of the first
//   level top-to-bottom, then the first level is dropped. Searches go
//   top-to-bottom while shrinking.
//
// ---------------------------------------------------------------------------
// Recovery (open): O(rehash threads + levels + heap threads), O(slots) after a crash
// ---------------------------------------------------------------------------
//   0. validate, reading only (a pool that fails is rejected unchanged):
//      the root's magic (R1 or R2); the open generation fits the item state; the
//      context names 1..62 levels, each linked, allocated, with its id, and
//      in a block that holds the 2^log2 buckets its header claims. Slots
//      and items are not read: check() validates those, in O(keys)
//   1. clear DIRTY in the context (persisting the word)
//      and make the scan epoch even unless a shrink is in progress (Scan)
//   2. zero every levels[] entry outside [last, first]: a level whose
//      expansion never reached the context (freed, unless the block is a
//      live level by now)
//   3. clear MOVING in the buckets named by progress[] (the only buckets a
//      rehash thread could have been in)
//   4. heap recovery (heap/heap.h) with keep(block): a live level -> keep;
//      an item referenced by a slot -> keep, unless TENTATIVE, LOSER or
//      REMOVED, then its slots are cleared and it is freed; anything else
//      -> free
//   5. the item count: saved by a clean close (if exact); after a crash,
//      counted here, O(slots), before any writer or rehash thread runs, so
//      that the count is exact (a count beside running writers counts an
//      insert twice or a delete not at all). The same scan clears PENDING
//      bits and unlinks REMOVED items no log named (R above). Every slot is
//      checked against the heap before its item is read; a slot naming no
//      whole item is not counted and makes the count inexact (not saved;
//      check() reports it). size() then only sums per-thread counters.
//   6. rehash threads resume the resize from min(progress[]) if one was in
//      progress.
//   So open is O(rehash threads + levels + heap threads) after a clean
//   close, and O(slots) after a crash.
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
//
// ---------------------------------------------------------------------------
// Scan (Index::scan, clevel_scan.cc)
// ---------------------------------------------------------------------------
// What moves an item, and where (the facts the argument rests on):
//   M1 Only rehash threads move items, one slot at a time: MOVING, copy into
//      a candidate bucket of another level of the round's context, drain,
//      then clear the source (move_bucket). Copy before clear: at every
//      moment some slot holds the item. No move stays inside a level
//      (safe_level excludes the level being emptied from place()).
//   M2 An expansion's round empties the last level (the smallest) into the
//      larger ones; a shrink's round empties the first level (the largest)
//      into the smaller ones. Nothing else moves an item: an update stores
//      its new pointer into a slot that held the old one, and when a key
//      has several copies (a context-aware insert, a move under way) it
//      keeps the one a search meets last, i.e. the one items move towards
//      (replace_all); inserts and deletes add or end a key.
//   M3 Level sizes: adjacent levels differ by a factor two (an expansion
//      adds 2x the first, a shrink 1/2 the last), so log2 of a level's
//      bucket count names it among the live levels; it is on media
//      (LevelHeader::log2), hence the same after a reopen. Levels appear
//      above the first (expansion) or below the last (a shrink's start),
//      and are dropped at the bottom (expansion's end) or the top (shrink's
//      end).
//   M4 Scan epoch (Root::scan_epoch, persisted): odd exactly while a
//      shrink's round may move items down. The first rehash thread makes it
//      odd when the round starts, before any move (every member of the
//      round takes its share from it under rehash_mutex_); the thread that
//      finishes the round makes it even once every share is done, before
//      the context CAS that ends the shrink or turns it around (only after
//      that CAS can a round move items up). Each change is one increment,
//      persisted before what it announces. Recovery makes an odd epoch even
//      when no shrink is in progress; a resumed shrink makes it odd again.
//      So: epoch even -> items move only up (to larger levels), epoch odd
//      -> only down.
//
// Order: within one epoch, levels by log2, ascending when the epoch is even
// and descending when it is odd, i.e. in the direction items move (M4);
// within a level, buckets in index order. A part is one bucket.
//
// Cursor (64 bits):
//   63..48  the epoch's low 16 bits when the cursor was handed out
//   47..42  log2 of the level + 1 (0: before every level; 42..63: past
//           every level: levels have at most 2^40 buckets)
//   41..0   bucket index within that level
//   A returned cursor is never 0 (its level field is >= 1). A cursor whose
//   epoch is not the current one's (another epoch, or a hostile value) is
//   taken as 0: the scan starts over in the current order. Otherwise it
//   resumes at the level with that log2, at that bucket; if that level is
//   gone (or never was), at bucket 0 of the next level in order (up: the
//   smallest log2 above it, down: the largest below it); a bucket index at
//   or past its level's end means the next level. Nothing in it depends on
//   DRAM addresses or on the open: after a reopen the epoch and the level
//   sizes are what they were.
//
// Each call reads buckets one at a time, each inside a read-side section
// under a freshly loaded context (so the level is not freed under it, as in
// salvage), copies the visible items' keys and values, leaves the section
// and passes them to fn. It loads the epoch (seq_cst) first and again after
// its last bucket. If the epoch changed, the cursor returned carries the old
// epoch (and the level field 63, so it is not 0): the next call starts over.
// Otherwise the cursor is the position after the last bucket read, or 0 if
// the order has no bucket left.
//
// Why a key present throughout is passed. Take the calls from the last
// start-over to the call that returns 0: they all ran in one epoch E (each
// saw E at its start and at its end, and E only grows). Call a slot
// "visited" when the scan's position has passed its bucket. Claim: from the
// first of those calls on, every key present since then either has been
// passed or is held by a slot not yet visited. At the first call nothing is
// visited. The position only advances after reading a bucket whose items it
// passes, so a key that was in that bucket when it was read was passed. A
// key can reach a visited slot only by a move (M2: an update keeps its slot,
// and of several copies it keeps the one later in order). With E even, a
// move goes from the last level to a larger one (M2, M4): if its source was
// not visited, the position is in the last level or below it, so the
// destination, in a larger level, is not visited either; if the source was
// visited, the key was passed already. With E odd the same holds mirrored:
// moves go from the first level down, and the order visits the first level
// first. Levels that appear or disappear do not matter: a new level with E
// even is above every level (unvisited) or, at a shrink's start, below them
// but empty of moved items until the epoch turns odd; with E odd no level
// appears or goes (no expansion runs during a shrink, and the top is
// dropped only after the epoch is even again, empty: no insert places into
// the level a round empties). When a cursor's level is gone it was emptied
// into levels later in the order, where the scan goes on. So when the order
// is exhausted every such key was passed.
//   A move during a call, while the call reads the bucket: the copy is made
//   before the source is cleared (M1), and the copy lies later in the order
//   than the source. Reading the source slot before it is cleared passes
//   the key; reading it cleared (MOVING alone, or 0) means the copy is in
//   place already, later in the order. A MOVING slot that still names the
//   item is passed. A move of the other direction under a call was
//   announced by an epoch change made before it (M4): had the call read any
//   slot such a move wrote, its acquire load of that slot orders the epoch
//   increment before the call's final epoch load, which then sees it, and
//   the next call starts over.
//   Duplicates: a key is passed twice only if it moves from a visited slot
//   to one not yet visited, or the scan starts over; both need a round in
//   progress. A scan without concurrent writes sees none: before reading a
//   bucket of the level a round is emptying, and before starting while a
//   shrink is in progress, a call waits outside any read-side section for
//   the round to end (bounded: 5 s per call, and at most 200 ms without the
//   round's progress entries moving, so a stalled or parked rehash thread
//   only costs time; then the call reads on and may pass some keys twice).
//
// Termination: within an epoch each call advances the position by at least
// one bucket, and the order holds the sum of the level sizes, which grows
// only when an expansion adds a level. The epoch changes twice per shrink,
// and a shrink needs the table to have grown before it can shrink again.
// So a scan ends after a bounded number of calls unless the index keeps
// resizing. (16 epoch bits: a cursor held across 65536 epoch changes may
// match by chance and resume mid-way; that loses the guarantee only then.)
// Any 64-bit cursor is a position from which the scan ends.
//
// Cost per call: the buckets read until `count` keys are passed (each a
// read-side section, O(levels) to find its level), plus the waits above.
// DRAM: the keys and values of one bucket at a time.
#pragma once

#include "engine/index.h"

namespace pmhash::engine::clevel {

extern const EngineInfo kEngineInfo;
// What clevel is and the options it takes (descriptor.cc).
extern const EngineDescriptor kDescriptor;

// clevel's options ("clevel.<option>", descriptor.cc has their docs and
// ranges) as typed values, read once when the index starts.
struct Config {
  unsigned initial_level_log2 = 0;
  unsigned rehash_threads = 0;
  double shrink_threshold = 0;
  unsigned min_level_log2 = 0;
  bool tag_filter = false;

  static Config from(const Options& options);
};

}  // namespace pmhash::engine::clevel
