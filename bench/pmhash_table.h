// bench/pmhash_table.h - a pmhash Store behind the driver's Table interface.
//
// One fresh pool per run: a file at config.pool_path (replaced if it exists,
// removed when the table is destroyed), or anonymous DRAM for granularity
// "none" (Store::create_volatile: the engine's code without any flush or
// fence). The granularity of a file pool is whatever libpmem2 reports; the
// driver forces it with PMEM2_FORCE_GRANULARITY before any table exists.
//
// Durability: engines that only persist synchronously refuse
// Durability::kEpoch; the table then runs them strict, which is stronger,
// and says so in durability(). Epochs last config.epoch_interval
// (Options::epoch_ms).
//
// Transactions: Store::transaction, one per attempt, with the configured
// lock timeout; an attempt that returns Aborted (a lock wait timed out) is
// retried. Whether the engine has transactions is asked once, at creation
// (Store::transaction returns NotSupported for engines without them).
//
// Reopen (pmhash-bench --reopen, between the load and the run phase, on a
// quiescent store): the open time of the store after a clean close and
// after a crash, as the store measures it (Stats::open_ns).
//   1 copy the pool file, holes kept, while the store is open: with no call
//     in flight and no background writer, the file holds every store the
//     engine issued, flushed or not, which is one of the states a crash at
//     that moment may leave (any store may reach the media early), with the
//     pool marked open: a legal crash image.
//   2 close the store (clean), open it again; it serves the run phase.
//   3 open the copy (crash recovery), check it, close it, remove it.
// Engines that write the pool from a background thread (epoch durability) are
// not quiescent, so the copy could be torn; they get only the clean reopen,
// and the reason is reported.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/status.h"
#include "pmhash/store.h"
#include "pmhash/transaction.h"
#include "table.h"
#include "workload.h"

namespace pmhash::bench {

// One open of a pool, and the store's shape right after it.
struct OpenMeasure {
  std::uint64_t open_ns = 0;      // Stats::open_ns
  std::uint64_t recovery_ns = 0;  // Stats::recovery_ns (0 after a clean close)
  bool clean_shutdown = true;     // false: the open ran crash recovery
  double wall_s = 0;              // Store::open as the caller saw it
  std::uint64_t items = 0;
  std::uint64_t slots = 0;
  std::uint64_t heap_used = 0;
  std::uint64_t dram_bytes = 0;   // Stats::dram_bytes (nehash: its directory)
  double check_s = 0;             // Store::check after the open (0: not run)
  std::vector<TableProperty> properties;  // the engine's, right after the open

  double bytes_per_key() const {
    return items == 0 ? 0 : static_cast<double>(heap_used) / static_cast<double>(items);
  }
};

// A store's properties (Stats::properties), each with the kind its
// engine's descriptor declares.
inline std::vector<TableProperty> table_properties(const Stats& st) {
  const EngineDescriptor* engine = find_engine(st.engine);
  std::vector<TableProperty> out;
  out.reserve(st.properties.size());
  for (const Property& p : st.properties) {
    bool since_open = true;
    if (engine != nullptr) {
      for (const PropertySpec& spec : engine->properties) {
        if (spec.name == p.name) since_open = spec.kind == PropertyKind::kSinceOpen;
      }
    }
    out.push_back(TableProperty{p.name, p.value, since_open});
  }
  return out;
}

// What PmhashTable::reopen measured.
struct ReopenOutcome {
  OpenMeasure clean;
  std::optional<OpenMeasure> crash;
  std::string crash_skipped;  // why there is no crash open, if there is none
  double copy_s = 0;                 // copying the crash image
  std::uint64_t image_bytes = 0;     // bytes of data in it (holes left out)
};

// Copies the file `from` to `to` (replaced), keeping holes: only the data
// extents are read (SEEK_DATA / SEEK_HOLE), and blocks of zeros in them are
// not written. Returns the bytes written; throws std::runtime_error.
inline std::uint64_t copy_sparse(const std::string& from, const std::string& to) {
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error("copying " + from + " to " + to + ": " + what + ": " +
                             std::strerror(errno));
  };
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  const Fd in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) fail("open");
  const Fd out{::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  if (out.fd < 0) fail("create");
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) fail("fstat");
  const off_t size = st.st_size;
  if (::ftruncate(out.fd, size) != 0) fail("ftruncate");
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<char> buffer(kChunk);
  std::uint64_t written = 0;
  off_t pos = 0;
  while (pos < size) {
    off_t data = ::lseek(in.fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      data = pos;                 // no SEEK_DATA here: read everything
    }
    off_t hole = ::lseek(in.fd, data, SEEK_HOLE);
    if (hole < 0) hole = size;
    for (off_t at = data; at < hole;) {
      const auto n = static_cast<std::size_t>(std::min<off_t>(kChunk, hole - at));
      const ssize_t got = ::pread(in.fd, buffer.data(), n, at);
      if (got <= 0) fail("read");
      const auto len = static_cast<std::size_t>(got);
      const bool zeros = std::all_of(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(len),
                                     [](char c) { return c == 0; });
      if (!zeros) {
        if (::pwrite(out.fd, buffer.data(), len, at) != got) fail("write");
        written += len;
      }
      at += got;
    }
    pos = hole;
  }
  return written;
}

