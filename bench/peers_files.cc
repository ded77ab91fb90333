// bench/peers_files.cc - the peers that keep their items in files: LMDB and
// RocksDB, each in a directory of its own that it creates and removes
// (TableConfig::files_dir), each in pmhash's strict or epoch durability.
// bench/peers.cc says what each peer is and why the comparison is fair.
//
// Strict: an acknowledged call is durable when it returns. LMDB syncs each
// write transaction at commit (its default flags); RocksDB fsyncs the WAL on
// each write (WriteOptions::sync).
//
// Epoch: writes reach the OS but are not synced; an EpochSyncer thread makes
// everything written so far durable every epoch_interval (mdb_env_sync(force)
// for LMDB opened with MDB_NOSYNC, SyncWAL for RocksDB), and a failed sync
// fails the next write.
//
// Each insert, update and remove is one write of its own (one LMDB write
// transaction; one RocksDB Put or Delete), never batched. LMDB gives
// pmhash's meanings natively: MDB_NOOVERWRITE for insert, a lookup inside
// the write transaction for update, mdb_del's MDB_NOTFOUND for remove.
// RocksDB cannot say whether a Put created a key, so each write looks the
// key up first under one of 1024 striped mutexes picked by the key's hash:
// concurrent inserts of one key see exactly one success.
//
// Transactions (the txn workload, table.h). LMDB: one write transaction
// (mdb_txn_begin, mdb_get per read, mdb_put, mdb_txn_commit), synced at
// commit when strict; LMDB runs one writer at a time, so nothing ever
// aborts. RocksDB: opened as a pessimistic TransactionDB when
// TableConfig::transactions is set; each transaction locks what it reads
// (GetForUpdate, exclusive) and writes (Put) until Commit, which writes and
// in strict mode syncs the WAL; a lock wait beyond the lock timeout
// (TimedOut), or Busy / TryAgain, aborts the attempt and it is retried.
// Neither checks that the updated key exists (the workload only updates
// loaded records and never deletes); pmhash's update does, under its lock.
//
// LMDB lookups use read transactions that are reset between lookups and
// renewed for each (MDB_NOTLS ties a read transaction to its object, not to
// a thread): a thread takes one from the table's pool in thread_begin() and
// returns it in thread_end(); a thread that skipped thread_begin() borrows
// one per lookup. The pool owns every transaction and aborts them all
// before the environment closes.
#include <lmdb.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/transaction.h>
#include <rocksdb/utilities/transaction_db.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "peers_detail.h"
#include "table.h"
#include "workload.h"

