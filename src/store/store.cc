// store/store.cc - the public Store: PoolStore over a pool, its heap and an
// engine; RemoteStore over an engine whose index lives on memory nodes.
#include "pmhash/store.h"
#include "store/store_testing.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <random>
#include <string>
#include <system_error>

#include "engine/index.h"
#include "engine/remote_common/remote_index.h"
#include "heap/heap.h"
#include "media/region.h"
#include "pmhash/engines.h"
#include "pool/pool.h"

namespace pmhash {
namespace {

Status check_key(std::string_view key) {
  if (key.size() > kMaxKeySize) {
    return Status::InvalidArgument("key of " + std::to_string(key.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kMaxKeySize));
  }
  return Status::OK();
}

Status check_value(std::string_view value) {
  if (value.size() > kMaxValueSize) {
    return Status::InvalidArgument("value of " + std::to_string(value.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kMaxValueSize));
  }
  return Status::OK();
}

// The finished engines that have a capability, comma-separated.
std::string engines_with(bool Capabilities::*capability) {
  std::string out;
  for (const EngineDescriptor* e : finished_engines()) {
    if (e->capabilities.*capability) out += (out.empty() ? "" : ", ") + std::string(e->name);
  }
  return out;
}

// The options a store starts an engine with, at create and open alike:
// the durability must be one the engine offers, and each engine option
// (Options::set) of this engine must be one it declares, with a value of its
// type and range (check_option). An option named for another engine is left
// alone: one Options may carry the settings of several engines. A name that
// starts with no engine's name is an error, as it is a typo.
Status check_options(const EngineDescriptor& engine, const Options& options) {
  if (options.durability == Durability::kEpoch && !engine.capabilities.epoch) {
    return Status::InvalidArgument("engine " + std::string(engine.name) +
                                   " persists every write before it returns: use durability strict");
  }
  for (const auto& [name, value] : options.engine_options) {
    const EngineDescriptor* owner = option_engine(name);
    if (owner != nullptr && owner != &engine) continue;
    if (Status s = check_option(name, value); !s.ok()) return s;
  }
  return Status::OK();
}

// The engine a create makes: the one named, or the default of where the
// index goes (pmhash/options.h, Options::engine).
std::string engine_to_create(const Options& options) {
  if (!options.engine.empty()) return options.engine;
  const EngineDescriptor* e = default_engine(options.memnodes.empty() ? Location::kPoolFile
                                                                      : Location::kMemoryNodes);
  return e != nullptr ? std::string(e->name) : std::string();
}

// The public Transaction over an engine's: checks sizes, hashes keys, and
// refuses everything once the store is closed.
class TransactionImpl final : public Transaction {
 public:
  TransactionImpl(std::unique_ptr<engine::Txn> txn, const std::atomic<bool>* store_closed)
      : txn_(std::move(txn)), store_closed_(store_closed) {}
  // A transaction committed or aborted touches nothing of the store's when
  // destroyed, so it may outlive the store (transaction.h).
  ~TransactionImpl() override {
    if (!finished_) abort();
  }

  Status get(std::string_view key, std::string* value) override {
    if (Status s = check(key, {}); !s.ok()) return s;
    return txn_->get(engine::make_key(key), value);
  }
  Status insert(std::string_view key, std::string_view value) override {
    if (Status s = check(key, value); !s.ok()) return s;
    return txn_->insert(engine::make_key(key), value);
  }
  Status update(std::string_view key, std::string_view value) override {
    if (Status s = check(key, value); !s.ok()) return s;
    return txn_->update(engine::make_key(key), value);
  }
  Status upsert(std::string_view key, std::string_view value) override {
    if (Status s = check(key, value); !s.ok()) return s;
    return txn_->upsert(engine::make_key(key), value);
  }
  Status remove(std::string_view key) override {
    if (Status s = check(key, {}); !s.ok()) return s;
    return txn_->remove(engine::make_key(key));
  }
  Status commit() override {
    if (store_closed_->load(std::memory_order_relaxed)) return Status::Busy("store is closed");
    finished_ = true;
    return txn_->commit();
  }
  void abort() override {
    if (finished_) return;
    if (!store_closed_->load(std::memory_order_relaxed)) txn_->abort();
    finished_ = true;
  }

