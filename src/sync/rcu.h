// sync/rcu.h - read-copy-update reclamation for lock-free engines.
//
// Memory unlinked by lock-free code is freed only after every reader that
// could still hold a pointer to it has left its read-side section. Backed by
// liburcu's memb flavour (membarrier-based: cheap readers, no signals, safe
// in a library). Threads register themselves on their first ReadGuard and
// unregister when they exit; users never see it.
//
// Under ThreadSanitizer (PMHASH_RCU_ATOMICS) the same interface is served by
// a small epoch scheme made of C++ atomics, because TSan cannot see the
// ordering that membarrier(2) provides.
#pragma once

namespace pmhash::rcu {

// Registers the calling thread if it is not yet registered. Idempotent.
void register_thread();

// A read-side critical section: pointers loaded inside stay valid until the
// guard is destroyed. Nestable. Must not wait for a grace period inside.
class ReadGuard {
 public:
  ReadGuard();
  ~ReadGuard();
  ReadGuard(const ReadGuard&) = delete;
  ReadGuard& operator=(const ReadGuard&) = delete;
};

// Waits until every read-side section that began before the call has ended.
// Must not be called inside a ReadGuard.
void synchronize();

}  // namespace pmhash::rcu
