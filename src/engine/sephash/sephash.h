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
// low d hash bits equal its pattern. The 2^initial_depth segments of a new
// index go round the nodes (pattern mod nodes); a split's new segment stays
// on its parent's node, where the items it names are, so every segment and
// its items live on one node. All 2^max_depth directory entries are kept
// current (a split rewrites the entries of its new half), so growing the
// global depth copies nothing; clients read the first 2^global_depth
// entries.
//
// Writes append. Every insert, update, upsert and remove writes a new item
// (key, value, the key's hash, a version from one FAA on node 0) and CASes a
// slot of the key's CurSeg to name it; a remove writes a tombstone. Nothing
// is written in place while a slot names it (a block is written again only
// after a merge freed it, and readers check for that: "Reclamation"
// below), so readers never act on a torn item. Among the entries
// of one key the largest version is the key's state; a merge keeps only
// that one (and drops it if it is a tombstone). Versions follow real time:
// a write that completes before another begins has the smaller version.
//
// Append (2 round trips; 3 when the key's bitmap bit is not set yet and
// the client's copy of its bitmap word is out of date): (1) FAA the
// version on node 0, and in parallel READ the segment's snapshot (seq,
// then the header), CAS the key's bitmap word (speculatively, below),
// READ a window of 8 slots and the check (meta, seq); [(1b) WRITE the
// item, CAS the bitmap word, READ the check, until the bit is set;] (2)
// WRITE the item (unless 1b did), CAS a free slot, READ the check. A slot
// is free when it holds the free word of the snapshot's seq (layout.h,
// free_slot). An insert, update or remove first looks the key up from
// the same snapshot, as a search does (a bitmap or fingerprint match costs
// the round trips of "Search" more).
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
// An insert, update or remove whose MainSeg prefix table (its presence
// check needs it) was cached at another seq than the kept word does not
// speculate: if the word is current the table is not, that pass ends
// after loading the table, and the next pass's snapshot would show the bit.
//   A speculative bit that does not serve is a false positive of the
// filter, never a wrong answer: a bit only makes readers read the slots,
// where entries are matched by key. A CAS never clears a bit (it stores
// expected | bit, and only where it finds expected). A CAS of the wrong
// sign (the segment merged since the session saw it) lands in the bitmap
// of a state that has ended or not begun: before a merge flips to a sign
// it clears that sign's bitmap (one WRITE, in the publish batch), which
// removes a bit CASed before it; a CAS that lands after the clear (it
// then found the cleared word, or the words appends set since) leaves one
// extra bit in the new state. An insert that finds its key, an update or
// remove that does not, a segment the key has left (a split the client's
// directory missed), a check that fails (a lock taken meanwhile): the bit
// stays, unused, until the state ends. The snapshot the key's presence is
// decided from is READ before the CAS, so it never counts this pass's bit
// (a later pass's snapshot may show an earlier pass's bit: one READ of
// the slots more). A failed CAS stores nothing and costs no fence
// (remote/verbs.cc); one that matches costs the fence of a writing verb,
// as 1b's CAS did.
//   Costs (pmhash-remote-bench --transport shm --records 100000, medians
// of three, against a round trip of its own for every new bit): round
// trips per insert 3.26 -> 2.35 at one client, 3.28 -> 2.37 at two,
// 3.29 -> 2.40 at four (2.35 at one client before the bit had a round
// trip of its own); verbs per insert 12.46 -> 11.56, bytes 1319 -> 1305.
// Per YCSB A operation at one client 3.31 -> 3.03 round trips; with more
// clients, A's round trips follow the polling of contended merge locks.
//
// Merge. The client that finds every slot taken sets the meta's lock bit
// (CAS), adds 1 to the segment's seq (FAA, before it reads anything),
// reads the slots and the MainSeg, sorts, keeps each key's newest entry
// (reading items only for entries whose 18 filter bits collide), writes a
// new MainSeg, clears the other sign's bitmap, writes the next state's free
// word to every slot, and writes the meta with the sign flipped and the
// new MainSeg, which unlocks it.
// Then, and only then, it frees what it dropped (see Reclamation).
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
// seen every slot taken in one checked READ, and a slot goes from free to
// taken only by a CAS on the free word of the appender's snapshot, which
// differs in every state. So no slot is free while a merge runs, and a
// stale appender's CAS finds the word changed and fails. As a second line,
// the append's second batch checks (meta, seq) after the CAS (the merge
// takes the lock before it reads a slot): if a lock was taken since the
// snapshot, the client appends again, from a fresh copy of its item in a
// new block (the first may have been merged, dropped and freed). Should
// both entries stand, they name different blocks with the same version and
// bytes; readers take either and merges keep one and free the other.
// Stats::read_retries counts those appends.
//
// Search (2 round trips for a MainSeg hit, 3 for a CurSeg hit, 1 for most
// misses): (1) READ the snapshot (seq, header), the MainSeg slots of the
// key's fingerprint (their place comes from the MainSeg's prefix table,
// cached per segment with the seq it was read at) and the check; (2) if
// the bitmap has the key's bit: READ the slots and the check, with the
// MainSeg candidates' items; (3) the CurSeg candidates' items and the
// check. Every round trip that reads anything a merge could free ends with
// the check, and its bytes are used only when the check passes.
//
// Reclamation (docs/design/sephash.md section 5). A merge or split frees
// the blocks it drops (superseded versions, tombstones and what they
// shadow, duplicate entries; each block once, never one a kept entry
// names) and the MainSeg it replaces, into its own client's free blocks,
// which that client's next allocations reuse at once; a closing client
// hands what it holds to its nodes' stacks (layout.h, FreeTable), from
// which other clients take it, and so does a client holding more than it
// needs (a record of its surplus after a merge). No client registry, no epoch: readers
// validate instead.
//   Seq. Each CurSeg header has a merge sequence number next to the meta.
// The lock holder adds 1 after its lock CAS and before it reads anything;
// it writes the unlocking meta last; seq never decreases (a takeover
// adds 2^32, a roll-back 1: "Dead lock holders" below).
//   Check. A reader's snapshot READs seq, then the meta (in that address
// order: seq at +8 is read by its own verb before the header). The check
// at the end of a batch READs the meta, then seq (one 16-byte READ; verbs
// of one node's sub-batch run in order and READs copy ascending, so it
// runs after every read before it in the batch). Data counts only if the
// check's meta equals the snapshot's, unlocked, and its seq too.
//   Claim: then no lock was held at any instant between the snapshot's
// meta READ (t1) and the check's meta READ (t2). A lock taken at tL and
// released at tR with tL <= t1 <= tR shows the snapshot's meta locked. With
// t1 < tL <= t2, either it is still held at t2 (the check's meta is
// locked), or it was released before t2 and its seq FAA (tL < tQ < tR)
// lies between the snapshot's seq READ (before t1) and the check's (after
// t2), so the seqs differ. Seq is what makes the meta's ABA harmless: two
// merges flip the sign back and may reuse the freed MainSeg's block at the
// same offset, giving a meta equal to an old one; seq never repeats.
//   Why a reader never acts on reused bytes. A block is freed only after
// the publish of a merge (or split) that dropped it, by that merge's lock
// holder; it was named by the state the merge locked, and by none after.
// A reader's data names blocks of the state its snapshot saw (or entries
// appended since, whose items were written before the CAS that names
// them). The merge that drops such a block locks after t1, so with no lock
// held in [t1, t2] it locks after t2, frees later still, and every READ
// the check validates ran before t2: the bytes are the block's while it was
// named. Item headers (lengths) are interpreted only after the check, so a
// reused block with a wrong length is a retry, never Corruption. The
// MainSeg prefix cache is used only while the snapshot's seq equals the
// one it was read at.
//   Why a merger never frees a block still named. It frees only blocks of
// entries it read under the lock (live CurSeg slots and its MainSeg), not
// named by a kept entry, and the MainSeg its publish replaced; after the
// publish the slots hold free words and the old MainSeg is unreferenced.
// An entry a stale append lands after the merge read the slots is
// overwritten by the publish; its block is its appender's, which appends
// again and never frees it. No other client frees this segment's blocks:
// frees need the segment's lock. A
// split moves the new half's entries into the new segment; they are freed
// later only by that segment's lock holder, which exists only after the
// split's publish.
//   Why merges rewrite the slots. With reuse, a slot word can recur: a
// block freed and taken again for the same key, in the same slot, makes
// the same 64-bit word, so an appender that saw an old entry of the other
// sign as free could CAS over a live entry. And a fixed free word (0) would
// recur too: an appender stalled across two merges would land its entry,
// made for an older state (depth, hash bits, sign), in a later one (a first
// version did so, and check() found keys in the wrong segment). So the
// publish batch writes, before the meta, free_slot(seq) to every slot: an
// item field of 0 and the low 22 bits of the new state's seq. A slot is
// free only when it holds its snapshot's free word, so a CAS can succeed
// only in the state its appender saw (up to 2^22 merges of one segment
// while one append stalls); if that state ended meanwhile, the check after
// the CAS fails and the append is made again, and the landed entry was
// either read by the merge (kept or dropped like any other) or overwritten
// by its publish.
//   Costs. No round trip is added: the snapshot is one more 8-byte READ,
// the check replaces the meta re-read (16 bytes instead of 8), and the
// round trips that read items end with a check too (one more 16-byte
// READ); the merge's FAA rides in the batch that reads the slots; freeing
// is local. pmhash-remote-bench, 50000 records, one client: round trips
// per insert 2.34 and per read 2.10 as before; verbs per read 4.24 -> 6.24,
// bytes per read 457 -> 490. A client
// that crashes loses the blocks it holds (its free blocks, the rest of its
// chunk, and an item whose append had not finished); nothing else waits
// for it, except a segment whose lock it held, for a lease ("Dead lock
// holders" below). An append that had to append again does not free its first block
// (a merge may hold it); it leaks.
//   Lost replies. A batch that fails with IOError may have run (its reply
// was lost, or came after the timeout) or may still run (over tcp, a
// request the client gave up on can reach the node later, even after the
// client's next request). No block may then be owned twice; where the
// client cannot tell, it gives the block up (Stats::remote_bytes_leaked):
// a leak is acceptable, a block owned twice never is. Case by case:
//   Push of a free record (layout.h, FreeTable: write the record, CAS the
// head from h to h' = (tag+1, the record)). Every change of a head adds 1
// to its tag, so one CAS settles it: from h to (tag+1, h's offset), which
// changes nothing but the tag. If it finds h, the push had not run, and
// now never will (the tag has moved on): the entries are the client's
// again, but the record's block is given up, since the late request may
// still write it. If it finds the head one change after h, that change
// is the only one since h: h' means the push ran (no other change makes
// h': the record's block was this client's alone), and it counts as done;
// anything else means another change came first, and the push's CAS
// fails whenever it arrives (as before). If it finds a later head, or
// gets no answer in three tries, the record may be on the stack, where
// another client may pop it: the record and its entries are given up. So
// a head still equal to h never by itself means "not pushed": only once
// the settling CAS has moved the tag.
//   Pop (CAS the head from h to (tag+1, next)). Another client popping h
// writes the same word, so nothing proves that this pop ran: after a
// failed batch the client takes nothing. The record is then still on the
// stack (the settling CAS found h, or another change first), or it was
// popped by this CAS and is nobody's (given up, counted).
//   Bump FAA (new space, remote_index): the client does not use the
// space; if the FAA ran, or runs later, that space is nobody's (not
// counted: the client cannot tell). An FAA never hands a range out twice.
//   Append. The item's block stays the client's only while no batch that
// writes the item or CASes a slot to it has failed; after one, the slot
// CAS may have run or may land later, so the block is given up. When the
// call fails otherwise, the block (written or not, named by no slot) is
// the client's again; when its entry stands, it is the index's.
//   Publish of a merge or split (the batch that ends with the meta). The
// holder reads (meta, seq) back: the meta it published and its lock's seq
// mean the publish ran (in order, the meta last), nobody has locked since
// (a lock raises seq) and no taker finished it for it (a takeover adds
// 2^32), so it frees what it dropped as after a reply. Otherwise it frees
// nothing (what it dropped leaks, as a dead holder's) and never rolls
// back: once its intent may stand, its publish is only ever finished, by
// a taker after a lease ("Dead lock holders"); a roll-back could write
// the old meta over a published state and free blocks still named.
// Before the intent, what a failed batch may have done is not
// destructive: a lock CAS leaves the segment locked for a lease (then
// rolled back by a taker), and a late seq FAA raises seq on an unlocked
// segment (readers look again, appenders find no free word and merge);
// so the holder rolls back as before. Blocks a merge or split took and
// had not written when a step failed are its own again.
//   The tag has 22 bits: a request delayed across 2^22 changes of one
// stack head could succeed on a recurring head, the assumption the tag
// already makes for pops. Costs: none when replies come; one round trip
// per failed push or pop (up to three when the settling CAS fails too),
// one 16-byte READ per failed publish.
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
// Dead lock holders (docs/design/sephash.md section 5a). A merge or split
// whose client dies (killed, host lost) or stalls between its lock CAS and
// its publish, or whose publish failed half way, would leave the segment
// locked for ever. Instead:
//   Intent. The holder writes, at CurSeg +24 (layout.h), what another
// client needs to finish its publish: {its lock's seq, the meta it
// locked, the meta it publishes, a split's new CurSeg}. A merge's publish
// batch is: new MainSeg, intent, bitmap clear, slots, meta. A split's
// first batch is: both MainSegs, the new CurSeg, intent (all on the
// segment's node, so in that order); then the new half's directory
// entries; then the global depth; then bitmap, slots, meta. A sub-batch
// runs in order, and a client killed mid-batch, or a node that loses power
// mid-batch, leaves a prefix of it, the last WRITE possibly torn at any
// 8-byte word (remote/transport.h, "Durability"); the intent's seq is
// therefore written after its other words, as a WRITE of its own. So when
// the intent stands the images it names are complete, and when it does
// not, nothing destructive ran (the slots and the old MainSeg are intact).
//   Lease. A waiter (any loop that finds the segment locked: appends,
// searches, scans, check) that has seen the same locked (meta, seq) for
// the index's lease ("The lease and the timeout" below) takes over: it
// CASes seq s -> s +
// kSeqTakeover (2^32; one taker wins, and it now holds the lock), reads the
// header and, if the intent is this lock's (its old meta is the locked
// meta and its seq equals s in the low 32 bits, layout.h intent_of_lock),
// rolls FORWARD: for a split, every directory entry of the new half
// (pattern | 1<<depth, step 2^(depth+1)) that still names a segment
// shallower than the new one is CASed to it (entries the new segment's
// own splits rewrote since stay), the global depth is raised; then the
// bitmap clear, slots = free_slot(seq), the new meta. Otherwise it rolls
// BACK: seq + 1, then the old meta, unlocked. All these writes are the
// holder's, with the same bytes: doing them twice is harmless. The dead
// holder's dropped blocks, the MainSeg it replaced and, when rolled back,
// the blocks it took, leak (frees happen only after a publish, by its
// holder). Waiters give Busy only after lease + the remote timeout.
//   Why the taker's free words are right. A takeover adds 2^32, so seq's
// low 22 bits, the free word's, stay the first holder's: the taker writes
// the words the holder wrote or would have. Readers compare the whole seq:
// every snapshot taken before the takeover fails its check (a locked one
// fails anyway). A stale appender's snapshot is of a state before the lock
// (seq < s in the low bits), so its CAS expects another word and fails, as
// with a normal merge; appenders of the new state read seq s + 2^32 and
// look for free_slot(s), which the slots hold. A takeover CAS that lands
// just after the holder published (only if the fencing assumption below
// fails) raises seq on an unlocked segment: readers and appenders of that
// state look again, nothing else.
//   No (meta, seq) of a lock recurs. A publish changes the meta (the sign
// flips); a roll-back (a taker's, or the holder's own after a failure)
// adds 1 to seq before it unlocks. So a waiter that saw a pair for a lease
// saw one lock, and the intent check cannot take an older merge's intent
// for this lock's: that intent's old meta is not the locked meta (its
// publish flipped the sign), or its seq differs.
//   Fencing a holder that was only slow. A holder (first or taker) begins
// no batch that writes to the segment, the directory or the global depth
// later than lease/2 after it sent its lock (or takeover) CAS: past that it
// stops without writing, leaves the lock, and its call returns Busy; a
// waiter, which takes over only a whole lease after it first saw the lock,
// finishes or undoes its work.
//
// The lease and the timeout live with the index. The lease is chosen at
// create (Options::sephash_lock_lease_ms, default 2000 ms) and kept in the
// membership stamp on every node (engine/remote_index.h); every open uses
// the stored lease and ignores the option, so all clients of an index
// agree on it. The remote timeout is the one a client gives, refused above
// lease/2 (create and open say both numbers), or lease/2 when it gives 0
// (the default): a client never waits for, and then acts on, a batch that
// took longer than lease/2. What remains ASSUMED, as in any lease scheme:
// a batch that began in time executes within lease/2 of its post. A
// process stopped between its clock check and its stores, or a tcp
// request that the client gave up on at its timeout but that the network
// delivers later still, could write after a taker and overwrite a later
// state. And the clients' clocks run at the same rate (steady clocks; only
// differences are used). The lease must be well above a merge's worst
// time (2000 ms against a few ms).
//
// Membership and generation (engine/remote_index.h). The create records
// which nodes make up the index, in which order, under a random index id
// and a generation, in every node's membership record (outside this
// index's root; race keeps the same); every attach verifies the nodes
// against node 0's list before it reads the root, and refuses a wrong,
// swapped, duplicate, missing, extra or fresh node with one line naming
// its position. A create over nodes that held an index (force) claims them
// for the next generation by CAS, waits out the old lease, then formats;
// every batch goes through the session's fence, so a client of the old
// generation fails its next call ("memory nodes were created again ...:
// open the index again") and writes nothing into the new index. The same
// assumptions as the lease's hold (a batch executes within lease/2 of its
// post; clocks at one rate). Two creates at once on fresh nodes: one CAS on
// node 0's stamp wins, the other is refused (AlreadyExists).
//
// What this version does not do yet: it runs one call
// per client thread at a time (the remote layer's coroutines are for the
// benchmark clients). Two concurrent inserts
// of one absent key by different clients may both return OK; the one with
// the larger version stands, as if the other had been an upsert.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/index.h"