namespace pmhash::bench {
namespace {

// --- shared by both ------------------------------------------------------------

// The directory a file peer keeps its files in: created by the constructor,
// which refuses one that exists (a table never mixes with, or later deletes,
// files it did not make), and removed with its contents by the destructor.
class FilesDir {
 public:
  FilesDir(const std::string& peer, const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    if (path.empty()) {
      throw std::runtime_error(peer + ": no files directory given (set TableConfig::files_dir)");
    }
    std::error_code ec;
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (!ec && !fs::create_directory(path, ec) && !ec) {
      throw std::runtime_error(peer + ": files directory " + path +
                               " already exists; the table creates and removes its own "
                               "directory: remove it or choose another path");
    }
    if (ec) {
      throw std::runtime_error(peer + ": cannot create files directory " + path + ": " +
                               ec.message());
    }
  }
  ~FilesDir() {
    std::error_code ec;  // nothing to do about a failure in a destructor
    std::filesystem::remove_all(path_, ec);
  }
  FilesDir(const FilesDir&) = delete;
  FilesDir& operator=(const FilesDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Checks the epoch interval before a file peer opens anything.
void check_epoch_interval(const std::string& peer, const TableConfig& config) {
  if (config.durability == Durability::kEpoch && config.epoch_interval.count() <= 0) {
    throw std::runtime_error(peer + ": epoch durability needs a positive epoch_interval, got " +
                             std::to_string(config.epoch_interval.count()) + " ms");
  }
}

// The epoch of a file peer: a background thread calls `sync` every
// `interval` until the syncer is destroyed; the destructor wakes it through
// the condition variable and joins it, without waiting out an interval. The
// first failed sync is kept; health() returns it, and the peers check it
// before each write, so a table whose epochs stopped becoming durable fails
// its next call instead of silently giving a weaker guarantee.
class EpochSyncer {
 public:
  EpochSyncer(std::chrono::milliseconds interval, std::function<Status()> sync)
      : interval_(interval), sync_(std::move(sync)), thread_([this] { run(); }) {}
  ~EpochSyncer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  EpochSyncer(const EpochSyncer&) = delete;
  EpochSyncer& operator=(const EpochSyncer&) = delete;

  // Syncs completed since the syncer started.
  std::uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }

  Status health() const {
    if (!failed_.load(std::memory_order_acquire)) return Status::OK();
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, interval_, [this] { return stop_; })) {
      lock.unlock();
      Status status = sync_();
      syncs_.fetch_add(1, std::memory_order_relaxed);
      lock.lock();
      if (!status.ok() && !failed_.load(std::memory_order_relaxed)) {
        failure_ = std::move(status);
        failed_.store(true, std::memory_order_release);
      }
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<Status()> sync_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;               // guarded by mutex_
  Status failure_;                  // guarded by mutex_; set once
  std::atomic<bool> failed_{false};
  std::atomic<std::uint64_t> syncs_{0};
  std::thread thread_;              // last: starts once the rest is built
};

// Starts an EpochSyncer in epoch mode; nothing in strict mode.
std::unique_ptr<EpochSyncer> start_epochs(const TableConfig& config,
                                          std::function<Status()> sync) {
  if (config.durability != Durability::kEpoch) return nullptr;
  return std::make_unique<EpochSyncer>(config.epoch_interval, std::move(sync));
}

Status epoch_health(const std::unique_ptr<EpochSyncer>& syncer) {
  return syncer ? syncer->health() : Status::OK();
}

std::optional<std::uint64_t> epoch_syncs(const std::unique_ptr<EpochSyncer>& syncer) {
  return syncer ? std::optional<std::uint64_t>(syncer->syncs()) : std::nullopt;
}

// --- LMDB --------------------------------------------------------------------

// Reader slots beyond config.threads: stats() and threads that call get()
// without thread_begin() borrow a read transaction, each holding a slot.
constexpr unsigned kLmdbReaderSlack = 64;
// LMDB's cost per item beyond key and value: an 8-byte node header and a
// 2-byte slot pointer, rounded up.
constexpr std::uint64_t kLmdbItemOverhead = 16;

// Room for the data four times over (random inserts leave B-tree pages
// half full, and copy-on-write keeps old pages until no reader needs them)
// plus 64 MiB, in whole OS pages. The map is address space, not storage: the
// file grows only as pages are written.
std::uint64_t lmdb_map_size(const TableConfig& config) {
  const std::uint64_t item = config.key_size + config.value_size + kLmdbItemOverhead;
  const std::uint64_t bytes = 4 * config.capacity_hint * item + (std::uint64_t{64} << 20);
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

MDB_val lmdb_val(std::string_view s) {
  // LMDB does not write through mv_data on put, get or del.
  return MDB_val{s.size(), const_cast<char*>(s.data())};
}

struct LmdbEnvClose {
  void operator()(MDB_env* env) const { mdb_env_close(env); }
};
using LmdbEnv = std::unique_ptr<MDB_env, LmdbEnvClose>;

// Creates and opens the environment in `dir` (MDB_NOTLS: a read transaction
// belongs to its MDB_txn object, not to the thread that began it).
LmdbEnv open_lmdb_env(const TableConfig& config, const std::string& dir) {
  MDB_env* raw = nullptr;
  int rc = mdb_env_create(&raw);
  if (rc != 0) throw std::runtime_error("lmdb " + dir + ": mdb_env_create: " + mdb_strerror(rc));
  LmdbEnv env(raw);
  const char* call = "mdb_env_set_maxreaders";
  rc = mdb_env_set_maxreaders(raw, config.threads + kLmdbReaderSlack);
  if (rc == 0) {
    call = "mdb_env_set_mapsize";
    rc = mdb_env_set_mapsize(raw, lmdb_map_size(config));
  }
  if (rc == 0) {
    call = "mdb_env_open";
    const unsigned flags = MDB_NOTLS | (config.durability == Durability::kEpoch ? MDB_NOSYNC : 0);
    rc = mdb_env_open(raw, dir.c_str(), flags, 0644);
  }
  if (rc != 0) throw std::runtime_error("lmdb " + dir + ": " + call + ": " + mdb_strerror(rc));
  return env;
}

// The one database (LMDB's unnamed main DB), opened once at creation.
MDB_dbi open_lmdb_dbi(MDB_env* env, const std::string& dir) {
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  int rc = mdb_txn_begin(env, nullptr, 0, &txn);
  if (rc == 0) {
    rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
    if (rc == 0) {
      rc = mdb_txn_commit(txn);
    } else {
      mdb_txn_abort(txn);
    }
  }
  if (rc != 0) throw std::runtime_error("lmdb " + dir + ": opening the database: " + mdb_strerror(rc));
  return dbi;
}

// The read transactions of one LMDB table. Each is kept reset (holding its
// reader slot but no snapshot) and renewed for one lookup at a time. A
// thread holds one from thread_begin() to thread_end(); the pool owns them
// all and aborts them before the environment closes, so a thread that never
// called thread_end() leaks nothing.
class LmdbReaders {
 public:
  explicit LmdbReaders(MDB_env* env) : env_(env) {}
  ~LmdbReaders() {
    for (MDB_txn* txn : all_) mdb_txn_abort(txn);
  }
  LmdbReaders(const LmdbReaders&) = delete;
  LmdbReaders& operator=(const LmdbReaders&) = delete;

  // A reset read transaction, reused or new; the LMDB error code on failure.
  int take(MDB_txn** txn) {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      *txn = free_.back();
      free_.pop_back();
      return 0;
    }
    const int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, txn);
    if (rc != 0) return rc;
    mdb_txn_reset(*txn);
    all_.push_back(*txn);
    return 0;
  }
  void give(MDB_txn* txn) {
    std::lock_guard lock(mutex_);
    free_.push_back(txn);
  }

