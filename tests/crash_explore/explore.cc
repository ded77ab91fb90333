// pmhash-crash-explore - the crash-state explorer of the crash checker.
//
//   pmhash-crash-explore [--engine NAME] [--seed N] [--threads N] [--ops N]
//                        [--keys N] [--granularity cache_line|page|byte]
//                        [--durability strict|epoch] [--epoch-ms N]
//                        [--ops-per-epoch N]
//                        [--nehash-bucket-bits N] [--nehash-initial-dir-bits N]
//                        [--pmeh-segment-kib N] [--pmeh-zone-bits N]
//                        [--pmeh-split-bits N] [--pmeh-split-step N]
//                        [--pmeh-workers N] [--pmeh-write-mode N]
//                        [--exhaustive N] [--samples N] [--every N]
//                        [--verifiers N] [--recovery-crash-every N]
//                        [--plant BUG] [--reproducers DIR] [--summary FILE]
//                        [--shared-keys]
//   pmhash-crash-explore --replay FILE [--attempts N]
//   pmhash-crash-explore --list-engines     (the engines NAME may be)
//   pmhash-crash-explore --durabilities ENGINE
//
// Runs the workload of crash/workload.h (with transactions when the engine
// has them) on a fresh pool watched by the persistence simulator
// (crash/persistence_sim.h). Every drain is a crash
// point; at every --every'th one it builds crash images from the lines not
// yet durable: every subset when there are at most --exhaustive of them,
// else nothing, everything and --samples random subsets (with a torn line
// each). Each image is recovered and verified by a separate verifier process
// (this program with --verify-server; a child, so recovery never runs inside
// the workload's persistence hook, and a crash in recovery is a finding, not
// the end of the run): it opens the image (running recovery) and checks it
// against the oracle (crash/oracle.h).
//
// With --durability epoch (engines that persist by epochs) every thread
// records the epoch each acknowledged operation ran in, and the oracle
// expects exactly the operations of epochs the recovery did not fail (and
// those before an acknowledged sync). The epoch worker's drains are then the
// only crash points, and the workload would outrun them: each thread waits
// for the epoch to end after every --ops-per-epoch operations, so that the
// crash points fall among the operations. One image in --recovery-crash-every
// is also crashed *during* its recovery, at a random drain of it, and that
// second image is recovered and verified too (recovery must be restartable).
//
// nehash pools are created with --nehash-bucket-bits (default 1: groups of
// two buckets) and --nehash-initial-dir-bits (default 0), so that the
// workload splits groups and expands the directory from the start; the
// clock of its expansion-rate rules counts the workload's operations.
//
// pmeh pools are created with --pmeh-segment-kib (default 4: 15 buckets of
// 14 slots) and --pmeh-zone-bits (default 1: two zones), and run with
// --pmeh-split-bits (default 3), --pmeh-split-step (default 1) and
// --pmeh-workers (default 2 owner threads), so that a few hundred operations
// split segments and install deeper directories. pmeh's writes are run by
// its owner threads on behalf of the callers (--pmeh-write-mode, the option
// pmeh.write_mode: 0 by default; 2 makes the callers write directly, under
// per-segment locks), so most of its crash points are drains of an owner: a report names the thread that drained (by its
// name, e.g. pmeh-owner-1) and the workload operations in flight then, one
// of which the owner was running.
//
// With --write-group N each thread runs its operations in write groups of N
// (Store::begin_write_group; pmhash-server's group persistence) and counts
// them acknowledged when the group ends: a crash image may then hold any
// prefix of the open group's operations, and must hold every ended group's.
//
// With --shared-keys the threads run the shared-key workload instead
// (crash/workload.h, shared_op_at: --keys keys in all, read and written by
// every thread, every write's value its own, no transactions): every call's
// answer is recorded with its place in one sequence of call starts and
// returns, the threads take turns (Turns, below: the turn changes hands
// inside drains, so that a thread reads what another has published but not
// yet made durable), and each crash image is checked for durable
// linearizability against the recorded answers (crash/oracle.h,
// SharedOracle: rules R1-R2 for strict durability, E1-E4 for epoch). At the
// end of the run the whole history must be linearizable against the store's
// contents (else exit status 3).
//
// A violation prints the seed, the crash point, the lines written, dropped
// and torn, and saves a reproducer (crash/reproducer.h) with a one-line
// replay command. Exit status: 0 no violation, 1 violations, 2 usage or
// setup error, 3 the workload itself misbehaved (a wrong answer before any
// crash).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "crash/explore_io.h"
#include "crash/oracle.h"
#include "crash/persistence_sim.h"
#include "crash/reproducer.h"
#include "crash/workload.h"
#include "engine/clevel/clevel_testing.h"
#include "engine/dali/dali_testing.h"
#include "engine/nehash/directory.h"
#include "engine/nehash/nehash_testing.h"
#include "engine/planted.h"
#include "engine/pmeh/pmeh_testing.h"
#include "media/region.h"
#include "pmhash/store.h"
#include "store/store_testing.h"

extern char** environ;

namespace pmhash::crashtest {
namespace {

using testing::CrashChoice;
using testing::PersistenceSim;

struct Config {
  std::string engine = "clevel";
  WorkloadSpec w;
  std::string granularity = "cache_line";
  std::string durability = "strict";
  unsigned epoch_ms = 1;
  std::uint64_t ops_per_epoch = 4;
  // Tiny nehash groups (2 buckets) under a one-entry main directory: the
  // workload splits groups and expands the directory throughout.
  unsigned nehash_bucket_bits = 1;
  unsigned nehash_initial_dir_bits = 0;
  // Tiny pmeh segments (4 KiB) in two zones with two owners: the workload
  // splits segments and grows the directory within a few hundred
  // operations (design/pmeh.md §13.3).
  unsigned pmeh_segment_kib = 4;
  unsigned pmeh_zone_bits = 1;
  unsigned pmeh_split_bits = 3;
  unsigned pmeh_split_step = 1;
  unsigned pmeh_workers = 2;
  unsigned pmeh_write_mode = 0;
  // Each thread's operations run in write groups of this many
  // (Store::begin_write_group), acknowledged when the group ends; 1: none.
  std::uint64_t write_group = 1;
  std::size_t exhaustive = 4;
  std::size_t samples = 4;
  std::size_t singles = 16;
  std::uint64_t every = 1;
  unsigned verifiers = 2;
  unsigned recovery_crash_every = 8;
  std::string plant;
  std::string dir = "/dev/shm";
  std::string reproducers = "crash-reproducers";
  unsigned max_reports = 3;
  std::uint64_t stop_after = 0;  // violations; 0: never stop early
  std::uint64_t first_point = 0, last_point = ~std::uint64_t{0};
  std::string summary;
  std::uint64_t pool_size = 8u << 20;
  std::string replay;
  unsigned attempts = 20;  // --replay: verifications of the image
  bool verify_server = false;
  // The shared-key workload (crash/workload.h, shared_op_at) under Turns,
  // checked by crash/oracle.h's SharedOracle.
  bool shared = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "pmhash-crash-explore: %s\n(see the comment at the top of tests/crash_explore/explore.cc)\n",
               why.c_str());
  std::exit(2);
}

std::uint64_t number(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage("flag " + flag + " needs a non-negative integer, got '" + text + "'");
  }
  return v;
}

