// engine/race/race.h - RACE hashing, the baseline sephash is measured
// against: "One-sided RDMA-Conscious Extendible Hashing for Disaggregated
// Memory" (Zuo, Hua et al., USENIX ATC 2021), on the same remote layer as
// sephash. The design below says where it departs from the paper
// (DEPARTURE) or fills a gap the paper leaves (GAP); docs/design/race.md
// has the reasons, the measurements and the tests.
//
// The index lives on memory nodes (remote/memnode.h) and is reached only
// with one-sided verbs (remote/client.h); the nodes run no index logic.
// Any number of client threads, in any number of processes, may use one
// index at once. Files: this header (the design), layout.h (the constant
// of every field below), race_index.h (the client), race_ops.cc (reads
// and writes), race_split.cc (splits), race_takeover.cc (waits, leases,
// takeovers), race_check.cc (scan, check), race.cc (create, open, the
// Index interface).
//
// Sections: 1 structure and bytes; 2 reading a key's buckets; 3 search;
// 4 insert, update, upsert, remove; 5 split; 6 readers and writers during
// a split; 7 dead splitters; 8 durability, membership, the lease; 9 what a
// crash leaves; 10 invariants (check); 11 compare and swap; 12 scan.
//
// ---- 1. Structure and bytes (extendible hashing) ---- A directory of 2^max_depth words on node
// 0 names, for the low hash bits of h1 (the suffix), a subtable, with its
// local depth. All 2^max_depth words are kept current
// (a split rewrites the words of both its halves), so raising the global
// depth copies nothing; clients cache the first 2^global_depth words. A
// subtable is an array of `race.groups` bucket groups; a group is 3 buckets
// of 64 bytes, main | overflow | main, and the overflow bucket is shared by
// its two main buckets. A bucket's word 0 is its header (local depth,
// suffix); words 1..7 are entry slots (fingerprint 8 bits, KV length in
// 64-byte units 8 bits, KV pointer 48 bits). A main bucket and its overflow
// bucket are adjacent (the "combined bucket", 128 bytes): one READ. After
// the groups, a 64-byte trailer holds the subtable's split lock and the
// intent of the split that holds it ("Split", "Dead splitters").
// Subtable with suffix p lives on node p mod nodes; a KV block lives on the
// node of the subtable its writer saw (the pointer names the node, so
// splits never move blocks).
//
//   subtable:  | group 0                       | group 1 | ... | trailer |
//              | main 0 | overflow | main 1   |
//              |<-- combined 0 -->|
//                       |<-- combined 1 -->|
//   bucket:    | header | slot 1 | ... | slot 7 |   (8-byte words)
//
//   directory word:  63 zero | 62..56 local depth | 55..48 node | 47..0 offset
//   bucket header:   63..56 local depth | 55..0 suffix (equal in all buckets
//                    of a subtable, but while a split rewrites them)
//   entry slot:      63..56 fp | 55..48 KV units (0: longer) | 47 frozen |
//                    46..39 KV node | 38..0 KV offset / 64     (0 = free)
//   trailer (64 B):  +0 lock word: 63 locked, 62..0 seq | +8 intent: new
//                    subtable's directory word | +16 intent: header at
//                    the lock (d, s) | +24 intent seq | +32 zero
//   KV block:        +0 checksum | +8 key length (u32) | +12 value length
//                    (u32) | +16 h1 | +24 key | value   (64-byte aligned)
//   root (node 0):   magic (written last) | layout version | nodes |
//                    directory offset | depths | groups | global depth
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
// is read again (race.read_retries) and, past the timeout, Corruption.
// Allocation: per-client 64 KiB chunks by FAA on the node's bump word
// (engine/remote_common/remote_index.h), subtables and the directory by FAA directly.
//
// ---- 2. Reading a key's buckets (every operation) ----
// one round trip READs both
// combined buckets and then, in the same batch, each one's first header
// word again. The view is good when the four headers and both trailing
// reads agree, and the header's suffix matches the key's low `depth`
// bits; a suffix mismatch (a stale directory cache) re-reads the directory
// and tries again; disagreeing headers (a split rewrote them meanwhile)
// read again. Verbs of a batch to one node run in order, and a READ copies
// words in ascending order with acquire loads (remote layer).
//
// ---- 3. Search (2 round trips) ----
// the view; then the KV blocks of the slots whose
// fingerprint matches, compared by key. Of several entries of one key (a
// transient state of concurrent inserts, below) the lowest address counts.
//
// ---- 4. Insert (3 round trips; 4 when a fingerprint matches), update,
// upsert, remove ----
// (1) WRITE the KV
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
// ---- 5. Split ----
// DEPARTURE in mechanism ( the paper moves entries one by one under
// the directory lock while inserts go on; we freeze the subtable first, so
// writers wait for the split while readers do not). A client that finds
// both combined buckets full splits the subtable O (depth d, suffix s) by
// hash bit d into itself and a new one N (suffix s1 = s | 1 << d, depth
// d + 1). The split lock and the intent live in O's trailer (layout.h);
// "the lock word" is its first word, (locked, seq). In this order, each
// round trip complete (so durable) before the next is posted:
//   (0) READ the lock word (locked: wait, below); CAS it from the word read
//       to (locked, seq + 1), and in the same sub-batch READ all of O after
//       the CAS. A CAS that fails means another client locked or split O
//       first: look again. Headers other than the view's mean O split
//       since the view: release (see 8) and look again. Allocate N (an
//       FAA on its node, suffix s1 mod nodes); NoSpace: release.
//   (1) freeze: CAS every entry slot from the word read to the word with
//       the frozen bit (free slots too), again for those that changed,
//       until all are frozen. From then on no writer's CAS can match any
//       slot (they expect unfrozen words), so the entries are fixed;
//       writers that see a frozen slot wait for the thaw;
//   (2) READ every entry's KV header (h1: which half it belongs to);
//   (3) WRITE N whole: headers (d + 1, s1), the entries with bit d set,
//       each at the same slot as in O (the same combined buckets;
//       duplicates keep their order), a zero trailer;
//   (I) WRITE the intent into O's trailer: N's directory word and O's
//       header (d, s), then, as a WRITE of its own, the intent seq = the
//       lock's seq. In (3)'s sub-batch when N and O share a node (it runs
//       in order), else in the next round trip. So wherever the seq is
//       durable, N and the intent's other words are whole (a node that
//       loses power mid-batch keeps a prefix of its writing verbs, the
//       last torn at 8-byte words at worst: remote/transport.h). Nothing
//       before (I) is destructive: O still holds every entry (frozen,
//       which only makes writers wait), its headers and the directory are
//       as before, and nothing names N;
//   (4) the directory words of the new half (s1, s1 + 2^(d+1), ...) that
//       name a subtable of depth <= d are CASed to N's word (from O's word
//       at depth d; a CAS that finds another such word, an ancestor whose
//       own split is not finished, is made again from that word; a word of
//       depth >= d + 1 is left: this split, a taker of it, or N's own
//       splits wrote it already); then CAS the global depth up to d + 1;
//   (5) WRITE O's headers (d + 1, s);
//   (6) CAS every O slot from its frozen word to its new one: 0 for a
//       moved entry or a free slot, the entry thawed otherwise ("entry by
//       entry", one doorbell batch);
//   (7) the directory words of O's half (s, s + 2^(d+1), ...) the same way
//       as in (4), to O's word at depth d + 1;
//   (8) release: CAS the lock word from (locked, seq) to (unlocked, seq +
//       1), once (7) has completed.
// The directory words are CASed, not written, so that the order in which
// this split, a taker of it, N's own splits and a taker of an ancestor's
// split change them does not matter: each word ends naming the deepest
// subtable of its suffix (a CAS moves a word only deeper).
// Properties: race.splits, race.items_moved (entries moved), race.split_bytes
// (the new subtable, the intent, the old one's headers and slots,
// directory words), race.lock_takeovers, race.read_retries (views read again because
// a split tore them, waits for a thaw, strays taken back, KV blocks read
// again after a bad checksum).
//
// ---- 6. Readers and writers during a split ----
// Readers during a split never miss a key present before they started:
// before (4) no directory word names the new subtable and the old one
// holds every entry (frozen entries are read like others); after (4) a
// reader that comes by the directory to the new subtable finds every moved
// entry there (written in (3)); a reader that comes to the old one with an
// old directory sees old headers until (5) and the entries still there
// until (6). A reader whose view includes a slot cleared by (6) read that
// slot after (5) completed, so its trailing header read, later in the same
// batch, returns the new header: the view is torn (first header old) or
// names another suffix, and the reader goes to the new subtable. A split
// undone (below) changed nothing a reader looks at but the frozen bits.
// Readers never wait for a
// split, except on headers that stay torn: a split cut short in (5), which
// they take over like writers (below).
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
// entry, which now stands in the key's new subtable. A split undone
// thaws its slots with the headers unchanged: an insert landing in a slot
// so freed is in its key's subtable, as if no split had begun. GAP: a second split of the same subtable that freezes a stray
// between the CAS and its undo would keep it, unreachable (space only).
//
// ---- 7. Dead splitters ----
// The design of sephash's dead lock holders (sephash.h, section 9),
// applied to the split. A splitter that dies (killed, host lost), stalls,
// or loses a batch anywhere between (0) and (8), or a memory node that
// loses power meanwhile, would leave O locked and frozen for good. Instead:
//   Waiters. Every loop that waits on a split reads O's lock word: a
// writer that sees a frozen slot, an insert whose entry was frozen, a
// splitter whose lock word is locked, a reader whose view stays torn, and
// check(), which waits out every subtable's lock before it reads anything
// (so a client attaching after a crash recovers by running check()). A
// waiter that has seen the same locked word for the index's lease ("Lease"
// below) takes over: it CASes the word from (locked, q) to (locked, q +
// 2^32), one taker wins, and in the same sub-batch it READs all of O
// after the CAS. A waiter gives Busy only when what it waits on made no
// progress for lease + remote timeout (the lock word unchanged and not
// locked, yet slots frozen or headers torn: damage; a locked word is taken
// over instead), or after 16 leases (at least 2 s) of takeovers that did
// not finish (each taker stops at half its lease; the next one takes over
// again).
//   Forward or back. The intent is this lock's when its seq is not 0 and
// equals the lock's seq in the low 32 bits (a takeover adds 2^32, so the
// holder's intent is recognised through any number of takeovers). Then
// the taker rolls FORWARD: from the intent it takes N, d and s (checked:
// N's depth d + 1, O's headers (d, s) or (d + 1, s), else Corruption),
// from O the slots still frozen, and for each the same new word as the
// holder (its entry's KV block is read again for h1: blocks never change
// once named), and runs (4) to (8). Otherwise it rolls BACK: no intent of
// this lock stands, so nothing destructive ran (the directory, the
// headers and every entry are as at the lock; N, if written, is named by
// nothing and leaks): it CASes every frozen slot back to its thawed word
// and releases (seq + 1).
//   What a taker finds after a crash or death at each step. After (0): a
// lock, nothing frozen: back. In (1) or (2): some or all slots frozen:
// back. In (3): N partly written: back. In (I): the intent's words partly
// written, its seq not (the seq is a single 8-byte word, written after
// the others: old or new, never torn): back; the seq written: forward.
// In or after (4): some new-half words name N, whose moved entries are
// all there (readers already go to it): forward. In (5): headers mixed
// (readers see torn views until the taker rewrites them): forward. In
// (6): some slots rewritten, the rest still frozen: forward, for the rest.
// In (7) or before (8) completes: forward (nothing frozen; the headers
// written again with the same bytes; the words by CAS).
//   Why a taker's writes are the holder's or harmless. (5) writes the
// bytes the holder wrote or would write. (6) CASes a slot from its frozen
// word, which only a lock holder changes, to the word the holder chose,
// a function of the frozen entry and its immutable block; a slot (6)
// rewrote already is no longer frozen, so the CAS fails and changes
// nothing. (4) and (7) only move words deeper. (8) is a CAS from the
// lock word held: it fails if someone took over since. Roll-back's thaw
// CASes from frozen words as well, and a lock without a standing intent
// has written nothing else but N (unnamed).
//   No lock word recurs. Every change of a lock word raises its seq (a
// lock and a release by 1, a takeover by 2^32), so a waiter that saw one
// locked word for a lease saw one holder (or one taker) all along, and no
// older lock's intent passes as this lock's: between them, a release and
// a lock changed the low 32 bits (assumed: fewer than 2^31 locks of one
// subtable; seq has 63 bits, so 2^31 takeovers of one lock).
//   Fencing. A holder, the splitter or a taker, begins no batch that
// writes to O, N, the directory or the global depth later than lease/2
// after it sent its lock (or takeover) CAS (its clock is read before the
// CAS, so no later than the lock). Past it, it stops and leaves the lock:
// a splitter's call returns Busy ("took more than half its lease"), a
// taker's waiter waits on and someone takes over again. A waiter takes
// over only after a whole lease of the same word, so (by the assumption
// under "Lease") every batch the slow holder began has executed by then,
// and it begins no other. A splitter that fails before freezing (NoSpace
// at (0), a lost allocation reply) releases at once; once a freeze batch
// was posted, a failure (IOError: the batch may still run) leaves the
// lock for a taker, as does a lost lock-CAS reply.
// ---- 8. Durability, membership, the lease ----
// Durability. Every round trip's writes are durable when it completes
// (remote layer), and a call returns after its last round trip: writes are
// strict. A node restarted from its pool file serves every completed write.
//
// Membership and generation (engine/remote_common/remote_index.h). The create records
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
// Lease (GAP: RACE has none; the generation fence and the split takeover
// need one). Race keeps, in the membership stamp, a lease of twice the
// remote timeout its create used (kDefaultTimeoutMs when
// Options::remote_timeout_ms is 0): 2 s by default. Clients use the
// timeout they give, which may not exceed lease/2 (refused, naming both
// numbers), or lease/2 for 0; a forced create waits the old index's lease;
// a dead split is taken over after a lease. ASSUMED, as the fence states:
// a batch executes within lease/2 of its post (a process stopped between
// its clock check and its post, or a tcp request that its client gave up
// on and that the network delivers later, breaks it), and the clocks of
// clients and creators run at the same rate.
//
// ---- 9. What a crash leaves ----
// A client that dies leaves the KV blocks it had written and not yet
// named, and the rest of its chunks: they leak (nothing is reclaimed). An
// insert whose slot CAS landed stands, with its block durable before it;
// one that lost the lowest-address rule at its re-read may leave its entry
// until its own removal CAS, which a dead client never sends: the key then
// has two entries, of which every operation uses the lower one (as in the
// GAP of section 4). A split it ran is finished or undone by the first
// waiter that sees its lock for a lease (section 7; a new subtable such
// a split wrote, when undone, leaks); there is no recovery
// pass at open: a client attaching after a crash recovers by running
// check(), or lazily, as its waits take dead splits over.
//   A node that dies mid-call fails the call with IOError naming it
// (whether the last round trip ran is unknown). A split whose client
// fails leaves its subtable locked until a waiter takes it over, a lease
// later ("Dead splitters"); reads of it go on meanwhile. for_each is not a
// snapshot while splits run (an entry being moved can be listed twice);
// check() expects a quiescent index, apart from dead splits, which it
// finishes or undoes first.
//
// ---- 10. Invariants ----
// check() verifies, once every subtable's split lock is released (waited
// for, or taken over from a dead splitter): no directory word with bit 63
// set; words beyond 2^global_depth repeat the ones below; each subtable
// unlocked, its headers all equal, with the depth of its directory words
// and a suffix matching every word that names it; no frozen slot; every
// KV block's checksum; every entry's fingerprint and stored hash match its
// key, its key belongs to the subtable and sits in one of its two
// combined buckets; no key has two entries.
//
// ---- 11. Compare and swap (the write path of section 4; 3 round trips
// for a present key, 2 for a Conflict, 7 from absence) ----
// A swap reads the view and its candidates' blocks as an update does
// (round trips 1 and 2), and compares the key's entry (the lowest, the one
// every operation uses) with the expected state:
//   - not as expected: Conflict, as of that view (a search's answer); absent
//     and to stay absent: OK, nothing written;
//   - present as expected: (3a) WRITE the new block (none when the key is
//     to be removed), complete before (3b) CAS the entry's slot from the
//     word compared to the new entry, or to 0. A CAS that fails looks
//     again, and compares again;
//   - absent as expected: under the subtable's split lock, (L) READ the
//     lock word (held: wait, and take over after a lease, as a splitter
//     does), CAS it to (locked, seq + 1); the view again, which must show
//     the same subtable with the same headers (else release, look again)
//     and the key still absent (else Conflict); the block WRITE; the
//     insert's steps (2) and (3), the free slot's CAS and the re-read (a
//     lower entry of the key makes the swap take its own back: Conflict);
//     release (CAS to (unlocked, seq + 1)). Both buckets full: release,
//     split, again.
// The block is written only once the swap is to write (a Conflict costs
// none; blocks are never reclaimed). Persist order: the block durable
// before the CAS that names it, the CAS durable when the swap returns.
//   The lock is the split's, and a swap holds it as a splitter would,
// without freezing anything and without an intent: writers do not look at
// the lock word, splits of the subtable and other swaps from absence wait
// for it, a waiter that sees it for a lease takes it over and, finding no
// intent of this lock, rolls back (nothing frozen) and releases. The swap
// writes nothing past lease/2 after its lock CAS (section 7, "Fencing").
//   Atomicity. For a present key, the comparison and the write are one
// CAS on the word compared: every write of a present key changes that
// word first (update, upsert, remove and swap CAS it; a split freezes it,
// and writers wait for the thaw), and a word equal to the one compared
// names the same block, whose bytes never change (blocks are neither
// changed nor reused), so the same value. For an absent key, swaps from
// absence of one subtable hold its lock one at a time, so each reads the
// view after the previous one's entry stood or was taken back: of
// concurrent swaps from absence exactly one succeeds. GAP: a plain insert
// (or an upsert of an absent key) takes no lock, and races a swap from
// absence as two inserts race (section 4): when a third client freed a
// slot between their reads both may succeed, and the key then has two
// entries, of which the lower counts.
//   Durability. As an update's: the block is durable before the slot's CAS
// and the call returns once the CAS is durable; a crash leaves the old
// entry or the new one. A Conflict depends on the view as a get's answer
// does (remote/transport.h, "Visibility comes before durability").
//
// ---- 12. Scan (Index::scan, race_check.cc; 2 round trips per subtable
// a call reads, 3 when a KV block is longer than its slot says, +2 when
// the client's directory copy is stale) ----
// Cursor: a position in the hash space, position = reverse_bits(h1)
// (engine/hash.h): all 64 bits, no other field. The directory picks a
// subtable by h1's low bits, so the subtable (d, s) holds exactly the keys
// whose positions have reverse_bits(s) in their top d bits: one contiguous
// range [reverse_bits(s), reverse_bits(s) + 2^(64-d)), and its split by
// bit d gives the two halves of that range, O the lower (bit d clear),
// N the upper. A call starts at the subtable covering position `cursor`
// (its suffix: the low bits of reverse_bits(cursor) through the
// directory, the headers deciding, as for a key with that h1), reads it
// whole and passes its keys at positions >= cursor in position order,
// then the subtables that follow in position order (each from the end of
// the previous one's range), until `count` keys were passed or a range
// ends at 2^64. A part is thus a position range of one subtable: the
// call stops inside a subtable once it has `count` keys (never between
// two keys of one position), and *next is the position of the first key
// it left there, or the end of the last range read (0: wrapped, the scan
// is over). So a small count costs a whole subtable read per call (a
// subtable of G groups holds up to 21 G keys; the next call reads it
// again from its cursor on). Every value is a cursor, decoded without
// anything per-open: valid across splits, across clients and across a
// reopen.
//   Reading a subtable: ONE READ of the whole subtable (groups and
// trailer) and, after it in the same batch, a READ of its first header
// again; the read is used when every bucket header and the re-read are
// equal (hd), and hd's suffix matches the position at hd's depth
// (otherwise the directory copy is stale: read it again, and look again;
// headers torn: read again, watching the split lock as readers do, so a
// dead split is taken over after a lease). The keys passed are those of
// entries (frozen or not) whose key belongs to (depth, suffix) of hd; of
// several entries of a key, the one at the lowest address (section 3).
//   Why a key present throughout is passed. The calls' ranges tile the
// position space: call k covers [cursor_k, next_k), and next_k is the next
// call's cursor; a part ends after the cursor it started from (it passes
// at least one key, and next is above that key's position, or it ends at
// its range's end), so the ranges are disjoint and a scan that ends has
// covered [0, 2^64). A key K of position p therefore falls in exactly one
// part visited, and every key of that part's subtable read with position
// in the part was passed; the read had header hd = (d, s) matching p, and
// K's entry was in it:
//   - hd is the subtable's header before a split (d, s), as was the
//     re-read: the split's step (5) had not completed when the re-read
//     ran (it would have rewritten this header), so (6), the only step
//     that clears an entry (after (5) completes), had not begun before
//     the READ ended: every entry of O was still in it, K's (moved or
//     not) among them, frozen or not (a freeze keeps the word);
//   - hd is the header after a split (d + 1, s): K has bit d clear, so
//     its entry stays in O through (6) (rewritten thawed to the same
//     word), whenever the READ ran; entries that (6) has not cleared yet
//     but whose keys moved to N are dropped by the filter (they are N's,
//     and N's range is visited on its own);
//   - a later split of the same subtable: its (5) would change the first
//     header, which the re-read shows unchanged, so its (6) cleared
//     nothing before the READ ended.
// Splits between calls change nothing of this: the next call starts at a
// position, not at a subtable, and the subtable now covering it is
// whichever split of the one before (a cursor in the middle of a
// subtable's range stays a position, whatever that subtable became). A
// write to K (update, upsert) CASes K's one slot word: the READ sees the
// old or the new entry, both K's. Without writes each key is in one
// subtable, whose range is visited once in disjoint parts: passed exactly
// once. A scan from another client than the splitter's sees the same
// memory nodes: nothing of the argument is client state.
//   Termination and cost: each part ends strictly after the position it
// started from, so a call visits at most 2^max_depth subtables and a scan
// without writes makes at most keys / count + subtables calls; per
// subtable one READ of table_bytes plus the 8-byte re-read, and one
// batch of KV block READs (a second for blocks longer than their slot's
// length field). The loops on torn headers and a stale directory give up
// as readers do (Busy after a lease and the timeout; a dead split is
// taken over). A depth beyond max_depth is Corruption; a KV block that
// keeps failing its checksum too. DRAM: the subtables one call visits
// (their keys and values are copied; fn runs after the last READ, with no
// session held).
#pragma once