 private:
  MDB_env* const env_;
  std::mutex mutex_;
  std::vector<MDB_txn*> free_;  // reset and held by no thread
  std::vector<MDB_txn*> all_;   // every transaction made, to abort
};

// The read transaction this thread took in thread_begin() for each LMDB
// table, keyed by the table's id. Ids are never reused (addresses are), so a
// table created where a destroyed one lived never finds the old one's entry.
struct BoundReader {
  std::uint64_t table;
  MDB_txn* txn;
};
thread_local std::vector<BoundReader> t_lmdb_readers;
std::atomic<std::uint64_t> g_next_lmdb_id{1};

class LmdbPeer final : public Table {
 public:
  explicit LmdbPeer(const TableConfig& config)
      : dir_("lmdb", config.files_dir),
        env_(open_lmdb_env(config, dir_.path())),
        dbi_(open_lmdb_dbi(env_.get(), dir_.path())),
        page_size_(page_size(env_.get())),
        map_size_(lmdb_map_size(config)),
        readers_(env_.get()),
        syncer_(start_epochs(config, [this] { return sync(); })) {
    durability_ = syncer_ ? "epoch: MDB_NOSYNC + mdb_env_sync every " +
                                std::to_string(config.epoch_interval.count()) + " ms"
                          : "strict: fdatasync per write transaction";
  }

  std::string name() const override { return "lmdb"; }
  std::string kind() const override { return "peer"; }
  std::string durability() const override { return durability_; }