// --plant NAME: the planted bugs this explorer can plant (each engine's
// <engine>_testing.h), by the names the crash tests use.
struct Plant {
  const char* name;
  engine::planted::Bug bug;
};
constexpr Plant kPlants[] = {
    {"slot-before-item", engine::clevel::testing::kSlotBeforeItemDurable},
    {"no-fence-before-context-swap", engine::clevel::testing::kNoFenceBeforeContextSwap},
    {"progress-not-persisted", engine::clevel::testing::kProgressNotPersisted},
    {"clevel-read-unpersisted", engine::clevel::testing::kReadUnpersisted},
    {"clevel-loser-clear-before-drain", engine::clevel::testing::kLoserClearBeforeDrain},
    {"dali-only-one-epoch-fails", engine::dali::testing::kOnlyOneEpochFails},
    {"dali-bucket-not-fenced", engine::dali::testing::kBucketNotFenced},
    {"dali-answer-before-durable", engine::dali::testing::kAnswerBeforeDurable},
    {"dali-write-group-ends-early", engine::dali::testing::kWriteGroupEndsEarly},
    {"nehash-read-unpersisted", engine::nehash::testing::kReadUnpersisted},
    {"pmeh-read-unpersisted", engine::pmeh::testing::kReadUnpersisted},
    {"nehash-meta-before-slot-durable", engine::nehash::testing::kMetaBeforeSlotDurable},
    {"nehash-table-before-group-durable", engine::nehash::testing::kTableBeforeGroupDurable},
    {"nehash-split-not-finished", engine::nehash::testing::kSplitNotFinished},
    {"nehash-op-log-clear-not-persisted", engine::nehash::testing::kOpLogClearNotPersisted},
    {"pmeh-meta-before-slot-durable", engine::pmeh::testing::kMetaBeforeSlotDurable},
    {"pmeh-zone-filled-before-entries-durable", engine::pmeh::testing::kZoneFilledBeforeEntriesDurable},
    {"pmeh-dir-slot-not-persisted-before-fill", engine::pmeh::testing::kDirSlotNotPersistedBeforeFill},
    {"pmeh-split-record-ignored", engine::pmeh::testing::kSplitRecordIgnored},
};

unsigned plant_mask(const std::string& name) {
  if (name.empty()) return engine::planted::kNone;
  std::string known;
  for (const Plant& p : kPlants) {
    if (name == p.name) return p.bug;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  usage("unknown --plant '" + name + "' (" + known + ")");
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage("flag " + flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--engine") c.engine = value();
    else if (flag == "--seed") c.w.seed = number(flag, value());
    else if (flag == "--threads") c.w.threads = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--ops") c.w.ops = number(flag, value());
    else if (flag == "--keys") c.w.keys = number(flag, value());
    else if (flag == "--granularity") c.granularity = value();
    else if (flag == "--durability") c.durability = value();
    else if (flag == "--epoch-ms") c.epoch_ms = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--ops-per-epoch") c.ops_per_epoch = number(flag, value());
    else if (flag == "--nehash-bucket-bits") c.nehash_bucket_bits = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--nehash-initial-dir-bits") {
      c.nehash_initial_dir_bits = static_cast<unsigned>(number(flag, value()));
    }
    else if (flag == "--pmeh-segment-kib") c.pmeh_segment_kib = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--pmeh-zone-bits") c.pmeh_zone_bits = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--pmeh-split-bits") c.pmeh_split_bits = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--pmeh-split-step") c.pmeh_split_step = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--pmeh-workers") c.pmeh_workers = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--pmeh-write-mode") c.pmeh_write_mode = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--transactions") c.w.transactions = number(flag, value()) != 0;
    else if (flag == "--write-group") c.write_group = number(flag, value());
    else if (flag == "--exhaustive") c.exhaustive = number(flag, value());
    else if (flag == "--samples") c.samples = number(flag, value());
    else if (flag == "--singles") c.singles = number(flag, value());
    else if (flag == "--every") c.every = number(flag, value());
    else if (flag == "--verifiers") c.verifiers = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--recovery-crash-every") c.recovery_crash_every = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--plant") c.plant = value();
    else if (flag == "--dir") c.dir = value();
    else if (flag == "--reproducers") c.reproducers = value();
    else if (flag == "--max-reports") c.max_reports = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--stop-after") c.stop_after = number(flag, value());
    else if (flag == "--points") {
      const std::string range = value();
      const std::size_t dash = range.find('-');
      if (dash == std::string::npos) usage("--points needs FIRST-LAST");
      c.first_point = number(flag, range.substr(0, dash).c_str());
      c.last_point = number(flag, range.substr(dash + 1).c_str());
    }
    else if (flag == "--summary") c.summary = value();
    else if (flag == "--pool-size") c.pool_size = number(flag, value());
    else if (flag == "--replay") c.replay = value();
    else if (flag == "--attempts") c.attempts = static_cast<unsigned>(number(flag, value()));
    else if (flag == "--verify-server") c.verify_server = true;
    else if (flag == "--shared-keys") c.shared = true;
    else if (flag == "--list-engines") {
      for (const std::string& e : Store::engines()) std::printf("%s\n", e.c_str());
      std::exit(0);
    }
    else if (flag == "--durabilities") {
      const std::string engine = value();
      std::printf("strict%s\n", accepts_epoch_durability(engine) ? " epoch" : "");
      std::exit(0);
    }
    else usage("unknown flag " + flag);
  }
  if (c.w.threads == 0 || c.w.threads > 16) usage("--threads must be 1..16");
  if (c.w.keys == 0) usage("--keys must be positive");
  if (c.every == 0) usage("--every must be positive");
  if (c.attempts == 0) usage("--attempts must be positive");
  if (c.verifiers == 0 || c.verifiers > 16) usage("--verifiers must be 1..16");
  if (c.exhaustive > 16) usage("--exhaustive must be at most 16 (2^16 images per crash point)");
  if (c.granularity != "cache_line" && c.granularity != "page" && c.granularity != "byte") {
    usage("--granularity must be cache_line, page or byte");
  }
  if (c.durability != "strict" && c.durability != "epoch") usage("--durability must be strict or epoch");
  if (c.epoch_ms == 0 || c.epoch_ms > 60000) usage("--epoch-ms must be 1..60000");
  if (c.ops_per_epoch == 0) usage("--ops-per-epoch must be positive");
  (void)plant_mask(c.plant);
  if (c.shared && c.w.transactions) usage("--shared-keys runs no transactions");
  if (c.write_group == 0) usage("--write-group must be positive");
  if (c.shared && c.write_group > 1) usage("--shared-keys runs no write groups");
  return c;
}

// The engine's non-zero properties, " (nehash.groups 40, nehash.splits
// 39, ...)", else "".
std::string engine_shape(const Stats& st) {
  std::string out;
  for (const Property& p : st.properties) {
    if (p.value == 0) continue;
    out += (out.empty() ? " (" : ", ") + p.name + " " + std::to_string(p.value);
  }
  return out.empty() ? out : out + ")";
}

// The engine's properties as JSON members, ",\"nehash.groups\":40,...".
std::string properties_json(const Stats& st) {
  std::string out;
  for (const Property& p : st.properties) out += ",\"" + p.name + "\":" + std::to_string(p.value);
  return out;
}

// The calling thread's name ("pmeh-owner-1", "workload-0"), else its id.
std::string thread_name() {
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) == 0 && name[0] != '\0') return name;
  std::ostringstream id;
  id << std::this_thread::get_id();
  return id.str();
}

// ---------------------------------------------------------------------------
// Verifier side: recovers images and checks them against the oracle.
// ---------------------------------------------------------------------------

// Crashes a recovery: a simulator watches the pool from the moment it is
// mapped and keeps one crash image, taken at a drain chosen uniformly among
// those of the recovery (reservoir sampling).
struct RecoveryCrash {
  std::unique_ptr<PersistenceSim> sim;
  std::atomic<bool> recovering{false};
  std::mt19937_64 rng{1};
  std::uint64_t drains = 0;
  std::vector<std::byte> image;
  std::string where;
};
RecoveryCrash* g_recovery_crash = nullptr;

void watch_recovery(media::Region& region) {
  RecoveryCrash* rc = g_recovery_crash;
  if (rc == nullptr || rc->sim) return;
  rc->sim = std::make_unique<PersistenceSim>(region);
  rc->sim->set_crash_point_hook([rc](const PersistenceSim& sim) {
    if (!rc->recovering.load()) return;
    ++rc->drains;
    if (rc->rng() % rc->drains != 0) return;
    const std::vector<std::uint64_t> dirty = sim.dirty_units();
    std::vector<CrashChoice> choices = testing::crash_choices(sim, dirty, 0, 1, rc->rng);
    const CrashChoice& pick = choices[rc->rng() % choices.size()];
    rc->image = sim.crash_image(pick);
    rc->where = "drain " + std::to_string(rc->drains) + " of recovery, " + pick.describe();
  });
}