class PmhashTable final : public Table {
 public:
  PmhashTable(const std::string& engine, const TableConfig& config)
      : engine_(engine), path_(config.granularity == "none" ? "" : config.pool_path) {
    Options options;
    options.engine = engine;
    options.force = true;
    options.durability = config.durability;
    options.epoch_ms = static_cast<unsigned>(config.epoch_interval.count());
    options.pool_size =
        config.pool_size != 0 ? config.pool_size : default_pool_size(engine, config);
    for (const auto& [name, value] : config.engine_options) options.set(name, value);
    Status s = create(options);
    if (s.is_invalid_argument() && config.durability == Durability::kEpoch) {
      options.durability = Durability::kStrict;
      s = create(options);
      fell_back_to_strict_ = true;
    }
    if (!s.ok()) {
      throw std::runtime_error("cannot create a " + engine + " store" +
                               (path_.empty() ? " in DRAM" : " at " + path_) + ": " +
                               s.to_string());
    }
    durability_ = options.durability;
    epoch_ms_ = options.epoch_ms;
    options_ = options;
    txn_options_.lock_timeout_ms = config.lock_timeout_ms;
    std::unique_ptr<Transaction> probe;
    txn_support_ = store_->transaction(txn_options_, &probe);
    at_start_ = store_->stats();
  }