 private:
  Status check(std::string_view key, std::string_view value) const {
    if (store_closed_->load(std::memory_order_relaxed)) return Status::Busy("store is closed");
    if (Status s = check_key(key); !s.ok()) return s;
    return check_value(value);
  }

  std::unique_ptr<engine::Txn> txn_;
  const std::atomic<bool>* store_closed_;
  bool finished_ = false;  // commit() ran, or abort()
};

// What every Store does whatever holds its index: refuses calls once
// closed, checks key and value sizes, hashes keys and hands the call to the
// engine. PoolStore and RemoteStore add what depends on where the index
// lives: sync, check, stats and close.
class StoreBase : public Store {
 public:
  Status get(std::string_view key, std::string* value) const override {
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = check_key(key); !s.ok()) return s;
    return index_->get(engine::make_key(key), value);
  }

  Status get(std::string_view key, std::string* value, const ReadOptions& options) const override {
    if (!options.snapshot) return get(key, value);
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = check_key(key); !s.ok()) return s;
    return index_->snapshot_get(engine::make_key(key), value);
  }

  Status transaction(const TransactionOptions& options,
                     std::unique_ptr<Transaction>* txn) override {
    if (Status s = check_open(); !s.ok()) return s;
    if (options.lock_timeout_ms < 1 || options.lock_timeout_ms > 60000) {
      return Status::InvalidArgument("transaction lock timeout must be 1 .. 60000 ms, got " +
                                     std::to_string(options.lock_timeout_ms));
    }
    std::unique_ptr<engine::Txn> t;
    Status s = index_->begin(options, &t);
    if (s.is_not_supported()) {
      return Status::NotSupported("engine " + engine_ + " has no transactions (engines with: " +
                                  engines_with(&Capabilities::transactions) + ")");
    }
    if (!s.ok()) return s;
    *txn = std::make_unique<TransactionImpl>(std::move(t), &closed_);
    return Status::OK();
  }

  Status insert(std::string_view key, std::string_view value) override {
    if (Status s = check_write(key, value); !s.ok()) return s;
    const engine::Key k = engine::make_key(key);
    return unless_only_garbage([&] { return index_->insert(k, value); });
  }

  Status update(std::string_view key, std::string_view value) override {
    if (Status s = check_write(key, value); !s.ok()) return s;
    const engine::Key k = engine::make_key(key);
    return unless_only_garbage([&] { return index_->update(k, value); });
  }

  Status upsert(std::string_view key, std::string_view value) override {
    if (Status s = check_write(key, value); !s.ok()) return s;
    const engine::Key k = engine::make_key(key);
    return unless_only_garbage([&] { return index_->upsert(k, value); });
  }

  void begin_write_group() override {
    if (check_open().ok()) index_->begin_write_group();
  }

  void end_write_group() override {
    if (check_open().ok()) index_->end_write_group();
  }