class Verifier {
 public:
  using Check = std::function<std::string(Store&)>;

  // Recovers the pool at `path` and checks it with `check` (an oracle's
  // verify); with `crash_recovery`, also crashes that recovery and checks
  // the second image. "" when all holds. *recovery_images counts second
  // images verified; *failed_image gets the unrecovered second image when
  // it is the one that failed.
  std::string verify(const std::string& path, const Check& check, bool crash_recovery,
                     std::uint64_t* recovery_images, std::vector<std::byte>* failed_image) {
    RecoveryCrash rc;
    rc.rng.seed(++requests_);
    if (crash_recovery) {
      g_recovery_crash = &rc;
      rc.recovering = true;
      media::Region::set_map_hook(&watch_recovery);
    }
    std::string result;
    {
      std::unique_ptr<Store> store;
      const Status s = Store::open(path, Options{.engine = ""}, &store);
      rc.recovering = false;
      media::Region::set_map_hook(nullptr);
      g_recovery_crash = nullptr;
      if (!s.ok()) {
        result = "open (recovery) failed: " + s.to_string();
      } else {
        result = check(*store);
        if (Status c = store->close(); !c.ok() && result.empty()) result = "close failed: " + c.to_string();
      }
    }
    // The region is gone: the simulator must not touch it any more.
    if (rc.sim) rc.sim->forget_region();
    if (!result.empty() || rc.image.empty()) return result;

    const std::string second = path + "-recovery";
    if (!write_file(second, rc.image)) return "cannot write " + second;
    std::unique_ptr<Store> store;
    const Status s = Store::open(second, Options{.engine = ""}, &store);
    if (!s.ok()) {
      result = "open failed: " + s.to_string();
    } else {
      result = check(*store);
      (void)store->close();
    }
    ::unlink(second.c_str());
    ++*recovery_images;
    if (!result.empty()) {
      *failed_image = std::move(rc.image);
      return "after a crash at " + rc.where + ": " + result;
    }
    return "";
  }

 private:
  std::uint64_t requests_ = 0;
};

