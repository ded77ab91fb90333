// engine/pmeh/zones.cc - owner threads, doorbells and mailboxes (design in
// pmeh.h §3): how a write from any thread becomes an operation of the one
// thread that owns its zone; and the opportunistic switch (§7): the
// monitor that finds hot zones and the owner's hand-over between modes.
#include <pthread.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>
#include <system_error>
#include <thread>

#include "engine/pmeh/pmeh.h"
#include "engine/pmeh/pmeh_index.h"
#include "engine/pmeh/pmeh_testing.h"
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

// The monitor (§7.2). A window lasts at least kWindowNs and closes once it
// has min_window_ops_ writes (1024), or after kMaxWindowNs with fewer (a calm
// window). Loop rounds of an owner between two looks at the clock.
constexpr std::int64_t kWindowNs = 1'000'000;
constexpr std::int64_t kMaxWindowNs = 250'000'000;
constexpr unsigned kHotWindows = 2;   // consecutive hot windows before SHARED
constexpr unsigned kColdWindows = 8;  // consecutive cold windows before OWNED
constexpr unsigned kSwitchGap = 8;    // windows between two switches of a zone
constexpr unsigned kMonitorRounds = 64;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status PmehIndex::start_owners() {
  unsigned w = Config::from(env_.options).workers;
  // Default: one owner per two hardware threads, so that owners and as many
  // callers fit on the cores (§12.17).
  if (w == 0) w = std::max(1u, std::thread::hardware_concurrency() / 2);
  w = std::min(w, kMaxWorkers);
  for (unsigned z = 0; z < (1u << z_); ++z) zones_[z].owner = z % w;
  hw_threads_ = std::max(1u, std::thread::hardware_concurrency());
  if (write_mode_ == kWriteDirect) {
    // No owner runs yet and no caller has come: the zones start SHARED
    // without a hand-over.
    for (unsigned z = 0; z < (1u << z_); ++z) zones_[z].mode.store(kShared);
    all_direct_.store(true);
  }
  stop_.store(false);
  // No monitor window before every owner runs.
  next_window_ns_.store(std::numeric_limits<std::int64_t>::max(), std::memory_order_relaxed);
  // Every Owner exists before the first thread starts: a running owner
  // reads owners_ (its own entry, workers()), so the vector must not grow
  // under it.
  for (unsigned i = 0; i < w; ++i) owners_.push_back(std::make_unique<Owner>());
  for (unsigned i = 0; i < w; ++i) {
    Owner& o = *owners_[i];
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
  // Release: owners_ is complete before any monitor window reads it.
  next_window_ns_.store(0, std::memory_order_release);
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
  unsigned rounds = 0;
  for (;;) {
    // Mode requests first, between two operations (§7.3).
    if (o.control.load(std::memory_order_relaxed) != 0) apply_requests(i);
    std::uint64_t served = 0;
    for (unsigned w = 0; w < 4; ++w) {
      std::uint64_t bits = o.doorbell[w].exchange(0, std::memory_order_acquire);
      while (bits != 0) {
        const unsigned t = w * 64 + static_cast<unsigned>(std::countr_zero(bits));
        bits &= bits - 1;
        Mailbox& m = mailboxes_[t];
        if (m.req.key != nullptr) {
          zones_[zone_of(m.req.key->h1)].ops.fetch_add(1, std::memory_order_relaxed);
        }
        m.result = execute(tc, m.req);
        delegated_.fetch_add(1, std::memory_order_relaxed);
        // Dekker with a parking caller: it stores parked, then reads done.
        m.done.store(1, std::memory_order_seq_cst);
        if (m.parked.load(std::memory_order_seq_cst) != 0) m.done.notify_one();
        ++served;
      }
    }
    if (served != 0) {
      // Splits this round started in SHARED zones: the rest of S moves now
      // that their callers have their answers (pmeh.h, "Writes during a
      // split").
      if (o.finish_pending) finish_shared_splits(tc, i);
      // The monitor's backlog: requests per round that found any.
      o.served.fetch_add(served, std::memory_order_relaxed);
      o.busy_rounds.fetch_add(1, std::memory_order_relaxed);
      if (++rounds % kMonitorRounds == 0) maybe_monitor();
      idle_since = Clock::now();
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) break;
    maybe_monitor();
    if (Clock::now() - idle_since < kOwnerSpin) {
      std::this_thread::yield();
      continue;
    }
    // Idle: a step of a split in flight, or retired SplitStates freed.
    if (idle_work(tc, i)) {
      idle_since = Clock::now();
      continue;
    }
    // Dekker with callers: they ring, then read sleeping; we store sleeping,
    // then read every doorbell (both seq_cst), so no wake-up is lost.
    o.sleeping.store(1, std::memory_order_seq_cst);
    bool work = stop_.load(std::memory_order_seq_cst) ||
                o.control.load(std::memory_order_seq_cst) != 0;
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
  wake(o);
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

void PmehIndex::wake(Owner& o) {
  // Dekker with the owner going to sleep (owner_loop): we stored the work,
  // then read sleeping; it stores sleeping, then reads the work.
  if (o.sleeping.load(std::memory_order_seq_cst) != 0) {
    o.sleeping.store(0, std::memory_order_seq_cst);
    o.sleeping.notify_one();
  }
}

// ---------------------------------------------------------------------------
// The opportunistic switch (§7)
// ---------------------------------------------------------------------------

void PmehIndex::post_request(unsigned z, ZoneRequest r) {
  zones_[z].request.store(r, std::memory_order_release);
  Owner& o = *owners_[zones_[z].owner];
  o.control.store(1, std::memory_order_seq_cst);
  wake(o);
}

void PmehIndex::apply_requests(unsigned i) {
  Owner& o = *owners_[i];
  o.control.exchange(0, std::memory_order_acq_rel);
  const unsigned w = workers();
  for (unsigned z = i; z < (1u << z_); z += w) {
    Zone& zone = zones_[z];
    const std::uint8_t r = zone.request.load(std::memory_order_acquire);
    if (r == kNoRequest) continue;
    const std::uint8_t mode = zone.mode.load(std::memory_order_relaxed);
    if (r == kRequestShared && mode == kOwned) {
      // This owner runs one operation at a time: its last lock-free write
      // in the zone has ended, durable (quiescent unlock), and happens
      // before any caller that loads SHARED.
      zone.mode.store(kShared, std::memory_order_seq_cst);
      zone_switches_.fetch_add(1, std::memory_order_relaxed);
    } else if (r == kRequestOwned && mode == kShared) {
      // Dekker with direct writers (§7.3): they announce, then read the
      // mode; we store TO_OWNED, then read every announcement. Either we
      // see a writer's announcement and wait for it to end, or it sees
      // TO_OWNED and delegates.
      zone.mode.store(kToOwned, std::memory_order_seq_cst);
      if (!planted::active(testing::kHandOverSkipsWait)) {
        for (unsigned t = 0; t < kMaxThreads; ++t) {
          // Acquire: the direct writer's stores happen before our next
          // lock-free write in the zone.
          while (mailboxes_[t].announce.load(std::memory_order_seq_cst) == z) {
            std::this_thread::yield();
          }
        }
      }
      zone.mode.store(kOwned, std::memory_order_release);
      zone_switches_.fetch_add(1, std::memory_order_relaxed);
    }
    // Cleared only if no newer request came meanwhile (go_direct may
    // overwrite a pending one; its control bit brings us back for it).
    std::uint8_t expected = r;
    zone.request.compare_exchange_strong(expected, kNoRequest, std::memory_order_acq_rel);
  }
}

void PmehIndex::note_caller(Mailbox& m) {
  m.counted = true;
  const unsigned callers = callers_.fetch_add(1, std::memory_order_relaxed) + 1;
  // The rule (pmeh.h, "Write mode"): delegation pays a hand-off per write,
  // cheap only while every owner and every caller has a hardware thread of
  // its own and one is left for the rest of the machine; without that
  // headroom a hand-off waits for a context switch, and callers writing
  // their segments themselves win.
  if (write_mode_ == kWriteAuto && opportunistic_ && callers + workers() >= hw_threads_ &&
      !all_direct_.load(std::memory_order_relaxed)) {
    go_direct();
  }
}

void PmehIndex::go_direct() {
  // Under the monitor's mutex: no window runs meanwhile, and none after
  // (maybe_monitor checks all_direct_ under it).
  std::lock_guard lock(monitor_mutex_);
  if (all_direct_.exchange(true, std::memory_order_acq_rel)) return;
  for (unsigned z = 0; z < (1u << z_); ++z) post_request(z, kRequestShared);
}

void PmehIndex::force_mode(unsigned z, bool shared) {
  const std::uint8_t want = shared ? kShared : kOwned;
  if (zones_[z].mode.load(std::memory_order_acquire) == want) return;
  post_request(z, shared ? kRequestShared : kRequestOwned);
  while (zones_[z].request.load(std::memory_order_acquire) != kNoRequest ||
         zones_[z].mode.load(std::memory_order_acquire) != want) {
    std::this_thread::yield();
  }
}

void PmehIndex::maybe_monitor() {
  if (!opportunistic_ || !monitor_on_.load(std::memory_order_relaxed) ||
      all_direct_.load(std::memory_order_relaxed)) {
    return;
  }
  const std::int64_t now = now_ns();
  if (now < next_window_ns_.load(std::memory_order_acquire)) return;
  // Any owner may close a window; one at a time.
  std::unique_lock lock(monitor_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !monitor_on_.load(std::memory_order_relaxed) ||
      all_direct_.load(std::memory_order_relaxed)) {
    return;
  }
  const unsigned zn = 1u << z_;
  std::vector<std::uint64_t> delta(zn);
  std::uint64_t total = 0;
  for (unsigned z = 0; z < zn; ++z) {
    delta[z] = zones_[z].ops.load(std::memory_order_relaxed) - zones_[z].seen_ops;
    total += delta[z];
  }
  next_window_ns_.store(now + kWindowNs, std::memory_order_relaxed);
  // Too few writes yet: the window goes on, up to kMaxWindowNs.
  if (total < min_window_ops_.load(std::memory_order_relaxed) &&
      now - window_start_ns_ < kMaxWindowNs) {
    return;
  }
  for (unsigned z = 0; z < zn; ++z) zones_[z].seen_ops += delta[z];
  std::vector<double> backlog(owners_.size());
  for (std::size_t o = 0; o < owners_.size(); ++o) {
    Owner& ow = *owners_[o];
    const std::uint64_t served = ow.served.load(std::memory_order_relaxed);
    const std::uint64_t rounds = ow.busy_rounds.load(std::memory_order_relaxed);
    backlog[o] = rounds == ow.seen_rounds ? 0.0
                                          : static_cast<double>(served - ow.seen_served) /
                                                static_cast<double>(rounds - ow.seen_rounds);
    ow.seen_served = served;
    ow.seen_rounds = rounds;
  }
  window_start_ns_ = now;
  monitor_window(delta, backlog);
}

std::vector<unsigned> PmehIndex::run_monitor_window(const std::vector<std::uint64_t>& ops,
                                                    const std::vector<double>& backlog) {
  std::vector<unsigned> switched;
  {
    std::lock_guard lock(monitor_mutex_);
    switched = monitor_window(ops, backlog);
  }
  for (unsigned z : switched) {
    while (zones_[z].request.load(std::memory_order_acquire) != kNoRequest) {
      std::this_thread::yield();
    }
  }
  return switched;
}

std::vector<unsigned> PmehIndex::monitor_window(const std::vector<std::uint64_t>& delta,
                                                const std::vector<double>& backlog) {
  ++windows_;
  const unsigned zn = 1u << z_;
  const unsigned w = workers();
  const double fair = 1.0 / w;
  std::uint64_t total = 0;
  for (unsigned z = 0; z < zn; ++z) total += delta[z];
  // A window with few writes decides nothing: every share counts as 0.
  const bool calm = total < min_window_ops_.load(std::memory_order_relaxed);
  std::vector<double> share(zn, 0.0);
  std::vector<double> owned(w, 0.0);
  for (unsigned z = 0; z < zn; ++z) {
    if (!calm) share[z] = static_cast<double>(delta[z]) / static_cast<double>(total);
    if (zones_[z].mode.load(std::memory_order_relaxed) == kOwned) owned[zones_[z].owner] += share[z];
  }
  std::vector<bool> overloaded(w, false);
  for (unsigned o = 0; o < w; ++o) {
    overloaded[o] = !calm && (owned[o] >= 1.5 * fair || backlog[o] >= 2.0);
  }
  const double hot = std::max(fair / 2, 2.0 / zn);
  const double cold = std::max(fair / 4, 1.0 / zn);
  for (unsigned z = 0; z < zn; ++z) {
    Zone& zone = zones_[z];
    const std::uint8_t mode = zone.mode.load(std::memory_order_relaxed);
    zone.hot_streak =
        mode == kOwned && overloaded[zone.owner] && share[z] >= hot ? zone.hot_streak + 1 : 0;
    zone.cold_streak = mode == kShared && share[z] < cold ? zone.cold_streak + 1 : 0;
  }
  std::vector<unsigned> switched;
  if (!opportunistic_) return switched;
  const auto may_switch = [&](const Zone& zone) {
    return zone.switched_at == 0 || windows_ - zone.switched_at >= kSwitchGap;
  };
  for (unsigned o = 0; o < w; ++o) {
    if (!overloaded[o]) continue;
    std::vector<unsigned> hot_zones;
    for (unsigned z = o; z < zn; z += w) {
      if (zones_[z].hot_streak >= kHotWindows && may_switch(zones_[z])) hot_zones.push_back(z);
    }
    std::sort(hot_zones.begin(), hot_zones.end(),
              [&](unsigned a, unsigned b) { return share[a] > share[b]; });
    // Hottest first, until the owner's OWNED share is below 1.5 f (at
    // least one: an owner overloaded by its backlog alone sheds its
    // hottest zone).
    double left = owned[o];
    bool first = true;
    for (unsigned z : hot_zones) {
      if (!first && left < 1.5 * fair) break;
      first = false;
      post_request(z, kRequestShared);
      zones_[z].switched_at = windows_;
      zones_[z].hot_streak = 0;
      left -= share[z];
      switched.push_back(z);
    }
  }
  for (unsigned z = 0; z < zn; ++z) {
    Zone& zone = zones_[z];
    if (zone.mode.load(std::memory_order_relaxed) == kShared && zone.cold_streak >= kColdWindows &&
        may_switch(zone)) {
      post_request(z, kRequestOwned);
      zone.switched_at = windows_;
      zone.cold_streak = 0;
      switched.push_back(z);
    }
  }
  return switched;
}

}  // namespace pmhash::engine::pmeh