  Status remove(std::string_view key) override {
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = check_key(key); !s.ok()) return s;
    return index_->remove(engine::make_key(key));
  }

  Status compare_and_swap(std::string_view key, std::optional<std::string_view> expected,
                          std::optional<std::string_view> desired) override {
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = check_key(key); !s.ok()) return s;
    if (expected) {
      if (Status s = check_value(*expected); !s.ok()) return s;
    }
    if (desired) {
      if (Status s = check_value(*desired); !s.ok()) return s;
    }
    const engine::Key k = engine::make_key(key);
    return unless_only_garbage([&] { return index_->compare_and_swap(k, expected, desired); });
  }

  Status for_each(const std::function<bool(std::string_view, std::string_view)>& fn)
      const override {
    if (Status s = check_open(); !s.ok()) return s;
    return index_->for_each(fn);
  }

  Status scan(std::uint64_t cursor, std::size_t count,
              const std::function<void(std::string_view, std::string_view)>& fn,
              std::uint64_t* next) const override {
    *next = 0;
    if (Status s = check_open(); !s.ok()) return s;
    return index_->scan(cursor, std::max<std::size_t>(count, 1), fn, next);
  }

  std::uint64_t random_cursor() const override {
    if (closed_.load(std::memory_order_relaxed)) return 0;
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return index_->random_cursor(rng());
  }

  Status salvage(const std::function<bool(std::string_view, std::string_view)>& fn,
                 std::uint64_t* skipped) const override {
    *skipped = 0;
    if (Status s = check_open(); !s.ok()) return s;
    return index_->salvage(fn, skipped);
  }

  std::uint64_t size() const override { return closed_ ? 0 : index_->size(); }

  // (Also while close() runs in the calling thread: the crash checker asks
  // from inside the drains of a close.)
  std::uint64_t epoch() const { return index_ ? index_->current_epoch() : 0; }

 protected:
  StoreBase(std::string engine, std::unique_ptr<engine::Index> index, std::uint64_t open_ns)
      : index_(std::move(index)), open_ns_(open_ns), engine_(std::move(engine)) {}

  Status check_open() const {
    if (closed_.load(std::memory_order_relaxed)) return Status::Busy("store is closed");
    return Status::OK();
  }

  // After a write answered NoSpace: frees what the calling thread holds
  // that no index entry needs any more; true when the write may succeed if
  // run again.
  virtual bool reclaim_after_no_space() { return false; }

  std::unique_ptr<engine::Index> index_;
  const std::uint64_t open_ns_;
  const std::string engine_;
  std::atomic<bool> closed_{false};

 private:
  // Runs a write, and once more when it found no space and
  // reclaim_after_no_space() freed some.
  template <typename Write>
  Status unless_only_garbage(const Write& write) {
    Status s = write();
    if (!s.is_no_space() || !reclaim_after_no_space()) return s;
    return write();
  }

  Status check_write(std::string_view key, std::string_view value) const {
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = check_key(key); !s.ok()) return s;
    return check_value(value);
  }
};

// A store whose index lives in a pool (a file, or anonymous memory): the
// store owns the pool, the heap in it and the engine over both.
class PoolStore final : public StoreBase {
 public:
  PoolStore(std::unique_ptr<pool::Pool> pool, std::unique_ptr<heap::Heap> heap,
            std::unique_ptr<engine::Index> index, std::uint64_t recovery_ns, std::uint64_t open_ns)
      : StoreBase(pool->engine(), std::move(index), open_ns),
        pool_(std::move(pool)),
        heap_(std::move(heap)),
        recovery_ns_(recovery_ns),
        counters_at_open_(media::counters()) {}

  ~PoolStore() override { (void)close(); }