// Request: "<image path> <windows> <crash recovery 0|1>\n"; for the
// shared-key workload <windows> is "shared:<crash seq>:<calls file>" (the
// calls begun by the time the image was complete, crash/oracle.h
// calls_text).
// Response: "ok <recovery images>\n" or
//           "violation <recovery images> <0|1: in the second image> <text>\n";
// a failed second image is left at "<image path>-failed".
int verify_server(const Config& c) {
  Verifier verifier;
  Oracle oracle(c.w);
  SharedOracle shared(c.w);
  char line[4096];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    std::istringstream in(line);
    std::string path, windows;
    int crash_recovery = 0;
    in >> path >> windows >> crash_recovery;
    std::uint64_t rc_images = 0;
    std::vector<std::byte> failed;
    std::string result;
    if (windows.rfind("shared:", 0) == 0) {
      SharedCrash crash;
      crash.epoch = c.durability == "epoch";
      const std::size_t colon = windows.find(':', 7);
      std::ifstream in_calls(colon == std::string::npos ? "" : windows.substr(colon + 1));
      std::string text;
      std::getline(in_calls, text);
      if (colon == std::string::npos || !parse_calls(text, &crash.calls)) {
        result = "verifier: bad request " + windows;
      } else {
        crash.point = std::stoull(windows.substr(7, colon - 7));
        result = verifier.verify(
            path, [&](Store& store) { return shared.verify(store, crash); }, crash_recovery != 0, &rc_images,
            &failed);
      }
    } else {
      const std::vector<Window> ws = parse_windows(windows);
      result = verifier.verify(
          path, [&](Store& store) { return oracle.verify(store, ws); }, crash_recovery != 0, &rc_images, &failed);
    }
    for (char& ch : result) {
      if (ch == '\n') ch = ' ';
    }
    if (result.empty()) {
      std::printf("ok %llu\n", static_cast<unsigned long long>(rc_images));
    } else {
      if (!failed.empty()) write_file(path + "-failed", failed);
      std::printf("violation %llu %d %s\n", static_cast<unsigned long long>(rc_images), failed.empty() ? 0 : 1,
                  result.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Turns: the interleaving of the shared-key workload.
// ---------------------------------------------------------------------------
//
// A read sees a write that a crash can still take back only if it runs
// between the write's publication and the drain that makes it durable. Left
// to the OS scheduler that window is a few hundred nanoseconds wide and is
// met by luck; so in the shared-key workload the workload threads take
// turns, and a turn changes hands exactly at the points where the window is
// open:
//
//   - one workload thread holds the turn and runs; the others wait, either
//     before their next operation or inside a drain of their own;
//   - at each drain of the running thread (the persistence simulator's
//     pre-drain hook, before the drain's crash point and before anything
//     becomes durable), with probability 1/2 the turn passes to another
//     thread, which runs until its own next drain or operation start
//     decides to pass it on; the drainer waits for the turn to come back;
//   - at each flush of the running thread, the same with probability 1/4
//     (between a publishing store and its drain: a rival writer of the
//     key meets the write half done, e.g. an insert not yet claimed);
//   - at each operation start, with probability 1/4 the turn passes on;
//   - at each drain of a thread that is not a workload thread (pmeh's
//     owners, which write for the callers; dali's epoch worker, whose
//     fence makes strict writes durable; clevel's rehash thread), with
//     probability 1/2 a thread waiting before a get of a key that a
//     running thread is writing (else, with probability 1/4, before any
//     get) runs that get as a guest, while the drainer waits: the get runs
//     while the writer whose write the drain is about to make durable is
//     still waiting for it.
// With --every N, the crash point that follows a change of hands inside a
// drain is explored whatever its number.
// Choices come from a generator seeded by the workload seed, so with a
// one-threaded engine the interleaving is a function of the seed; threads of
// the engine's own (owners, the epoch worker, rehash) add their timing.
//
// A thread that waits for the turn while the one holding it is blocked on
// it (a lock or item it holds while parked in a drain; a strict dali write
// waiting for a fence that waits for a parked thread's epoch) would wait
// forever: so a waiter that sees no progress for kStall (no operation start
// or drain of a workload thread; crash points, which stop everything, do
// not count) stops waiting and runs alongside. That only adds interleavings
// (the oracle treats every call the same however it interleaved); it is not
// a timing assumption of any check.
thread_local int t_workload = -1;  // the workload thread's index, -1 for others

class Turns {
 public:
  static constexpr std::chrono::milliseconds kStall{20};

  Turns(unsigned threads, std::uint64_t seed)
      : state_(threads, kWaitingAtStart), key_(threads, 0), writing_(threads, false),
        rng_(seed * 0x2545f4914f6cdd1dull + 11) {}

  // Workload thread t is about to start an operation on `key` (a get:
  // `read`; a sync: key ~0).
  void at_op_start(unsigned t, bool read, std::uint64_t key) {
    std::unique_lock lock(mu_);
    ++progress_;
    key_[t] = key;
    writing_[t] = false;
    if (guest_ == static_cast<int>(t)) {
      guest_ = -1;
      cv_.notify_all();
    } else if (holder_ == static_cast<int>(t) && rng_() % 4 == 0) {
      pass_on(t);
    }
    state_[t] = read ? kWaitingBeforeRead : kWaitingAtStart;
    wait_for_turn(lock, t);
    state_[t] = kRunning;
    writing_[t] = !read;
  }

  // Thread t, between operations, is about to wait for something only the
  // engine's own threads do (the end of an epoch): a thread waiting for the
  // turn inside a drain (maybe inside that epoch) gets it.
  void release(unsigned t) {
    std::lock_guard lock(mu_);
    ++progress_;
    if (holder_ != static_cast<int>(t)) return;
    for (unsigned u = 0; u < state_.size(); ++u) {
      if (state_[u] == kWaitingInDrain) {
        holder_ = static_cast<int>(u);
        ++passes_;
        cv_.notify_all();
        return;
      }
    }
  }

  // Whether the turn changed hands inside a drain (a pass or a guest read)
  // since the last call: the next crash point is worth exploring.
  bool take_interesting() {
    std::lock_guard lock(mu_);
    return std::exchange(interesting_, false);
  }

  // Workload thread t is done.
  void finish(unsigned t) {
    std::lock_guard lock(mu_);
    ++progress_;
    state_[t] = kDone;
    if (guest_ == static_cast<int>(t)) guest_ = -1;
    if (holder_ == static_cast<int>(t)) pass_on(t);
    cv_.notify_all();
  }

  // The pre-drain hook (and, with `flush`, the pre-flush hook): any thread,
  // before its drain (flush) takes effect.
  void at_drain(bool flush = false) {
    std::unique_lock lock(mu_);
    const int t = t_workload;
    if (flush && t < 0) return;
    if (t >= 0) {
      ++progress_;
      if (guest_ == t) return;  // a guest's get drains (a reader persisting what it saw): go on
      if (holder_ == t) {
        if (rng_() % (flush ? 4 : 2) != 0 || !pass_on(static_cast<unsigned>(t))) return;
        interesting_ = true;
      }
      // Not ours (any more): wait for the turn inside the drain.
      state_[t] = kWaitingInDrain;
      wait_for_turn(lock, static_cast<unsigned>(t));
      state_[t] = kRunning;
      return;
    }
    if (guest_ >= 0) return;
    // Readers of a key a running thread is writing first (the write this
    // drain may be about to make durable), any reader one time in four.
    std::vector<unsigned> readers, of_written;
    for (unsigned u = 0; u < state_.size(); ++u) {
      if (state_[u] != kWaitingBeforeRead || holder_ == static_cast<int>(u)) continue;
      readers.push_back(u);
      for (unsigned w = 0; w < state_.size(); ++w) {
        if (w != u && state_[w] == kRunning && writing_[w] && key_[w] == key_[u]) of_written.push_back(u);
      }
    }
    const std::vector<unsigned>& pick = of_written.empty() ? readers : of_written;
    if (pick.empty() || rng_() % (of_written.empty() ? 4 : 2) != 0) return;
    const int guest = static_cast<int>(pick[rng_() % pick.size()]);
    guest_ = guest;
    ++guests_;
    interesting_ = true;
    cv_.notify_all();
    stalled_wait(lock, [&] { return guest_ != guest; });
    if (guest_ == guest) guest_ = -1;  // it stalled: it runs on alongside
  }

  // A crash point is being explored (everything waits for it): no stall.
  void set_busy(bool busy) {
    std::lock_guard lock(mu_);
    busy_ = busy;
    ++progress_;
  }

  std::uint64_t passes() const { std::lock_guard lock(mu_); return passes_; }
  std::uint64_t guests() const { std::lock_guard lock(mu_); return guests_; }
  std::uint64_t stalls() const { std::lock_guard lock(mu_); return stalls_; }

 private:
  enum State { kRunning, kWaitingAtStart, kWaitingBeforeRead, kWaitingInDrain, kDone };

  // Hands the turn from t to another thread that is not done; false when
  // there is none.
  bool pass_on(unsigned t) {
    std::vector<unsigned> others;
    for (unsigned u = 0; u < state_.size(); ++u) {
      if (u != t && state_[u] != kDone) others.push_back(u);
    }
    if (others.empty()) return false;
    holder_ = static_cast<int>(others[rng_() % others.size()]);
    ++passes_;
    cv_.notify_all();
    return true;
  }

  void wait_for_turn(std::unique_lock<std::mutex>& lock, unsigned t) {
    const int me = static_cast<int>(t);
    if (holder_ >= 0 && state_[holder_] == kDone) holder_ = me;
    stalled_wait(lock, [&] { return holder_ == me || guest_ == me; });
    if (holder_ != me && guest_ != me) holder_ = me;  // stalled: take the turn
  }

  // Waits until done(), or until nothing progressed for kStall (false).
  template <typename Done>
  bool stalled_wait(std::unique_lock<std::mutex>& lock, Done done) {
    std::uint64_t seen = progress_;
    auto since = std::chrono::steady_clock::now();
    while (!done()) {
      cv_.wait_for(lock, std::chrono::milliseconds(2));
      const auto now = std::chrono::steady_clock::now();
      if (progress_ != seen || busy_) {
        seen = progress_;
        since = now;
      } else if (now - since > kStall) {
        ++stalls_;
        return false;
      }
    }
    return true;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<State> state_;
  std::vector<std::uint64_t> key_;  // the key of each thread's current or next operation
  std::vector<bool> writing_;       // running a write (or a sync)
  bool interesting_ = false;
  int holder_ = 0;
  int guest_ = -1;
  bool busy_ = false;
  std::uint64_t progress_ = 0;
  std::uint64_t passes_ = 0, guests_ = 0, stalls_ = 0;
  std::mt19937_64 rng_;
};

// The calls of the shared-key workload, numbered in one sequence (every
// start and every return takes the next number).
class CallLog {
 public:
  std::size_t begin(unsigned t, std::uint64_t i) {
    std::lock_guard lock(mu_);
    Call c;
    c.thread = t;
    c.index = i;
    c.start = seq_++;
    calls_.push_back(c);
    return calls_.size() - 1;
  }
  void end(std::size_t at, Call::Answer answer, std::int64_t observed, std::uint64_t epoch) {
    std::lock_guard lock(mu_);
    Call& c = calls_[at];
    c.end = seq_++;
    c.answer = answer;
    c.observed = observed;
    c.epoch = epoch;
  }
  std::uint64_t seq() const {
    std::lock_guard lock(mu_);
    return seq_;
  }
  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::uint64_t seq_ = 0;
  std::vector<Call> calls_;
};

// ---------------------------------------------------------------------------
// Explorer side.
// ---------------------------------------------------------------------------

struct Pending {
  std::uint64_t crash_point = 0;
  std::string thread;  // which thread's drain
  CrashChoice choice;
  std::vector<std::uint64_t> dirty;
  std::vector<Window> windows;
  // Shared-key workload: the crash's sequence number and the calls begun by
  // the time the image was complete (calls_text).
  std::uint64_t crash_seq = 0;
  std::string calls;
  std::vector<std::byte> image;
};

class Explorer {
 public:
  Explorer(Config c, std::string self) : c_(std::move(c)), self_(std::move(self)) {}

  int run();

 private:
  struct Child {
    pid_t pid = -1;
    FILE* to = nullptr;
    FILE* from = nullptr;
    std::string file;
    std::byte* map = nullptr;  // the file, mapped shared (see dispatch)
    bool busy = false;
    Pending pending;
  };

  void spawn(Child* v, unsigned index);
  void stop(Child* v);
  Child* free_verifier();
  void collect(Child* v);
  void dispatch(Child* v, bool crash_recovery);
  void at_crash_point(const PersistenceSim& sim);
  void report(const Pending& p, const std::string& what, const std::vector<std::byte>* image);
  std::string rerun_command(std::uint64_t point) const;
  bool workload(unsigned t);
  bool shared_workload(unsigned t);
  std::string check_live_history();
  bool stopping() const { return c_.stop_after != 0 && violations_ >= c_.stop_after; }

  // What a thread has acknowledged, read by the crash points (another
  // thread): how many operations, how many before its last sync, and (epoch
  // durability) how many by the end of each recent epoch.
  struct Acks {
    std::mutex mu;
    std::uint64_t count = 0;
    std::uint64_t synced = 0;
    std::map<std::uint64_t, std::uint64_t> by_epoch;  // epoch -> count
    // 1 + the number of the operation the thread is running, 0 between
    // operations (which operations a crash point may be a drain of).
    std::atomic<std::uint64_t> running{0};
  };
  Window window_of(unsigned t, std::uint64_t epoch_now);
  bool epoch_mode() const { return c_.durability == "epoch"; }

  Config c_;
  std::string self_;
  std::unique_ptr<Store> store_;
  std::vector<std::unique_ptr<Acks>> acked_;
  std::vector<Child> verifiers_;
  std::mt19937_64 rng_;
  std::atomic<bool> workload_failed_{false};
  std::unique_ptr<Turns> turns_;  // shared-key workload
  CallLog log_;
  std::uint64_t last_explored_seq_ = ~std::uint64_t{0};

  std::uint64_t points_explored_ = 0;
  std::uint64_t images_ = 0;
  std::uint64_t recovery_images_ = 0;
  std::atomic<std::uint64_t> violations_{0};
  std::uint64_t largest_dirty_ = 0;
};

void Explorer::spawn(Child* v, unsigned index) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) usage("cannot make pipes");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from[1], STDOUT_FILENO);
  std::vector<std::string> args = {self_,
                                   "--verify-server",
                                   "--seed", std::to_string(c_.w.seed),
                                   "--threads", std::to_string(c_.w.threads),
                                   "--ops", std::to_string(c_.w.ops),
                                   "--keys", std::to_string(c_.w.keys),
                                   "--transactions", c_.w.transactions ? "1" : "0",
                                   "--granularity", c_.granularity,
                                   "--durability", c_.durability};
  if (c_.shared) args.push_back("--shared-keys");
  // A bug planted in recovery must be there when the verifier recovers.
  if (!c_.plant.empty()) {
    args.push_back("--plant");
    args.push_back(c_.plant);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawn(&v->pid, self_.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    usage("cannot start the verifier " + self_);
  }
  posix_spawn_file_actions_destroy(&actions);
  ::close(to[0]);
  ::close(from[1]);
  v->to = ::fdopen(to[1], "w");
  v->from = ::fdopen(from[0], "r");
  v->file = c_.dir + "/pmhash-explore-" + std::to_string(::getpid()) + "-v" + std::to_string(index) + ".pool";
  v->busy = false;
  if (v->map == nullptr) {
    const int fd = ::open(v->file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(c_.pool_size)) != 0) usage("cannot make " + v->file);
    void* p = ::mmap(nullptr, c_.pool_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) usage("cannot map " + v->file);
    v->map = static_cast<std::byte*>(p);
  }
}

void Explorer::stop(Child* v) {
  if (v->to) std::fclose(v->to);
  if (v->from) std::fclose(v->from);
  v->to = v->from = nullptr;
  if (v->pid > 0) {
    int status = 0;
    ::waitpid(v->pid, &status, 0);
  }
  v->pid = -1;
  if (v->map != nullptr) ::munmap(v->map, c_.pool_size);
  v->map = nullptr;
  ::unlink(v->file.c_str());
  ::unlink((v->file + "-recovery").c_str());
  ::unlink((v->file + "-failed").c_str());
  ::unlink((v->file + ".calls").c_str());
}

void Explorer::collect(Child* v) {
  char line[8192];
  v->busy = false;
  if (std::fgets(line, sizeof line, v->from) == nullptr) {
    // The verifier died: recovery (or the verification) crashed.
    std::fclose(v->to);
    std::fclose(v->from);
    v->to = v->from = nullptr;
    int status = 0;
    ::waitpid(v->pid, &status, 0);
    v->pid = -1;
    const std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                : "exited with status " + std::to_string(WEXITSTATUS(status));
    ++images_;
    report(v->pending, "the verifier process " + how + " while recovering or checking this image",
           &v->pending.image);
    spawn(v, static_cast<unsigned>(v - verifiers_.data()));
    return;
  }
  std::istringstream in(line);
  std::string word;
  unsigned long long rc = 0;
  in >> word >> rc;
  recovery_images_ += rc;
  ++images_;
  if (word == "ok") return;
  int second = 0;
  in >> second;
  std::string what;
  std::getline(in, what);
  if (!what.empty() && what[0] == ' ') what.erase(0, 1);
  if (!what.empty() && what.back() == '\n') what.pop_back();
  if (second) {
    Reproducer r;
    std::ifstream failed(v->file + "-failed", std::ios::binary);
    std::vector<std::byte> image(v->pending.image.size());
    failed.read(reinterpret_cast<char*>(image.data()), static_cast<std::streamsize>(image.size()));
    report(v->pending, what, &image);
  } else {
    report(v->pending, what, &v->pending.image);
  }
}

Explorer::Child* Explorer::free_verifier() {
  for (;;) {
    for (Child& v : verifiers_) {
      if (!v.busy) return &v;
    }
    std::vector<pollfd> fds;
    for (Child& v : verifiers_) fds.push_back({::fileno(v.from), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), 300 * 1000);
    if (n == 0) {
      // Nothing answered in five minutes: a recovery hangs.
      for (Child& v : verifiers_) {
        ::kill(v.pid, SIGKILL);
      }
      for (Child& v : verifiers_) collect(&v);  // each reports its death
      continue;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) collect(&verifiers_[i]);
    }
  }
}