  Status insert(std::string_view key, std::string_view value) override {
    return write("insert", "mdb_put", [&](MDB_txn* txn) {
      MDB_val k = lmdb_val(key), v = lmdb_val(value);
      return mdb_put(txn, dbi_, &k, &v, MDB_NOOVERWRITE);
    });
  }
  Status update(std::string_view key, std::string_view value) override {
    return write("update", "mdb_get/mdb_put", [&](MDB_txn* txn) {
      MDB_val k = lmdb_val(key), v = lmdb_val(value), old;
      const int rc = mdb_get(txn, dbi_, &k, &old);
      return rc != 0 ? rc : mdb_put(txn, dbi_, &k, &v, 0);
    });
  }
  Status remove(std::string_view key) override {
    return write("remove", "mdb_del", [&](MDB_txn* txn) {
      MDB_val k = lmdb_val(key);
      return mdb_del(txn, dbi_, &k, nullptr);
    });
  }

  Status transactions_supported() const override { return Status::OK(); }

  // Never aborts (one writer at a time): *aborts stays as it is.
  Status transact(const TxnRequest& request, std::string* buffer, std::uint64_t*) override {
    std::string_view missing;
    const Status s = write("transaction", "mdb_get/mdb_put", [&](MDB_txn* txn) {
      for (std::string_view key : request.reads) {
        MDB_val k = lmdb_val(key), v;
        if (const int rc = mdb_get(txn, dbi_, &k, &v); rc != 0) {
          missing = key;
          return rc;
        }
        buffer->assign(static_cast<const char*>(v.mv_data), v.mv_size);
      }
      MDB_val k = lmdb_val(request.write_key), v = lmdb_val(request.value);
      return mdb_put(txn, dbi_, &k, &v, 0);
    });
    if (s.is_not_found()) {
      return Status::NotFound("lmdb " + dir_.path() + ": transaction get '" +
                              std::string(missing) + "': not found");
    }
    return s;
  }

  Status get(std::string_view key, std::string* value) override {
    if (MDB_txn* txn = bound_reader(); txn != nullptr) return read(txn, key, value);
    // A thread that did not call thread_begin() borrows one for this call.
    MDB_txn* txn = nullptr;
    if (const int rc = readers_.take(&txn); rc != 0) return error("get", "mdb_txn_begin", rc);
    Status status = read(txn, key, value);
    readers_.give(txn);
    return status;
  }

  void thread_begin() override {
    MDB_txn* txn = nullptr;
    // On failure the thread borrows per call, and get() reports the error.
    if (readers_.take(&txn) == 0) t_lmdb_readers.push_back({id_, txn});
  }
  void thread_end() override {
    auto& bound = t_lmdb_readers;
    const auto it = std::find_if(bound.begin(), bound.end(),
                                 [this](const BoundReader& b) { return b.table == id_; });
    if (it == bound.end()) return;
    readers_.give(it->txn);
    bound.erase(it);
  }

  // items from the database's B-tree header (a short read transaction);
  // bytes: the pages in use up to the highest one ever written, which is the
  // extent of the data file.
  TableStats stats() const override {
    TableStats stats;
    stats.bytes_kind = "files";
    stats.durability_points = epoch_syncs(syncer_);
    MDB_txn* txn = nullptr;
    if (readers_.take(&txn) == 0) {
      MDB_stat st;
      if (mdb_txn_renew(txn) == 0) {
        if (mdb_stat(txn, dbi_, &st) == 0) stats.items = st.ms_entries;
        mdb_txn_reset(txn);
      }
      readers_.give(txn);
    }
    MDB_envinfo info;
    if (mdb_env_info(env_.get(), &info) == 0) stats.bytes = (info.me_last_pgno + 1) * page_size_;
    return stats;
  }

 private:
  static std::uint64_t page_size(MDB_env* env) {
    MDB_stat st;
    return mdb_env_stat(env, &st) == 0 ? st.ms_psize : 4096;
  }

  MDB_txn* bound_reader() const {
    for (const BoundReader& b : t_lmdb_readers) {
      if (b.table == id_) return b.txn;
    }
    return nullptr;
  }