namespace pmhash::engine::sephash {

extern const EngineInfo kEngineInfo;

// Tests: called in an append between its first round trip (meta and slots
// read) and its second (the slot CAS), on the appending thread.
void set_append_hook_for_testing(std::function<void()> hook);

// Tests: the steps of a merge or split after its lock CAS at which the
// lock hook is called, on the holder's thread.
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
};
// Tests: a hook that returns true makes the holder stop at that step as if
// it died there (it writes nothing more and leaves the lock; its call
// returns IOError). With a hook set, the merge's publish runs as three
// batches and the split's last as two, so that kMergeIntent, kMergeSlots
// and kSplitSlots fall between batches (a holder killed mid-batch leaves
// a prefix of it applied).
void set_lock_hook_for_testing(std::function<bool(LockStep)> hook);

// Tests: what a client does with a block of a memory node.
enum class BlockUse {
  kTaken,  // it writes the block from now on: an item, a MainSeg, a CurSeg,
           // or a free record it pushes (the record stays taken on the stack)
  kFreed,  // it may be written by whoever takes it next: a merge or split
           // freed it, an allocation did not use it after all, or a
           // client popped the record it was
};
// Tests: called, on the client's thread, for every block any client of
// the process takes or frees (its node, offset and length in bytes; a
// block is freed with the length it was taken with). Blocks that go on or
// come off a stack as a record's entries are free all along; blocks given
// up (leaked) are never freed. Set it while no client runs.
void set_block_hook_for_testing(
    std::function<void(BlockUse, unsigned node, std::uint64_t off, std::uint64_t bytes)> hook);

}  // namespace pmhash::engine::sephash
