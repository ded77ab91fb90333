// engine/dali/txn.cc - transactions: strong strict two-phase locking with
// buffered writes, and read-only snapshot transactions (dali.h,
// "Transactions"; paper §3.4).
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/dali/dali_index.h"
#include "engine/dali/dali_testing.h"

namespace pmhash::engine::dali {

class DaliTxn final : public Txn {
 public:
  DaliTxn(DaliIndex& ix, const TransactionOptions& o)
      : ix_(ix), read_only_(o.read_only), timeout_(o.lock_timeout_ms) {}
  ~DaliTxn() override { abort(); }

  // A read-only transaction registers its snapshot.
  Status start() {
    if (!read_only_) return Status::OK();
    Status s;
    heap::ThreadCache* tc = ix_.heap_.thread(&s);
    if (tc == nullptr) return s;
    snapshot_ = ix_.register_snapshot(tc->slot());
    has_snapshot_ = true;
    return Status::OK();
  }

  Status get(const Key& key, std::string* value) override {
    if (Status s = usable(); !s.ok()) return s;
    if (read_only_) {
      Status s;
      heap::ThreadCache* tc = ix_.heap_.thread(&s);
      if (tc == nullptr) return s;
      return ix_.read_as_of(tc->slot(), key, snapshot_, value);
    }
    bool present = false;
    std::uint64_t depends_on = 0;
    if (Status s = look(key, &present, value, &depends_on); !s.ok()) return s;
    answer_durable(depends_on);
    return present ? Status::OK() : Status::NotFound();
  }

  Status insert(const Key& key, std::string_view value) override {
    return write(DaliIndex::Op::kInsert, key, value);
  }
  Status update(const Key& key, std::string_view value) override {
    return write(DaliIndex::Op::kUpdate, key, value);
  }
  Status upsert(const Key& key, std::string_view value) override {
    return write(DaliIndex::Op::kUpsert, key, value);
  }
  Status remove(const Key& key) override { return write(DaliIndex::Op::kRemove, key, {}); }

  Status commit() override;

  void abort() override {
    if (state_ != State::kOpen) return;
    release();
    state_ = State::kAborted;
    aborted_why_ = "aborted by the caller";
  }

 private:
  enum class State : unsigned char { kOpen, kCommitted, kAborted };
  struct Write {
    std::uint64_t h1 = 0, h2 = 0;
    std::string value;
    bool absent = false;
  };

  Status usable() const {
    if (state_ == State::kAborted) return Status::Aborted("transaction " + aborted_why_);
    if (state_ == State::kCommitted) return Status::InvalidArgument("transaction already committed");
    return Status::OK();
  }

  // Locks the key's stripe unless held; on timeout the transaction aborts.
  Status acquire(const Key& key) { return acquire_stripe(ix_.stripe_of(key.h1)); }

  Status acquire_stripe(std::uint32_t stripe) {
    if (held_.contains(stripe)) return Status::OK();
    if (!ix_.lock_until(stripe, timeout_)) {
      release();
      state_ = State::kAborted;
      aborted_why_ = "aborted: waited " + std::to_string(timeout_.count()) +
                     " ms for a lock (a possible deadlock); retry it";
      return Status::Aborted("transaction " + aborted_why_);
    }
    held_.insert(stripe);
    return Status::OK();
  }

  // The key as this transaction sees it: its own write, else the store
  // (read under the lock, which stays held until the end).
  // *depends_on: the epoch of the record read from the store (0: none, or
  // the transaction's own write).
  Status look(const Key& key, bool* present, std::string* value, std::uint64_t* depends_on) {
    *depends_on = 0;
    if (Status s = acquire(key); !s.ok()) return s;
    if (auto it = writes_.find(std::string(key.bytes)); it != writes_.end()) {
      *present = !it->second.absent;
      if (*present && value != nullptr) *value = it->second.value;
      return Status::OK();
    }
    const DaliIndex::Probe p = ix_.probe(key);
    *present = p.present;
    if (p.found != 0) *depends_on = ix_.rec(p.found)->version;
    if (p.present && value != nullptr) value->assign(record_value(ix_.rec(p.found)));
    return Status::OK();
  }

  // Strict: an answer taken from the store waits until the record it came
  // from is durable (dali.h, "Durable linearizability"). The locks stay
  // held; the wait is outside any epoch, so it cannot hold up the advance.
  void answer_durable(std::uint64_t depends_on) {
    if (ix_.strict_ && depends_on != 0 && !planted::active(testing::kAnswerBeforeDurable)) {
      ix_.epochs_->wait_durable(depends_on);
    }
  }

  Status write(DaliIndex::Op op, const Key& key, std::string_view value) {
    if (Status s = usable(); !s.ok()) return s;
    if (read_only_) return Status::InvalidArgument("a read-only transaction cannot write");
    if (op == DaliIndex::Op::kUpsert) {
      // A blind write: its answer needs nothing from the store, so its
      // stripe is locked at commit, in stripe order with the other blind
      // writes' (lock_blind_writes), not now in the caller's key order.
      buffer(key, value, /*absent=*/false);
      return Status::OK();
    }
    bool present = false;
    std::uint64_t depends_on = 0;
    if (Status s = look(key, &present, nullptr, &depends_on); !s.ok()) return s;
    if (op == DaliIndex::Op::kInsert && present) {
      answer_durable(depends_on);
      return Status::AlreadyExists("key exists");
    }
    if ((op == DaliIndex::Op::kUpdate || op == DaliIndex::Op::kRemove) && !present) {
      answer_durable(depends_on);
      return Status::NotFound();
    }
    buffer(key, value, op == DaliIndex::Op::kRemove);
    return Status::OK();
  }