#include <functional>

#include "engine/index.h"

namespace pmhash::engine::race {

extern const EngineInfo kEngineInfo;
// What race is and the options it takes (descriptor.cc).
extern const EngineDescriptor kDescriptor;

// race's options ("race.<option>", descriptor.cc has their docs and
// ranges) as typed values, read once when the index starts.
struct Config {
  unsigned initial_depth = 0;
  unsigned max_depth = 0;
  unsigned groups = 0;

  static Config from(const Options& options);
};

// Limits of the create options (race.initial_depth, race.max_depth, race.groups; descriptor.cc).
inline constexpr unsigned kMaxDepth = 20;
inline constexpr unsigned kMinGroups = 2;
inline constexpr unsigned kMaxGroups = 4096;
// The remote timeout of a create that gives none (Options::remote_timeout_ms
// 0): the index's lease is twice the create's timeout.
inline constexpr unsigned kDefaultTimeoutMs = 1000;

// The steps of a split ("Split" above) after which a test's split hook
// (race_testing.h) runs, on the thread of the lock's holder, while the
// subtable is locked.
enum class SplitStep {
  kLocked,              // (0) the lock taken, the subtable read; nothing frozen
  kFrozen,              // (1) every slot frozen
  kNewTableWritten,     // (3) the new subtable written; no intent
  kIntentWritten,       // (I) the intent written
  kDirectoryUpdated,    // (4) the new half's directory words and the global depth
  kHeadersHalfUpdated,  // (5) half of the old subtable's headers rewritten
  kHeadersUpdated,      // (5) all of them
  kSlotsHalfRewritten,  // (6) half of the frozen slots rewritten
  kSlotsRewritten,      // (6) all of them
  kDirectoryFinished,   // (7) the old half's directory words; the lock still held
};

}  // namespace pmhash::engine::race