// Hands v its pending image. The file is rewritten through a shared mapping,
// page by page where it differs: the last recovery changed a few pages, and
// writing the whole pool each time would cost more than recovering it.
void Explorer::dispatch(Child* v, bool crash_recovery) {
  const std::vector<std::byte>& image = v->pending.image;
  if (image.size() != c_.pool_size) usage("crash image of unexpected size");
  constexpr std::size_t kPage = 4096;
  for (std::size_t off = 0; off < image.size(); off += kPage) {
    const std::size_t n = std::min(kPage, image.size() - off);
    if (std::memcmp(v->map + off, image.data() + off, n) != 0) std::memcpy(v->map + off, image.data() + off, n);
  }
  std::string windows = windows_text(v->pending.windows);
  if (c_.shared) {
    const std::string calls = v->file + ".calls";
    if (!write_file(calls, reinterpret_cast<const std::byte*>(v->pending.calls.data()), v->pending.calls.size())) {
      usage("cannot write " + calls);
    }
    windows = "shared:" + std::to_string(v->pending.crash_seq) + ":" + calls;
  }
  std::fprintf(v->to, "%s %s %d\n", v->file.c_str(), windows.c_str(), crash_recovery ? 1 : 0);
  std::fflush(v->to);
  v->busy = true;
}

void Explorer::at_crash_point(const PersistenceSim& sim) {
  const std::uint64_t point = sim.crash_points();
  // Shared-key workload: a crash point right after the turn changed hands
  // inside a drain is always explored (a read may just have seen what this
  // drain makes durable).
  // Otherwise a crash point at which no call began or returned since the
  // last one explored (an engine thread's drains while the workload waits:
  // dali's epoch worker drains every epoch) is skipped: its image differs
  // only by what the engine's own threads did, which the explorations
  // without --shared-keys cover.
  const bool turned = turns_ && turns_->take_interesting();
  const std::uint64_t crash_seq = log_.seq();  // calls that returned before it completed
  const bool idle = turns_ && crash_seq == last_explored_seq_;
  if (((point % c_.every != 0 || idle) && !turned) || point < c_.first_point || point > c_.last_point ||
      stopping()) {
    return;
  }
  last_explored_seq_ = crash_seq;
  ++points_explored_;
  // Everything waits for this crash point: no turn is stalled meanwhile.
  if (turns_) turns_->set_busy(true);
  // The epoch now bounds the counter any crash image of this point holds.
  const std::uint64_t epoch_now = epoch_mode() ? store::testing::epoch(*store_) : 0;
  std::vector<Window> windows(c_.w.threads);
  for (unsigned t = 0; t < c_.w.threads; ++t) windows[t] = window_of(t, epoch_now);
  const std::vector<std::uint64_t> dirty = sim.dirty_units();
  largest_dirty_ = std::max<std::uint64_t>(largest_dirty_, dirty.size());
  // With byte granularity (eADR, CXL with global persistent flush) stores
  // reach media in the order they become visible, which the simulator does
  // not see: only nothing and everything since the last fence are states it
  // knows to be possible. (Any subset would invent states no machine has.)
  const bool byte = sim.granularity() == media::Granularity::kByte;
  std::vector<CrashChoice> choices = testing::crash_choices(
      sim, dirty, byte ? 0 : c_.exhaustive, byte ? 0 : c_.samples, rng_, byte ? 0 : c_.singles);
  // Which thread drained, and the operations in flight: an engine whose
  // writes run on its own threads (pmeh's owners) drains for one of them.
  std::string thread = thread_name();
  std::string in_flight;
  for (unsigned t = 0; t < c_.w.threads; ++t) {
    const std::uint64_t running = acked_[t]->running.load(std::memory_order_acquire);
    if (running == 0) continue;
    in_flight += (in_flight.empty() ? "" : ", ") + std::string("workload-") + std::to_string(t) + " op " +
                 std::to_string(running - 1);
  }
  thread += "; operations in flight: " + (in_flight.empty() ? std::string("none") : in_flight);
  for (CrashChoice& choice : choices) {
    Child* v = free_verifier();
    Pending& p = v->pending;
    p.crash_point = point;
    p.thread = thread;
    sim.crash_image_into(choice, &p.image);
    // Operations acknowledged while the image was copied may be in it.
    p.windows = windows;
    for (unsigned t = 0; t < c_.w.threads; ++t) {
      std::lock_guard lock(acked_[t]->mu);
      // With write groups, the whole open group may be in the image: any
      // prefix up to its end (the oracle takes seen + 1 as the last).
      p.windows[t].seen = std::min(acked_[t]->count + c_.write_group - 1, c_.w.ops);
    }
    if (c_.shared) {
      p.crash_seq = crash_seq;
      p.calls = calls_text(log_.calls());
    }
    p.choice = std::move(choice);
    p.dirty = dirty;
    const bool crash_recovery = c_.recovery_crash_every != 0 && rng_() % c_.recovery_crash_every == 0;
    dispatch(v, crash_recovery);
  }
  if (turns_) turns_->set_busy(false);
}

