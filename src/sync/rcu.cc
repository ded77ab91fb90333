// sync/rcu.cc - see rcu.h.
#include "sync/rcu.h"

#if !defined(PMHASH_RCU_ATOMICS)

// The inline (LGPL-permitted) read-side primitives: a read lock is then a
// few instructions instead of a call into the shared library.
#define _LGPL_SOURCE
#include <urcu/urcu-memb.h>

namespace pmhash::rcu {
namespace {

// Registers the thread with liburcu on first use and unregisters it when the
// thread exits, so users of pmhash never see liburcu.
struct Registration {
  bool registered = false;
  ~Registration() {
    if (registered) urcu_memb_unregister_thread();
  }
};
thread_local Registration tls_registration;

}  // namespace

void register_thread() {
  if (!tls_registration.registered) {
    urcu_memb_register_thread();
    tls_registration.registered = true;
  }
}

ReadGuard::ReadGuard() {
  register_thread();
  urcu_memb_read_lock();
}

ReadGuard::~ReadGuard() { urcu_memb_read_unlock(); }

void synchronize() { urcu_memb_synchronize_rcu(); }

}  // namespace pmhash::rcu

#else  // PMHASH_RCU_ATOMICS: an epoch scheme ThreadSanitizer understands.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace pmhash::rcu {
namespace {

// Each registered thread publishes the global epoch it entered its
// outermost read-side section in (0: not in a section). synchronize()
// advances the epoch and waits until no thread is inside a section that
// began in an older epoch. All accesses are seq_cst: a reader's store of
// `active` and its later loads of shared pointers are ordered against the
// writer's unlink and its reads of `active`.
struct Reader {
  std::atomic<std::uint64_t> active{0};
  unsigned nesting = 0;
};

std::atomic<std::uint64_t> g_epoch{1};
std::mutex g_mutex;
std::vector<Reader*>& readers() {
  static auto* v = new std::vector<Reader*>();  // outlives thread exits
  return *v;
}

struct Registration {
  Reader* reader = nullptr;
  ~Registration() {
    if (reader == nullptr) return;
    std::lock_guard lock(g_mutex);
    auto& v = readers();
    std::erase(v, reader);
    delete reader;
  }
};
thread_local Registration tls_registration;

}  // namespace

void register_thread() {
  if (tls_registration.reader != nullptr) return;
  auto* r = new Reader();
  std::lock_guard lock(g_mutex);
  readers().push_back(r);
  tls_registration.reader = r;
}

ReadGuard::ReadGuard() {
  register_thread();
  Reader* r = tls_registration.reader;
  if (r->nesting++ == 0) r->active.store(g_epoch.load());
}

ReadGuard::~ReadGuard() {
  Reader* r = tls_registration.reader;
  if (--r->nesting == 0) r->active.store(0);
}

void synchronize() {
  const std::uint64_t target = g_epoch.fetch_add(1) + 1;
  std::vector<Reader*> snapshot;
  {
    std::lock_guard lock(g_mutex);
    snapshot = readers();
  }
  // A reader registered after the snapshot entered after the unlink, so it
  // cannot hold the unlinked memory. The snapshot's readers cannot be freed
  // while we look: a thread only deletes its Reader under g_mutex, so take
  // the lock for every probe.
  for (Reader* r : snapshot) {
    for (;;) {
      {
        std::lock_guard lock(g_mutex);
        if (std::find(readers().begin(), readers().end(), r) == readers().end()) break;
        const std::uint64_t a = r->active.load();
        if (a == 0 || a >= target) break;
      }
      std::this_thread::yield();
    }
  }
}

}  // namespace pmhash::rcu

#endif