  Status sync() override {
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = index_->sync(); !s.ok()) return s;
    // A file region's write-back can fail (EIO, ENOSPC) where persistent
    // memory cannot: then nothing since is known durable.
    return pool_->region().write_back_error();
  }

  Status check() const override {
    if (Status s = check_open(); !s.ok()) return s;
    if (Status s = pool_->verify_header(); !s.ok()) return s;
    if (Status s = index_->check(); !s.ok()) return s;
    return heap_->check();
  }

  media::Region& region() const { return pool_->region(); }

  Description describe() const override {
    Description d;
    d.engine = engine_;
    if (closed_) return d;
    d.granularity = std::string(media::granularity_name(pool_->region().granularity()));
    d.clean_shutdown = pool_->was_clean();
    d.recovery_ns = recovery_ns_;
    return d;
  }

  Stats stats() const override {
    Stats st;
    if (closed_) return st;
    st.engine = engine_;
    st.granularity = std::string(media::granularity_name(pool_->region().granularity()));
    st.pool_size = pool_->header().pool_size;
    st.heap_used = heap_->used_bytes();
    st.heap_free = heap_->free_bytes();
    st.clean_shutdown = pool_->was_clean();
    st.recovery_ns = recovery_ns_;
    st.open_ns = open_ns_;
    const media::Counters now = media::counters();
    st.flushes = now.flushes - counters_at_open_.flushes;
    st.fences = now.fences - counters_at_open_.fences;
    index_->fill_stats(&st);
    return st;
  }

  Status close() override {
    if (closed_.exchange(true)) return Status::OK();
    index_->close();
    heap_->drain_all();
    pool_->mark_clean_shutdown();
    Status written = pool_->region().write_back_error();
    index_.reset();
    heap_.reset();
    pool_.reset();
    return written;
  }

 private:
  // Engines retire replaced values, removed items and dropped blocks into
  // the thread's heap log, which is emptied (after a grace period) only
  // when it fills: until then those blocks stay allocated, and a small pool
  // could answer NoSpace while most of it is such garbage (e.g. one key
  // whose large value is updated again and again). A failed write changed
  // nothing and the engine call has returned, so no read-side section is
  // open and every logged block is unlinked: exactly when
  // Heap::ThreadCache::drain_retired may run.
  bool reclaim_after_no_space() override {
    heap::ThreadCache* tc = heap_->thread();
    if (tc == nullptr) return false;
    tc->drain_retired();
    return true;
  }

  std::unique_ptr<pool::Pool> pool_;
  std::unique_ptr<heap::Heap> heap_;
  std::uint64_t recovery_ns_;
  media::Counters counters_at_open_;
};

// A store whose index lives on memory nodes (Options::memnodes): no pool
// and no heap here; the engine holds its sessions with the nodes, and
// every write is durable on them before it returns.
class RemoteStore final : public StoreBase {
 public:
  RemoteStore(std::string engine, std::unique_ptr<engine::Index> index, std::uint64_t open_ns)
      : StoreBase(std::move(engine), std::move(index), open_ns) {}

  ~RemoteStore() override { (void)close(); }

  Status sync() override {
    if (Status s = check_open(); !s.ok()) return s;
    return index_->sync();
  }

  Status check() const override {
    if (Status s = check_open(); !s.ok()) return s;
    return index_->check();
  }

  Description describe() const override {
    Description d;
    d.engine = engine_;
    d.granularity = "remote";
    return d;
  }

  Stats stats() const override {
    Stats st;
    if (closed_) return st;
    st.engine = engine_;
    st.open_ns = open_ns_;
    index_->fill_stats(&st);
    return st;
  }

  Status close() override {
    if (closed_.exchange(true)) return Status::OK();
    index_->close();
    index_.reset();
    return Status::OK();
  }
};

using Clock = std::chrono::steady_clock;

std::uint64_t ns_since(Clock::time_point t0) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// Runs an engine's create or open. Engines start background threads (and
// allocate DRAM) there; when the system refuses, the standard library throws,
// and the exception must not escape the Status API: it becomes an IOError
// that names the pool and the reason (e.g. under ulimit -v or -s, or a
// process out of threads).
Status start_engine(Status (*make)(const engine::Env&, std::unique_ptr<engine::Index>*),
                    const engine::Env& env, std::unique_ptr<engine::Index>* index) {
  const std::string& path = env.pool->path();
  const std::string who =
      (path.empty() ? std::string("volatile pool") : "pool " + path) + ": engine " +
      env.pool->engine();
  try {
    return make(env, index);
  } catch (const std::system_error& e) {
    return Status::IOError(who + " cannot start (a thread or another resource was refused): " +
                           e.what());
  } catch (const std::bad_alloc&) {
    return Status::IOError(who + " cannot start: out of memory");
  }
}

