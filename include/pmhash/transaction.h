// pmhash/transaction.h - multi-key transactions (engines that offer them:
// dali).
//
//   std::unique_ptr<pmhash::Transaction> txn;
//   pmhash::Status s = store->transaction(&txn);
//   std::string from;
//   s = txn->get("alice", &from);           // locks alice's bucket
//   s = txn->update("alice", debit(from));  // buffered until commit
//   s = txn->upsert("bob", credit(...));
//   s = txn->commit();                      // all or nothing, also across crashes
//   if (s.is_aborted()) { /* a lock wait timed out: retry the transaction */ }
//
// Isolation: a read-write transaction is serializable (strict two-phase
// locking: every key it reads or writes stays locked until commit or abort,
// so nothing it read can change under it). A read-only transaction
// (TransactionOptions::read_only) takes no locks and reads a snapshot: the
// state the store would recover to after a crash at its start (dali: as of
// two epochs before it began). Read-only transactions are serializable but
// not strictly so: they may miss writes acknowledged in the last epochs.
//
// Durability: a committed transaction's writes run in one epoch and survive
// a crash all together or not at all; they are durable when commit returns
// with Durability::kStrict, and once their epoch is with kEpoch
// (Store::sync() waits for that).
//
// Deadlocks are detected by timeout: a lock wait longer than
// TransactionOptions::lock_timeout_ms aborts the transaction (Status
// Aborted; nothing it wrote is applied, every lock is released) and it may
// be retried. Locks cover buckets, not keys, so two transactions on
// different keys may also wait for each other.
//
// Thread safety: a Transaction is used by one thread at a time (it may move
// between threads). It must be committed, aborted or destroyed before its
// Store is closed; once committed or aborted it may outlive the Store.
// While it holds locks, writes by the Store's own methods to keys in the
// same buckets wait for it, and time out as well (Status Busy).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "pmhash/status.h"

namespace pmhash {

struct TransactionOptions {
  // Reads only, from a snapshot, without locks (see above). Writes return
  // InvalidArgument.
  bool read_only = false;
  // Longest wait for one lock before the transaction aborts. 1 .. 60000.
  unsigned lock_timeout_ms = 100;
};

class Transaction {
 public:
  // Aborts the transaction if it is neither committed nor aborted.
  virtual ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // As Store::get, seeing this transaction's own writes. Errors: NotFound;
  // InvalidArgument for an oversized key; Aborted (this call or an earlier
  // one timed out waiting for a lock: the transaction is over).
  virtual Status get(std::string_view key, std::string* value) = 0;

  // As the Store's methods; the write is buffered and applied at commit.
  // Errors: AlreadyExists / NotFound as for the Store (the transaction goes
  // on; nothing was buffered); InvalidArgument (oversized key or value, or
  // a write in a read-only transaction); Aborted as for get.
  virtual Status insert(std::string_view key, std::string_view value) = 0;
  virtual Status update(std::string_view key, std::string_view value) = 0;
  virtual Status upsert(std::string_view key, std::string_view value) = 0;
  virtual Status remove(std::string_view key) = 0;

  // Applies every buffered write at once and releases the locks. Errors:
  // Aborted (the transaction was aborted before); NoSpace (the pool cannot
  // hold the writes: none is applied, the transaction is over); Busy (the
  // store is closed). After commit, every call returns InvalidArgument.
  virtual Status commit() = 0;

  // Drops the buffered writes and releases the locks. Idempotent.
  virtual void abort() = 0;

 protected:
  Transaction() = default;
};

}  // namespace pmhash
