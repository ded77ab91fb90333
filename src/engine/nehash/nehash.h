// engine/nehash/nehash.h - NEHASH: extendible hashing with a lazily expanded
// three-level directory in DRAM and bucket groups in persistent memory.
//
// Follows "NEHASH: high-concurrency extendible hashing for non-volatile
// memory" (Cai et al., FITEE 2023): the directory of §3, the bucket groups
// of §4, the recovery table and rebuild of §5. The paper is silent on crash
// consistency, update, delete, variable-length items and a full conflict
// bucket; those parts are marked DEPARTURE (we change the paper) or GAP (we
// add what it leaves out). docs/design/nehash.md is the full design; this is
// its condensed form (§ numbers below are that document's).
//
// h1, h2: the halves of the key's XXH3-128. b: bucket-directory bits (option
// nehash.bucket_bits, 1..10). G0: initial main-directory bits
// (nehash.initial_dir_bits, 0..16). L: a group's local depth (D_Length).
// kMaxDepth = 60 - b. t: the calling thread's heap slot.
//
// ---------------------------------------------------------------------------
// On-media layout (layout.h has every field)
// ---------------------------------------------------------------------------
//
//   Layout version 2 (pool-header parameter and root; magics end in 2): a
//   key may sit in any slot of its home bucket. A layout-1 pool (pool-header
//   version 1 or root magic "NEHASHR1": each key in its home slot or the
//   conflict bucket) is refused at open by name (InvalidArgument naming both
//   versions), before anything of it is read or written.
//
//   pool root (8576 B)
//   +---------------------------------------------------------------------+
//   | magic "NEHASHR2", version 2, b, G0 (checked against the pool header)|
//   | rec_segments[32]   offsets of the Rec_BG_TABLE segments             |
//   | item_count, count_valid   saved by a clean close                    |
//   | op_log[256]        one 32-byte OpLog per heap thread slot           |
//   +---------------------------------------------------------------------+
//
//   Rec_BG_TABLE (paper §5): segment s holds 512 << s one-word entries; it
//   grows by a segment and never moves an entry. Entry id = BG_Id:
//     bits 0..5 D_Length | bits 6..47 BG_Address (64-aligned) | 0    (0: unused)
//   DEPARTURE: one word per group (a split's commit is two 8-byte stores);
//   BG_Id is the index; the prefix lives in the group header.
//
//   bucket group (one heap block; paper §4, Fig. 2)
//   +--------------+-----------------------------+------------+-----+----------+
//   | header 64 B  | bucket directory:           | bucket 0   | ... | conflict |
//   | magic,prefix,| (2^b + 1) x 16 slot metas   | 16 slots   |     | bucket   |
//   | bg_id, create| (32 B each, padded to 64 B) | x 16 B     |     | (2^b)    |
//   | depth, b,    |                             |            |     |          |
//   | overflow     |                             |            |     |          |
//   +--------------+-----------------------------+------------+-----+----------+
//   A group covers every h1 whose top L bits equal its prefix's. Its prefix
//   never changes: a split keeps the lower half in place.
//
//   slot meta (16 bits): VALID | INLINE | key_len:4 | value_len:4 | fp:6 (h2 & 63)
//   slot (16 B): INLINE (key and value <= 8 B): w0 = key, w1 = value, padded
//                otherwise: w0 = pptr(item), w1 = h1 (items: engine/item.h,
//                state = h1). INLINE exactly when the pair fits.
//   DEPARTURE: the bucket directory holds per-slot metas, not bucket
//   pointers (the buckets sit at fixed offsets), so a slot is published by
//   one 8-byte store of its meta word.
//   Overflow block (GAP, only at kMaxDepth): {magic, next}, 16 metas, one
//   bucket; chained from the group header, never unlinked.
//
// ---------------------------------------------------------------------------
// DRAM directory (paper §3; directory.h)
// ---------------------------------------------------------------------------
//   main node: 2^G HL_E {point, time_value}; one-time node: 2 HL_E under a
//   main entry; two-time node: 2 (Rule 2) or 4 (Rule 1) HL {point} under a
//   one-time entry. point: 0 empty | GroupRef | NODE bit + child | LOCK bit
//   (a group being created). Entry i of a node has HL_value
//   (hl_base << bits) | i = the top `depth` bits of the h1s routed there. A
//   group is named by a run of 2^(node depth - L) entries of one node.
//
//   Bit budget (Fig. 3): directory bits from the top (at most kMaxDepth);
//   home bucket = (h1 >> 4) mod 2^b; home slot = h1 mod 16. Neither depends
//   on the depth, so a split never changes them.
//
//   Lookup: at most three acquire loads of entry words, lock-free, inside an
//   RCU read-side section. A split re-points entries by single stores; a new
//   node is complete before the release store that publishes it. Every
//   operation checks at its end that its group still covers h1 (the group's
//   depth only grows, and only under SPLITTING) and otherwise starts over.
//
//   Split of group g (depth L) named from node N (§2.5):
//     A  L < N.depth: re-point the upper half of g's run to g1
//     B  L == N.depth, N main: hang a one-time node [g, g1] under the entry
//     C  L == N.depth, N one-time: hang a two-time node of 2^(1+Spread_rate)
//        entries ([g, g1] or [g, g, g1, g1]), clamped to kMaxDepth
//     D  L == N.depth, N two-time: full main expansion, then retry
//     L == kMaxDepth: an overflow block instead
//   Expansion rate (Steps 1-5): t0_i when a key is first stored under main
//   entry i; dt_i = now - t0_i when i gets a one-time node; t1_ij for one-time
//   entry j likewise (a half the split fills starts at the split); dt_ij when
//   j gets a two-time node; Spread_rate = dt_i < dt_ij ? 1 : 0 (equation (1),
//   implemented literally: docs/design/nehash.md §8.7). Times are DRAM only,
//   behind a test clock (testing::set_clock).
//   Full expansion (under dir_mutex_ exclusive; gets and writes go on): a main
//   node as deep as the deepest leaf; each leaf of depth D fills its
//   2^(G' - D) entries; the old nodes are freed after a grace period. Nothing
//   in the pool changes.
//   DRAM bound (DEPARTURE; the design document notes the problem, §8.11, and
//   leaves it open): a full expansion never builds a main node of more than
//   2^24 entries (Directory::kMaxMainBits). XXH3 is unkeyed, so keys crafted
//   to share long h1 prefixes could otherwise grow the main node without
//   end; and kMaxDepth itself needs a main node of 2^(kMaxDepth - 3)
//   entries, so without the bound an overflow block could never be reached.
//   A group whose split would need a larger main node gets an overflow
//   block instead, and a group that has overflow blocks is never split
//   again (its keys could not all move to the new group's buckets): it gets
//   another block. Open accepts groups up to three levels deeper than the
//   bound (the deepest a two-time node reaches).
//   The entry LOCK bit is used only by group creation (the design also
//   sets it while a split rewrites entries; the split already owns its
//   group's entries through SPLITTING, and readers ignore LOCK anyway).
//
// ---------------------------------------------------------------------------
// Operations and persist order (§3, §4.1)
// ---------------------------------------------------------------------------
//   A key lives in any slot of its home bucket (DEPARTURE: the paper gives
//   each key one slot), in the group's conflict bucket only if its home
//   bucket was full when it was inserted, or (no split possible) in an
//   overflow block. An insert takes the first free slot of the home bucket
//   from the home slot on (wrapping at 16), so a key is mostly at its home
//   slot; a key stays where it was put (a slot freed later in its bucket
//   does not draw it back from the conflict bucket).
//   Locks (writers only; DRAM lock words, directory.h):
//     home bucket     all 16 bits of the bucket's word, set by one CAS once
//                     none is set; unlock adds kVersionOne - 0xFFFF (clears
//                     them and bumps the version). A slot of the bucket may
//                     hold any of its keys, so a writer owns the bucket, not
//                     a slot (per-slot locks would let a key's writer and
//                     the home writer of the slot it sits in deadlock).
//     conflict slot,  bit s of the conflict bucket's or the overflow
//     overflow slot   block's word; unlock adds kVersionOne - bit.
//   Every writer of a key takes its home bucket first, so one key's writers
//   are serialised; then a conflict or overflow slot's lock if it needs one
//   (the conflict bucket and the overflow blocks are nobody's home bucket:
//   no cycle). After the home bucket a writer reads the group's SPLITTING
//   state (seq_cst, Dekker with the splitter), backs off if set, and waits
//   outside its read section.
//   Quiescent unlock: a lock is released only once every store made under
//   it (slot words and metas) is durable.
//
//   get        lock-free: one seqlock over the home bucket's word (wait
//              while any of its 16 bits is set; retry if the word moved):
//              the bucket's 16 fps (one 32-byte meta entry), home slot
//              first, reading only the slots whose fp matches; then, if
//              the count says so, the conflict bucket's matching slots and
//              overflow, each under its own slot's seqlock.
//              Writers store words and metas with release after locking,
//              readers load them with acquire (no standalone fences: TSan
//              cannot check those).
//   insert     item (if not inline), flush | slot words, flush -> drain #1 |
//              meta VALID -> drain #2. Target: the first free slot of the
//              home bucket from the home slot on, else a free conflict
//              slot, else a free overflow slot; none -> unlock, split, retry.
//   update a   inline, same value length: store w1, persist.
//          b   pointer to pointer: new item; retire old -> drain #1 | w0,
//              persist.
//          c   any change of form or length (DEPARTURE): through op_log[t]:
//              log {meta, w0, w1} -> drain #1 | log.op = kSlotUpdate(slot),
//              persist (commit) | slot words and meta -> drain #3 | log.op =
//              0, persist.
//   remove     pointer: retire item -> drain #1 | clear VALID, persist.
//   compare_and_swap (Mode::kSwap of the write path): decided where insert
//              decides AlreadyExists and update NotFound, under the key's
//              home bucket (and a conflict or overflow slot's own lock),
//              past the SPLITTING check, in the group that covers the key:
//              the slot's value (w1, or the item w0 names) is compared byte
//              for byte with the expected one, or the key's absence with an
//              expected absence. A mismatch answers Conflict and writes
//              nothing; a match writes as insert (absent -> value), update
//              a/b/c (value -> value) or remove (value -> absent) does,
//              with the same persist order. Absent -> absent writes
//              nothing. The comparison and the write are one step for every
//              other writer of the key, which all hold the home bucket, and
//              for a split, which waits for the bucket's lock before it
//              moves or cleans the slot (step 0, step 10).
//   group creation in an empty main entry: CAS the entry to LOCK; id; block
//              zeroed (intent 1), header -> drain #1 | table[id] = off | L,
//              persist | publish the entry.
//   table growth: segment zeroed (intent 1), header -> drain | rec_segments[s],
//              persist.
//   for_each   walks the hash space in prefix order, one group range at a
//              time, taking only keys in [x, end of the range): each key
//              present throughout is reported once ("Scan" below; scan is
//              for_each cut into calls).
//   Blocks use the heap's intent slots: items 0; groups, segments, overflow
//   blocks 1. Nothing is allocated unlogged: no background sweep.
//
// ---------------------------------------------------------------------------
// Durable linearizability (docs/design/nehash.md §4.5)
// ---------------------------------------------------------------------------
// Every write is durable when it returns; no call answers from a store a
// crash could still take back. The publishes and the drains that make them
// durable, all under the slot's lock (the key's home bucket; for a conflict
// or overflow slot also that slot's bit, the home bucket held throughout):
//   P1  insert: meta VALID -> drain #2 -> unlock
//   P2  update a/b: w1 or w0 -> persist -> unlock; c: slot and meta ->
//       drain #3 (the op-log record already commits it) -> unlock
//   P3  remove: meta VALID cleared -> persist -> unlock
//   P4  split: g1 and both table words durable (drain #2) before the DRAM
//       directory names g1 (step 9); g's stale slots cleared under their
//       locks, drained (#3) before unlock. Recovery of a committed split
//       clears them again.
//   P5  group creation: table word persisted before the entry is published.
//   P6  compare_and_swap: P1, P2 or P3 for the write it makes; nothing for
//       a Conflict or a swap from absent to absent.
// So a lock is released only once every store made under it is durable
// (quiescent unlock), and the lock word (DRAM) is the "not yet durable"
// mark: while a bucket's bits are set, its metas and words may hold a store
// a crash can lose. The answers:
//   R1  get hit in the home bucket: the home word is loaded (acquire) with
//       no bit set before the scan and again after it; the answer is kept
//       only if it did not move, so the copy is one that was durable before
//       its writer unlocked (P1-P3). A hit in a conflict or overflow slot is
//       read under that slot's seqlock (wait while its bit is set, retry if
//       the version moved) and kept under the home word's check too. An
//       item a pointer slot names was drained before the slot (insert
//       drain #1).
//   R2  get NotFound: the same two loads of the home word: unchanged, no
//       writer of the key (each holds the home bucket, P1-P3) nor a split
//       cleaning the bucket (P4) ran meanwhile, so the metas the scan
//       skipped were durable. Else the scan runs again. (Writers of the
//       bucket's other keys bump the word too: a spurious retry, never a
//       wrong answer.)
//   R3  insert AlreadyExists, update/remove NotFound: decided under the
//       key's home bucket lock, after every earlier writer of the key
//       unlocked, so on durable slots; a conflict or overflow slot is read
//       under its seqlock (R1).
//   R3' compare_and_swap's Conflict (and the comparison of a swap that
//       writes) is decided as R3: under the home bucket lock, on slots
//       every earlier writer of the key made durable before it unlocked
//       (P1-P3, P6); the value of a pointer slot is its item's, drained
//       before the slot named it. A swap that finds no group (the key's
//       entry is empty) answers from the directory, which names only
//       durable groups (P5), as update's NotFound does.
//   R4  a group reached through the directory is durable (P4, P5); a
//       reader of a group a split left keeps an answer only if the group
//       still covers the key.
// ReadOptions::snapshot is get(): the latest durable state (every answer
// is durable, R1-R4). Costs: the home word is loaded twice (a DRAM line the
// get reads anyway).
//
// Conflict counts (GAP; DRAM only). Bits 16..20 of a home bucket's lock
// word count the VALID slots of the group's conflict bucket whose key has
// this home bucket (directory.h). get() scans the conflict bucket and the
// overflow chain only if that count is not 0 or the group has overflow
// blocks, so a miss on an uncontended bucket reads the lock word, the home
// meta and nothing else of the pool.
//   C1  an insert into a conflict slot adds one to its home word while it
//       holds the key's home bucket, before it stores the slot; a remove of
//       a conflict slot subtracts one, also under the home bucket, after it
//       clears VALID. Overflow slots are not counted. (A key goes to the
//       conflict bucket only when its bucket is full, but the count rules
//       do not depend on why.)
//   C2  a split counts its new group's conflict bucket before the directory
//       names the group; its step 10 subtracts one for each conflict slot
//       it clears, after the clear.
//   C3  open counts every group's conflict bucket after the replays and
//       the cleaning of W1, before serving. A count is never lower than
//       the number of VALID conflict slots whose key has its bucket as
//       home (C1-C3 add before a store and subtract after a clear).
//   A writer's lookup under the key's home bucket (insert, update, remove)
//   skips the conflict bucket on a count of 0 as well: only a writer
//   holding that bucket could have put the key there.
//   R2' a NotFound that skipped the conflict bucket: the home word, count
//       included, was the same at the start and at the end of the scan
//       (R2), so no writer of the key ran in between, and any conflict slot
//       of the key durable before the scan would have been counted (C1-C3).
//       A split that lowered the count moved the key out of the group, and
//       the covering check that follows sends the get to the new group.
//
// Cache lines of a get (8-byte pair, b = 6; measured in
// docs/results/nehash/): the directory entry (1 to 3 node lines, the main
// node mostly cached), the GroupRef, then three independent lines fetched
// together: the home lock word, the bucket's metas and the home slot's line
// (the two pool lines are prefetched before the lock word is loaded). A
// key off its home slot may sit in another of the bucket's four lines; a
// fingerprint that matches by chance (1 in 64 per VALID slot) reads one
// more. A miss with a zero conflict count stops there; a key in the
// conflict bucket adds the conflict metas and its slot. One hash per call
// (the store's Key).
//
// Drains per write of an 8-byte pair, and why none can go (a slot is 16
// bytes and its meta lies in another line; the crash model keeps only
// 8-byte stores whole and orders nothing within a line):
//   insert   2: the words before the VALID meta (else a crash publishes a
//            torn pair), the meta before the answer (durability).
//   update   1: w1 is one 8-byte store, persisted before the answer.
//   remove   1: VALID cleared, persisted before the answer.
// A split adds its own (three drains per split, amortised over the keys
// that fill a group).
//
// ---------------------------------------------------------------------------
// Split (§4.2; DEPARTURE: in place, the paper gives no procedure)
// ---------------------------------------------------------------------------
//   g keeps the lower half (prefix P); g1 gets P | 1 << (63 - d). A key of
//   bucket k keeps its (k, slot) in g1 (the buckets are copied first); a
//   conflict key goes to the first free slot of its home bucket in g1 from
//   its home slot on, else to g1's conflict bucket (at most 16 come from
//   g's: they fit). Pointer slots are copied as they are (w1 gives h1;
//   inline keys are rehashed): no item is read.
//    0 dir_mutex_ shared; SPLITTING on g; wait until g has no slot lock
//    1 choose the directory action (D: expand, return; kMaxDepth: overflow)
//    2 id1   3 g1 zeroed (intent 1), header, upper half, flush
//    4 op_log[t].op = kSplit(d, g); flush        5 drain #1
//    6 table[id1] = g1 | d+1; table[g] = g | d+1; flush   7 drain #2 (commit)
//    8 clear intent 1   9 DRAM: g1's GroupRef, g.depth = d+1, directory action
//   10 clear VALID of g's slots outside its new range, under the lock of
//      each bucket concerned (all 16 bits, one CAS once none is set, as a
//      writer takes its home bucket)   11 drain #3
//   12 op_log[t].op = 0 (no drain)   13 clear SPLITTING, wake writers
//   Recovery of a kSplit(g, d) record, with E1 = "a live group has prefix
//   P | 1 << (63 - d) and creation depth d+1" and B = "g's entry says > d":
//     !E1 !B  not committed: nothing (heap recovery frees g1)
//      E1 !B  committed, bump lost: g's entry = d+1; clean g's stale slots
//     !E1  B  bump reached media alone: g's entry back to d (g still has both
//             halves); g1 freed
//      E1  B  committed: clean g's stale slots
//   g's slots do not change before step 10, and g1 is durable before either
//   table word can be, so each key ends in exactly one covering group. A
//   record outliving its split replays E1 B, which is idempotent (depths only
//   grow, groups are never freed; E1 is found by creation depth, so it holds
//   even after g1 split again). DEPARTURE from the design document: E1 is
//   keyed by g1's creation depth, not its current depth, for that reason.
//
// ---------------------------------------------------------------------------
// Scan (Index::scan, Store::scan's resumable cursor)
// ---------------------------------------------------------------------------
//   Cursor: a position in the hash space, the h1 the call starts at; all 64
//   bits, so every value is a position. The directory is by the top bits of
//   h1, so each group, and each empty directory entry, covers one
//   contiguous range [P, P + 2^(64-L)). Ranges only ever subdivide: a split
//   halves one, nothing merges, and a full expansion or an open changes the
//   DRAM directory, never a range. Nothing in a cursor is a DRAM address or
//   per-open state: it stays valid across splits, expansions and reopen.
//   A call (copy_range(), which for_each and salvage use too): x = cursor;
//   find(x) gives the group g covering x (or an empty entry: a range with
//   no key); copy g's VALID slots whose h1 lies in the piece of g's range
//   that holds x and is >= x; x = the piece's end; repeat until `count`
//   keys were copied or x wraps to 0. *next = x, or 0 when x wrapped (the
//   scan is over). fn runs on each piece's copy after the read guard is
//   left. A piece is 1/2^j of g's range, aligned, j the largest (at most 6)
//   that leaves 2^(b+4)/2^j >= max(count, 64) slots a piece: a call with a
//   small count does not pass a whole group of 2^b buckets (for_each: j =
//   0). Pieces tile ranges as ranges tile the space, so "range" below
//   reads "piece" as well; a piece costs a read of the whole group.
//   One range read consistently: under an RCU read guard (the directory's
//   nodes and the items named stay alive); g's depth d is loaded (acquire)
//   before the copy and again after it, and the copy starts over if it
//   moved, or at once if g no longer covers x (a split raced find()); each
//   slot is read under its seqlock (read(): waits while a writer or a
//   split's step 10 holds it), after an acquire load of its meta.
//   Why a key K present from the call with cursor 0 until the call that
//   returned 0 is passed:
//   S1 The calls' intervals [cursor, next) tile the hash space from 0 to
//      2^64 (each starts where the last ended), and inside a call the
//      ranges copied tile [cursor, next) (each starts at the last one's
//      end). So some range copy R covered K's h1.
//   S2 Writers never move a key: it stays in the slot its insert chose
//      (update a, b and c rewrite that slot in place), so K sits in one
//      slot of the group covering h1 while it is present, and also, during
//      a split of that group, as a copy in g1 that nobody reads before g1
//      is named (step 9).
//   S3 R read g at depth d at both of its depth loads, and K's h1 lies in
//      g's range at d. A split takes K's slot out of g only at step 10,
//      which clears VALID (release) after step 9 stored g's depth d+1; a
//      copy that saw a cleared meta (acquire) sees that depth at its final
//      load and starts over. So R read K's slot before any such clear:
//      VALID, holding K (S2), in range and >= x; R passed K.
//   Each key has one position and the ranges copied are disjoint, so a key
//   is passed at most once per scan, resizes or not (a copy that starts
//   over drops what it had copied); the filter h1 >= x drops the part of
//   the first range below a cursor that fell inside a range (a cursor no
//   call returned: split ranges' starts stay range starts).
//   Termination: x strictly grows from one range to the next or wraps (the
//   end); a copy starts over only when g deepened (at most kMaxDepth times
//   per range) or for the moment between a split's depth store and its
//   directory update (step 9). Damage: a slot that fails the item check
//   (heap/checked.h) ends the call with Corruption naming the group.
//   Cost per call: about count / (keys per piece) + 1 pieces, each one
//   find() (at most three entry loads) and a read of its group's 2^b + 1
//   buckets of 16 slots and overflow blocks; DRAM: one piece's keys.
//
// ---------------------------------------------------------------------------
// Open: the rebuild (§5; paper Steps 1-6), O(groups + threads), never O(keys)
// ---------------------------------------------------------------------------
//   Phase V (reads only; a rejected pool is left byte-for-byte unchanged):
//   V0 pool-header version 2 and root magic and version of layout 2 (a
//      layout-1 pool is refused by name); b and G0 equal to the pool
//      header; segments allocated, large enough, right magic and index.
//   1  every table word; per live entry one group header (magic, bg_id, b,
//      create_depth <= L <= kMaxDepth, zero prefix bits below create_depth);
//      overflow chains only at kMaxDepth. Holes go to the id free list.
//   op logs: a kSplit record picks its row above (the planned depth); a
//      kSlotUpdate record must name a slot of a live group and its meta.
//   overlap: with the planned depths, no two groups cover a common prefix.
//   2-3 G = max(D_L_Max, G0): a main node of 2^G entries, but of at most
//      2^kMaxMainBits (the DRAM bound below; G0 excepted): a group deeper
//      than that hangs in a one-time node and, three levels deep, a
//      two-time node of two bits below it, as its splits had placed it.
//      (Without the cap a pool whose deepest group sits three levels below a
//      main node at the bound would need 8x the bound at open; a damaged
//      depth byte would ask for 2 GiB.) D_L_Max above kMaxMainBits + 3 is
//      rejected: no sequence of splits makes it.
//   4-6 every group is attached to all 2^(G - L) entries of its range
//      (DEPARTURE: Step 6 splits in the directory, no key moves, so open
//      stays O(groups) and allocates nothing). With the option
//      nehash.split_shallow_on_open, a thread started after open splits
//      each such group physically by the ordinary split (forced, case A
//      only: the main node is already G deep) until each main entry has its
//      own group; writers meet it as any concurrent split, close stops it
//      after the split in progress, and a crash leaves ordinary split
//      states.
//   Phase W: W1 replay slot updates, apply the kSplit rows, drain, clear
//   the records (a record outlives what it stands for), drain; W2 heap
//   recovery, keep(off) = a live group, segment, overflow
//   block, or an item whose key hashes to its state and which a VALID
//   pointer slot of its covering group names; W3 times restart, count from
//   the root if a clean close saved it (else recounted on first use),
//   count_valid = 0 persisted before serving.
//
// ---------------------------------------------------------------------------
// check() verifies (§6)
// ---------------------------------------------------------------------------
//   1 root matches the pool header; every op log empty. 2 segments sound;
//   every live entry names an allocated group whose header agrees; no block
//   twice. 3 group ranges disjoint. 4 directory shape (main 2^G >= 2^G0,
//   one-time 2 entries, two-time 2 or 4, depths, hl_base, no LOCK). 5 each
//   leaf's group covers it; each group named by exactly its run in one node;
//   table entries and GroupRefs one to one with equal depths. 6 durations
//   >= 0, time stamps not in the future. 7 every VALID slot well formed,
//   inline exactly when the pair fits, in its group's range, right fp, a
//   key of bucket k in its home bucket k (the conflict bucket and overflow
//   blocks: any), pointer slots naming an allocated item with state ==
//   w1 == the key's h1. 8 no key twice. 9 each overflow block on one chain
//   (not "only at kMaxDepth": see the DRAM bound). 10 the count; every
//   allocated block is a group, segment, overflow block or exactly one
//   slot's item.
//
// Stats: the properties nehash.groups, nehash.depth (deepest directory
// level in use), nehash.splits, the expansion nodes made by kind and the
// full expansions, slots and bytes moved (descriptor.cc); dram_bytes =
// nodes, GroupRefs and lock words. open_ns (the rebuild time, clean opens too) is measured by
// the store for every engine.
#pragma once

#include "engine/index.h"
#include "engine/nehash/directory.h"

namespace pmhash::engine::nehash {

extern const EngineInfo kEngineInfo;
// What nehash is and the options it takes (descriptor.cc).
extern const EngineDescriptor kDescriptor;

// nehash's options ("nehash.<option>", descriptor.cc has their docs and
// ranges) as typed values, read once when the index starts.
struct Config {
  unsigned bucket_bits = 0;
  unsigned initial_dir_bits = 0;
  bool split_shallow_on_open = false;

  static Config from(const Options& options);
};

}  // namespace pmhash::engine::nehash