  void buffer(const Key& key, std::string_view value, bool absent) {
    Write& w = writes_[std::string(key.bytes)];
    w.h1 = key.h1;
    w.h2 = key.h2;
    w.value.assign(value);
    w.absent = absent;
  }

  // At commit: locks the stripes of the blind writes not locked yet, in
  // ascending stripe order. Two transactions of blind writes alone (MSET)
  // thus never wait on each other in a cycle, whatever order their callers
  // wrote the keys in; with locks taken by reads, a cycle is still broken
  // by the timeout. Every lock is held before any write is applied and
  // until the commit ends: still two-phase.
  Status lock_blind_writes() {
    std::vector<std::uint32_t> stripes;
    for (const auto& [key, w] : writes_) {
      const std::uint32_t stripe = ix_.stripe_of(w.h1);
      if (!held_.contains(stripe)) stripes.push_back(stripe);
    }
    std::sort(stripes.begin(), stripes.end());
    stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
    for (std::uint32_t stripe : stripes) {
      if (Status s = acquire_stripe(stripe); !s.ok()) return s;
    }
    return Status::OK();
  }

  void release() {
    for (std::uint32_t stripe : held_) ix_.unlock(stripe);
    held_.clear();
    writes_.clear();
    if (has_snapshot_) {
      ix_.release_snapshot(snapshot_);
      has_snapshot_ = false;
    }
  }

  DaliIndex& ix_;
  const bool read_only_;
  const std::chrono::milliseconds timeout_;
  std::uint64_t snapshot_ = 0;
  bool has_snapshot_ = false;
  std::unordered_set<std::uint32_t> held_;
  std::unordered_map<std::string, Write> writes_;
  State state_ = State::kOpen;
  std::string aborted_why_;
};

Status DaliTxn::commit() {
  if (Status s = usable(); !s.ok()) return s;
  if (writes_.empty()) {
    release();
    state_ = State::kCommitted;
    return Status::OK();
  }
  Status s;
  heap::ThreadCache* tc = ix_.heap_.thread(&s);
  if (tc == nullptr) return s;
  if (s = lock_blind_writes(); !s.ok()) return s;
  const unsigned t = tc->slot();
  struct Plan {
    const std::string* key;
    const Write* w;
    DaliIndex::Probe p;
    std::uint64_t off = 0;  // new record, or 0: rewrite in place
  };
  std::vector<Plan> plans;
  plans.reserve(writes_.size());
  std::uint64_t e = 0;
  bool grew = false;
  for (int attempt = 0;; ++attempt) {
    // Every lock is held (since the first access to each key, or, for a
    // key only written blind, since lock_blind_writes above): one epoch
    // holds every write, so a crash keeps all of them or none (dali.h).
    e = ix_.epochs_->enter(t);
    plans.clear();
    // Allocation is the one thing that can fail: all of it first.
    bool room = true;
    for (const auto& [key, w] : writes_) {
      const Key k{key, w.h1, w.h2};
      Plan plan{&key, &w, ix_.probe(k)};
      if (!ix_.fits_in_place(plan.p.found, e, key.size(), w.value.size())) {
        room = room && ix_.allocate_record(tc, t, record_size(key.size(), w.value.size()),
                                           w.absent ? plan.p.found : 0, &plan.off)
                           .ok();
      }
      plans.push_back(plan);
    }
    if (room) break;
    for (const Plan& plan : plans) {
      if (plan.off != 0) ix_.free_record(tc, t, plan.off);
    }
    ix_.epochs_->exit(t);
    if (attempt == 0) {
      // Our stripes are collected under the locks we hold (else
      // make_room would wait the lock timeout on each).
      ix_.make_room(tc, t, &held_);
      continue;
    }
    const std::size_t n = writes_.size();
    release();
    state_ = State::kAborted;
    aborted_why_ = "failed: the pool is full";
    return Status::NoSpace("pool full: the transaction's " + std::to_string(n) +
                           " writes do not fit; none was applied");
  }
  for (std::uint32_t stripe : held_) ix_.begin_write(stripe);
  for (const Plan& plan : plans) {
    if (plan.off == 0) {
      ix_.write_in_place(t, e, plan.p.found, plan.w->value, plan.w->absent);
    } else {
      ix_.prepend(t, e, plan.p.bucket, plan.off, *plan.key, plan.w->value, plan.w->absent, e);
    }
    const std::int64_t delta = (plan.w->absent ? 0 : 1) - (plan.p.present ? 1 : 0);
    if (delta != 0) ix_.add_count(t, ix_.stripe_of(plan.w->h1), delta);
    grew = grew || delta > 0;
  }
  ix_.epochs_->exit(t);
  for (std::uint32_t stripe : held_) ix_.end_write_and_unlock(stripe);
  held_.clear();
  release();
  state_ = State::kCommitted;
  if (grew) ix_.maybe_grow(tc, t);
  if (ix_.strict_) ix_.wait_durable_or_defer(e);
  return Status::OK();
}

Status DaliIndex::begin(const TransactionOptions& options, std::unique_ptr<Txn>* txn) {
  auto t = std::make_unique<DaliTxn>(*this, options);
  if (Status s = t->start(); !s.ok()) return s;
  *txn = std::move(t);
  return Status::OK();
}

}  // namespace pmhash::engine::dali