// The exploration that found a crash point, narrowed to it (the point's
// number is exact when the workload is single-threaded and no resize runs
// in the background; else a window around it).
std::string Explorer::rerun_command(std::uint64_t point) const {
  const std::uint64_t from = point > 20 ? point - 20 : 0;
  std::string cmd = self_ + " --engine " + c_.engine + " --seed " + std::to_string(c_.w.seed) + " --threads " +
                    std::to_string(c_.w.threads) + " --ops " + std::to_string(c_.w.ops) + " --keys " +
                    std::to_string(c_.w.keys) + " --granularity " + c_.granularity + " --durability " +
                    c_.durability + " --epoch-ms " + std::to_string(c_.epoch_ms) + " --ops-per-epoch " +
                    std::to_string(c_.ops_per_epoch) + " --nehash-bucket-bits " +
                    std::to_string(c_.nehash_bucket_bits) + " --nehash-initial-dir-bits " +
                    std::to_string(c_.nehash_initial_dir_bits) + " --pmeh-segment-kib " +
                    std::to_string(c_.pmeh_segment_kib) + " --pmeh-zone-bits " + std::to_string(c_.pmeh_zone_bits) +
                    " --pmeh-split-bits " + std::to_string(c_.pmeh_split_bits) + " --pmeh-split-step " +
                    std::to_string(c_.pmeh_split_step) + " --pmeh-workers " + std::to_string(c_.pmeh_workers) +
                    " --pmeh-write-mode " + std::to_string(c_.pmeh_write_mode) +
                    " --exhaustive " +
                    std::to_string(c_.exhaustive) + " --samples " + std::to_string(c_.samples) + " --singles " +
                    std::to_string(c_.singles) + " --points " +
                    std::to_string(from) + "-" + std::to_string(point + 20);
  if (!c_.plant.empty()) cmd += " --plant " + c_.plant;
  if (c_.shared) cmd += " --shared-keys";
  return cmd;
}

void Explorer::report(const Pending& p, const std::string& what, const std::vector<std::byte>* image) {
  ++violations_;
  if (violations_ > c_.max_reports) return;
  std::string dropped;
  for (std::uint64_t u : p.dirty) {
    bool written = false;
    for (std::uint64_t w : p.choice.written) written |= w == u;
    if (written) continue;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s0x%llx", dropped.empty() ? "" : ",", static_cast<unsigned long long>(u));
    dropped += buf;
  }
  ::mkdir(c_.reproducers.c_str(), 0755);
  const std::string file = c_.reproducers + "/" + c_.engine + "-seed" + std::to_string(c_.w.seed) + "-t" +
                           std::to_string(c_.w.threads) + "-point" + std::to_string(p.crash_point) + "-" +
                           std::to_string(violations_) + ".crash";
  Reproducer r;
  r.fields["engine"] = c_.engine;
  r.fields["seed"] = std::to_string(c_.w.seed);
  r.fields["threads"] = std::to_string(c_.w.threads);
  r.fields["ops"] = std::to_string(c_.w.ops);
  r.fields["keys"] = std::to_string(c_.w.keys);
  r.fields["granularity"] = c_.granularity;
  r.fields["durability"] = c_.durability;
  r.fields["transactions"] = c_.w.transactions ? "1" : "0";
  r.fields["windows"] = windows_text(p.windows);
  r.fields["crash_point"] = std::to_string(p.crash_point);
  r.fields["choice"] = p.choice.describe();
  r.fields["dropped"] = dropped.empty() ? "-" : dropped;
  r.fields["planted"] = c_.plant.empty() ? "-" : c_.plant;
  r.fields["violation"] = what;
  if (c_.shared) {
    r.fields["shared"] = "1";
    r.fields["crash_seq"] = std::to_string(p.crash_seq);
    r.fields["calls"] = p.calls;
  }
  r.image = *image;
  const bool saved = write_reproducer(file, r);
  std::printf(
      "VIOLATION engine %s seed %llu threads %u ops %llu durability %s%s\n"
      "  crash point %llu (a drain in thread %s), acknowledged per thread %s\n"
      "  lines %s; dropped %s\n"
      "  %s\n"
      "  replay: %s --replay %s%s\n"
      "  rerun:  %s\n",
      c_.engine.c_str(), static_cast<unsigned long long>(c_.w.seed), c_.w.threads,
      static_cast<unsigned long long>(c_.w.ops), c_.durability.c_str(),
      c_.plant.empty() ? "" : (" planted " + c_.plant).c_str(),
      static_cast<unsigned long long>(p.crash_point), p.thread.c_str(),
      (windows_text(p.windows) + (c_.shared ? "; crash at call seq " + std::to_string(p.crash_seq) : "")).c_str(),
      p.choice.describe().c_str(), dropped.empty() ? "-" : dropped.c_str(), what.c_str(), self_.c_str(),
      file.c_str(), saved ? "" : " (COULD NOT SAVE)", rerun_command(p.crash_point).c_str());
  std::fflush(stdout);
}

Window Explorer::window_of(unsigned t, std::uint64_t epoch_now) {
  Acks& a = *acked_[t];
  std::lock_guard lock(a.mu);
  Window w;
  w.done = w.seen = a.count;
  w.synced = a.synced;
  if (!epoch_mode()) return w;
  // The counter in a crash image of this point is the epoch now or the next
  // (at the drain that persists it); recovery fails it and the one before
  // (and a crash of that recovery the next ones): no crash of this point
  // fails now-2, the first epoch of the window.
  for (std::uint64_t e = epoch_now >= 2 ? epoch_now - 2 : 0; e <= epoch_now + 2; ++e) {
    auto it = a.by_epoch.upper_bound(e);
    w.by_epoch.emplace_back(e, it == a.by_epoch.begin() ? 0 : std::prev(it)->second);
  }
  return w;
}

// The clock of nehash's expansion-rate rules while the workload runs: one
// microsecond per operation started. The shape of the directory (two-time
// nodes of two or four entries, hence when full expansions happen) then
// follows from the workload, not from how long crash points take, and a
// single-threaded run's crash points keep their numbers in a rerun.
std::atomic<std::int64_t> g_operations{0};
std::int64_t operation_clock() { return g_operations.load(std::memory_order_relaxed) * 1000; }

