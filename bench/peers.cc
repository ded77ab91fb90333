// bench/peers.cc - the five tables pmhash is measured against, each behind
// the interface of bench/table.h, and the registry that makes them by name.
// The DRAM maps live in peers_volatile.cc, the file peers in peers_files.cc.
//
//   libcuckoo  libcuckoo::cuckoohash_map<string, string>: concurrent cuckoo
//              hashing with striped bucket locks, in DRAM.
//   tbb        oneTBB's concurrent_hash_map<string, string>: chained buckets
//              with a reader-writer lock per item, in DRAM.
//   std        std::unordered_map under one std::shared_mutex (shared for
//              get, exclusive for writes): what a user writes by hand.
//   lmdb       LMDB: a copy-on-write B+tree in a memory-mapped file; one
//              writer at a time, readers never block.
//   rocksdb    RocksDB: an LSM tree behind a write-ahead log (WAL).
//
// Durability (each table's durability() says which it gives):
//
//   The DRAM maps keep nothing across a crash: "none (volatile DRAM)". They
//   are the ceiling of a concurrent hash table that need not persist
//   anything, and a result table labels them so; they are never a rival in
//   pmhash's durability class.
//
//   lmdb and rocksdb get pmhash's two modes (TableConfig::durability):
//     strict  an acknowledged call survives a crash.
//             lmdb:    LMDB's default flags, each write transaction is
//                      synced at commit: "strict: fdatasync per write
//                      transaction".
//             rocksdb: WriteOptions::sync: "strict: WAL fsync per write".
//     epoch   a call survives once its epoch is durable; a background thread
//             makes everything written so far durable every epoch_interval.
//             lmdb:    MDB_NOSYNC, mdb_env_sync(force) per epoch: "epoch:
//                      MDB_NOSYNC + mdb_env_sync every N ms". Between syncs
//                      LMDB orders nothing, so a power failure (not a process
//                      crash) before the next sync may damage the file.
//             rocksdb: unsynced WAL writes (the WAL is written per call),
//                      SyncWAL per epoch: "epoch: WAL written per write,
//                      SyncWAL every N ms". WAL recovery stops at a torn
//                      tail, so a crash loses at most the last epoch.
//
// Why this is fair:
//   - Every call is one operation of its own: one LMDB write transaction,
//     one RocksDB write; nothing is batched across calls, as in pmhash.
//   - Every peer gives pmhash's meanings: insert of a present key is
//     AlreadyExists and changes nothing, update and remove of an absent key
//     are NotFound. LMDB has this natively (MDB_NOOVERWRITE, a lookup inside
//     the write transaction). RocksDB has no insert-if-absent, so a write
//     reads first under one of 1024 striped mutexes chosen by the key's hash;
//     the extra read is the price of the semantics, and concurrent inserts
//     of one key still see exactly one success.
//   - The DRAM maps start small (libcuckoo with TableConfig::initial_slots,
//     which the driver sets to the slots of a new store of the default
//     engine; the others empty) so that resizing is measured, as it is for
//     pmhash. None of them is reserved from capacity_hint.
//   - The file peers keep their files in TableConfig::files_dir, on the file
//     system the driver puts the pool on.
//   - Lookups take string_views: the DRAM maps hash and compare views
//     directly, so a lookup builds no temporary std::string.
#include <stdexcept>

#include "peers_detail.h"
#include "table.h"

namespace pmhash::bench {

const std::vector<std::string>& peer_names() {
  static const std::vector<std::string> names = {"libcuckoo", "tbb", "std", "lmdb", "rocksdb"};
  return names;
}

std::unique_ptr<Table> make_peer(const std::string& name, const TableConfig& config) {
  if (auto table = peers_detail::make_volatile_peer(name, config)) return table;
  if (auto table = peers_detail::make_file_peer(name, config)) return table;
  std::string known;
  for (const std::string& n : peer_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::runtime_error("unknown peer '" + name + "' (peers: " + known + ")");
}

}  // namespace pmhash::bench
