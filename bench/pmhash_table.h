// bench/pmhash_table.h - a pmhash Store behind the driver's Table interface.
//
// One fresh pool per run: a file at config.pool_path (replaced if it exists,
// removed when the table is destroyed), or anonymous DRAM for granularity
// "none" (Store::create_volatile: the engine's code without any flush or
// fence). The granularity of a file pool is whatever libpmem2 reports; the
// driver forces it with PMEM2_FORCE_GRANULARITY before any table exists.
//
// Durability: engines that only persist synchronously (clevel) refuse
// Durability::kEpoch; the table then runs them strict, which is stronger,
// and says so in durability(). Epochs last config.epoch_interval
// (Options::epoch_ms).
//
// Transactions: Store::transaction, one per attempt, with the configured
// lock timeout; an attempt that returns Aborted (a lock wait timed out) is
// retried. Whether the engine has transactions is asked once, at creation
// (Store::transaction returns NotSupported for engines without them).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "pmhash/options.h"
#include "pmhash/status.h"
#include "pmhash/store.h"
#include "pmhash/transaction.h"
#include "table.h"

namespace pmhash::bench {

class PmhashTable final : public Table {
 public:
  PmhashTable(const std::string& engine, const TableConfig& config)
      : engine_(engine), path_(config.granularity == "none" ? "" : config.pool_path) {
    Options options;
    options.engine = engine;
    options.force = true;
    options.durability = config.durability;
    options.epoch_ms = static_cast<unsigned>(config.epoch_interval.count());
    options.pool_size = config.pool_size != 0 ? config.pool_size : default_pool_size(config);
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

  // Bytes of a pool that holds `capacity_hint` items comfortably: the
  // items, the index at its largest (two levels, load factor near 1/2 right
  // after an expansion) and the heap's slack, at least 1 GiB (sparse).
  static std::uint64_t default_pool_size(const TableConfig& config) {
    const std::uint64_t per_key = 200 + 2 * (config.key_size + config.value_size);
    return std::max<std::uint64_t>(std::uint64_t{1} << 30, config.capacity_hint * per_key);
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
    out.expansions = now.expansions;
    out.items_moved = now.items_moved;
    if (durability_ == Durability::kEpoch) out.durability_points = now.epoch_fences;
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
    return Status::NotFound(std::string("transaction ") + op + " '" + std::string(key) +
                            "': not found");
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
  TransactionOptions txn_options_;
  Status txn_support_;  // what Store::transaction said at creation
  std::unique_ptr<Store> store_;
  Stats at_start_;
};

}  // namespace pmhash::bench