bool Explorer::workload(unsigned t) {
  ThreadModel model;
  Acks& acks = *acked_[t];
  pthread_setname_np(pthread_self(), ("workload-" + std::to_string(t)).c_str());
  // Write groups: the operations of a group are acknowledged together when
  // it ends (a server replies then), so a crash image may hold any prefix
  // of the open group's (the windows' `seen`, below).
  const std::uint64_t group = c_.write_group;
  for (std::uint64_t i = 0; i < c_.w.ops && !stopping(); ++i) {
    const Op op = op_at(c_.w, t, i);
    if (group > 1 && i % group == 0) store_->begin_write_group();
    g_operations.fetch_add(1, std::memory_order_relaxed);
    acks.running.store(i + 1, std::memory_order_release);
    const std::string e = run_checked(*store_, t, op, &model);
    acks.running.store(0, std::memory_order_release);
    if (!e.empty()) {
      if (group > 1) store_->end_write_group();
      std::fprintf(stderr, "workload: thread %u op %llu: %s\n", t, static_cast<unsigned long long>(i), e.c_str());
      workload_failed_ = true;
      return false;
    }
    if (op.kind == Op::kSync) {
      // Every operation before a sync is durable when it returns, in a
      // group or not.
      std::lock_guard lock(acks.mu);
      acks.synced = i;
    }
    if (group > 1) {
      if ((i + 1) % group != 0 && i + 1 != c_.w.ops && !stopping()) continue;
      store_->end_write_group();
    }
    // The operation ran in this epoch or an earlier one.
    const std::uint64_t epoch = epoch_mode() ? store::testing::epoch(*store_) : 0;
    {
      std::lock_guard lock(acks.mu);
      acks.count = i + 1;
      if (epoch_mode()) {
        acks.by_epoch[epoch] = i + 1;
        while (acks.by_epoch.size() > 16) acks.by_epoch.erase(acks.by_epoch.begin());
      }
    }
    if (epoch_mode() && (i + 1) % c_.ops_per_epoch == 0) {
      // Let the epoch end (and its drains, the crash points, happen) before
      // going on: a pace, not a promise.
      const std::uint64_t e = store::testing::epoch(*store_);
      while (store::testing::epoch(*store_) == e && !stopping()) std::this_thread::yield();
    }
  }
  if (group > 1) store_->end_write_group();  // one a stop left open
  return true;
}

// The shared-key workload of thread t: every call recorded in log_, turns
// taken as Turns says.
bool Explorer::shared_workload(unsigned t) {
  t_workload = static_cast<int>(t);
  Acks& acks = *acked_[t];
  pthread_setname_np(pthread_self(), ("workload-" + std::to_string(t)).c_str());
  bool ok = true;
  for (std::uint64_t i = 0; i < c_.w.ops && !stopping(); ++i) {
    const Op op = shared_op_at(c_.w, t, i);
    turns_->at_op_start(t, op.kind == Op::kGet, op.kind == Op::kSync ? ~std::uint64_t{0} : op.key);
    g_operations.fetch_add(1, std::memory_order_relaxed);
    acks.running.store(i + 1, std::memory_order_release);
    const std::size_t at = log_.begin(t, i);
    const std::string key = shared_key_name(op.key);
    std::string got;
    Status s;
    switch (op.kind) {
      case Op::kInsert: s = store_->insert(key, op.value); break;
      case Op::kUpdate: s = store_->update(key, op.value); break;
      case Op::kUpsert: s = store_->upsert(key, op.value); break;
      case Op::kRemove: s = store_->remove(key); break;
      case Op::kGet: s = store_->get(key, &got, ReadOptions{.snapshot = is_snapshot_get(op)}); break;
      case Op::kSync: s = store_->sync(); break;
      case Op::kTxn:
      case Op::kSwapIn:
      case Op::kSwap:
      case Op::kSwapOut:
        s = Status::InvalidArgument("no transactions or swaps in the shared-key workload");
        break;
    }
    const Call::Answer answer = s.ok() ? Call::kOk
                              : s.is_not_found() ? Call::kNotFound
                              : s.is_already_exists() ? Call::kAlreadyExists
                                                      : Call::kOther;
    const std::int64_t observed = op.kind == Op::kGet && s.ok() ? shared_write_of(c_.w, got) : durable::kAbsent;
    log_.end(at, answer, observed, epoch_mode() ? store::testing::epoch(*store_) : 0);
    acks.running.store(0, std::memory_order_release);
    // The answers a model cannot predict here (they depend on the other
    // threads) are checked by the oracle; these are wrong whatever ran.
    const bool legal = op.kind == Op::kInsert ? s.ok() || s.is_already_exists()
                     : op.kind == Op::kUpdate || op.kind == Op::kRemove || op.kind == Op::kGet
                         ? s.ok() || s.is_not_found()
                         : s.ok();
    if (!legal || observed == -2) {
      std::fprintf(stderr, "workload: thread %u op %llu on %s answered %s%s\n", t,
                   static_cast<unsigned long long>(i), key.c_str(), s.to_string().c_str(),
                   observed == -2 ? " with a value no write wrote" : "");
      workload_failed_ = true;
      ok = false;
      break;
    }
    {
      std::lock_guard lock(acks.mu);
      acks.count = i + 1;
    }
    if (epoch_mode() && (i + 1) % c_.ops_per_epoch == 0) {
      // A pace, as in workload(); a thread parked in a drain inside the
      // epoch would hold its end up.
      turns_->release(t);
      const std::uint64_t e = store::testing::epoch(*store_);
      while (store::testing::epoch(*store_) == e && !stopping()) std::this_thread::yield();
    }
  }
  turns_->finish(t);
  return ok;
}

// The whole history of a run, every call returned, against the store's
// contents at its end: linearizable (crash/oracle.h, R1-R2 with nothing in
// flight). "" when it is.
std::string Explorer::check_live_history() {
  SharedCrash all;
  all.point = durable::kInFlight;
  all.calls = log_.calls();
  all.epoch = epoch_mode();
  std::map<std::uint64_t, std::string> found;
  std::string bad;
  const Status s = store_->for_each([&](std::string_view k, std::string_view v) {
    const auto key = parse_shared_key(std::string(k));
    if (!key) bad = std::string(k);
    else found.emplace(*key, std::string(v));
    return true;
  });
  if (!s.ok()) return "for_each at the end of the run: " + s.to_string();
  if (!bad.empty()) return "key " + bad + " at the end of the run was never written";
  return SharedOracle(c_.w).check(all, found, ~std::uint64_t{0}, /*live=*/true);
}

