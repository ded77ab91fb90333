// engine/pmeh/pmeh.h - PMEH: parallel multi-split extendible hashing for
// persistent memory (Hu et al., ICPP'21, slides only; issue 7).
//
// The full design, with every departure from the slides argued, is
// docs/design/pmeh.md; "§n" refers to it. This comment condenses it and
// says what the code implements so far.
//
// ---------------------------------------------------------------------------
// Layout (§1, layout.h)
// ---------------------------------------------------------------------------
//   Root (pool root area): magic, version, Z, s; dir_array[64] (directory
//   offsets by id); the saved item count; split[256] (one split record per
//   zone); op_log[256] (one 32-byte record per heap thread slot).
//
//   Directory (heap block): 256-byte header {magic, id, G, Z, zone_filled
//   bitmap}, then 2^G entries; entry i = the segment covering the h1 whose
//   top G bits are i. Zone z = the top Z bits of h1 owns the entries
//   [z 2^(G-Z), (z+1) 2^(G-Z)).
//
//   Segment (heap block of exactly 2^s bytes, s = 12..16): 256-byte header
//   {magic, prefix, depth L, nb | children[8] | split word, moved[4]}, then
//   nb = 2^s/256 - 1 buckets of 256 bytes:
//       +-----------+---------+---------------------------------+
//       | meta[14]  | 4 B pad | slot[14], 16 B each {w0, w1}    |
//       +-----------+---------+---------------------------------+
//   meta: VALID | INLINE | key_len | value_len | fp (h2 & 63); an inline
//   slot holds an 8-byte key and value, a pointer slot pptr(item, h2 >> 48)
//   and h1. A key's window is buckets {b, b+1 mod nb}, b = ((h1 & 2^32-1)
//   nb) >> 32; any slot of the window.
//
// ---------------------------------------------------------------------------
// Threads (§3)
// ---------------------------------------------------------------------------
//   W owner threads (pmeh.workers; default half the cores) start with the
//   store; zone z belongs to owner z mod W, which alone writes the zone's
//   segments while the zone is OWNED (SHARED zones: §7 below, and "Write
//   mode", which makes every zone SHARED on few cores). A caller prepares an item if the pair is not inline
//   (allocate with intent 0, write, flush, drain), fills its mailbox (one
//   per heap slot), rings its bit in the owner's doorbell, and waits
//   (spins 4 us, yielding, then parks). The owner serves every rung bit,
//   then spins 20 us (yielding), then sleeps; the doorbell/sleeping and
//   done/parked pairs are seq_cst Dekker handshakes, so no wake-up is lost.
//
//   Reads run on the caller's thread, lock-free: every write to a segment
//   happens between two bumps of its DRAM version (odd inside); a read
//   copies what it found and retries if the version moved (16 times, then
//   it is delegated too). A pointer slot's item is read only after the
//   version is validated; RCU keeps it until the read section ends.
//
// ---------------------------------------------------------------------------
// Multi-split and directories (§5, §6), owner only
// ---------------------------------------------------------------------------
//   A full window splits its segment S (depth L) into 2^k fresh children of
//   depth L + k (k = pmeh.split_bits); child c(h1) = the k bits of h1 after
//   the top L. Each pair is copied to the same (bucket, position) of its
//   child, so a split never overflows. S is never written: a crash leaves
//   it whole. The zone's directory must have G >= L + k: otherwise the
//   owner installs a deeper directory (header -> dir_array[n+1]) and fills
//   its zone into it. Any zone moves into the newest directory at its own
//   next write (lazy per-zone fill: entries -> its zone_filled bit); a
//   directory every zone has left is retired then (retire log entry ->
//   dir_array[j] = 0) and freed after a grace period.
//   Splits are gradual (§5.3, B = pmeh.split_step): the start moves only
//   the window of the insert that found it full; every later write in the
//   zone moves its window (if on S) plus up to B buckets from a cursor, as
//   one batch (child buckets -> S.moved bits); the split completes when
//   every bucket is moved, or early when another split is needed in the
//   zone or a child's window is full; idle owners step too; B = 0 splits
//   at once; SHARED zones finish a split right after its start (below).
//   While S splits the directory still names it; readers read bucket j
//   from S until bit j is moved, then from the child; writes on S go to
//   the child, under S's version. Readers holding S see its version odd,
//   then DEAD, and restart from their zone's directory.
//   k (default 1): children start at half the fill S had at its split,
//   not at 1/2^k of it, so the space per pair stays near that of a
//   half-full table whatever the key count; k = 3 swings between 1/8 and
//   full, as segments split in waves. k = 1 copies every pair once per
//   doubling of the table, k = 3 once per eightfold growth, and the
//   directory grows one level at a time: more moves and splits, which the
//   rules of "Writes during a split" keep out of the callers' way. k = 2
//   and 3 stay options (fewer, larger splits, more space).
//
// ---------------------------------------------------------------------------
// Writes during a split (SHARED zones)
// ---------------------------------------------------------------------------
//   Rule 1: in a SHARED zone the owner moves a split whole as soon as the
//   write that started it is answered: the start moves that write's window
//   (as with any B), the owner answers its round of requests, then moves
//   the rest of S and completes the split in one batch, before it serves
//   another round; a split in flight there that it did not start (found
//   MOVING by open, or started while the zone was OWNED) completes at its
//   next step, delegated or idle. Gradual steps bound how long an OWNED
//   zone's queue waits behind one split; in a SHARED zone the callers do
//   not queue at the owner: only the writers of S wait, for one copy of S,
//   while a gradual split would hand each of S's writes with an unmoved
//   bucket to the owner until it ends (a hand-off per write, §16, where a
//   write on 2 cores waits for the scheduler). The persist order is the
//   gradual split's with two batches: record -> children -> MOVING; the
//   window's batch and the rest's (child buckets -> drain -> S.moved ->
//   persist, each); completion (§8.1 "split").
//   Rule 2: a direct writer that takes S's version by CAS while S splits
//   writes the key itself when both buckets of its window are moved: it
//   probes and writes the window of the key's child (the only place the
//   key can be), each write form with its own persist order (below; an
//   insert: slot words -> drain -> meta VALID -> persist), and releases
//   S's version, durable (P1-P3). That is the owner's
//   write on S, done by another thread under the same lock: moves, steps
//   and completion take S's version the same way, so no batch runs while
//   it writes. The moved bits it relies on were persisted (P4 #2) before
//   the version it took was released, so a crash cannot turn the bucket
//   back into S's, and recovery resumes a MOVING split with the child
//   bucket as it is. A window with an unmoved bucket, or a full child
//   window, goes to the owner (it completes the split first, rule 1): S is
//   never written, and splits are moved by owners only.
//
// ---------------------------------------------------------------------------
// Persist order (§8.1); every write is durable when it returns
// ---------------------------------------------------------------------------
//   insert      item, intent (caller) -> slot words -> meta VALID
//   update (a)  inline, same value length: w1, one persist
//          (b)  pointer to pointer: retire old item -> w0
//          (c)  otherwise: op-log fields -> op -> slot and meta -> op = 0
//   remove      (pointer: retire item ->) meta VALID cleared
//   compare_and_swap (Request::kSwap)  the insert's, an update's or the
//               remove's order for the write it makes; nothing for a
//               Conflict or a swap from absent to absent (below)
//   split       record R[z] = S -> (child header, S.children[i]) each ->
//               S.split MOVING; each batch: child buckets -> S.moved bits;
//               completion: retire S -> R = S | COMPLETING -> entries -> R = 0
//   directory   header -> dir_array[n+1]; fill: entries -> zone_filled bit;
//               retirement: retire entries -> dir_array[j] = 0, lowest first
//   A segment's version becomes even only after its stores are durable.
//
// ---------------------------------------------------------------------------
// Durable linearizability (§8.3)
// ---------------------------------------------------------------------------
// No call answers from a store a crash at that moment could take back. The
// segment's DRAM version is the "not yet durable" mark: odd from before a
// writer's first store until after its last drain. Publishes and drains:
//   P1  insert: meta VALID -> drain #2 -> version even
//   P2  update a/b: the word, persisted -> even; c: slot and meta -> drain
//       #3 (the op-log record committed it already) -> even
//   P3  remove: VALID cleared, persisted -> even
//   P4  move batch (under S's version): child buckets -> drain #1; moved
//       bits (DRAM and S.moved) -> persist #2 -> even
//   P5  split completion (under S's version): record COMPLETING persisted
//       before any entry names a child; the children's versions are even
//       from then on, their buckets durable (P4); entries -> drain -> S
//       even and DEAD. An entry a reader follows before that drain is
//       redone by recovery from the COMPLETING record.
//   P6  directory: dir_array[id] persisted before a zone fills; a zone's
//       entries, then its zone_filled bit, persisted before the zone's
//       DRAM directory pointer moves.
//   P7  compare_and_swap: P1, P2 or P3 for the write it makes; nothing
//       for a Conflict or a swap from absent to absent.
// The answers:
//   R1  get (any thread): reads only under an even version and keeps the
//       answer (hit or NotFound) only if the version did not move: every
//       store it saw was drained before the version became even (P1-P4);
//       the segment it reached is durably named (P5, P6). An item was
//       drained by the caller before its slot was written.
//   R2  AlreadyExists, NotFound of update/remove, owner_get: OWNED, the
//       owner is the zone's only writer and runs one write at a time, each
//       durable before it returns; SHARED, decided under the version taken
//       by CAS (even, so durable); the hand-over waits out direct writers.
// No change was needed for this; the planted bug pmeh-read-unpersisted
// (get reads under an odd version and keeps a hit whose version moved)
// shows what R1 prevents. ReadOptions::snapshot is get(): every answer is
// already durable.
//   R3  compare_and_swap: a write like the others (a request of op kSwap,
//       run by the owner or, SHARED, by the caller under the segment's
//       version), decided by refused() exactly where insert decides
//       AlreadyExists and update/remove NotFound: after the owner moved the
//       key's window out of a splitting S (or, direct, only in a moved
//       window), in the one place the key can be. The key's slot value (w1,
//       or the item w0 names: drained by its writer's caller before the slot
//       named it) or its absence is compared with the expected state; a
//       mismatch is Conflict and writes nothing (a direct writer releases
//       the version it took), a match writes under the same hold (P7). So
//       the comparison and the write are one step for every other writer,
//       and a Conflict, like AlreadyExists, is decided on durable state
//       (R2).
//
// ---------------------------------------------------------------------------
// Scan (Index::scan, Store::scan's resumable cursor; §4.6)
// ---------------------------------------------------------------------------
//   Cursor: a position in the hash space, the h1 the call starts at; all 64
//   bits, so every value is a position. Directories are by the top bits of
//   h1, so a segment of depth L covers one contiguous range
//   [prefix, prefix + 2^(64-L)). A part is the range of the segment the
//   directory names for x: a splitting S keeps its whole range (its
//   unmoved buckets and its children's moved ones) until completion
//   re-points the entries, and from then on each child is a part. Ranges
//   only subdivide (nothing merges; a deeper directory, a zone fill or an
//   open re-point entries, never a range), and nothing in a cursor is a
//   DRAM address or per-open state: it stays valid across splits,
//   directory growth and reopen.
//   A call (copy_part(), which for_each and salvage use too): x = cursor;
//   copy the part covering x (copy_segment: the pairs whose h1 is >= x when
//   x is inside the range); x = the range's end; repeat until `count` keys
//   were copied or the range ended the hash space (*next = 0). *next = x
//   otherwise. fn runs on each part's copy outside the read section.
//   One part read consistently: as get (R1): on the caller's thread the
//   segment's version is loaded (acquire) before the copy, must be even
//   and not DEAD, and must not have moved at its end (the slot words and
//   metas are loaded with acquire); else the copy starts over from the
//   directory; after 4 tries the zone's owner copies it between two of its
//   requests (OWNED: it is the zone's only writer; SHARED: optimistically
//   until a copy holds, and only the owner splits).
//   Why a key K present from the call with cursor 0 until the call that
//   returned 0 is passed:
//   S1 The calls' intervals [cursor, next) tile the hash space from 0 to
//      2^64, and inside a call the parts copied tile [cursor, next): each
//      starts at the last one's end, and copy_segment checks that the
//      segment it found covers x. So some copy C covered K's h1.
//   S2 Where K is: writers never move a key (every update form rewrites
//      its slot in place), so K sits in one slot of its window in the
//      segment covering h1; while that segment S splits, in S's bucket j
//      until j is moved, and from the move on at the same position of
//      child c(h1)'s bucket j (the batch copies before it sets the moved
//      bit; S itself is never written, so its stale copy stays); after
//      completion in the child, which the directory names.
//   S3 Every store to S's range while it splits (writes into S or a moved
//      child window, move batches, completion) runs under S's odd
//      version; every other write under its own segment's. A copy C that
//      held saw one state between two such writers: the moved bits it
//      read (acquire) are those of that state, and it read bucket j where
//      that state keeps it (S's or the children's), so it found K (S2).
//      A copy that reached S through an entry read before completion
//      re-pointed it finds S odd or DEAD (released after the entries) and
//      starts over at the children. The owner's copy is a state between
//      two of its writes. So C passed K.
//   Parts are disjoint ranges and each key has one position, so a key is
//   passed at most once per scan, resizes or not (a copy that starts over
//   drops what it had copied); a hostile or old cursor inside a range
//   passes that range's keys from the cursor on.
//   Termination: x strictly grows from one part to the next, or the part
//   ends the hash space; a part is copied at most 4 times on the caller's
//   thread, then once by the owner. Damage: a directory entry that names
//   no segment covering x, or a slot that fails the item check
//   (heap/checked.h), ends the call with Corruption naming it.
//   Cost per call: about count / (pairs per segment) + 1 parts, each one
//   directory lookup and a read of nb buckets (a splitting S: up to 2^k
//   child buckets for each moved one); DRAM: one part's pairs at a time.
//
// ---------------------------------------------------------------------------
// Open (§9): O(threads + in-flight splits)
// ---------------------------------------------------------------------------
//   V: root, op logs, the run of directories (contiguous ids, G growing),
//   each zone's directory = the newest with its bit; each split record
//   names a segment of its zone (and, MOVING, its 2^k children). W1:
//   replay committed slot updates, clear them; re-point the range of a
//   COMPLETING split to its children, then clear its record. W2: heap
//   recovery; keep(off) = a live directory, a segment its zone's directory
//   names at its prefix, or an item whose key hashes to its state and that
//   a VALID pointer slot of its window's authoritative buckets names, or a
//   child of a MOVING split. A MOVING split resumes (its SplitState is
//   rebuilt from S's header and moved bits: writes may have landed in
//   moved child buckets); a record whose S is not MOVING is undone
//   (children freed, record cleared). W3: the saved count (else recounted
//   on first use); directories no zone uses are freed. No segment is
//   scanned: open reads one header per split record and one per child.
//
// ---------------------------------------------------------------------------
// check() (§10)
// ---------------------------------------------------------------------------
//   1 root, op logs empty, a split record exactly for each split in flight.
//   2 directories: contiguous, allocated, headers right, G increasing, DRAM
//   mirrors them, none older than the oldest in use. 4 a split in flight:
//   MOVING, k, 2^k allocated children of the right depth and prefix, none
//   beyond, DRAM moved bits = S's; no other segment with a split word or
//   child. 3 every
//   entry of each zone names an allocated segment whose prefix and depth
//   agree, by exactly its aligned run. 5 slots well formed, inline exactly
//   when the pair fits, in range, in the key's window, right fp and tag. 6
//   no key twice. 7 no segment version odd. 8 the count; every allocated
//   block is a directory, a segment, a child of a split in flight or one
//   slot's item (slots: S's unmoved buckets, the children's moved ones).
//
// ---------------------------------------------------------------------------
// The opportunistic switch (§7, zones.cc), off with pmeh.opportunistic
// ---------------------------------------------------------------------------
//   Zone modes OWNED (delegated, lock-free), SHARED (any thread writes the
//   zone's slots itself, taking the segment's version by CAS; splits and
//   directory fills stay with the owner, which takes versions by CAS too),
//   TO_OWNED (transient). A monitor window (>= 1 ms and >= 1024 writes,
//   closed by any owner) switches a zone to SHARED after 2 windows in which
//   its owner was overloaded (its OWNED zones' share >= 1.5/W, or a backlog
//   >= 2) and the zone's share >= max(1/2W, 2/Zn); back after 8 windows
//   below max(1/4W, 1/Zn); at most once per 8 windows. Hand-over: a direct
//   writer announces its zone in its mailbox, then reads the mode (both
//   seq_cst); the owner stores TO_OWNED, then waits for every announcement
//   of the zone to clear, then stores OWNED.
//
// ---------------------------------------------------------------------------
// Write mode (pmeh.write_mode; measurements in pmeh.md §16)
// ---------------------------------------------------------------------------
//   A delegated write is a hand-off: the caller's mailbox and doorbell move
//   to the owner's core and the result moves back. That is cheap only while
//   the owner runs on a hardware thread of its own; when owners and callers
//   fill the hardware threads, every hand-off waits for the scheduler
//   to run the other side (the callers' time goes to sched_yield and the
//   owner's queue, §16), and the writes of all callers run on the W owners'
//   share of the cores. Callers that write their zone's slots themselves
//   (the SHARED regime of §7: per-segment version taken by CAS) pay one CAS
//   instead and use every core.
//   Rule, mode 0 (auto): writes are delegated (the monitor of §7 may still
//   switch hot zones) while W + C < T, C the calling threads seen so far,
//   T the hardware threads: every owner and caller has a hardware thread
//   and one is left for the rest of the machine. From the first write that
//   makes W + C >= T (measured: at T = 2, W = 1, one caller, direct writes
//   win by an order of magnitude on a shared machine, §16), every
//   zone is asked to go SHARED and stays SHARED; the monitor stops. Its
//   owner keeps the structural work: splits, their steps and directory
//   fills (a direct writer that meets one hands the write over, §7.3), so
//   the paper's split and directory design is unchanged. Mode 1 forces
//   delegation, mode 2 starts every zone SHARED. pmeh.opportunistic = false
//   turns the automatic switch off too (mode 0 then always delegates).
//
// ---------------------------------------------------------------------------
// Drains per operation (the minimum the crash argument allows, and met)
// ---------------------------------------------------------------------------
//   The crash model keeps 8-byte stores whole, nothing more (a line may
//   tear between its words), and a call returns only once durable. With
//   inline pairs (key and value <= 8 bytes):
//     insert   2 drains: the slot's two words must be durable before the
//              meta that makes them VALID (else a crash leaves a VALID slot
//              with a torn key or value: #1), and the meta before the
//              answer (#2). No fewer: VALID cannot be in the same 8-byte
//              store as a 16-byte slot.
//     update   1: the value word is one 8-byte store, persisted before the
//              answer (update (a); the meta and key stay).
//     remove   1: the meta with VALID cleared, persisted before the answer.
//   A pointer pair adds the caller's item drain (insert, update (b)) and a
//   drain for the retire entry of the item it drops (update (b), remove):
//   the item must be durable before a slot names it, the retire entry
//   before the slot stops naming the old item (else it leaks). An update
//   that changes the slot's form (c) pays the op log's 3 drains and a
//   persist. A split or directory fill adds its own drains (§8.1) to the
//   write that triggers it, amortised over the keys it makes room for.
//   Nothing else drains: the segment version, the zone mode, the
//   announcement and the counters are DRAM.
//
// ---------------------------------------------------------------------------
// Choices a user should know about (docs/design/pmeh.md §10, §12.23, §13.4)
// ---------------------------------------------------------------------------
//   check() keeps Store::check's contract (a quiescent store): it pauses the
//   owners' idle split steps, which run with no caller operation in flight,
//   but not their request loops, which are idle when no caller is. In a
//   SHARED zone a direct writer whose segment has a split in flight writes
//   the child itself only when its window is moved, else hands its write
//   to the owner instead of stepping the split itself, so splits are only
//   ever moved by owners. W = max(1, cores / 2) owners by default;
//   writes are delegated while owners and callers leave a hardware thread
//   spare, then direct ("Write mode" above).
#pragma once

#include "engine/index.h"

namespace pmhash::engine::pmeh {

extern const EngineInfo kEngineInfo;
// What pmeh is and the options it takes (descriptor.cc).
extern const EngineDescriptor kDescriptor;

// pmeh's options ("pmeh.<option>", descriptor.cc has their docs and
// ranges) as typed values, read once when the index starts.
struct Config {
  unsigned zone_bits = 0;
  unsigned segment_kib = 0;
  unsigned workers = 0;
  unsigned split_bits = 0;
  unsigned split_step = 0;
  bool idle_steps = false;
  bool opportunistic = false;
  unsigned write_mode = 0;
  bool delegate_reads = false;

  static Config from(const Options& options);
};

}  // namespace pmhash::engine::pmeh
