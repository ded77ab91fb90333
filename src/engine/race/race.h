// engine/race/race.h - RACE hashing, the baseline sephash is measured
// against: "One-sided RDMA-Conscious Extendible Hashing for Disaggregated
// Memory" (Zuo, Hua et al., USENIX ATC 2021), on the same remote layer as
// sephash (docs/design/sephash.md section 6). We hold no copy of the paper;
// the design below follows the facts issue 8 lists, and says where it
// departs (DEPARTURE) or fills a gap (GAP).
//
// The index lives on memory nodes (remote/memnode.h) and is reached only
// with one-sided verbs (remote/client.h); the nodes run no index logic.
// Byte layouts are in layout.h. Any number of client threads, in any number
// of processes, may use one index at once.
//
// Structure (extendible hashing). A directory of 2^max_depth words on node
// 0 names, for the low hash bits of h1 (the suffix), a subtable, with its
// local depth and a split lock bit. All 2^max_depth words are kept current
// (a split rewrites the words of both its halves), so raising the global
// depth copies nothing; clients cache the first 2^global_depth words. A
// subtable is an array of `race_groups` bucket groups; a group is 3 buckets
// of 64 bytes, main | overflow | main, and the overflow bucket is shared by
// its two main buckets. A bucket's word 0 is its header (local depth,
// suffix); words 1..7 are entry slots (fingerprint 8 bits, KV length in
// 64-byte units 8 bits, KV pointer 48 bits). A main bucket and its overflow
// bucket are adjacent (the "combined bucket", 128 bytes): one READ.
// Subtable with suffix p lives on node p mod nodes; a KV block lives on the
// node of the subtable its writer saw (the pointer names the node, so
// splits never move blocks).
//
//   subtable:  | group 0                       | group 1 | ...
//              | main 0 | overflow | main 1   |
//              |<-- combined 0 -->|
//                       |<-- combined 1 -->|
//   bucket:    | header | slot 1 | ... | slot 7 |   (8-byte words)
//
// Hashes. The suffix is h1's low bits; the two main buckets are
// (h1 >> 32) mod 2G and h2 mod 2G (G groups; the next bucket when both
// agree); the fingerprint is h2's top byte. A key's buckets have the same
// positions in every subtable, which the split relies on.
//
// KV blocks (GAP: the checksum's form). Header (XXH3-64 checksum of the
// rest, key and value lengths, h1), key, value; written once before any
// slot names it and never changed (no reclamation: RACE has none either,
// and neither do we: blocks of updated and removed keys, and those of
// inserts that lost a race, stay allocated). A block whose checksum fails
// is read again (Stats::read_retries) and, past the timeout, Corruption.
// Allocation: per-client 64 KiB chunks by FAA on the node's bump word
// (engine/remote_index.h), subtables and the directory by FAA directly.
//
// Reading a key's buckets (every operation): one round trip READs both
// combined buckets and then, in the same batch, each one's first header
// word again. The view is good when the four headers and both trailing
// reads agree, and the header's suffix matches the key's low `depth`
// bits; a suffix mismatch (a stale directory cache) re-reads the directory
// and tries again; disagreeing headers (a split rewrote them meanwhile)
// read again. Verbs of a batch to one node run in order, and a READ copies
// words in ascending order with acquire loads (remote layer).
//
// Search (2 round trips): the view; then the KV blocks of the slots whose
// fingerprint matches, compared by key. Of several entries of one key (a
// transient state of concurrent inserts, below) the lowest address counts.
//
// Insert (3 round trips; 4 when a fingerprint matches): (1) WRITE the KV
// block and READ the view in one batch; [(1b) READ the blocks of
// fingerprint matches: the key present is AlreadyExists]; (2) CAS a free
// slot from 0 to the entry, and READ that bucket's header after it: the
// less loaded combined bucket (the one with more free slots, the first on
// a tie), its main bucket's first free slot, else its overflow's; (3) READ
// the view again [and the blocks of fingerprint matches below our slot]:
// if another entry of the key sits at a lower address, ours is removed
// (CAS to 0) and the insert reports AlreadyExists (an upsert updates that
// entry instead). Both buckets full: split, then again. The slot choice is deterministic, so inserters of one key that
// saw the same buckets race for the same slot and the CAS picks one.
// Update, upsert of a present key, remove: (1) WRITE the new block, READ
// the view; (2) the candidates' blocks; (3) CAS the key's slot from the old
// word to the new entry (remove: to 0); a failed CAS looks again.
//
// Concurrent inserts of one key: each inserter whose entry stands saw no
// lower entry of the key at its step (3); an inserter seeing a lower one
// removes its own. When the two re-reads see each other, exactly the
// higher one loses. GAP (as in the paper's rule): if the lower slot's CAS
// lands after the higher inserter's re-read, and both inserters' first
// reads saw the key absent but not the same free slots (a third client
// freed a slot in between), both return OK; the key then has two entries,
// all operations act on the lower one, and a remove of it makes the other
// visible. Inserters that saw the same buckets pick the same slot (and
// all but one CAS fail and then see the winner's entry), so when nothing
// else writes those buckets meanwhile exactly one insert returns OK
// (RaceTest.ConcurrentInsertsOfOneKeyExactlyOneSucceeds). An
// insert in flight may be seen by a reader and then removed (it lost):
// inserts are linearizable only once they have returned.
//
// Split (DEPARTURE in mechanism: the paper moves entries one by one under
// the directory lock while inserts go on; we freeze the subtable first, so
// writers wait for the split while readers do not). A client that finds
// both combined buckets full splits the subtable (depth d, suffix s) by
// hash bit d into itself and a new one (suffix s | 1 << d, depth d + 1):
//   (0) CAS the lock bit into directory word s (from the exact word: a
//       stale splitter fails); allocate the new subtable;
//   (1) freeze: READ the subtable, then CAS every entry slot from the word
//       read to the word with the frozen bit (free slots too), again for
//       those that changed, until all are frozen. From then on no writer's
//       CAS can match any slot (they expect unfrozen words), so the entries
//       are fixed; writers that see a frozen slot wait for the thaw;
//   (2) READ every entry's KV header (h1: which half it belongs to);
//   (3) WRITE the new subtable whole: headers (d + 1, s | 1 << d), the
//       entries with bit d set, each at the same slot as in the old one
//       (the same combined buckets; duplicates keep their order);
//   (4) WRITE the directory words of the new half; CAS the global depth up;
//   (5) WRITE the old subtable's headers (d + 1, s);
//   (6) CAS every old slot from its frozen word to its new one: 0 for a
//       moved entry, the entry thawed otherwise ("entry by entry", one
//       doorbell batch);
//   (7) WRITE the directory words of the old half (depth d + 1), the word
//       s last, which releases the lock.
// Stats: expansions (splits), items_moved (entries moved), bytes_moved
// (the new subtable, the old one's headers and slots, directory words),
// read_retries (views read again because a split tore them, waits for a
// thaw, strays taken back, KV blocks read again after a bad checksum).
//
// Readers during a split never miss a key present before they started:
// before (4) no directory word names the new subtable and the old one
// holds every entry (frozen entries are read like others); after (4) a
// reader that comes by the directory to the new subtable finds every moved
// entry there (written in (3)); a reader that comes to the old one with an
// old directory sees old headers until (5) and the entries still there
// until (6). A reader whose view includes a slot cleared by (6) read that
// slot after (5) completed, so its trailing header read, later in the same
// batch, returns the new header: the view is torn (first header old) or
// names another suffix, and the reader goes to the new subtable.
// RaceTest.ReadersDuringEachSplitStepFindEveryKey stops a split after each
// step and reads every key from another client.
//
// Writers during a split: frozen slots make every CAS on the old subtable
// fail, and a writer whose view shows a frozen slot waits (yields) until
// the thaw, then reads again (and follows the suffix to the new subtable).
// An insert whose entry was frozen before its re-read (3) waits the same
// way; its entry keeps its place in whichever subtable now holds the key.
// So no writer changes an entry the split copied. One ABA remains: a free
// slot goes 0, frozen, 0 again through a whole split, so an insert that
// read it free before the split can CAS it after, into a subtable its key
// has left (a stray). The header READ after the CAS (step 2) catches that:
// the split rewrote the headers before the thaw, so a changed header whose
// suffix no longer matches the key means the CAS came after (5) or before
// (1). The insert then CASes its entry back to 0: success means a stray
// (never visible: any reader of the slot reads the new header after it)
// and the insert starts again; failure means the split had captured the
// entry, which now stands in the key's new subtable. (Found by
// RaceProcessTest, whose single clients keep stale directories longest.)
// GAP: a second split of the same subtable that freezes a stray between
// the CAS and its undo would keep it, unreachable (space only).
//
// Durability. Every round trip's writes are durable when it completes
// (remote layer), and a call returns after its last round trip: writes are
// strict. A node restarted from its pool file serves every completed write.
//
// Membership and generation (engine/remote_index.h). The create records
// which nodes make up the index, in which order, under a random index id
// and a generation, in every node's membership record (outside this
// index's root); every attach verifies the nodes against node 0's list
// before it reads the root, and refuses a wrong, swapped, duplicate,
// missing, extra or fresh node with one line naming its position. A create
// over nodes that held an index (force) takes the next generation, waits
// out the old one's lease, then formats; every batch of a client goes
// through its session's fence, so a client of the old generation fails its
// next call ("memory nodes were created again ...: open the index again")
// and writes nothing into the new index.
//
// Lease (GAP: RACE has no lease; the fence needs one). Race keeps, in the
// membership stamp, a lease of twice the remote timeout its create used
// (kDefaultTimeoutMs when Options::remote_timeout_ms is 0). Clients use the
// timeout they give, which may not exceed lease/2 (refused, naming both
// numbers), or lease/2 for 0; a forced create waits the old index's lease.
// ASSUMED, as the fence states: a batch executes within lease/2 of its
// post, and the clocks of clients and creators run at the same rate.
//
// Failure. A node that dies mid-call fails the call with IOError naming it
// (whether the last round trip ran is unknown). A split that fails after
// (1) leaves its subtable frozen and locked: reads go on; writes to it
// return Busy after the timeout (the same limitation as sephash's merge
// lock: nothing recovers a split whose client died). A split that fails
// at (0) (NoSpace: the node of the new subtable is full) unlocks and
// changes nothing. for_each is not a snapshot while splits run (an entry
// being moved can be listed twice); check() expects a quiescent index.
//
// check() verifies: no directory word locked; words beyond 2^global_depth
// repeat the ones below; each subtable's headers all equal, with the depth
// of its directory words and a suffix matching every word that names it;
// no frozen slot; every KV block's checksum; every entry's fingerprint and
// stored hash match its key, its key belongs to the subtable and sits in
// one of its two combined buckets; no key has two entries.
#pragma once

#include <functional>

#include "engine/index.h"

namespace pmhash::engine::race {

extern const EngineInfo kEngineInfo;

// Limits of the create options (Options::race_*).
inline constexpr unsigned kMaxDepth = 20;
inline constexpr unsigned kMinGroups = 2;
inline constexpr unsigned kMaxGroups = 4096;
// The remote timeout of a create that gives none (Options::remote_timeout_ms
// 0): the index's lease is twice the create's timeout.
inline constexpr unsigned kDefaultTimeoutMs = 1000;

// Tests: the steps of a split (race.h, "Split") after which the hook runs,
// on the splitting thread, while the subtable is locked.
enum class SplitStep { kFrozen, kNewTableWritten, kDirectoryUpdated, kHeadersUpdated };
void set_split_hook_for_testing(std::function<void(SplitStep)> hook);

}  // namespace pmhash::engine::race