  ~PmhashTable() override {
    store_.reset();
    if (!path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
  }

  PmhashTable(const PmhashTable&) = delete;
  PmhashTable& operator=(const PmhashTable&) = delete;

  // Bytes of a pool for the run the config describes, at least 1 GiB. An
  // engine with an estimate of its own (EngineDescriptor::pool_bytes), which
  // needs more per key, is asked for the keys the store holds at most
  // (max_keys; capacity_hint when unknown): the pool is allocated when it is
  // made, so keys a run phase only reads or updates are not paid for twice.
  // Every other engine gets generic_pool_bytes() for capacity_hint keys
  // (every key the run names, a margin when the run phase does not insert).
  static std::uint64_t default_pool_size(const std::string& engine, const TableConfig& config) {
    Options set;
    for (const auto& [name, value] : config.engine_options) set.set(name, value);
    const EngineDescriptor* descriptor = find_engine(engine);
    PoolDemand demand{config.capacity_hint, config.key_size, config.value_size};
    std::uint64_t bytes = 0;
    if (descriptor != nullptr && descriptor->pool_bytes != nullptr) {
      if (config.max_keys != 0) demand.keys = config.max_keys;
      bytes = descriptor->pool_bytes(demand, set);
    } else {
      bytes = generic_pool_bytes(demand);
    }
    return std::max<std::uint64_t>(std::uint64_t{1} << 30, bytes);
  }

  std::string name() const override { return engine_; }
  std::string kind() const override { return "pmhash"; }

  std::string durability() const override {
    if (path_.empty()) return "none (volatile DRAM, granularity none)";
    if (durability_ == Durability::kEpoch) {
      return "epoch: durable when its epoch is (" + std::to_string(epoch_ms_) + " ms epochs)";
    }
    std::string text = "strict: every call durable when it returns";
    if (fell_back_to_strict_) text += " (the engine has no epoch mode)";
    return text;
  }

  Status insert(std::string_view key, std::string_view value) override {
    return store_->insert(key, value);
  }
  Status get(std::string_view key, std::string* value) override { return store_->get(key, value); }
  Status update(std::string_view key, std::string_view value) override {
    return store_->update(key, value);
  }
  Status remove(std::string_view key) override { return store_->remove(key); }

  Status transactions_supported() const override { return txn_support_; }

  Status transact(const TxnRequest& request, std::string* buffer,
                  std::uint64_t* aborts) override {
    if (!txn_support_.ok()) return txn_support_;
    return retry_aborted([&] { return attempt(request, buffer); }, aborts);
  }

  TableStats stats() const override {
    const Stats now = store_->stats();
    TableStats out;
    out.items = now.items;
    out.load_factor = now.load_factor;
    out.bytes = now.heap_used;
    out.bytes_kind = "pool";
    out.flushes = now.flushes - at_start_.flushes;
    out.fences = now.fences - at_start_.fences;
    out.slots = now.slots;
    out.properties = table_properties(now);
    // Each epoch that ended made everything before it durable.
    if (durability_ == Durability::kEpoch) out.durability_points = now.durable_epoch;
    out.resizing = now.resizing;
    return out;
  }

  // Polls until the background rehash threads have finished the resize the
  // last phase started. Untimed; the driver reports the wait separately.
  bool quiesce(std::chrono::seconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (store_->stats().resizing) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  // Store::check(): every invariant of the engine.
  Status check() const { return store_->check(); }

  // The options the store was created with (defaults included).
  const Options& options() const { return options_; }
  bool strict() const { return durability_ == Durability::kStrict; }

  // Closes and reopens the store, and opens a crash image of it (see the
  // top of the file); `check`: run Store::check on both reopened stores
  // (untimed). Call only between phases, with the store quiescent. Throws
  // std::runtime_error naming what failed; the table is unusable then.
  ReopenOutcome reopen(bool check) {
    if (path_.empty()) throw std::runtime_error("a volatile store (granularity none) cannot be reopened");
    ReopenOutcome out;
    const std::string image = path_ + ".crash";
    const bool background_writer = store_->stats().epoch != 0;
    if (background_writer) {
      out.crash_skipped = engine_ +
                          " writes the pool from its epoch thread, so a copy of the open pool "
                          "could be torn; no crash image";
    } else {
      const auto started = std::chrono::steady_clock::now();
      out.image_bytes = copy_sparse(path_, image);
      out.copy_s = seconds_since(started);
    }
    if (const Status s = store_->close(); !s.ok()) {
      throw std::runtime_error("closing " + path_ + ": " + s.to_string());
    }
    store_.reset();
    out.clean = open_and_measure(path_, check, &store_);
    at_start_ = store_->stats();
    if (!background_writer) {
      std::unique_ptr<Store> crashed;
      out.crash = open_and_measure(image, check, &crashed);
      const Status s = crashed->close();
      crashed.reset();
      std::error_code ignored;
      std::filesystem::remove(image, ignored);
      if (!s.ok()) throw std::runtime_error("closing the crash image " + image + ": " + s.to_string());
    }
    return out;
  }

 private:
  // One attempt; the Transaction aborts itself when destroyed uncommitted.
  Status attempt(const TxnRequest& request, std::string* buffer) {
    std::unique_ptr<Transaction> txn;
    if (Status s = store_->transaction(txn_options_, &txn); !s.ok()) return s;
    for (std::string_view key : request.reads) {
      if (Status s = txn->get(key, buffer); !s.ok()) return named(s, "get", key);
    }
    if (Status s = txn->update(request.write_key, request.value); !s.ok()) {
      return named(s, "update", request.write_key);
    }
    return txn->commit();
  }

  // NotFound naming the key (other statuses say enough already).
  static Status named(const Status& s, const char* op, std::string_view key) {
    if (!s.is_not_found()) return s;
    return Status::NotFound(std::string("transaction ") + op + " '" + printable_key(key) +
                            "': not found");
  }

  static double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  OpenMeasure open_and_measure(const std::string& path, bool check, std::unique_ptr<Store>* store) const {
    Options options = options_;  // the run-time options too (pmeh's owners, k, B)
    options.force = false;
    options.durability = durability_;
    options.epoch_ms = epoch_ms_;
    OpenMeasure m;
    const auto started = std::chrono::steady_clock::now();
    if (const Status s = Store::open(path, options, store); !s.ok()) {
      throw std::runtime_error("reopening " + path + ": " + s.to_string());
    }
    m.wall_s = seconds_since(started);
    const Stats st = (*store)->stats();
    m.open_ns = st.open_ns;
    m.recovery_ns = st.recovery_ns;
    m.clean_shutdown = st.clean_shutdown;
    m.items = st.items;
    m.slots = st.slots;
    m.properties = table_properties(st);
    m.heap_used = st.heap_used;
    m.dram_bytes = st.dram_bytes;
    if (check) {
      const auto check_start = std::chrono::steady_clock::now();
      if (const Status s = (*store)->check(); !s.ok()) {
        throw std::runtime_error("check after reopening " + path + ": " + s.to_string());
      }
      m.check_s = seconds_since(check_start);
    }
    return m;
  }

  Status create(const Options& options) {
    if (path_.empty()) return Store::create_volatile(options, &store_);
    return Store::create(path_, options, &store_);
  }

  std::string engine_;
  std::string path_;  // empty: a volatile store
  Durability durability_ = Durability::kStrict;
  bool fell_back_to_strict_ = false;
  unsigned epoch_ms_ = 0;
  Options options_;  // as created
  TransactionOptions txn_options_;
  Status txn_support_;  // what Store::transaction said at creation
  std::unique_ptr<Store> store_;
  Stats at_start_;
};

}  // namespace pmhash::bench
