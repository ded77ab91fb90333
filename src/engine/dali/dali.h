// engine/dali/dali.h - Dalí: a periodically persistent, transactional hash
// map.
//
// Follows "Dalí: A Periodically Persistent Hash Map" (Nawab, Izraelevitz,
// Kelly, Morrey, Chakrabarti, Scott; DISC'17), §3, with the changes marked
// DEPARTURE below. No update issues a flush or a fence: its stores may reach
// media in any order, and a periodic global fence (epochs.h) makes a whole
// epoch durable at once. On an ordinary file (page granularity) that is one
// write-back of the epoch's dirty pages and one fdatasync per epoch instead
// of one per write.
//
// ---------------------------------------------------------------------------
// On-media layout (every field: layout.h)
// ---------------------------------------------------------------------------
//
//   pool root (Root)
//   +------------------------------------------------------------------+
//   | magic, L0 (initial table 2^L0 buckets), stripe count              |
//   | epoch          the global epoch counter (own line)                |
//   | shape          the table shape (L, p), versioned like a bucket    |
//   | item_count, count_valid      saved by a clean close               |
//   | sweep_pending  a crash's leaked blocks are still to be swept      |
//   | segments[37]   offsets of the bucket segments                     |
//   | failed_count, failed[1000]   the failure list, sorted            |
//   +------------------------------------------------------------------+
//
//   segment j (one heap block)            bucket (32 bytes, paper Fig. 2-3)
//   +---------------+----------+-----     +--------+--------+--------+--------+
//   | SegmentHeader | bucket 0 | ...      | status | ptr[0] | ptr[1] | ptr[2] |
//   +---------------+----------+-----     +--------+--------+--------+--------+
//     segment 0: buckets [0, 2^L0); segment j >= 1: [2^(L0+j-1), 2^(L0+j)).
//     status = <a, f, c, ss>: the roles of the three pointers (2 bits each,
//     f may be ⊥) and the epoch ss of the bucket's latest update (58 bits).
//
//   record (one heap block): next | written, absent | version | key_len |
//     value_len | key | value. A bucket's records form a list, newest
//     first; several records may hold one key, the newest counts; a delete
//     adds an "absent" record (paper §2).
//
// ---------------------------------------------------------------------------
// Pointer roles (paper §3.1), for a bucket whose status says ss:
//   active (a)     the head of the newest list (written in ss);
//   in-flight (f)  the head as of the end of ss-1, or ⊥ if ss-1 changed
//                  nothing;
//   committed (c)  the head as of the end of the newest epoch <= ss-2 that
//                  did not fail.
// The valid head (paper Fig. 4): a if ss did not fail; else f if ss-1 did
// not fail and f is not ⊥; else c. Every read and update starts there, so
// records of failed epochs are never seen again.
//
// update (paper Fig. 5; insert, update, upsert, remove and
// compare_and_swap are all one), under the bucket's lock, inside epoch E:
//   1. find the valid head, and on it the newest record of the key; decide
//      (judge()): insert needs the key absent, update and remove present,
//      compare_and_swap its expected state (below); a refusal writes
//      nothing;
//   2. the newest record of the key carries a write of E (its version is E)
//      -> rewrite it in place (paper §3.4 "In-place updates") if the new
//      value fits its block; done;
//   3. else write a new record whose next is the valid head (absent for a
//      remove), version = written = E;
//   4. new roles from the lookup table (paper Fig. 6, next_roles() in
//      layout.h), with curr_fail = ss failed, prev_fail = ss-1 failed or
//      f = ⊥;
//   5. ptr[new a] := the record; status := <new roles, ss = E> (one store).
// The record, the pointer, the status word and the heap's allocation bit are
// written with plain stores and recorded for the epoch's fence.
//
// compare_and_swap(key, expected, desired) is this update with the
// expectation as its condition (Op::kSwap, or kSwapRemove when desired is
// absent): in step 1 the newest record of the key on the valid list must be
// a value equal byte for byte to `expected`, or, when expected is absent,
// an "absent" record or none; else Conflict and nothing is written. Then
// steps 2-5 write `desired` as update/insert would, or an "absent" record
// as remove would (so size() moves as theirs does); from absent to absent
// there is nothing to write and the answer is OK. Atomic: the comparison
// and the write happen under the stripe's lock, which every write of the
// key (a transaction's from its first touch to its commit) and every
// split of its bucket holds while it reads and changes the list, and the
// probe reads the shape under that lock, so a split cannot move the key
// between them.
//
// Why any order is safe (paper §4, Lemma 3): the pointer an update
// retargets is, under both the old and the new status, never a valid head
// for any crash that could expose the change; and no crash exposes either
// store unless the counter moved two epochs past E, by which time the fence
// of E made both durable together with the record. If E or E-1 fails, the
// next update finds the valid head of the last good state through f or c.
//
// ---------------------------------------------------------------------------
// Epochs and durability (epochs.h)
// ---------------------------------------------------------------------------
// The counter is persisted before an epoch begins, which is then published
// under a sequence lock; an advance ends the epoch: it waits for the
// threads still in it, then fences it. A worker thread advances every
// Options::epoch_ms (default 10). An update of epoch e is durable once the
// persisted counter is e+2 (its fence ran in the advance before: no need to
// wait for the fence of e+1; epochs.h). With Durability::kEpoch a call
// returns at once and sync() waits for that; with kStrict every mutating
// call waits for it, running the advances itself (epochs.h, "Who ends an
// epoch": helping; concurrent callers share each advance).
//
// Persist order of a strict write in epoch e (insert, update, upsert,
// remove, compare_and_swap; a commit), after its plain stores (epochs.h
// numbers the steps):
//   S1  advance(e), step 2: counter e+1 stored, flushed, drained (drain 1;
//       its step 1 fences e-1, a drain only if e-1 dirtied a line); e+1
//       published;
//   S2  advance(e+1), step 1: the threads still in e leave; every line
//       dirtied in e flushed, drained (drain 2);
//   S3  advance(e+1), step 2: counter e+2 stored, flushed, drained (drain
//       3); e+2 published: the write returns.
// So a strict write waits for at least 3 drains (2 when an advance before
// it had already moved the counter to e+1), and fewer never make it
// durable under this recovery, which fails the counter's epoch and the one
// before. The caller runs the advances it needs itself (epochs.h, "Who
// ends an epoch"), and returns without a drain when another caller's
// advances already published e+2. An advance serves every write of its
// epoch: writers that keep coming meet at about one advance (2 drains)
// per write, and fewer per write the more of them share an epoch.
//
// ---------------------------------------------------------------------------
// Durable linearizability (kStrict)
// ---------------------------------------------------------------------------
// No call returns an answer that a crash at that moment could take back.
// Every answer depends on at most one record: the newest record of the key
// on its bucket's valid list (a value, or an "absent" record), or none. A
// record of version v is found again after every crash once the epoch v
// survives (epochs.h): its own write is then durable, and so is each later
// write of the valid list that could hide it only if it too survived. The
// orders, per answer:
//   D1  write OK (insert, update, upsert, remove, compare_and_swap; a
//       commit): its records are written in epoch e; it returns after
//       wait_durable(e). What it decided on (the key's previous newest
//       record: for compare_and_swap, the value it compared) has a version
//       <= e, so it is durable too.
//   D2  get() value or NotFound from an "absent" record of version v: read
//       inside an epoch, then, outside it, wait_durable(v) before the
//       answer. Split copies keep the version of the record they copy, and
//       a failed split leaves the original on the valid list.
//   D3  insert AlreadyExists, update/remove NotFound, compare_and_swap
//       Conflict, and a compare_and_swap from absent to absent (OK with
//       nothing written): the same, for the record the probe saw under the
//       lock (its version read before unlocking, since garbage collection
//       may free it after). So a Conflict never rests on a write a crash
//       could lose: when the value it differs from is of an epoch that may
//       still fail, it waits for that epoch (at most S1-S3 of it). A
//       Conflict with no record of the key is D4.
//   D4  NotFound with no record of the key on the list: depends on no
//       write that a crash can undo. Garbage collection drops a key's last
//       record (an "absent" anchor) only once the unlinks of its older
//       records are durable (below), and a write never removes records.
//   D5  transactions: a read or refused write under the locks waits like
//       D2/D3 (locks held, no epoch entered), the commit like D1; a
//       read-only transaction reads as of E-2, already durable (D6).
//   D6  snapshot reads (ReadOptions::snapshot): as of E-2 for a reader in
//       epoch E, durable since E is current (epochs.h), and holding every
//       strict write acknowledged before the read began (D1 returns only
//       once e+2 is current).
// wait_durable(v) costs one load when v is already durable (v <= current -
// 2), so reads of keys not written in the last two epochs never wait; a
// read of a fresh write waits for at most two epoch advances, which it
// runs itself (helping): at most the 3 drains of S1-S3 above for the
// record's epoch v, none once v+2 is current. A strict read adds no drain
// of its own (it writes nothing). With Durability::kEpoch nothing waits:
// that mode is linearizable but answers from epochs a crash may lose.
//
// ---------------------------------------------------------------------------
// Locks (paper §3: a mutex per bucket)
// ---------------------------------------------------------------------------
// DEPARTURE: the mutexes are DRAM words, one per stripe of buckets (bucket
// index mod 2^min(L0, 16)), not fields of the bucket: a lock in the pool
// would dirty a line on every read and need resetting after a crash. The
// stripe of a key is h mod 2^s with s <= L0 <= L, so it never changes as
// the table grows, and a split's two buckets share it. An operation locks
// before it enters its epoch, so updates of a bucket run in non-decreasing
// epochs and no thread holds up an epoch while it waits for a lock.
//
// DEPARTURE: reads take no lock (the paper's reads lock the bucket). The
// lock word is also a sequence lock: its holder sets a "writing" bit while
// it changes the stripe's lists (every store of the change a release
// store), and bumps a write generation when done; a read of the newest
// state (Store::get) runs inside an epoch (so nothing it reaches is freed
// under it), waits while the bit is set, reads with acquire loads (the
// value bytes too, so that a rewrite in place races defined), and reads
// again if the generation moved. So reads never wait for a transaction
// that merely holds a lock, and a transaction's reader sees the last
// committed value (linearizable: it comes before the commit). A split also
// bumps a split generation, the one change snapshot readers care about
// (Snapshot reads).
//
// ---------------------------------------------------------------------------
// Growth (DEPARTURE: the paper's bucket array is fixed)
// ---------------------------------------------------------------------------
// Linear hashing: the table has 2^L + p buckets; a key with hash h lives in
// bucket h mod 2^L, or h mod 2^(L+1) when h mod 2^L is below the split
// pointer p (that bucket has been split).
// When present keys exceed 2 per bucket, the inserting thread splits bucket
// p into p and q = p + 2^L (one split per insert at most, none while
// another thread splits):
//   - the segment holding q is allocated and named by the root first, with
//     incremental persistence (logged allocation, persisted header and root
//     entry): once per doubling;
//   - under the stripe's lock, inside epoch E: the valid list of p is copied
//     into two new lists (each key to the bucket its bit L names, in the old
//     order, leaving out what garbage collection would drop; copies keep
//     their version and are written in E);
//   - p gets its new list by an update of the role table whose new active
//     pointer names the copy list (instead of a new record linked to the
//     old head): an update like any other as far as crashes go;
//   - q is written whole: status <a 0, f ⊥, c 1, ss E>, ptr[0] = its list;
//   - the shape (L, p+1), or (L+1, 0) at the end of a round, is stored in
//     the root's shape "bucket", whose three pointers hold shapes, by the
//     same role table;
//   - the old list of p is retired (freed once unreachable).
// Why any order is safe: everything the split writes is written in E and
// recorded for E's fence. If E does not fail, all of it is durable. If it
// fails, the root's shape reverts to the one before (its valid value, like
// a bucket's valid head), under which q is not part of the table and p's
// valid head is its old list (f or c); so whatever part of the split
// reached media is never read. A thread that uses the new shape runs in E
// or later (it takes the stripe's lock after the split released it, and
// epochs only grow), so its writes fail whenever the split does. A failed
// split leaves q with any contents: a later split of p writes q whole
// again, never reading it. Segments are never freed (no shrinking); when
// the pool has no room for a segment or for the copies, growth pauses
// until the next epoch and the lists simply get longer.
//
// ---------------------------------------------------------------------------
// Snapshot reads (paper §3.4 "Multiversioning")
// ---------------------------------------------------------------------------
// A read-only operation (ReadOptions::snapshot) or transaction reads without
// locks, as of two epochs before it began: what a crash would keep. It
// announces its epoch E like an update (so nothing it may reach is freed
// under it), reads the bucket's valid head and takes the first record of
// the key whose version <= E-2. Updates only add records above the valid
// list of E-2, and rewrite in place only records whose version is the
// current epoch (> E-2), so the list below is stable. Splits are the one
// change that moves a key: the reader checks the stripe's split generation
// before and after (a sequence lock) and reads again if it changed.
// Garbage collection and splits keep, for each key, every version newer
// than the horizon (the oldest open snapshot, and E-3 for the epoch E they
// run in) and the newest one at or below it, so every snapshot still finds
// its version. Serializable: every update of an epoch <= E-2 ended before
// the reader began (the epoch boundary is a consistent cut) and a
// transaction's writes share one epoch. Not strictly serializable.
//
// ---------------------------------------------------------------------------
// Scan (Index::scan, scan.cc; the contract is Store::scan's)
// ---------------------------------------------------------------------------
// SC1 Positions. A key's position is reverse_bits(h1) (engine/hash.h): bit
//     i of h1 is bit 63-i of the position. A bucket is chosen by the low d
//     bits of h1 (d = L, or L+1 below the split pointer and from 2^L on:
//     its depth), so it holds exactly the keys whose positions have its
//     index's d low bits, reversed, as their top d bits: one contiguous
//     range [reverse_bits(index), reverse_bits(index) + 2^(64-d)). Whatever
//     the shape, its buckets' ranges tile [0, 2^64). A split of bucket p of
//     depth L into p and p + 2^L (hash bit L) cuts its range into the lower
//     half (p) and the upper half (p + 2^L): a split moves a key only
//     within the range of the bucket it leaves. The table never shrinks; a
//     crash that fails a split's epoch brings back the unsplit bucket, the
//     union of the two ranges.
// SC2 The cursor is a position, all 64 bits of it (no bit is reserved), so
//     every value is one. 0 starts at the lowest position; *next = 0 means
//     the end of the last bucket wrapped past 2^64: the scan is over.
//     Positions come from h1 only, so a cursor stays valid across splits,
//     a close and reopen, and a crash that reverts the shape.
// SC3 One call, from pos = cursor: read the bucket that holds pos (the one
//     of the hash reverse_bits(pos) in the shape of the read), pass its
//     present keys whose positions are >= pos (only the first bucket of a
//     call can start below pos: a hash per record there), then pos := the
//     end of its range; repeat until `count` keys were passed or pos wraps
//     to 0. *next = pos. fn is called after each bucket, outside any epoch
//     and lock, from a copy of that bucket's keys and values.
// SC4 A bucket is read as get() reads one (Locks): the stripe's lock word
//     w1 (no write or split under way), then the shape, then, inside an
//     epoch (nothing freed under us), the valid list with acquire loads,
//     the newest record of each key counting; then the lock word again,
//     and everything once more if the stripe changed (a write, a split, a
//     commit, a collection). The bucket of pos is in pos's stripe, and only
//     a split of that very bucket (same stripe) changes which bucket holds
//     pos: a split of bucket q changes bucket_of only for hashes whose low
//     L bits are q, and the step to the next level only for those of
//     2^L - 1. So the choice of the bucket, its depth and its list are one
//     state of the table at one instant. No lock is taken: a transaction
//     holding the stripe does not hold the scan up.
// SC5 The guarantee. The reads of one scan visit intervals [c0 = 0, c1),
//     [c1, c2), ... each starting where the last ended, strictly rising
//     (pos lies in its bucket's range, so its end is above pos or wraps),
//     until one ends at 2^64: they tile the whole position space. A key
//     present from the first call to the last has its position in exactly
//     one interval [ci, ci+1); at the instant of that read (SC4) the key was
//     present, so on the list of the bucket that the shape of that instant
//     gives it, which is the bucket read (the interval lies in its range):
//     it is passed. Splits between or during calls do not matter, since
//     each read is of one state. It is also passed only once: the
//     intervals are disjoint and each read passes only keys in its
//     interval. So even under concurrent growth a scan passes no key twice;
//     keys inserted or removed during the scan may or may not be passed.
// SC6 Epochs and transactions: a scan passes what get() would answer. The
//     valid lists hold no record of a failed epoch and nothing a
//     transaction has not committed (its writes wait in DRAM until the
//     commit applies them all at once under its stripes' write bits, so a
//     bucket read sees all of a commit in its stripe or none; two buckets
//     read apart may see a transaction before and after: a scan is not a
//     snapshot). Under kStrict, before fn sees a bucket's keys, the scan
//     waits until the newest version any of its answers rests on (a value
//     passed, or an "absent" record that left a key out) is durable, as
//     get() does (D2); under kEpoch nothing waits.
// SC7 Damage: every record is checked as find() checks it (in the heap,
//     whole, a list no longer than the heap could hold), the value against
//     the one length it is copied by; Corruption naming the bucket, once
//     the read proved consistent (SC4). An ill-formed status word reads as
//     an empty list, as in get() (check() reports it). Any cursor maps to
//     an existing bucket: no cursor is refused.
// SC8 Cost: per call, the buckets visited and the records on their lists
//     (garbage included), a retry per change of a stripe under the read (as
//     get()); DRAM of one bucket's keys and values. A scan of a table that
//     stops growing makes at most one read per bucket. Busy only when all
//     thread slots are taken (heap); it never waits for a lock.
//
// ---------------------------------------------------------------------------
// Transactions (paper §3.4)
// ---------------------------------------------------------------------------
// Strong strict two-phase locking over the stripe locks: a transaction
// locks the stripe of each key it touches, on first touch, and keeps every
// lock until it commits or aborts; a lock wait longer than its timeout
// aborts it (deadlock detection by timeout). A blind write (upsert: its
// answer reads nothing) locks its stripe at commit instead, all such
// stripes in ascending order before anything is applied: transactions of
// blind writes only (the server's MSET) never deadlock, where locking in
// their callers' key orders made two of them wait out the timeout.
// Writes are buffered in DRAM; at commit the records are allocated (the
// one step that can fail: NoSpace then frees them and applies nothing,
// makes room once -- collecting its own stripes under the locks it holds,
// the others under theirs -- and tries again), and every write is applied
// as above inside one epoch. DEPARTURE: the paper runs the whole
// transaction in one epoch; here only the commit is, so that a transaction waiting on its
// caller cannot hold up the global fence. Reads before commit are made
// under the locks, which keep what they read unchanged until commit.
// All-or-nothing across crashes: the writes share one epoch, and an epoch
// fails or survives as a whole.
//
// ---------------------------------------------------------------------------
// Write groups (Store::begin_write_group; group persistence)
// ---------------------------------------------------------------------------
// A strict write's last step is to wait until its epoch e is durable (S1-S3
// above: e+2 published), and an answer's to wait for the epoch of the
// record it saw. Inside a thread's write group both waits are deferred: the
// thread remembers the newest epoch it owes (thread-local; one group per
// thread, of one index) and end_write_group() waits once for it. Nothing
// else changes: the write is applied, and leaves its epoch, exactly as
// before, so the advances it defers to are the ordinary ones, and a group
// of writes in one epoch costs one wait (about two drains) where each write
// alone would wait for its own. Durable linearizability holds because
//   G1  the group's own answers are shown to nobody before the end (the
//       caller's promise: pmhash-server sends them after it), and the end
//       returns only once every epoch they depend on is durable;
//   G2  any other caller that meets a record of the group waits for the
//       record's epoch as for any record (get, and the R rules above):
//       what it answers from is durable first;
//   G3  a crash before the end loses at most writes none of whose answers
//       was shown, and the epochs it fails are whole (recovery unchanged).
// A transaction's commit defers its wait the same way. With kEpoch nothing
// waits, and a group changes nothing.
//
// ---------------------------------------------------------------------------
// Garbage collection (paper §3.4) and reclamation
// ---------------------------------------------------------------------------
// A write that superseded a version with records behind it, and every 8th
// write of a thread (at most once per epoch and lock stripe), queues its
// bucket. Once a thread has queued 8, it collects them: with each stripe's
// lock (try_lock: a busy stripe is skipped), inside one epoch, it walks
// their valid lists side by side, one record of each at a time, so that
// the lists' cache misses overlap (walking a list is a chain of misses,
// most of what collection costs). Later than the paper's "at the end of
// an update", but every decision below depends only on the lock and the
// epoch the collection runs in. For each key, its anchor is the
// newest record that every snapshot reader sees (version <= horizon) and
// that survives every crash (written <= E-2); every older record of the key
// is obsolete. Each run of obsolete records (never the head) is unlinked
// with one pointer store in the record before it; every such store may
// reach media alone, in any order, as it leaves the anchors in front of
// what it unlinks. An "absent" anchor is obsolete too once nothing older of
// its key is left, but it goes only when no older version of its key is on
// the list any more and the stripe's last unlink is two epochs old
// (durable): else a crash could keep its unlink and lose an older
// version's, and the key would come back (found by the crash checker).
// A bucket pointer other than the valid head may still name an unlinked
// record: it never becomes a valid head again, since the valid head after
// any crash is the list of the last update that survived (paper Lemma 3),
// which holds the record's anchor above it (the anchor survives every
// crash). An unlinked record (and a split's old list) is retired in DRAM
// and freed once Epochs::quiescent() passes its epoch: the unlink is then
// durable and no reader can be on it.
//
// A full pool (NoSpace) makes room before it answers: three epochs on,
// garbage collection of every bucket, two fences, every retired record
// freed; then the write is tried once more. A remove needs a record too:
// the heap keeps 1/64 of its chunks (at least one) free for the "absent"
// records of removes (Heap::set_reserve), so that a pool that refuses
// inserts still takes removes, whose garbage then makes room; and a remove
// that still finds no room takes a block of the size of the record it
// removes, the size its garbage frees.
//
// Heap: records are allocated with ThreadCache::allocate_unlogged (no log,
// no flush); the allocation bit is recorded for the fence like any other
// store. A crash can leave a block allocated that no valid list reaches (a
// record of a failed epoch, a retired record not freed yet, a failed
// split's copies): the sweep below returns those.
//
// ---------------------------------------------------------------------------
// Recovery (open)
// ---------------------------------------------------------------------------
//   0. validate, reading only: root, failure list sorted and within
//      capacity, counter above every failed epoch, the shape (valid value
//      under the failure list this open will have) in range, and every
//      segment the shape needs allocated, sized and labelled.
//   After a crash (pool not closed cleanly), with F = the counter:
//   1. before serving, the heap's allocation bitmaps are copied to DRAM
//      (Heap::snapshot_allocated: O(chunks), a memcpy of the bitmaps; 7 ms
//      for a 1M-key pool here), sweep_pending is persisted, F-1 and F are
//      appended to the failure list (entries, then the count, persisted),
//      then the counter := F+1, persisted (paper §3.4). Nothing else
//      happens before the store serves: buckets are repaired by the updates
//      that touch them (paper Fig. 7c).
//   2. DEPARTURE (paper: "a sweep of the heap that reclaims any node not
//      found on a bucket list", details left open): a background thread
//      recounts the keys, then marks every record on a valid list, and frees
//      every block of the copy that is not a segment, not marked and not
//      freed by anyone since open. Whatever leaves a list meanwhile is
//      retired, and retire() marks it; every free since open goes into a
//      DRAM set first, so a block that a new record took is never taken for
//      garbage, and the sweep claims each block in that set before freeing
//      it. When the frees are durable, sweep_pending is cleared; a close
//      before that leaves it set, and the next open sweeps. check() reports
//      leaks only once the sweep ended.
//   A clean close fences twice, so the counter vouches for everything, and
//   open starts in the counter's epoch without failing any.
//
// Failure list capacity: 1000 entries (500 crashes). DEPARTURE: the paper
// keeps the list forever. When it is full, recovery first rewrites every
// bucket, and the shape, so that its valid value is reached through epochs
// that did not fail (an update to its own valid head, in the new epoch),
// fences, and empties the list; that one open is O(buckets).
//
// ---------------------------------------------------------------------------
// check() verifies
// ---------------------------------------------------------------------------
//   the root's shape is the one in use and every segment it needs is
//   allocated, sized and labelled; every status word well formed with ss
//   not above the counter; along every valid list: records allocated and
//   well formed, written epochs non-increasing and none failed, versions
//   not above the written epoch and non-increasing per key, each key in
//   the bucket the shape gives it, no record on two lists, the list finite;
//   the item count; once the sweep has run, every allocated block is a
//   segment, a record on a valid list or a retired record (no leak).
#pragma once

#include "engine/index.h"

namespace pmhash::engine::dali {

extern const EngineInfo kEngineInfo;
// What dali is and the options it takes (descriptor.cc).
extern const EngineDescriptor kDescriptor;

// dali's options ("dali.<option>", descriptor.cc has their docs and
// ranges) as typed values, read once when the index starts.
struct Config {
  unsigned initial_log2 = 0;
  unsigned lock_timeout_ms = 0;

  static Config from(const Options& options);
};

}  // namespace pmhash::engine::dali
