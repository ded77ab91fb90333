// engine/sephash/sephash.h - SepHash: a write-optimised hash index on
// disaggregated memory ("SepHash: a write-optimized hash index on
// disaggregated memory via separate segment structure", Min et al., PVLDB
// 17(5) 2024, with the authors' public code for what the paper's first
// pages leave out). Where this engine departs from them, and what it
// measures, is in docs/design/sephash.md.
//
// The index lives on memory nodes (remote/memnode.h) and is reached only
// with one-sided verbs (remote/client.h); the nodes run no index logic.
// Any number of client threads, in any number of processes on any number
// of hosts, use one index at once. Files: this header (the design),
// layout.h (the constants of every byte below), sephash_index.h (the
// client), sephash_ops.cc (search, append), sephash_merge.cc (merge,
// split), sephash_reclaim.cc (allocation, reuse), sephash_takeover.cc
// (leases, takeovers), sephash_check.cc (scan, check), sephash_swap.cc
// (compare and swap), sephash.cc (create, open, the Index interface).
//
// Sections: 1 structure; 2 bytes on the memory nodes; 3 search; 4 append
// (insert, update, upsert, remove); 5 merge; 6 split; 7 reclamation; 8
// lost replies; 9 dead lock holders; 10 the lease, the timeout and
// membership; 11 durability and what a crash leaves; 12 invariants
// (check); 13 compare and swap (sephash_swap.cc); 14 scan
// (sephash_check.cc).
//
// ---- 1. Structure ----
// A directory of 2^max_depth entries on node 0 names, for the low hash
// bits, a segment. A segment is a CurSeg (1 KiB: a header and 104
// unsorted slots, where writes append) and a MainSeg (a sorted, immutable
// array of slots, which merges rewrite). A segment of local depth d holds
// the keys whose low d hash bits equal its pattern. The 2^initial_depth
// segments of a new index go round the nodes (pattern mod nodes); a
// split's new segment stays on its parent's node, so every segment, its
// MainSegs and its items live on one node. All 2^max_depth directory
// entries are kept current (a split rewrites the entries of its new
// half), so raising the global depth copies nothing; clients cache the
// first 2^global_depth entries and read them again when a segment's
// pattern does not match a key's hash.
//
// Writes append. Every insert, update, upsert and remove writes a new item
// (key, value, the key's hash, a version from one FAA on node 0) and CASes
// a slot of the key's CurSeg to name it; a remove writes a tombstone.
// Nothing is written in place while a slot names it. Among the entries of
// one key the largest version is the key's state; a merge keeps only that
// one (and drops it if it is a tombstone). Versions follow real time: a
// write that completes before another begins has the smaller version.
//
// ---- 2. Bytes on the memory nodes (layout.h has each field's constant) ----
// An address (RAddr, engine/remote_common/remote_index.h) is a node (bits 63..56) and a
// byte offset in that node's region (47..0).
//
// Index root, node 0, remote::kIndexRootOffset (layout.h, IndexRoot):
//   magic "PMHSEPH1" (written last at create) | layout version | nodes |
//   initial depth | max depth | MainSeg slot limit | directory offset |
//   free-table offset | global depth (own 64-byte line, CAS) | version
//   (own 64-byte line, FAA: the next write's version)
// Directory, node 0: 2^max_depth RAddrs of CurSegs; entry i names the
// segment of the keys whose low global-depth hash bits are i.
//
// CurSeg (1024 bytes, 64-byte aligned):
//   +0      +8      +16      +24 ........... +56   +64          +128         +192 ......... +1024
//   | meta | seq   | pattern | intent (4 words) | floor | bitmap sign 0 | bitmap sign 1 | 104 slots |
//   meta:  63 sign | 62 lock | 61..56 local depth | 55..42 MainSeg slots |
//          41..0 MainSeg offset / 64 (same node). One word, so that a
//          merge's sign, depth and MainSeg change at once.
//   seq:   the merge sequence number: +1 by each lock holder before it
//          reads the segment, +1 by a roll-back or a swap's unlock, +2^32
//          by a takeover;
//          never decreases, never repeats with the same meta (section 7).
//   intent: seq of the lock | old meta (unlocked) | new meta | a split's
//          new CurSeg (0 for a merge): what a taker needs to finish a
//          publish (section 9).
//   floor: the swap floor, the version of the last compare_and_swap
//          made under the lock (0: none; section 13).
//   bitmap: 512 bits per sign; bit fp*2 + (fp2 & 1) is set before any
//          slot of that sign names an entry with those fingerprints.
//
// Slot word (CurSeg and MainSeg; one 8-byte CAS word):
//   63      56 55  51  50   49  47  46   45   42 41                  0
//   | fp (8)  | fp2 (5) | tomb | len (3) | sign | dbits (4) | item off / 64 (42) |
//   fp, fp2: hash bits 63..56 and 55..51; tomb: the item removes its key;
//   len: item length in 64-byte units, 1..7 (0: longer, read the item's
//   header); sign: the CurSeg state the entry belongs to (0 in MainSegs);
//   dbits: the four hash bits from 4*floor(depth/4) on, what a split sorts
//   by without reading items; item off: on the segment's node.
//   An entry is live when its item field is not 0 and its sign is the
//   meta's. A free slot has item field 0 and, in bits 63..42, the low 22
//   bits of the seq of the state it is free in (free_slot(seq)); a new
//   CurSeg's slots are 0, the free word of seq 0.
//
// MainSeg (immutable once published; a power of two of 64-byte units):
//   +0                       +576
//   | prefix: 257 x uint16 | slots, sorted by (fp, fp2), sign 0 |
//   prefix[f]: the index of the first slot whose fingerprint is >= f.
//
// Item (64-byte aligned, immutable while a slot names it):
//   +0 version | +8 key length (u32) | +12 value length (u32, 0 for a
//   tombstone) | +16 the key's hash | +24 key | value
//
// Free table (one 64-byte block per node, at the same offset on every
// node): a Treiber stack head: 63..42 tag (+1 on every change), 41..0
// offset / 64 of the top free record. A free record (4 KiB, immutable on
// the stack): next record | entry count | entries (63..42 length in
// 64-byte units, 41..0 offset / 64).
//
// ---- 3. Search (2 round trips for a MainSeg hit, 3 for a CurSeg hit,
// 1 for most misses) ----
//   (1) READ the snapshot (seq, then the header, meta first), the MainSeg
//       slots of the key's fingerprint (their place from the MainSeg's
//       prefix table, cached per segment with the seq it was read at) and
//       the check (meta, seq);
//   (2) if the bitmap of the meta's sign has the key's bit: READ the
//       CurSeg slots, the MainSeg candidates' items and the check;
//   (3) the CurSeg candidates' items and the check.
// Every round trip that reads anything a merge could free ends with the
// check, and its bytes are used only when the check passes (section 7).
// The newest matching entry (largest version) answers; a tombstone is
// NotFound.
//
// ---- 4. Append: insert, update, upsert, remove (2 round trips; 3 when
// the key's bitmap bit is not set yet and the client's copy of its bitmap
// word is out of date) ----
// In this order, each round trip complete (so durable) before the next
// is posted:
//   (1) FAA the version on node 0 and, in parallel, on the segment's node:
//       READ the snapshot; CAS the key's bitmap word from the session's
//       copy to copy | bit (speculative, below); READ the MainSeg slots of
//       the key's fingerprint (unless an upsert); READ a window of 8
//       slots; READ the check. An insert, update or remove then decides
//       whether the key is present from this snapshot, as a search does
//       (its items' round trips are the extra cost of a match); when the
//       newest entry it saw has a version >= its own, it takes a new one
//       (one more FAA), so that it orders after everything it saw. Any
//       pass whose item has not landed yet and whose version is not above
//       the snapshot's swap floor takes a new one too (section 13).
//   (1b) only while the bit is not known set: WRITE the item, CAS the
//       bitmap word from the word last seen to word | bit, READ the check.
//   (2) WRITE the item (unless 1b did), CAS a free slot from the
//       snapshot's free word to the entry, READ the check. Same node, in
//       order: the item is durable before the slot that names it.
// A failed check after a won CAS (a lock was taken since the snapshot)
// makes the append begin again, with a fresh copy of its item in a new
// block (the first may have been merged, dropped and freed). Should both
// entries stand, they name different blocks with the same version and
// bytes; readers take either and merges keep one and free the other.
// Two inserts of one absent key by different clients may both return OK;
// the one with the larger version stands, as if the other had been an
// upsert.
//   The bit before the slot. A slot's entry is never durable without its
// bitmap bit in the state the entry lives in (readers skip a CurSeg whose
// bitmap lacks the key). So the bit is set in a round trip before the
// slot's CAS: in one batch with it, a bitmap CAS that failed (another bit
// of its word set since the word was read) could not stop the slot's CAS,
// and a node that lost power before the bit followed would keep an entry
// that scans list and gets miss.
//   Speculative bit. Each client session keeps, per segment, the seq, the
// sign and that sign's bitmap words as it last saw them (a snapshot, a
// bitmap CAS's old word, its own merge's or split's publish). When that
// word lacks the key's bit, round trip 1 CASes the word of that sign from
// the kept value to value | bit, after the snapshot's READs (one node's
// verbs run in order) and before the check. The bit is set when the
// snapshot's sign is the kept sign, the CAS's old word is the kept value
// and the check passes: no lock was held from the snapshot's READ to the
// check's, so the CAS, between them, set the bit in the bitmap of the
// snapshot's state, durable when round trip 1 completes, before any slot
// CAS; the slot CAS succeeds only in that state (its free word), and a
// sign's bitmap is cleared only by a merge that begins a later state of
// that sign. Otherwise 1b runs, from the snapshot's word, or from the
// CAS's old word when the CAS was made on the snapshot's sign (read later;
// if it has the bit, another write set it, as when 1b's CAS finds it so).
// An insert, update or remove whose MainSeg prefix table was cached at
// another seq than the kept word does not speculate: if the word is
// current the table is not, that pass ends after loading the table, and
// the next pass's snapshot would show the bit.
//   A speculative bit that does not serve is a false positive of the
// filter, never a wrong answer: a bit only makes readers read the slots,
// where entries are matched by key. A CAS never clears a bit (it stores
// expected | bit, and only where it finds expected). A CAS of the wrong
// sign (the segment merged since the session saw it) lands in the bitmap
// of a state that has ended or not begun: before a merge flips to a sign
// it clears that sign's bitmap (one WRITE, in the publish batch), which
// removes a bit CASed before it; a CAS that lands after the clear leaves
// one extra bit in the new state. The snapshot the key's presence is
// decided from is READ before the CAS, so it never counts this pass's bit.
// A failed CAS stores nothing and costs no fence (remote/verbs.cc).
//   The stale sign. A merge starts only when a client has seen every slot
// taken in one checked READ, and a slot goes from free to taken only by a
// CAS on the free word of the appender's snapshot, which differs in every
// state. So no slot is free while a merge runs, and a stale appender's CAS
// finds the word changed and fails; the check after the CAS is the second
// line (the merge takes the lock before it reads a slot).
//   The property sephash.append_retries counts the appends made again.
//
// ---- 5. Merge ----
// The client that finds every slot taken merges the segment. In this
// order (every verb on the segment's node; a batch's verbs run in order):
//   (1) CAS the meta from the meta read to meta | lock;
//   (2) FAA seq by 1, then READ the slots and the MainSeg (one batch: the
//       FAA before anything is read);
//   (2b) only when a slot read names no item (a free word of an earlier
//       state, left by a merge undone, or the state's own when the lock
//       CAS matched a later state with a recurring meta): CAS each such
//       slot to free_slot(seq); one that fails holds an append that landed
//       after the READ, and the merge is undone (section 13);
//   (3) sort the CurSeg's entries and merge them into the MainSeg's,
//       keeping each key's newest entry (items are read only where entries'
//       18 filter bits collide), dropping tombstones;
//   (4) the publish batch: WRITE the new MainSeg; WRITE the intent's last
//       three words, then its seq (an 8-byte WRITE of its own); WRITE zero
//       over the other sign's bitmap; WRITE free_slot(seq) to every slot;
//       WRITE the meta with the sign flipped and the new MainSeg, unlocked;
//   (5) after the reply, and only then, free what it dropped and the
//       MainSeg it replaced into its own free blocks (section 7).
// When the merged MainSeg would exceed the MainSeg slot limit, the lock
// holder splits instead (section 6).
//
// ---- 6. Split ----
// A split of segment O (depth d, pattern p) by hash bit d keeps in O the
// keys with bit d clear and moves those with bit d set to a new segment N
// (pattern p | 1 << d) on O's node. (1) to (3) as the merge's (at depths
// 4k the slots' four hash bits are used up and the split READs every
// kept item's hash); then:
//   (4) one batch on O's node: WRITE both new MainSegs and N's CurSeg
//       (meta at depth d + 1, pattern, slots free in seq 0); WRITE the
//       intent (new segment N), its seq last;
//   (5) WRITE the directory entries of N's half (p | 1 << d, step 2^(d+1))
//       to N, on node 0;
//   (6) CAS the global depth up to d + 1 if it is lower;
//   (7) WRITE zero over O's other-sign bitmap, free_slot(seq) to O's
//       slots, and O's meta (depth d + 1, its new MainSeg, sign flipped,
//       unlocked);
//   (8) free what it dropped, as a merge does.
// Before (4)'s intent seq is durable nothing destructive ran: O's slots
// and MainSeg are intact and nothing names N. After it, the split is only
// ever finished (section 9).
//
// ---- 7. Reclamation: optimistic validation, immediate reuse ----
// A merge or split frees the blocks it drops (superseded versions,
// tombstones and what they shadow, duplicate entries; each block once,
// never one a kept entry names) and the MainSeg it replaces, into its own
// client's free blocks, which that client's next allocations reuse at
// once. A closing client hands what it holds to its nodes' stacks (the
// free table), from which other clients take it, and so does a client
// holding more than it needs (a record of its surplus after a merge). No
// client registry, no epoch: readers validate instead.
//   Check. A reader's snapshot READs seq, then the meta (in that address
// order: seq at +8 is read by its own verb before the header). The check
// at the end of a batch READs the meta, then seq (one 16-byte READ; verbs
// of one node's sub-batch run in order and READs copy ascending, so it
// runs after every read before it in the batch). Data counts only if the
// check's meta equals the snapshot's, unlocked, and its seq too.
//   Claim: then no lock was held at any instant between the snapshot's
// meta READ (t1) and the check's meta READ (t2). A lock taken at tL and
// released at tR with tL <= t1 <= tR shows the snapshot's meta locked.
// With t1 < tL <= t2, either it is still held at t2 (the check's meta is
// locked), or it was released before t2 and its seq FAA (tL < tQ < tR)
// lies between the snapshot's seq READ (before t1) and the check's (after
// t2), so the seqs differ. Seq is what makes the meta's ABA harmless: two
// merges flip the sign back and may reuse the freed MainSeg's block at the
// same offset, giving a meta equal to an old one; seq never repeats.
//   A reader never acts on reused bytes. A block is freed only after the
// publish of a merge (or split) that dropped it, by that merge's lock
// holder; it was named by the state the merge locked, and by none after.
// A reader's data names blocks of the state its snapshot saw (or entries
// appended since, whose items were written before the CAS that names
// them). The merge that drops such a block locks after t1, so with no lock
// held in [t1, t2] it locks after t2, frees later still, and every READ
// the check validates ran before t2. Item headers (lengths) are
// interpreted only after the check, so a reused block with a wrong length
// is a retry, never Corruption. The MainSeg prefix cache is used only
// while the snapshot's seq equals the one it was read at.
//   A merger never frees a block still named. It frees only blocks of
// entries it read under the lock (live CurSeg slots and its MainSeg), not
// named by a kept entry, and the MainSeg its publish replaced; after the
// publish the slots hold free words and the old MainSeg is unreferenced.
// An entry a stale append lands after the merge read the slots is
// overwritten by the publish; its block is its appender's, which appends
// again and never frees it. No other client frees this segment's blocks:
// frees need the segment's lock. A split moves the new half's entries
// into N; they are freed later only by N's lock holder.
//   Merges rewrite the slots. With reuse, a slot word can recur: a block
// freed and taken again for the same key, in the same slot, makes the same
// 64-bit word, so an appender that saw an old entry of the other sign as
// free could CAS over a live entry; and a fixed free word would let an
// appender stalled across two merges land an entry made for an older state
// (depth, hash bits, sign) in a later one. So the publish writes
// free_slot(seq) to every slot before the meta. A slot is free only when
// it holds its snapshot's free word, so a CAS can succeed only in the
// state its appender saw (up to 2^22 merges of one segment while one
// append stalls); if that state ended meanwhile, the check after the CAS
// fails and the append is made again, and the landed entry was either
// read by the merge (kept or dropped like any other) or overwritten by
// its publish.
//
// ---- 8. Lost replies ----
// A batch that fails with IOError may have run (its reply was lost, or
// came after the timeout) or may still run (over tcp, a request the client
// gave up on can reach the node later, even after the client's next
// request). No block may then be owned twice; where the client cannot
// tell, it gives the block up (sephash.bytes_leaked): a leak is
// acceptable, a block owned twice never is.
//   Push of a free record (write the record, CAS the head from h to
// h' = (tag+1, the record)). Every change of a head adds 1 to its tag, so
// one CAS settles it: from h to (tag+1, h's offset), which changes nothing
// but the tag. If it finds h, the push had not run, and now never will
// (the tag has moved on): the entries are the client's again, but the
// record's block is given up, since the late request may still write it.
// If it finds the head one change after h, that change is the only one
// since h: h' means the push ran (no other change makes h': the record's
// block was this client's alone), and it counts as done; anything else
// means another change came first, and the push's CAS fails whenever it
// arrives. If it finds a later head, or gets no answer in three tries,
// the record may be on the stack, where another client may pop it: the
// record and its entries are given up. A head still equal to h never by
// itself means "not pushed": only once the settling CAS has moved the tag.
//   Pop (CAS the head from h to (tag+1, next)). Another client popping h
// writes the same word, so nothing proves that this pop ran: after a
// failed batch the client takes nothing. The record is then still on the
// stack, or it was popped by this CAS and is nobody's (given up, counted).
//   Bump FAA (new space): the client does not use the space; if the FAA
// ran, or runs later, that space is nobody's. An FAA never hands a range
// out twice.
//   Append. The item's block stays the client's only while no batch that
// writes the item or CASes a slot to it has failed; after one, the slot
// CAS may have run or may land later, so the block is given up. When the
// call fails otherwise, the block (written or not, named by no slot) is
// the client's again; when its entry stands, it is the index's. An append
// made again does not free its first block (a merge may hold it).
//   Publish of a merge or split (the batch that ends with the meta). The
// holder reads (meta, seq) back: the meta it published and its lock's seq
// mean the publish ran (in order, the meta last), nobody has locked since
// (a lock raises seq) and no taker finished it for it (a takeover adds
// 2^32), so it frees what it dropped as after a reply. Otherwise it frees
// nothing (what it dropped leaks, as a dead holder's) and never rolls
// back: once its intent may stand, its publish is only ever finished, by
// a taker after a lease; a roll-back could write the old meta over a
// published state and free blocks still named. Before the intent, what a
// failed batch may have done is not destructive: a lock CAS leaves the
// segment locked for a lease (then rolled back by a taker), and a late seq
// FAA raises seq on an unlocked segment (readers look again, appenders
// find no free word and merge); so the holder rolls back: FAA seq by 1,
// then WRITE the old meta. Blocks a merge or split took and had not
// written when a step failed are its own again.
//   The tag has 22 bits: a request delayed across 2^22 changes of one
// stack head could succeed on a recurring head, the assumption the tag
// already makes for pops.
//
// ---- 9. Dead lock holders: intent and lease takeover ----
// A merge or split whose client dies or stalls between its lock CAS and
// its publish, or whose publish failed half way, would leave the segment
// locked for ever. Instead:
//   Intent. The holder writes the intent (merge (4), split (4)) before
// anything destructive. A sub-batch runs in order, and a client killed
// mid-batch, or a node that loses power mid-batch, leaves a prefix of it,
// the last WRITE possibly torn at any 8-byte word (remote/transport.h,
// "Durability"); the intent's seq is therefore written after its other
// words, as a WRITE of its own. So when the intent stands the images it
// names are complete, and when it does not, nothing destructive ran.
//   Lease. A waiter (any loop that finds the segment locked: appends,
// searches, scans, check) that has seen the same locked (meta, seq) for
// the index's lease takes over: it CASes seq s -> s + 2^32 (one taker
// wins, and it now holds the lock), READs the header and, if the intent
// is this lock's (its old meta is the locked meta and its seq equals s in
// the low 32 bits, layout.h intent_of_lock), rolls FORWARD: for a split,
// every directory entry of the new half that still names a segment
// shallower than N is CASed to N (entries N's own splits rewrote since
// stay), the global depth is raised; then the bitmap clear, slots =
// free_slot(seq), the new meta. Otherwise it rolls BACK: seq + 1, then
// the old meta, unlocked. All these writes are the holder's, with the
// same bytes: doing them twice is harmless. The dead holder's dropped
// blocks, the MainSeg it replaced and, when rolled back, the blocks it
// took, leak (frees happen only after a publish, by its holder). Waiters
// give Busy only after lease + the remote timeout.
//   The taker's free words are right. A takeover adds 2^32, so seq's low
// 22 bits, the free word's, stay the first holder's: the taker writes the
// words the holder wrote or would have. Readers compare the whole seq:
// every snapshot taken before the takeover fails its check. A stale
// appender's snapshot is of a state before the lock, so its CAS expects
// another word and fails; appenders of the new state read seq s + 2^32
// and look for free_slot(s), which the slots hold. A takeover CAS that
// lands just after the holder published (only if the fencing assumption
// below fails) raises seq on an unlocked segment: readers and appenders
// of that state look again, nothing else.
//   No (meta, seq) of a lock recurs. A publish changes the meta (the sign
// flips); a roll-back (a taker's, or the holder's own) adds 1 to seq
// before it unlocks. So a waiter that saw a pair for a lease saw one lock,
// and the intent check cannot take an older merge's intent for this
// lock's.
//   Fencing a holder that was only slow. A holder (first or taker) begins
// no batch that writes to the segment, the directory or the global depth
// later than lease/2 after it sent its lock (or takeover) CAS: past that
// it stops without writing, leaves the lock, and its call returns Busy; a
// waiter, which takes over only a whole lease after it first saw the
// lock, finishes or undoes its work.
//   What a taker finds after a holder's death at each step: merge or
// split (1)-(3): locked, no intent of this lock: back. Merge (4) or split
// (4) before the intent's seq is durable: images written that nothing
// names: back (they leak). After it: forward, whatever of split (5)-(7)
// or merge (4) had landed (each written again with the same bytes, the
// directory by CAS).
//
// ---- 10. The lease, the timeout and membership ----
// The lease is chosen at create (sephash.lock_lease_ms, default
// 2000 ms) and kept in the membership stamp on every node
// (engine/remote_common/remote_index.h); every open uses the stored lease and ignores
// the option, so all clients of an index agree on it. The remote timeout
// is the one a client gives, refused above lease/2 (create and open say
// both numbers), or lease/2 when it gives 0: a client never waits for,
// and then acts on, a batch that took longer than lease/2. ASSUMED, as in
// any lease scheme: a batch that began in time executes within lease/2 of
// its post (a process stopped between its clock check and its stores, or
// a tcp request that the client gave up on but that the network delivers
// later, could write after a taker and overwrite a later state); the
// clients' clocks run at the same rate (steady clocks; only differences
// are used); a lease well above a merge's worst time.
//   Membership and generation (engine/remote_common/remote_index.h). The create records
// which nodes make up the index, in which order, under a random index id
// and a generation, in every node's membership record (outside this
// index's root); every attach verifies the nodes against node 0's list
// before it reads the root, and refuses a wrong, swapped, duplicate,
// missing, extra or fresh node with one line naming its position. A
// create over nodes that held an index (force) claims them for the next
// generation by CAS, waits out the old lease, then formats: the free
// tables, the segments, the directory and the root, the magic last, then
// it commits the membership. Every batch goes through the session's
// fence, so a client of the old generation fails its next call and writes
// nothing into the new index. Two creates at once on fresh nodes: one CAS
// on node 0's stamp wins, the other is refused (AlreadyExists).
//
// ---- 11. Durability and what a crash leaves ----
// Every round trip's writes are durable when it completes (remote layer),
// and a call returns after its last round trip: writes are strict, and no
// answer depends on a write a crash could lose. A memory node that
// restarts from its pool file serves every completed write. A node that
// dies mid-call fails the call with IOError (whether its last round trip
// ran is unknown, as with a lost RDMA completion); calls made after the
// node is back succeed.
//   A client that crashes leaves: the blocks it held (its free blocks, the
// rest of its chunks, and an item whose append had not finished: an item
// no slot names, never read), which leak; an append whose slot CAS landed,
// which stands (its bit was durable before it); and, if it held a lock, a
// locked segment, which the first waiter to see it for a lease finishes
// or undoes (section 9). Nothing else waits for it. There is no recovery
// pass at open: every reader validates, and every waiter takes over.
//
// ---- 12. Invariants (check() verifies them, after waiting out or taking
// over every lock) ----
//   - every segment's local depth is at most the global depth;
//   - every directory entry names a segment whose pattern its index has in
//     the segment's depth bits; entries beyond 2^global_depth repeat the
//     ones below;
//   - every MainSeg is sorted by fingerprint;
//   - every live entry's fingerprints and hash bits are its item's, its
//     item's stored hash is its key's, its key belongs to the segment, and
//     a tombstone has no value;
//   - (not checked, argued above) a live entry's bitmap bit is set in its
//     sign's bitmap; no free block is named by a live entry.
//
// ---- 13. Compare and swap (a search, then 4 round trips under the
// segment's lock; 5 when the key's bitmap bit is not set yet) ----
// An append decides presence from a snapshot and lands later (two inserts
// of an absent key may both succeed, section 4). A swap instead holds the
// segment's lock, the merge lock of section 5, from its comparison to its
// write. In this order, each round trip complete (so durable) before the
// next is posted:
//   (1) a search (section 3). A key not in the expected state is a
//       Conflict as of that search's validated snapshot, and a key absent
//       and to stay absent is OK: nothing is locked or written;
//   (2) CAS the meta from the meta read to meta | lock; then one batch:
//       FAA the version on node 0; on the segment's node FAA seq by 1
//       (every older snapshot now fails its check), READ the header, the
//       slots and the MainSeg's prefix table;
//   (3) the fence: CAS every slot holding free_slot(s) (s: the seq before
//       the lock, the state's free word) to free_slot(s + 2), the free
//       word of the state the unlock begins; READ the MainSeg slots of the
//       key's fingerprint;
//   (4) READ the items of the key's candidates and compare the newest
//       entry with the expected state (a tombstone is absence). Not as
//       expected, or absent and to stay absent: unlock (FAA seq by 1, then
//       WRITE the meta, unlocked) and return Conflict (or OK). Every slot
//       taken: unlock, merge, start over. An entry newer than the swap's
//       version (it landed before the fence with a later FAA): one more
//       FAA;
//   (5) WRITE the item (a tombstone when the key is to be absent), WRITE
//       the swap floor (CurSeg +56) = the swap's version, CAS the key's
//       bitmap bit into the meta's sign (again, from the word found, while
//       appenders' speculative CASes change the word; skipped when the
//       header showed the bit);
//   (6) one batch: WRITE the entry into a fenced slot, FAA seq by 1,
//       WRITE the meta, unlocked.
// One node, in order: the item, the floor and the bit are durable before
// the slot, the slot before the unlock.
//   Why the comparison and the write are one step. From the fence on, no
// slot changes until the unlock: an append can CAS a slot only from its
// snapshot's free word, and every slot holding this state's now holds the
// next state's (an append that landed first made the fence's CAS fail,
// and its entry is compared with like the others); appends whose snapshot
// saw the lock fail their check; merges and splits need the lock; the
// MainSeg is immutable; nothing is freed while the lock is held (frees
// need it), so the items need no check. (4) thus sees every entry of the
// key, none lands between (4) and (6), and the swap's version is above
// every one it compared with. The swap takes effect at (4).
//   The swap floor. A write whose version is below the swap's could still
// land after the unlock: an append whose version FAA ran before the
// swap's and whose snapshot READ after the unlock (the two run on
// different nodes), or an append begun again with the version of an
// earlier pass. Its entry would be shadowed by the swap's, as if ordered
// before a swap that never compared with it. So an append whose item has
// not landed yet and whose version is not above the floor its snapshot
// shows takes a new version first (an FAA after the snapshot, so after the
// unlock, so after the swap's FAA), and rewrites its item. A split copies
// the floor into the new CurSeg (the keys it moves keep their floor). An
// append whose item did land (its CAS won and its check failed) keeps its
// version: the lock that failed its check read its entry, which thus
// counts, and its second entry is the duplicate of section 4. That lock
// read it, or its entry stays in the slots: no append lands in a locked
// state after its holder's READ unseen. A swap fences every free slot; a
// merge, whose lock comes after a READ that saw every slot taken, fences
// the slots that name no item (merge (2b)); a lock undone (seq + 1, the
// meta) leaves the slots as they were; a seq raised on an unlocked
// segment (a late FAA) leaves the entry in the slots of a state that looks
// full, whose merge reads it.
//   Dead or slow holders. A swap writes no intent. A taker rolls it back
// (seq + 1, the old meta), which is the swap's own unlock: a takeover keeps
// seq's low bits, so the fenced slots hold the taken-over state's free
// word; slots not yet fenced hold an older one and look taken (the next
// appender merges); an entry (6) wrote stands, its item, floor and bit
// durable before it. The swap writes nothing past lease/2 after its lock
// CAS. A failure before (6) unlocks (within lease/2); a failed (6) is
// never sent again (the segment may have been locked by another since).
// Its item's block follows the append's rules (section 8).
//   Durability. The swap returns after (6) completes: durable on return. A
// crash before leaves the key's old state, or the swap's entry (with its
// item, floor and bit): either state, which readers and check() take as
// any entry. A Conflict depends on the words it compared with as a get's
// answer does (remote/transport.h, "Visibility comes before durability");
// an OK that wrote depends on none: its entry is newer than all of them.
//
// ---- 14. Scan (Index::scan, sephash_check.cc; per segment visited 3
// round trips: the unlocked snapshot, the header, slots and MainSeg with
// the check, the items with the check; 4 when an item is longer than its
// slot says; +2 when the client's directory copy is stale) ----
// Cursor: a position in the hash space, position = reverse_bits(hash)
// (engine/hash.h), the hash being the one whose low bits pick the
// segment: all 64 bits, no other field. Segment (d, p) holds exactly the
// keys whose positions have reverse_bits(p) in their top d bits: one
// contiguous range [reverse_bits(p), reverse_bits(p) + 2^(64-d)); its
// split by bit d gives the two halves of that range (O keeps the lower,
// N takes the upper); a merge moves entries between the two levels of
// one segment, within its range. A call starts at the segment covering
// position `cursor` (through the directory with the low bits of
// reverse_bits(cursor), the segment's meta and pattern deciding, as for
// a key of that hash), reads it whole and passes its keys at positions
// >= cursor in position order, then the segments that follow in position
// order, each from the end of the previous one's range, until `count`
// keys were passed or a range ends at 2^64. A part is thus a position
// range of one segment: the call stops inside a segment once it has
// `count` keys (never between two keys of one position), and *next is the
// position of the first key it left there, or the end of the last range
// read (0: the scan is over). So a small count costs a whole segment read
// per call (up to 104 + main_max_slots entries and their items; the next
// call reads it again from its cursor on).
// Every value is a cursor, decoded with nothing per-open: valid across
// merges, splits, clients and a reopen.
//   Reading a segment: as for_each does, the snapshot (waiting out a
// lock, taking a dead holder's over after the lease), then one batch
// READing the header, the CurSeg slots and the MainSeg, ended by the
// check, then the items of every live entry of BOTH levels, ended by the
// check again; any failed check reads the segment again. The keys passed
// are those whose newest entry (largest version) of the view is not a
// tombstone, with their hash in (depth, pattern) of the snapshot's meta.
//   Why a key K present throughout is passed. The calls' ranges tile
// the position space: call k covers [cursor_k, next_k), next_k being the
// next call's cursor; a part ends after the position it started from (it
// passes a key and ends above it, or ends at its range's end), so a scan
// that ends has covered [0, 2^64) with disjoint ranges, and K's position
// falls in exactly one part visited, every key of whose segment view at
// a position in the part was passed. That segment's
// view passed its checks: no lock was held between the snapshot and the
// last check ("Reclamation", the claim), so no merge or split published
// or freed anything meanwhile, and the view is one state of the segment
// (both levels of it, read while neither could change but by appends)
// plus appends that landed during the READ. K is in that state: K's
// entries leave a state only by a merge (moved into the MainSeg, or
// dropped when superseded) or a split (moved to N), each under the lock,
// so K's newest entry of the state was in the slots or the MainSeg the
// view READ; an append of K (an update) adds a newer entry, never a
// tombstone while K stays present, so the newest entry the view holds is
// a value of K. A merge running during the call makes the snapshot wait
// or the check fail: the segment is read again, whole, after its
// publish, so an entry being merged is read in the CurSeg before or in
// the MainSeg after, never missed between the levels. A split: before its
// publish O is locked (readers wait) and holds every key of (d, p); N is
// complete when its intent is durable, before the directory names it,
// and holds the keys of its half that O's locked state held; after the
// publish O holds (d + 1, p)'s keys and N the rest. Either way the view
// of the segment covering K's position holds K. Splits and merges
// between calls change nothing of this: the next call starts at a
// position, and whatever segment covers it now is read. Without writes
// each key's newest entry is in one segment, whose range is visited once
// in disjoint parts: passed exactly once. Another client's scan during a split sees the same
// memory nodes; nothing of the argument is client state.
//   Termination and cost: each part ends strictly after the position it
// started from, so a call visits at most 2^max_depth segments. A call's
// waits are a reader's (Busy after a lease and the timeout on one lock;
// a stale directory is read again until the same deadline). A depth
// beyond max_depth, or a pattern beyond it, is Corruption, as is an item
// with a bad length under a passing check. DRAM: the segments one call
// visits (keys and values copied; fn runs after the last READ, with no
// session held).
#pragma once