// Attaches the heap and the engine to an open pool (create or open). The
// time from `started` until the engine serves is the open time reported in
// Stats (when `opening`), and after an unclean shutdown also the recovery
// time. Takes the pool only on success, so that a failed create can remove
// its file while still holding the lock.
Status attach(std::unique_ptr<pool::Pool>& pool, const Options& options,
              Status (*make)(const engine::Env&, std::unique_ptr<engine::Index>*),
              Clock::time_point started, bool opening, std::unique_ptr<Store>* store) {
  std::unique_ptr<heap::Heap> heap;
  if (Status s = heap::Heap::open(pool->region(), pool->heap_offset(), pool->heap_size(), &heap);
      !s.ok()) {
    return s;
  }
  engine::Env env{pool.get(), heap.get(), options};
  std::unique_ptr<engine::Index> index;
  if (Status s = start_engine(make, env, &index); !s.ok()) return s;
  // The heap and the engine accepted the pool: only now is it marked in use
  // (pool.h; a pool they reject is left unchanged). Before any operation.
  pool->begin_session();
  const std::uint64_t open_ns = opening ? ns_since(started) : 0;
  const std::uint64_t ns = pool->was_clean() ? 0 : ns_since(started);
  *store = std::make_unique<PoolStore>(std::move(pool), std::move(heap), std::move(index), ns,
                                       open_ns);
  return Status::OK();
}


}  // namespace

Store::~Store() = default;
Transaction::~Transaction() = default;

namespace {

// The engine and pool parameters of a new store, or why it cannot be made.
Status creation_params(const Options& options, const engine::EngineInfo** info,
                       pool::CreateParams* params) {
  const std::string name = engine_to_create(options);
  *info = engine::find_engine(name);
  if (*info == nullptr) {
    return Status::InvalidArgument("unknown engine '" + name +
                                   "' (engines: " + engine::engine_names() + ")");
  }
  if (Status s = check_options(*(*info)->descriptor, options); !s.ok()) return s;
  params->engine = name;
  params->size = options.pool_size;
  params->force = options.force;
  // The store owns the heap: it formats it here, inside Pool::create
  // (before the header that makes the file a pool), and opens it in attach().
  params->format_heap = heap::Heap::format;
  return (*info)->encode_params(options, params->engine_params.data());
}

}  // namespace

namespace {

// Engines whose index lives on memory nodes (Options::memnodes): the store
// has no pool file, and `path` must be empty.
Status start_remote(const std::string& path, const Options& options, bool create,
                    std::unique_ptr<Store>* store) {
  std::string name = engine_to_create(options);
  if (!create && options.engine.empty()) {
    // Open takes whatever engine the nodes hold, as with a pool file.
    char magic[8] = {};
    if (Status s = engine::remote_index::read_root_magic(options, name, &magic); !s.ok()) return s;
    if (const engine::EngineInfo* held = engine::find_remote_engine(magic)) {
      name = held->descriptor->name;
    }
  }
  const engine::EngineInfo* info = engine::find_engine(name);
  if (info == nullptr || info->create_remote == nullptr) {
    return Status::InvalidArgument("engine '" + name +
                                   "' keeps its index in a pool file, not on memory nodes "
                                   "(memory nodes are for " +
                                   engine::remote_engine_names() + ")");
  }
  if (!path.empty()) {
    return Status::InvalidArgument("engine " + name +
                                   " keeps its index on memory nodes (" + options.memnodes +
                                   "): give no pool path");
  }
  if (Status s = check_options(*info->descriptor, options); !s.ok()) return s;
  const Clock::time_point started = Clock::now();
  std::unique_ptr<engine::Index> index;
  Status s;
  try {
    s = create ? info->create_remote(options, &index) : info->open_remote(options, &index);
  } catch (const std::bad_alloc&) {
    s = Status::IOError("engine " + name + " cannot start: out of memory");
  }
  if (!s.ok()) return s;
  *store = std::make_unique<RemoteStore>(name, std::move(index), create ? 0 : ns_since(started));
  return Status::OK();
}

}  // namespace