  Status read(MDB_txn* txn, std::string_view key, std::string* value) const {
    int rc = mdb_txn_renew(txn);
    if (rc != 0) return error("get", "mdb_txn_renew", rc);
    MDB_val k = lmdb_val(key), v;
    rc = mdb_get(txn, dbi_, &k, &v);
    if (rc == 0) value->assign(static_cast<const char*>(v.mv_data), v.mv_size);
    mdb_txn_reset(txn);
    return rc == 0 ? Status::OK() : error("get", "mdb_get", rc);
  }

  // Runs `body` (which returns an LMDB code) in a write transaction of its
  // own, committed on success and aborted otherwise. LMDB runs one write
  // transaction at a time; mdb_txn_begin waits for the writer lock.
  template <typename Body>
  Status write(const char* op, const char* call, Body body) {
    if (Status health = epoch_health(syncer_); !health.ok()) return health;
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env_.get(), nullptr, 0, &txn);
    if (rc != 0) return error(op, "mdb_txn_begin", rc);
    rc = body(txn);
    if (rc != 0) {
      mdb_txn_abort(txn);
      return error(op, call, rc);
    }
    rc = mdb_txn_commit(txn);
    return rc == 0 ? Status::OK() : error(op, "mdb_txn_commit", rc);
  }

  Status sync() {
    const int rc = mdb_env_sync(env_.get(), 1);
    return rc == 0 ? Status::OK() : error("epoch sync", "mdb_env_sync", rc);
  }

  Status error(const char* op, const char* call, int rc) const {
    const std::string where = "lmdb " + dir_.path() + ": " + op + ": " + call + ": ";
    switch (rc) {
      case MDB_NOTFOUND:
        return Status::NotFound();
      case MDB_KEYEXIST:
        return Status::AlreadyExists("key exists");
      case MDB_MAP_FULL:
        return Status::NoSpace(where + "the map of " + std::to_string(map_size_) +
                               " bytes is full: raise capacity_hint (or the item sizes) it is "
                               "sized from");
      case MDB_BAD_VALSIZE:
        return Status::InvalidArgument(
            where + "key empty or longer than LMDB's limit of " +
            std::to_string(mdb_env_get_maxkeysize(env_.get())) + " bytes");
      case MDB_READERS_FULL:
        return Status::IOError(where + "all reader slots in use: raise TableConfig::threads to "
                                       "the threads that use the table, and call thread_end()");
      default:
        return Status::IOError(where + mdb_strerror(rc));
    }
  }

  // Destroyed bottom-up: the epoch thread stops, the read transactions are
  // aborted, the environment closes, and then the directory is removed.
  FilesDir dir_;
  LmdbEnv env_;
  MDB_dbi dbi_;
  const std::uint64_t page_size_;
  const std::uint64_t map_size_;
  const std::uint64_t id_ = g_next_lmdb_id.fetch_add(1, std::memory_order_relaxed);
  std::string durability_;
  mutable LmdbReaders readers_;
  std::unique_ptr<EpochSyncer> syncer_;
};

// --- RocksDB -----------------------------------------------------------------

// Mutexes that serialise the read-then-write of insert, update and remove
// per key; a power of two, each on its own cache line.
constexpr std::size_t kRocksStripes = 1024;
struct alignas(64) Stripe {
  std::mutex mutex;
};

rocksdb::Slice rocks_slice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

// The database, and the same object as a TransactionDB when
// config.transactions asks for one (else txn_db is null).
struct RocksHandles {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::TransactionDB* txn_db = nullptr;
};

RocksHandles open_rocksdb(const TableConfig& config, const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  // Background flush and compaction threads to match the client threads;
  // memtables keep RocksDB's default size (64 MiB).
  options.IncreaseParallelism(static_cast<int>(std::max(2u, config.threads)));
  RocksHandles out;
  if (config.transactions) {
    rocksdb::TransactionDBOptions txn_options;
    txn_options.transaction_lock_timeout = config.lock_timeout_ms;
    // Plain writes (the load phase) wait as long for a transaction's lock.
    txn_options.default_lock_timeout = config.lock_timeout_ms;
    const rocksdb::Status s =
        rocksdb::TransactionDB::Open(options, txn_options, dir, &out.txn_db);
    if (!s.ok()) throw std::runtime_error("rocksdb " + dir + ": TransactionDB::Open: " + s.ToString());
    out.db.reset(out.txn_db);
    return out;
  }
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) throw std::runtime_error("rocksdb " + dir + ": DB::Open: " + s.ToString());
  out.db.reset(db);
  return out;
}

