// engine/pmeh/zones.cc - owner threads, doorbells and mailboxes (design in
// pmeh.h §3): how a write from any thread becomes an operation of the one
// thread that owns its zone.
#include <pthread.h>

#include <bit>
#include <chrono>
#include <system_error>
#include <thread>

#include "engine/pmeh/pmeh_index.h"
#include "sync/rcu.h"

namespace pmhash::engine::pmeh {
namespace {

using Clock = std::chrono::steady_clock;
// An owner spins this long without a request before it sleeps; a caller
// spins this long for its result before it parks (§12.17). Both spin by
// yielding the core, not with pause: owners plus callers outnumber the
// cores on small machines, and a pause-spinning thread holds the core the
// thread it waits for needs (measured 4-5x fewer inserts/s, §12.17).
constexpr auto kOwnerSpin = std::chrono::microseconds(20);
constexpr auto kCallerSpin = std::chrono::microseconds(4);

}  // namespace

Status PmehIndex::start_owners() {
  unsigned w = env_.options.pmeh_workers;
  // Default: one owner per two hardware threads, so that owners and as many
  // callers fit on the cores (§12.17).
  if (w == 0) w = std::max(1u, std::thread::hardware_concurrency() / 2);
  w = std::min(w, kMaxWorkers);
  for (unsigned z = 0; z < (1u << z_); ++z) zones_[z].owner = z % w;
  stop_.store(false);
  for (unsigned i = 0; i < w; ++i) {
    owners_.push_back(std::make_unique<Owner>());
    Owner& o = *owners_.back();
    try {
      o.thread = std::thread([this, i] { owner_loop(i); });
    } catch (const std::system_error& e) {
      stop_owners();
      return Status::IOError("pmeh: cannot start owner thread " + std::to_string(i + 1) + " of " +
                             std::to_string(w) + ": " + e.what());
    }
    o.started.wait(0, std::memory_order_acquire);
    if (o.started.load(std::memory_order_acquire) < 0) {
      const std::string why = o.start_error.to_string();
      stop_owners();
      return Status::IOError("pmeh: cannot start owner thread " + std::to_string(i + 1) + " of " +
                             std::to_string(w) + ": " + why);
    }
  }
  return Status::OK();
}

void PmehIndex::stop_owners() {
  // close() does not race with operations, so no request is pending.
  stop_.store(true, std::memory_order_seq_cst);
  for (auto& o : owners_) {
    // Dekker with the owner going to sleep: it stores sleeping = 1, then
    // reads stop_; we stored stop_, then clear sleeping (both seq_cst).
    o->sleeping.store(0, std::memory_order_seq_cst);
    o->sleeping.notify_one();
  }
  for (auto& o : owners_) {
    if (o->thread.joinable()) o->thread.join();
  }
  owners_.clear();
}

void PmehIndex::owner_loop(unsigned i) {
  Owner& o = *owners_[i];
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) {
    o.start_error = s;
    o.started.store(-1, std::memory_order_release);
    o.started.notify_one();
    return;
  }
  rcu::register_thread();
  const std::string name = "pmeh-owner-" + std::to_string(i);
  pthread_setname_np(pthread_self(), name.c_str());
  o.started.store(1, std::memory_order_release);
  o.started.notify_one();
  auto idle_since = Clock::now();
  for (;;) {
    bool served = false;
    for (unsigned w = 0; w < 4; ++w) {
      std::uint64_t bits = o.doorbell[w].exchange(0, std::memory_order_acquire);
      while (bits != 0) {
        const unsigned t = w * 64 + static_cast<unsigned>(std::countr_zero(bits));
        bits &= bits - 1;
        Mailbox& m = mailboxes_[t];
        m.result = execute(tc, m.req);
        delegated_.fetch_add(1, std::memory_order_relaxed);
        // Dekker with a parking caller: it stores parked, then reads done.
        m.done.store(1, std::memory_order_seq_cst);
        if (m.parked.load(std::memory_order_seq_cst) != 0) m.done.notify_one();
        served = true;
      }
    }
    if (served) {
      idle_since = Clock::now();
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) break;
    if (Clock::now() - idle_since < kOwnerSpin) {
      std::this_thread::yield();
      continue;
    }
    // Dekker with callers: they ring, then read sleeping; we store sleeping,
    // then read every doorbell (both seq_cst), so no wake-up is lost.
    o.sleeping.store(1, std::memory_order_seq_cst);
    bool work = stop_.load(std::memory_order_seq_cst);
    for (unsigned w = 0; w < 4 && !work; ++w) {
      work = o.doorbell[w].load(std::memory_order_seq_cst) != 0;
    }
    if (!work) o.sleeping.wait(1, std::memory_order_seq_cst);
    o.sleeping.store(0, std::memory_order_relaxed);
    idle_since = Clock::now();
  }
}

Status PmehIndex::delegate(heap::ThreadCache* tc, unsigned zone, const Request& req,
                           Request* result_req) {
  const unsigned t = tc->slot();
  Mailbox& m = mailboxes_[t];
  m.req = req;
  m.done.store(0, std::memory_order_relaxed);
  Owner& o = *owners_[zones_[zone].owner];
  // Ring: the request is visible to the owner that takes our bit.
  o.doorbell[t / 64].fetch_or(std::uint64_t{1} << (t % 64), std::memory_order_seq_cst);
  if (o.sleeping.load(std::memory_order_seq_cst) != 0) {
    o.sleeping.store(0, std::memory_order_seq_cst);
    o.sleeping.notify_one();
  }
  const auto start = Clock::now();
  for (unsigned spins = 0; m.done.load(std::memory_order_acquire) == 0; ++spins) {
    if ((spins & 7) == 7 && Clock::now() - start > kCallerSpin) {
      m.parked.store(1, std::memory_order_seq_cst);
      while (m.done.load(std::memory_order_seq_cst) == 0) m.done.wait(0, std::memory_order_acquire);
      m.parked.store(0, std::memory_order_relaxed);
      break;
    }
    std::this_thread::yield();
  }
  if (result_req != nullptr) *result_req = m.req;
  return m.result;
}

}  // namespace pmhash::engine::pmeh