int Explorer::run() {
  ::setenv("PMEM2_FORCE_GRANULARITY", c_.granularity.c_str(), 1);
  engine::nehash::testing::set_clock(&operation_clock);
  engine::planted::bugs.store(plant_mask(c_.plant));
  rng_.seed(c_.w.seed * 7919 + c_.w.threads);
  const std::string pool = c_.dir + "/pmhash-explore-" + std::to_string(::getpid()) + ".pool";
  Options o;
  o.engine = c_.engine;
  o.pool_size = c_.pool_size;
  o.force = true;
  o.set("clevel.initial_level_log2", 2);  // tiny: the workload expands and shrinks the table
  o.set("clevel.min_level_log2", 2);
  o.set("clevel.shrink_threshold", 0.15);
  o.set("dali.initial_log2", 2);  // tiny: the workload grows the table all the time
  o.set("nehash.bucket_bits", c_.nehash_bucket_bits);
  o.set("nehash.initial_dir_bits", c_.nehash_initial_dir_bits);
  o.set("pmeh.segment_kib", c_.pmeh_segment_kib);
  o.set("pmeh.zone_bits", c_.pmeh_zone_bits);
  o.set("pmeh.split_bits", c_.pmeh_split_bits);
  o.set("pmeh.split_step", c_.pmeh_split_step);
  o.set("pmeh.workers", c_.pmeh_workers);
  o.set("pmeh.write_mode", c_.pmeh_write_mode);
  // A crash point stops the epoch worker while it dispatches images, and
  // every thread entering an epoch waits for it meanwhile, locks held: no
  // lock wait of a single operation may time out for that.
  o.set("dali.lock_timeout_ms", 60000);
  o.durability = epoch_mode() ? Durability::kEpoch : Durability::kStrict;
  o.epoch_ms = c_.epoch_ms;
  if (Status s = Store::create(pool, o, &store_); !s.ok()) usage("cannot create " + pool + ": " + s.to_string());
  c_.w.transactions = !c_.shared && has_transactions(*store_);
  if (c_.shared) turns_ = std::make_unique<Turns>(c_.w.threads, c_.w.seed);

  verifiers_.resize(c_.verifiers);
  for (unsigned i = 0; i < c_.verifiers; ++i) spawn(&verifiers_[i], i);
  for (unsigned t = 0; t < c_.w.threads; ++t) acked_.push_back(std::make_unique<Acks>());

  const auto start = std::chrono::steady_clock::now();
  std::uint64_t crash_points = 0;
  Stats shape;  // the table's growth the workload caused, before close
  {
    PersistenceSim sim(store::testing::region(*store_));
    // The simulator copied the region as durable while an epoch worker
    // may have gone on advancing: counters it persisted before the
    // observer was in place count as never written. A sync (two epochs'
    // fences on dali, watched now) makes the copy agree with the media
    // before the first crash point.
    if (Status s = store_->sync(); !s.ok()) usage("sync after create: " + s.to_string());
    sim.set_crash_point_hook([this](const PersistenceSim& s) { at_crash_point(s); });
    if (turns_) {
      sim.set_pre_drain_hook([this] { turns_->at_drain(); });
      sim.set_pre_flush_hook([this] { turns_->at_drain(/*flush=*/true); });
    }
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < c_.w.threads; ++t) {
      threads.emplace_back([this, t] { c_.shared ? shared_workload(t) : workload(t); });
    }
    for (std::thread& th : threads) th.join();
    if (c_.shared && !workload_failed_ && !stopping()) {
      if (std::string e = check_live_history(); !e.empty()) {
        std::fprintf(stderr, "workload: the run's answers are not linearizable: %s\n", e.c_str());
        workload_failed_ = true;
      }
    }
    // Crashes during the last resize and during close are crash points too.
    while (!workload_failed_ && !stopping() && store_->stats().resizing) std::this_thread::yield();
    shape = store_->stats();
    (void)store_->close();  // frees the region
    sim.forget_region();
    sim.set_crash_point_hook(nullptr);
    crash_points = sim.crash_points();
  }
  store_.reset();
  for (Child& v : verifiers_) {
    if (v.busy) collect(&v);
  }
  for (Child& v : verifiers_) stop(&v);
  ::unlink(pool.c_str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::printf(
      "engine %s seed %llu threads %u ops %llu granularity %s durability %s%s%s: %llu crash points, %llu explored, "
      "%llu crash images, %llu crashes during recovery, %llu violations, largest dirty set %llu%s, "
      "%.1f s\n",
      c_.engine.c_str(), static_cast<unsigned long long>(c_.w.seed), c_.w.threads,
      static_cast<unsigned long long>(c_.w.ops), c_.granularity.c_str(), c_.durability.c_str(),
      c_.plant.empty() ? "" : (" planted " + c_.plant).c_str(), c_.shared ? " shared-keys" : "",
      static_cast<unsigned long long>(crash_points), static_cast<unsigned long long>(points_explored_), static_cast<unsigned long long>(images_),
      static_cast<unsigned long long>(recovery_images_), static_cast<unsigned long long>(violations_.load()),
      static_cast<unsigned long long>(largest_dirty_), engine_shape(shape).c_str(), seconds);
  if (turns_) {
    std::printf("turns: %llu passed at drains and operation starts, %llu guest reads at other threads' drains, "
                "%llu stalled waits, %zu calls\n",
                static_cast<unsigned long long>(turns_->passes()), static_cast<unsigned long long>(turns_->guests()),
                static_cast<unsigned long long>(turns_->stalls()), log_.calls().size());
  }
  if (!c_.summary.empty()) {
    if (FILE* f = std::fopen(c_.summary.c_str(), "a")) {
      std::fprintf(f,
                   "{\"engine\":\"%s\",\"seed\":%llu,\"threads\":%u,\"ops\":%llu,\"granularity\":\"%s\","
                   "\"durability\":\"%s\",\"shared\":%s,\"turn_passes\":%llu,\"guest_reads\":%llu,\"stalls\":%llu,"
                   "\"planted\":\"%s\",\"crash_points\":%llu,\"explored\":%llu,\"images\":%llu,"
                   "\"recovery_images\":%llu,\"violations\":%llu%s,\"seconds\":%.1f}\n",
                   c_.engine.c_str(), static_cast<unsigned long long>(c_.w.seed), c_.w.threads,
                   static_cast<unsigned long long>(c_.w.ops), c_.granularity.c_str(), c_.durability.c_str(),
                   c_.shared ? "true" : "false", static_cast<unsigned long long>(turns_ ? turns_->passes() : 0),
                   static_cast<unsigned long long>(turns_ ? turns_->guests() : 0),
                   static_cast<unsigned long long>(turns_ ? turns_->stalls() : 0), c_.plant.c_str(),
                   static_cast<unsigned long long>(crash_points),
                   static_cast<unsigned long long>(points_explored_), static_cast<unsigned long long>(images_),
                   static_cast<unsigned long long>(recovery_images_),
                   static_cast<unsigned long long>(violations_.load()),
                   properties_json(shape).c_str(), seconds);
      std::fclose(f);
    }
  }
  if (workload_failed_) return 3;
  return violations_ == 0 ? 0 : 1;
}

// Verifies one saved reproducer in this process.
int replay(const Config& c) {
  Reproducer r;
  if (std::string e = read_reproducer(c.replay, &r); !e.empty()) usage(e);
  WorkloadSpec w;
  w.seed = std::stoull(r.field("seed"));
  w.threads = static_cast<unsigned>(std::stoul(r.field("threads")));
  w.ops = std::stoull(r.field("ops"));
  w.keys = std::stoull(r.field("keys"));
  w.transactions = r.field("transactions") == "1";
  // A bug planted in recovery replays only with it planted again.
  engine::planted::bugs.store(plant_mask(r.field("planted") == "-" ? "" : r.field("planted")));
  ::setenv("PMEM2_FORCE_GRANULARITY", r.field("granularity").c_str(), 1);
  const std::string path = c.dir + "/pmhash-replay-" + std::to_string(::getpid()) + ".pool";
  std::printf("replaying %s: engine %s seed %s threads %s, crash point %s, %s\n", c.replay.c_str(),
              r.field("engine").c_str(), r.field("seed").c_str(), r.field("threads").c_str(),
              r.field("crash_point").c_str(), r.field("choice").c_str());
  // A resize resumed by recovery runs in the background while the image is
  // verified, so some violations (a slot left frozen, a level dropped too
  // early) show only when the checks win the race: verify the image up to
  // --attempts times, each from the saved bytes.
  int violations = 0;
  for (unsigned attempt = 1; attempt <= c.attempts; ++attempt) {
    if (!write_file(path, r.image)) usage("cannot write " + path);
    std::string result;
    {
      std::unique_ptr<Store> store;
      const Status s = Store::open(path, Options{.engine = ""}, &store);
      if (!s.ok()) {
        result = "open (recovery) failed: " + s.to_string();
      } else if (r.field("shared") == "1") {
        SharedCrash crash;
        crash.epoch = r.field("durability") == "epoch";
        crash.point = std::stoull(r.field("crash_seq"));
        if (!parse_calls(r.field("calls"), &crash.calls)) usage(c.replay + ": bad calls field");
        result = SharedOracle(w).verify(*store, crash);
      } else {
        result = Oracle(w).verify(*store, parse_windows(r.field("windows")));
      }
    }
    if (!result.empty()) {
      ++violations;
      std::printf("VIOLATION (attempt %u) %s\n", attempt, result.c_str());
      break;
    }
  }
  ::unlink(path.c_str());
  if (violations == 0) {
    std::printf("recovered and verified %u times: no violation\n", c.attempts);
    return 0;
  }
  return 1;
}

}  // namespace
}  // namespace pmhash::crashtest

int main(int argc, char** argv) {
  using namespace pmhash::crashtest;
  ::signal(SIGPIPE, SIG_IGN);
  const Config c = parse(argc, argv);
  if (!c.replay.empty()) return replay(c);
  if (c.verify_server) {
    ::setenv("PMEM2_FORCE_GRANULARITY", c.granularity.c_str(), 1);
    pmhash::engine::planted::bugs.store(plant_mask(c.plant));
    return verify_server(c);
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) usage("cannot find my own executable");
  self[n] = '\0';
  Explorer explorer(c, self);
  return explorer.run();
}