Status Store::create(const std::string& path, const Options& options,
                     std::unique_ptr<Store>* store) {
  if (!options.memnodes.empty()) return start_remote(path, options, /*create=*/true, store);
  const engine::EngineInfo* info = nullptr;
  pool::CreateParams params;
  if (Status s = creation_params(options, &info, &params); !s.ok()) return s;
  if (info->create == nullptr) {
    return Status::InvalidArgument("engine " + params.engine +
                                   " keeps its index on memory nodes: give them in "
                                   "Options::memnodes (--memnodes shm:PATH,tcp:HOST:PORT)");
  }
  std::unique_ptr<pool::Pool> pool;
  if (Status s = pool::Pool::create(path, params, &pool); !s.ok()) return s;
  Status s = attach(pool, options, info->create, Clock::now(), /*opening=*/false, store);
  // A failed create leaves no file behind, as when Pool::create fails. The
  // pool still holds the file's lock, so nobody has opened it meanwhile.
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

Status Store::create_volatile(const Options& options, std::unique_ptr<Store>* store) {
  const engine::EngineInfo* info = nullptr;
  pool::CreateParams params;
  if (Status s = creation_params(options, &info, &params); !s.ok()) return s;
  if (info->create == nullptr) {
    return Status::InvalidArgument("engine " + params.engine +
                                   " keeps its index on memory nodes; it has no volatile form");
  }
  std::unique_ptr<pool::Pool> pool;
  if (Status s = pool::Pool::create_volatile(params, &pool); !s.ok()) return s;
  return attach(pool, options, info->create, Clock::now(), /*opening=*/false, store);
}

Status Store::read_modify_write(std::string_view key, const ModifyFn& fn) {
  std::string current;
  for (;;) {
    Status s = get(key, &current);
    if (!s.ok() && !s.is_not_found()) return s;
    const bool present = s.ok();
    const std::optional<std::string_view> seen =
        present ? std::optional<std::string_view>(current) : std::nullopt;
    const Modification m = fn(seen);
    // Keep: the answer is the value read, as of the get.
    if (m.kind == Modification::Kind::kKeep) return Status::OK();
    // Removing an absent key changes nothing either.
    if (m.kind == Modification::Kind::kRemove && !present) return Status::OK();
    const std::optional<std::string_view> desired =
        m.kind == Modification::Kind::kSet ? std::optional<std::string_view>(m.value)
                                           : std::nullopt;
    s = compare_and_swap(key, seen, desired);
    if (!s.is_conflict()) return s;
  }
}

std::vector<std::string> Store::engines() { return engine::engine_list(Location::kPoolFile); }

std::vector<std::string> Store::remote_engines() {
  return engine::engine_list(Location::kMemoryNodes);
}

media::Region& store::testing::region(Store& store) {
  return static_cast<PoolStore&>(store).region();
}

std::uint64_t store::testing::epoch(const Store& store) {
  return static_cast<const StoreBase&>(store).epoch();
}

Status Store::open(const std::string& path, const Options& options,
                   std::unique_ptr<Store>* store) {
  if (!options.memnodes.empty()) return start_remote(path, options, /*create=*/false, store);
  std::unique_ptr<pool::Pool> pool;
  if (Status s = pool::Pool::open(path, options.engine, &pool); !s.ok()) return s;
  const engine::EngineInfo* info = engine::find_engine(pool->engine());
  if (info == nullptr) {
    return Status::Corruption("pool " + path + ": holds unknown engine '" + pool->engine() +
                              "' (engines: " + engine::engine_names() + ")");
  }
  if (Status s = check_options(*info->descriptor, options); !s.ok()) return s;
  return attach(pool, options, info->open, Clock::now(), /*opening=*/true, store);
}

}  // namespace pmhash