class RocksPeer final : public Table {
 public:
  explicit RocksPeer(const TableConfig& config)
      : dir_("rocksdb", config.files_dir),
        handles_(open_rocksdb(config, dir_.path())),
        db_(handles_.db.get()),
        stripes_(std::make_unique<Stripe[]>(kRocksStripes)),
        syncer_(start_epochs(config, [this] { return sync(); })) {
    write_options_.sync = config.durability == Durability::kStrict;
    durability_ = syncer_ ? "epoch: WAL written per write, SyncWAL every " +
                                std::to_string(config.epoch_interval.count()) + " ms"
                          : "strict: WAL fsync per write";
  }

  std::string name() const override { return "rocksdb"; }
  std::string kind() const override { return "peer"; }
  std::string durability() const override { return durability_; }

  Status insert(std::string_view key, std::string_view value) override {
    return write("insert", key, [&](bool present) {
      if (present) return Status::AlreadyExists("key exists");
      return status("insert", "Put", db_->Put(write_options_, rocks_slice(key), rocks_slice(value)));
    });
  }
  Status update(std::string_view key, std::string_view value) override {
    return write("update", key, [&](bool present) {
      if (!present) return Status::NotFound();
      return status("update", "Put", db_->Put(write_options_, rocks_slice(key), rocks_slice(value)));
    });
  }
  Status remove(std::string_view key) override {
    return write("remove", key, [&](bool present) {
      if (!present) return Status::NotFound();
      return status("remove", "Delete", db_->Delete(write_options_, rocks_slice(key)));
    });
  }
  Status get(std::string_view key, std::string* value) override {
    return status("get", "Get", db_->Get(rocksdb::ReadOptions(), rocks_slice(key), value));
  }

  Status transactions_supported() const override {
    if (handles_.txn_db != nullptr) return Status::OK();
    return Status::NotSupported("rocksdb: opened without a TransactionDB (set TableConfig::transactions)");
  }

  Status transact(const TxnRequest& request, std::string* buffer,
                  std::uint64_t* aborts) override {
    if (Status s = transactions_supported(); !s.ok()) return s;
    if (Status health = epoch_health(syncer_); !health.ok()) return health;
    return retry_aborted([&] { return attempt(request, buffer); }, aborts);
  }