#include <cstdint>
#include <functional>

#include "engine/index.h"

namespace pmhash::engine::sephash {

extern const EngineInfo kEngineInfo;
// What sephash is and the options it takes (descriptor.cc).
extern const EngineDescriptor kDescriptor;

// sephash's options ("sephash.<option>", descriptor.cc has their docs and
// ranges) as typed values, read once when the index starts.
struct Config {
  unsigned lock_lease_ms = 0;
  unsigned initial_depth = 0;
  unsigned main_max_slots = 0;
  unsigned max_depth = 0;

  static Config from(const Options& options);
};

// The steps of a merge, split or compare_and_swap after its lock CAS at
// which a test's lock hook runs (sephash_testing.h).
enum class LockStep {
  kLocked,        // the lock taken; seq not raised yet
  kRead,          // seq raised, slots and MainSeg read; nothing written
  kMergePublish,  // merge: before its publish batch
  kMergeIntent,   // merge: the new MainSeg and the intent written
  kMergeSlots,    // merge: also the bitmap and the slots; not the meta
  kSplitFirst,    // split: before its first batch
  kSplitIntent,   // split: the MainSegs, the new CurSeg and the intent written
  kSplitDirectory,  // split: also the new half's directory entries
  kSplitDepth,    // split: also the global depth
  kSplitSlots,    // split: also the bitmap and the slots; not the meta
  kSwapLocked,    // compare_and_swap: the lock taken; seq not raised yet
  kSwapFenced,    // swap: seq raised, the free slots fenced; nothing else written
  kSwapItem,      // swap: also the item, the swap floor and the bit; not the slot
};
// What a client does with a block of a memory node, as a test's block hook
// sees it (sephash_testing.h).
enum class BlockUse {
  kTaken,  // it writes the block from now on: an item, a MainSeg, a CurSeg,
           // or a free record it pushes (the record stays taken on the stack)
  kFreed,  // it may be written by whoever takes it next: a merge or split
           // freed it, an allocation did not use it after all, or a
           // client popped the record it was
};

}  // namespace pmhash::engine::sephash