  // items: RocksDB's estimate (memtable and SST entry counts less
  // deletions; overwrites not yet compacted away may count twice). bytes:
  // the SST files plus the WAL being written; older WAL files, which live
  // only until their memtable is flushed, would need a directory scan.
  // resizing: a flush or compaction is running.
  TableStats stats() const override {
    TableStats stats;
    stats.bytes_kind = "files";
    stats.durability_points = epoch_syncs(syncer_);
    std::uint64_t v = 0;
    if (db_->GetIntProperty(rocksdb::DB::Properties::kEstimateNumKeys, &v)) stats.items = v;
    if (db_->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &v)) {
      std::unique_ptr<rocksdb::LogFile> wal;
      const bool have_wal = db_->GetCurrentWalFile(&wal).ok() && wal != nullptr;
      stats.bytes = v + (have_wal ? wal->SizeFileBytes() : 0);
    }
    using P = rocksdb::DB::Properties;
    stats.resizing = property(P::kNumRunningFlushes) + property(P::kNumRunningCompactions) > 0;
    return stats;
  }

  // Polls until no flush or compaction is pending or running.
  bool quiesce(std::chrono::seconds timeout) override {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout;
    while (background_work()) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

 private:
  std::uint64_t property(const std::string& name) const {
    std::uint64_t v = 0;
    return db_->GetIntProperty(name, &v) ? v : 0;
  }

  bool background_work() const {
    using P = rocksdb::DB::Properties;
    return property(P::kMemTableFlushPending) + property(P::kCompactionPending) +
               property(P::kNumRunningFlushes) + property(P::kNumRunningCompactions) >
           0;
  }

  // Looks the key up and runs `body(present)`, which writes or refuses,
  // under the key's stripe, so that concurrent writes of one key act one
  // after another.
  template <typename Body>
  Status write(const char* op, std::string_view key, Body body) {
    if (Status health = epoch_health(syncer_); !health.ok()) return health;
    std::lock_guard lock(stripes_[std::hash<std::string_view>{}(key) & (kRocksStripes - 1)].mutex);
    rocksdb::PinnableSlice existing;
    const rocksdb::Status found =
        db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), rocks_slice(key), &existing);
    if (!found.ok() && !found.IsNotFound()) return status(op, "Get", found);
    return body(found.ok());
  }

  Status sync() { return status("epoch sync", "SyncWAL", db_->SyncWAL()); }

  // One attempt; an attempt that is not committed is rolled back when the
  // Transaction is deleted.
  Status attempt(const TxnRequest& request, std::string* buffer) {
    const std::unique_ptr<rocksdb::Transaction> txn(
        handles_.txn_db->BeginTransaction(write_options_));
    const rocksdb::ReadOptions read_options;
    for (std::string_view key : request.reads) {
      const rocksdb::Status s = txn->GetForUpdate(read_options, rocks_slice(key), buffer);
      if (!s.ok()) return txn_status("GetForUpdate", key, s);
    }
    rocksdb::Status s = txn->Put(rocks_slice(request.write_key), rocks_slice(request.value));
    if (!s.ok()) return txn_status("Put", request.write_key, s);
    s = txn->Commit();
    return s.ok() ? Status::OK() : txn_status("Commit", request.write_key, s);
  }

  // Lock timeouts and conflicts abort the attempt (retried); NotFound names
  // the key.
  Status txn_status(const char* call, std::string_view key, const rocksdb::Status& s) const {
    if (s.IsTimedOut() || s.IsBusy() || s.IsTryAgain()) {
      return Status::Aborted(std::string("rocksdb transaction: ") + call + ": " + s.ToString());
    }
    if (s.IsNotFound()) {
      return Status::NotFound("rocksdb " + dir_.path() + ": transaction " + call + " '" +
                              printable_key(key) + "': not found");
    }
    return status("transaction", call, s);
  }

  Status status(const char* op, const char* call, const rocksdb::Status& s) const {
    if (s.ok()) return Status::OK();
    if (s.IsNotFound()) return Status::NotFound();
    const std::string what = "rocksdb " + dir_.path() + ": " + op + ": " + call + ": " + s.ToString();
    if (s.IsNoSpace()) return Status::NoSpace(what + " (free space on the file system)");
    return Status::IOError(what);
  }

  // Destroyed bottom-up: the epoch thread stops, the database closes, and
  // then the directory is removed.
  FilesDir dir_;
  RocksHandles handles_;
  rocksdb::DB* const db_;  // handles_.db
  std::unique_ptr<Stripe[]> stripes_;
  rocksdb::WriteOptions write_options_;
  std::string durability_;
  std::unique_ptr<EpochSyncer> syncer_;
};

}  // namespace

namespace peers_detail {

std::unique_ptr<Table> make_file_peer(const std::string& name, const TableConfig& config) {
  if (name != "lmdb" && name != "rocksdb") return nullptr;
  check_epoch_interval(name, config);
  if (name == "lmdb") return std::make_unique<LmdbPeer>(config);
  return std::make_unique<RocksPeer>(config);
}

}  // namespace peers_detail
}  // namespace pmhash::bench
