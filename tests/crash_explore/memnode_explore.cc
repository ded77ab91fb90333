// pmhash-memnode-crash-explore - the crash-state explorer for indexes on
// memory nodes (sephash, race): a memory node loses power at each of its
// fences while clients run.
//
//   pmhash-memnode-crash-explore [--engine sephash|race] [--nodes N]
//       [--seed N] [--threads N] [--ops N] [--keys N]
//       [--granularity cache_line|page|byte] [--node-size BYTES]
//       [--sephash-main-max-slots N] [--race-groups N]
//       [--exhaustive-words N] [--exhaustive N] [--samples N] [--singles N]
//       [--every N] [--points FIRST-LAST] [--verifiers N]
//       [--lease-ms N] [--timeout-ms N]
//       [--plant BUG] [--reproducers DIR] [--summary FILE]
//       [--stop-after N] [--max-reports N] [--dir DIR]
//   pmhash-memnode-crash-explore --replay FILE [--attempts N]
//   pmhash-memnode-crash-explore --list-engines
//
// The system. --threads client threads run the crash workload
// (crash/workload.h; each thread owns its keys, the only sharing the
// oracle can judge) on one Store of the engine, whose index spans --nodes
// memory nodes. The nodes are memory-node pools in --dir, opened by this
// process; a PersistenceSim (crash/persistence_sim.h) watches each node's
// region at --granularity. The clients reach the nodes through an
// in-process transport ("sim:I", plugged in with
// remote::testing::set_connect_hook) that runs each batch with
// remote::execute(), the memory node's own executor, under one mutex for
// all nodes: while one node runs a batch, every other node is between
// batches, and everything a node has completed is durable (transport.h,
// "Durability"). The workload's clients use a lease and a remote timeout
// of ten minutes: time spent in the crash points below must not make a
// healthy merge holder give up or a waiter time out.
//
// Crash points. Every fence a node issues (execute fences before each
// writing verb that follows another, and at the end of a batch) is a crash
// point: that node loses power there, its lines not yet durable reaching
// media in any combination, while the other nodes keep their bytes, and
// every client dies with it. At every --every'th point the explorer builds
// crash images of that node: when its dirty lines hold at most
// --exhaustive-words changed 8-byte words, every subset of those words
// (the verb being written torn in every way); else every subset of whole
// lines when there are at most --exhaustive, else nothing, everything,
// each line alone and each left out (up to --singles lines), and --samples
// random subsets with a torn line each (persistence_sim.h, crash_choices).
// With byte granularity stores reach media in the order they become
// visible, which the simulator cannot see: only nothing and everything.
//
// Verification. Each crash image, with the other nodes' durable bytes, goes
// to a verifier process (this program with --verify-server; --verifiers of
// them) through files in --dir. The verifier attaches a new client to them
// with the shm transport (Store::open, taking the engine node 0 holds) and
// runs check(), so that recovery is what the engine does for clients that
// died (sephash: a segment lock held for --lease-ms is taken over, and the
// merge or split finished or undone; race: a subtable's split lock held for
// --lease-ms is taken over, and the split finished or undone); check()
// must pass. Then a second
// client, with a long lease (its own merges must not run out of it on a
// slow machine), checks the store against the oracle (crash/oracle.h):
// every operation acknowledged before the crash point is there, each in
// flight wholly or not at all, check() passes, the store keeps working.
// Both have the remote timeout --timeout-ms (both engines wait a lease and
// that long on a lock whose holder made no progress; race gives up on a KV
// block that fails its checksum after it).
//
// A violation prints the seed, the crash point, the node, its lines
// written, dropped and torn, and saves a reproducer (crash/reproducer.h;
// the nodes' images one after another) that --replay verifies again with
// one command. Exit status: 0 no violation, 1 violations, 2 usage or setup
// error, 3 the workload itself misbehaved (a wrong answer before any crash).
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
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "crash/explore_io.h"
#include "crash/oracle.h"
#include "crash/persistence_sim.h"
#include "crash/reproducer.h"
#include "crash/workload.h"
#include "engine/planted.h"
#include "engine/race/race_testing.h"
#include "engine/remote_common/remote_index_testing.h"
#include "engine/sephash/sephash_testing.h"
#include "media/region.h"
#include "pmhash/store.h"
#include "pool/pool.h"
#include "remote/memnode.h"
#include "remote/remote_testing.h"
#include "remote/transport.h"

extern char** environ;

namespace pmhash::crashtest {
namespace {

using testing::CrashChoice;
using testing::PersistenceSim;

struct Config {
  std::string engine = "sephash";
  unsigned nodes = 2;
  WorkloadSpec w;
  std::string granularity = "cache_line";
  std::uint64_t node_size = pool::kMinPoolSize;
  // Small structures, so that a few hundred operations merge and split:
  // sephash MainSegs split past 208 slots; race subtables of 2 groups (42
  // slots) split a few times per hundred keys.
  unsigned sephash_main_max_slots = 208;
  unsigned race_groups = 2;
  std::size_t exhaustive_words = 4;
  std::size_t exhaustive = 4;
  std::size_t samples = 4;
  std::size_t singles = 16;
  std::uint64_t every = 1;
  std::uint64_t first_point = 0, last_point = ~std::uint64_t{0};
  unsigned verifiers = 2;
  unsigned lease_ms = 50;
  unsigned timeout_ms = 25;  // at most half the lease
  std::string plant;
  std::string dir = "/dev/shm";
  std::string reproducers = "crash-reproducers";
  std::string summary;
  unsigned max_reports = 3;
  std::uint64_t stop_after = 0;  // violations; 0: never stop early
  std::string replay;
  unsigned attempts = 3;  // --replay: verifications of the images
  bool verify_server = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "pmhash-memnode-crash-explore: %s\n(see the comment at the top of "
               "tests/crash_explore/memnode_explore.cc)\n",
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

// --plant NAME: the planted bugs this explorer can plant (the memory
// node's in engine/planted.h, each engine's in its <engine>_testing.h), by
// the names the crash tests use.
struct Plant {
  const char* name;
  engine::planted::Bug bug;
};
constexpr Plant kPlants[] = {
    {"memnode-one-fence", engine::planted::kMemnodeOneFencePerBatch},
    {"sephash-meta-before-mainseg", engine::sephash::testing::kMetaBeforeMainSegDurable},
    {"race-slot-before-kv", engine::race::testing::kSlotBeforeKvDurable},
    {"race-intent-before-new-table", engine::race::testing::kIntentBeforeNewTable},
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
  c.w.keys = 150;
  c.w.ops = 300;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage("flag " + flag + " needs a value");
      return argv[++i];
    };
    auto small = [&]() { return static_cast<unsigned>(std::min<std::uint64_t>(number(flag, value()), 1u << 30)); };
    if (flag == "--engine") c.engine = value();
    else if (flag == "--nodes") c.nodes = small();
    else if (flag == "--seed") c.w.seed = number(flag, value());
    else if (flag == "--threads") c.w.threads = small();
    else if (flag == "--ops") c.w.ops = number(flag, value());
    else if (flag == "--keys") c.w.keys = number(flag, value());
    else if (flag == "--granularity") c.granularity = value();
    else if (flag == "--node-size") c.node_size = number(flag, value());
    else if (flag == "--sephash-main-max-slots") c.sephash_main_max_slots = small();
    else if (flag == "--race-groups") c.race_groups = small();
    else if (flag == "--exhaustive-words") c.exhaustive_words = number(flag, value());
    else if (flag == "--exhaustive") c.exhaustive = number(flag, value());
    else if (flag == "--samples") c.samples = number(flag, value());
    else if (flag == "--singles") c.singles = number(flag, value());
    else if (flag == "--every") c.every = number(flag, value());
    else if (flag == "--points") {
      const std::string range = value();
      const std::size_t dash = range.find('-');
      if (dash == std::string::npos) usage("--points needs FIRST-LAST");
      c.first_point = number(flag, range.substr(0, dash).c_str());
      c.last_point = number(flag, range.substr(dash + 1).c_str());
    }
    else if (flag == "--verifiers") c.verifiers = small();
    else if (flag == "--lease-ms") c.lease_ms = small();
    else if (flag == "--timeout-ms") c.timeout_ms = small();
    else if (flag == "--plant") c.plant = value();
    else if (flag == "--dir") c.dir = value();
    else if (flag == "--reproducers") c.reproducers = value();
    else if (flag == "--summary") c.summary = value();
    else if (flag == "--max-reports") c.max_reports = small();
    else if (flag == "--stop-after") c.stop_after = number(flag, value());
    else if (flag == "--replay") c.replay = value();
    else if (flag == "--attempts") c.attempts = small();
    else if (flag == "--verify-server") c.verify_server = true;
    else if (flag == "--list-engines") {
      for (const std::string& e : Store::remote_engines()) std::printf("%s\n", e.c_str());
      std::exit(0);
    }
    else usage("unknown flag " + flag);
  }
  bool known = false;
  for (const std::string& e : Store::remote_engines()) known |= e == c.engine;
  if (!known) usage("--engine must be an engine on memory nodes (--list-engines), got '" + c.engine + "'");
  if (c.nodes == 0 || c.nodes > 8) usage("--nodes must be 1..8");
  if (c.w.threads == 0 || c.w.threads > 16) usage("--threads must be 1..16");
  if (c.w.keys == 0) usage("--keys must be positive");
  if (c.every == 0) usage("--every must be positive");
  if (c.attempts == 0) usage("--attempts must be positive");
  if (c.verifiers == 0 || c.verifiers > 16) usage("--verifiers must be 1..16");
  if (c.exhaustive > 16) usage("--exhaustive must be at most 16 (2^16 images per crash point)");
  if (c.exhaustive_words > 12) usage("--exhaustive-words must be at most 12 (2^12 images per crash point)");
  if (c.granularity != "cache_line" && c.granularity != "page" && c.granularity != "byte") {
    usage("--granularity must be cache_line, page or byte");
  }
  if (c.node_size < pool::kMinPoolSize || c.node_size > (std::uint64_t{1} << 30)) {
    usage("--node-size must be " + std::to_string(pool::kMinPoolSize) + " .. 1 GiB");
  }
  if (c.lease_ms == 0 || c.timeout_ms == 0) usage("--lease-ms and --timeout-ms must be positive");
  if (c.timeout_ms > c.lease_ms / 2) usage("--timeout-ms may be at most half of --lease-ms");
  (void)plant_mask(c.plant);
  return c;
}

// The calling thread's name ("workload-0"), else its id.
std::string thread_name() {
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) == 0 && name[0] != '\0') return name;
  std::ostringstream id;
  id << std::this_thread::get_id();
  return id.str();
}

std::string node_specs(const std::string& kind, const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + kind + ":" + n;
  return out;
}

// The options of a client that recovers and verifies crash images.
Options verifier_options(const std::vector<std::string>& files, unsigned lease_ms, unsigned timeout_ms) {
  Options o;
  o.engine = "";  // whatever node 0 holds
  o.memnodes = node_specs("shm", files);
  // The lease is the index's (stored at create); the verifier's own comes
  // from remote_index::testing::set_lease, set by verify_nodes.
  (void)lease_ms;
  o.remote_timeout_ms = timeout_ms;
  return o;
}

// The lease of the client that checks a recovered index: long enough that
// its own merges (the oracle's further writes) never run out of it, however
// slow the machine.
constexpr unsigned kCheckLeaseMs = 10000;

// How often recovery's check() is tried while it answers Busy.
constexpr int kCheckAttempts = 5;

// Attaches to the node files and checks them against the oracle; "" when
// the promise holds. Recovery first: a client with the short lease runs
// check(), which waits on every segment lock a dead client held and takes
// it over (sephash), and must pass; then a client with a long lease runs
// the oracle.
std::string verify_nodes(Oracle& oracle, const std::vector<std::string>& files, const std::vector<Window>& windows,
                         unsigned lease_ms, unsigned timeout_ms) {
  // The index's lease was stored at its create (long, for the workload);
  // recovery and verification use their own, on images no live client uses.
  struct Lease {
    explicit Lease(unsigned ms) { engine::remote_index::testing::set_lease(ms); }
    ~Lease() { engine::remote_index::testing::set_lease(0); }
  };
  {
    const Lease lease(lease_ms);
    std::unique_ptr<Store> store;
    const Status s = Store::open("", verifier_options(files, lease_ms, timeout_ms), &store);
    if (!s.ok()) return "open (attach) failed: " + s.to_string();
    // Busy is check()'s "retry later": a takeover that kept missing its
    // lease/2 window (a short verifier lease on a loaded machine). A dead
    // split or merge that no takeover can finish fails every attempt.
    Status c = store->check();
    for (int attempt = 1; c.is_busy() && attempt < kCheckAttempts; ++attempt) c = store->check();
    if (!c.ok()) return "check() after the crash (recovery): " + c.to_string();
    if (Status c = store->close(); !c.ok()) return "close after recovery failed: " + c.to_string();
  }
  const Lease lease(kCheckLeaseMs);
  std::unique_ptr<Store> store;
  const Status s = Store::open("", verifier_options(files, kCheckLeaseMs, timeout_ms), &store);
  if (!s.ok()) return "open (attach) after recovery failed: " + s.to_string();
  std::string result = oracle.verify(*store, windows);
  if (Status c = store->close(); !c.ok() && result.empty()) result = "close failed: " + c.to_string();
  return result;
}

// ---------------------------------------------------------------------------
// Verifier side.
// ---------------------------------------------------------------------------

// Request: "<windows> <path of node 0> <path of node 1> ...\n".
// Response: "ok\n" or "violation <text>\n".
int verify_server(const Config& c) {
  Oracle oracle(c.w);
  char buf[8192];
  while (std::fgets(buf, sizeof buf, stdin) != nullptr) {
    std::istringstream in(buf);
    std::string windows, path;
    in >> windows;
    std::vector<std::string> files;
    while (in >> path) files.push_back(path);
    std::string result = verify_nodes(oracle, files, parse_windows(windows), c.lease_ms, c.timeout_ms);
    for (char& ch : result) {
      if (ch == '\n') ch = ' ';
    }
    if (result.empty()) {
      std::printf("ok\n");
    } else {
      std::printf("violation %s\n", result.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

// ---------------------------------------------------------------------------
// The memory nodes and their in-process transport.
// ---------------------------------------------------------------------------

struct Node {
  std::string path;
  std::unique_ptr<pool::Pool> pool;
  std::unique_ptr<PersistenceSim> sim;
};

// The nodes "sim:I" names, and the mutex every batch on any of them runs
// under (so that when one node fences, every other is between batches).
std::vector<Node> g_nodes;
std::mutex g_batches;

// A client's connection to node I: post() runs the batch at once, under the
// mutex; poll() reports it done.
class SimTransport final : public remote::Transport {
 public:
  SimTransport(std::string name, unsigned node) : name_(std::move(name)), node_(node) {}

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return g_nodes[node_].pool->region().size(); }

  Status post(std::uint64_t tag, std::span<remote::Op> ops) override {
    if (Status s = remote::validate(name_, size(), ops); !s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(g_batches);
      remote::execute(g_nodes[node_].pool->region(), ops);
    }
    done_.push_back(tag);
    return Status::OK();
  }

  void poll(std::vector<remote::Completion>* done, std::chrono::nanoseconds) override {
    for (std::uint64_t tag : done_) done->push_back({tag, Status::OK()});
    done_.clear();
  }

  std::size_t in_flight() const override { return done_.size(); }

 private:
  std::string name_;
  unsigned node_;
  std::vector<std::uint64_t> done_;
};

Status connect_sim(const std::string& spec, const remote::ConnectOptions&, std::unique_ptr<remote::Transport>* out) {
  const std::string index = spec.substr(spec.find(':') + 1);
  char* end = nullptr;
  const unsigned long n = std::strtoul(index.c_str(), &end, 10);
  if (end == index.c_str() || *end != '\0' || n >= g_nodes.size()) {
    return Status::InvalidArgument("memory node '" + spec + "': no such in-process node");
  }
  *out = std::make_unique<SimTransport>(spec, static_cast<unsigned>(n));
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Explorer side.
// ---------------------------------------------------------------------------

// The crash choices for a node whose dirty lines are `dirty` (module comment).
std::vector<CrashChoice> node_choices(const PersistenceSim& sim, const std::vector<std::uint64_t>& dirty,
                                      const Config& c, std::mt19937_64& rng) {
  if (sim.granularity() == media::Granularity::kByte) return testing::crash_choices(sim, dirty, 0, 0, rng, 0);
  std::vector<std::pair<std::uint64_t, std::uint8_t>> lines;
  std::vector<std::pair<std::size_t, unsigned>> words;  // (line index, word)
  for (std::uint64_t line : dirty) {
    const std::uint8_t mask = sim.dirty_words(line);
    for (unsigned w = 0; w < 8; ++w) {
      if (mask & (1u << w)) words.emplace_back(lines.size(), w);
    }
    lines.emplace_back(line, mask);
  }
  if (words.size() > c.exhaustive_words) {
    return testing::crash_choices(sim, dirty, c.exhaustive, c.samples, rng, c.singles);
  }
  std::vector<CrashChoice> out;
  for (std::uint64_t subset = 0; subset < (std::uint64_t{1} << words.size()); ++subset) {
    std::vector<std::uint8_t> chosen(lines.size(), 0);
    for (std::size_t i = 0; i < words.size(); ++i) {
      if (subset & (std::uint64_t{1} << i)) chosen[words[i].first] |= static_cast<std::uint8_t>(1u << words[i].second);
    }
    CrashChoice choice;
    for (std::size_t l = 0; l < lines.size(); ++l) {
      if (chosen[l] == 0) continue;
      if (chosen[l] == lines[l].second) {
        choice.written.push_back(lines[l].first);
      } else {
        choice.torn.emplace_back(lines[l].first, chosen[l]);
      }
    }
    out.push_back(std::move(choice));
  }
  return out;
}

struct Pending {
  std::uint64_t crash_point = 0;
  unsigned node = 0;
  std::string thread;  // which thread's fence, and the operations in flight
  CrashChoice choice;
  std::vector<std::uint64_t> dirty;
  std::vector<Window> windows;
  std::vector<std::vector<std::byte>> images;  // one per node
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
    std::vector<std::string> files;  // one per node
    std::vector<std::byte*> maps;    // the files, mapped shared (see dispatch)
    std::vector<std::uint64_t> extents;  // per node: bytes of the image last dispatched
    bool busy = false;
    Pending pending;
  };

  // What a thread has acknowledged, read by the crash points (another
  // thread): how many operations and how many before its last sync.
  struct Acks {
    std::mutex mu;
    std::uint64_t count = 0;
    std::uint64_t synced = 0;
    // 1 + the operation the thread runs, 0 between operations.
    std::atomic<std::uint64_t> running{0};
  };

  void make_nodes();
  void spawn(Child* v, unsigned index);
  void stop(Child* v);
  Child* free_verifier();
  void collect(Child* v);
  void dispatch(Child* v);
  void at_crash_point(unsigned node, const PersistenceSim& sim);
  void report(const Pending& p, const std::string& what);
  std::string rerun_command(std::uint64_t point) const;
  bool workload(unsigned t);
  bool stopping() const { return c_.stop_after != 0 && violations_ >= c_.stop_after; }
  Window window_of(unsigned t);

  Config c_;
  std::string self_;
  std::unique_ptr<Store> store_;
  std::vector<std::unique_ptr<Acks>> acked_;
  std::vector<Child> verifiers_;
  std::mt19937_64 rng_;
  std::atomic<bool> workload_failed_{false};

  std::uint64_t points_ = 0;  // fences of every node (under g_batches)
  std::uint64_t points_explored_ = 0;
  std::uint64_t images_ = 0;
  std::atomic<std::uint64_t> violations_{0};
  std::uint64_t largest_dirty_ = 0;
};

void Explorer::make_nodes() {
  g_nodes.resize(c_.nodes);
  for (unsigned i = 0; i < c_.nodes; ++i) {
    Node& n = g_nodes[i];
    n.path = c_.dir + "/pmhash-mnexplore-" + std::to_string(::getpid()) + "-node" + std::to_string(i) + ".pool";
    if (Status s = remote::create_memnode(n.path, c_.node_size, /*force=*/true); !s.ok()) {
      usage("cannot create memory node " + n.path + ": " + s.to_string());
    }
    if (Status s = remote::open_memnode(n.path, /*shared=*/false, &n.pool); !s.ok()) {
      usage("cannot open memory node " + n.path + ": " + s.to_string());
    }
  }
}

void Explorer::spawn(Child* v, unsigned index) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) usage("cannot make pipes");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from[1], STDOUT_FILENO);
  std::vector<std::string> args = {self_,
                                   "--verify-server",
                                   "--engine", c_.engine,
                                   "--seed", std::to_string(c_.w.seed),
                                   "--threads", std::to_string(c_.w.threads),
                                   "--ops", std::to_string(c_.w.ops),
                                   "--keys", std::to_string(c_.w.keys),
                                   "--lease-ms", std::to_string(c_.lease_ms),
                                   "--timeout-ms", std::to_string(c_.timeout_ms)};
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
  v->busy = false;
  if (v->maps.empty()) {
    for (unsigned n = 0; n < c_.nodes; ++n) {
      const std::string file = c_.dir + "/pmhash-mnexplore-" + std::to_string(::getpid()) + "-v" +
                               std::to_string(index) + "-node" + std::to_string(n) + ".pool";
      const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(c_.node_size)) != 0) usage("cannot make " + file);
      void* p = ::mmap(nullptr, c_.node_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) usage("cannot map " + file);
      v->files.push_back(file);
      v->maps.push_back(static_cast<std::byte*>(p));
      v->extents.push_back(0);
    }
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
  for (std::byte* m : v->maps) ::munmap(m, c_.node_size);
  for (const std::string& f : v->files) ::unlink(f.c_str());
  v->maps.clear();
  v->files.clear();
  v->extents.clear();
}

void Explorer::collect(Child* v) {
  char line[8192];
  v->busy = false;
  ++images_;
  if (std::fgets(line, sizeof line, v->from) == nullptr) {
    // The verifier died: attaching or checking crashed it.
    std::fclose(v->to);
    std::fclose(v->from);
    v->to = v->from = nullptr;
    int status = 0;
    ::waitpid(v->pid, &status, 0);
    v->pid = -1;
    const std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                : "exited with status " + std::to_string(WEXITSTATUS(status));
    report(v->pending, "the verifier process " + how + " while attaching to or checking these images");
    spawn(v, static_cast<unsigned>(v - verifiers_.data()));
    return;
  }
  std::string text = line;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text == "ok") return;
  const std::string prefix = "violation ";
  report(v->pending, text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text);
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
      // Nothing answered in five minutes: an attach or a check hangs.
      for (Child& v : verifiers_) ::kill(v.pid, SIGKILL);
      for (Child& v : verifiers_) collect(&v);  // each reports its death
      continue;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) collect(&verifiers_[i]);
    }
  }
}

// The bytes of a node's region that anything was ever stored to: up to
// its bump word (memory-node pools hand out space only from there, and a
// block is written only once allocated), a page-rounded offset in
// [kFirstAllocatable, size]. Crash images are taken of that much only.
std::uint64_t extent(const std::byte* base, std::uint64_t size) {
  constexpr std::uint64_t kPage = 4096;
  const std::uint64_t bump = std::atomic_ref<std::uint64_t>(
      *reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(base) + remote::kBumpOffset))
                                  .load(std::memory_order_acquire);
  const std::uint64_t end = std::max<std::uint64_t>(bump, remote::kFirstAllocatable);
  return end >= size - kPage ? size : (end + kPage - 1) / kPage * kPage;
}

// Hands v its pending images. Each file is rewritten through a shared
// mapping, page by page where it differs, up to the farthest of the image,
// the previous image and what the verifier allocated (its bump word):
// beyond that both are zero. The last verification changed a few pages;
// writing whole nodes each time would cost more than it.
void Explorer::dispatch(Child* v) {
  constexpr std::size_t kPage = 4096;
  static const std::byte zero[kPage] = {};
  for (unsigned n = 0; n < c_.nodes; ++n) {
    const std::vector<std::byte>& image = v->pending.images[n];
    const std::uint64_t end =
        std::max({std::uint64_t{image.size()}, v->extents[n], extent(v->maps[n], c_.node_size)});
    for (std::size_t off = 0; off < end; off += kPage) {
      const std::size_t len = std::min<std::uint64_t>(kPage, c_.node_size - off);
      const std::byte* want = off < image.size() ? image.data() + off : zero;
      if (std::memcmp(v->maps[n] + off, want, len) != 0) std::memcpy(v->maps[n] + off, want, len);
    }
    v->extents[n] = image.size();
  }
  std::string request = windows_text(v->pending.windows);
  for (const std::string& f : v->files) request += " " + f;
  std::fprintf(v->to, "%s\n", request.c_str());
  std::fflush(v->to);
  v->busy = true;
}

Window Explorer::window_of(unsigned t) {
  Acks& a = *acked_[t];
  std::lock_guard lock(a.mu);
  Window w;
  w.done = w.seen = a.count;
  w.synced = a.synced;
  return w;
}

// Runs with g_batches held (a node's fence): every other node is between
// batches, so its durable image is all it has.
void Explorer::at_crash_point(unsigned node, const PersistenceSim& sim) {
  const std::uint64_t point = ++points_;
  if (point % c_.every != 0 || point < c_.first_point || point > c_.last_point || stopping()) return;
  ++points_explored_;
  std::vector<Window> windows(c_.w.threads);
  for (unsigned t = 0; t < c_.w.threads; ++t) windows[t] = window_of(t);
  std::vector<std::uint64_t> ends(c_.nodes);
  for (unsigned n = 0; n < c_.nodes; ++n) ends[n] = extent(g_nodes[n].pool->region().base(), c_.node_size);
  const std::vector<std::uint64_t> dirty = sim.dirty_units(ends[node]);
  largest_dirty_ = std::max<std::uint64_t>(largest_dirty_, dirty.size());
  std::vector<CrashChoice> choices = node_choices(sim, dirty, c_, rng_);
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
    p.node = node;
    p.thread = thread;
    p.images.resize(c_.nodes);
    for (unsigned n = 0; n < c_.nodes; ++n) {
      if (n == node) {
        sim.crash_image_into(choice, &p.images[n], ends[n]);
      } else {
        const std::vector<std::byte>& durable = g_nodes[n].sim->durable();
        p.images[n].assign(durable.begin(), durable.begin() + static_cast<std::ptrdiff_t>(ends[n]));
      }
    }
    // Operations acknowledged while the images were copied may be in them.
    p.windows = windows;
    for (unsigned t = 0; t < c_.w.threads; ++t) {
      std::lock_guard lock(acked_[t]->mu);
      p.windows[t].seen = acked_[t]->count;
    }
    p.choice = std::move(choice);
    p.dirty = dirty;
    dispatch(v);
  }
}

// The exploration that found a crash point, narrowed to it (the point's
// number is exact for a single-threaded workload; else a window around it).
std::string Explorer::rerun_command(std::uint64_t point) const {
  const std::uint64_t from = point > 20 ? point - 20 : 0;
  std::string cmd = self_ + " --engine " + c_.engine + " --nodes " + std::to_string(c_.nodes) + " --seed " +
                    std::to_string(c_.w.seed) + " --threads " + std::to_string(c_.w.threads) + " --ops " +
                    std::to_string(c_.w.ops) + " --keys " + std::to_string(c_.w.keys) + " --granularity " +
                    c_.granularity + " --node-size " + std::to_string(c_.node_size) +
                    " --sephash-main-max-slots " + std::to_string(c_.sephash_main_max_slots) + " --race-groups " +
                    std::to_string(c_.race_groups) + " --exhaustive-words " + std::to_string(c_.exhaustive_words) +
                    " --exhaustive " + std::to_string(c_.exhaustive) + " --samples " + std::to_string(c_.samples) +
                    " --singles " + std::to_string(c_.singles) + " --lease-ms " + std::to_string(c_.lease_ms) +
                    " --timeout-ms " + std::to_string(c_.timeout_ms) + " --points " + std::to_string(from) + "-" +
                    std::to_string(point + 20);
  if (!c_.plant.empty()) cmd += " --plant " + c_.plant;
  return cmd;
}

void Explorer::report(const Pending& p, const std::string& what) {
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
  const std::string file = c_.reproducers + "/" + c_.engine + "-nodes" + std::to_string(c_.nodes) + "-seed" +
                           std::to_string(c_.w.seed) + "-t" + std::to_string(c_.w.threads) + "-point" +
                           std::to_string(p.crash_point) + "-" + std::to_string(violations_) + ".crash";
  Reproducer r;
  r.fields["engine"] = c_.engine;
  r.fields["nodes"] = std::to_string(c_.nodes);
  r.fields["node_size"] = std::to_string(c_.node_size);
  r.fields["seed"] = std::to_string(c_.w.seed);
  r.fields["threads"] = std::to_string(c_.w.threads);
  r.fields["ops"] = std::to_string(c_.w.ops);
  r.fields["keys"] = std::to_string(c_.w.keys);
  r.fields["granularity"] = c_.granularity;
  r.fields["windows"] = windows_text(p.windows);
  r.fields["crash_point"] = std::to_string(p.crash_point);
  r.fields["crashed_node"] = std::to_string(p.node);
  r.fields["choice"] = p.choice.describe();
  r.fields["dropped"] = dropped.empty() ? "-" : dropped;
  r.fields["planted"] = c_.plant.empty() ? "-" : c_.plant;
  r.fields["lease_ms"] = std::to_string(c_.lease_ms);
  r.fields["timeout_ms"] = std::to_string(c_.timeout_ms);
  r.fields["violation"] = what;
  for (const std::vector<std::byte>& image : p.images) {
    r.image.insert(r.image.end(), image.begin(), image.end());
    r.image.resize(r.image.size() + (c_.node_size - image.size()), std::byte{0});  // zero beyond its extent
  }
  const bool saved = write_reproducer(file, r);
  std::printf(
      "VIOLATION engine %s nodes %u seed %llu threads %u ops %llu%s\n"
      "  crash point %llu: a fence of node %u (thread %s), acknowledged per thread %s\n"
      "  node %u lines %s; dropped %s\n"
      "  %s\n"
      "  replay: %s --replay %s%s\n"
      "  rerun:  %s\n",
      c_.engine.c_str(), c_.nodes, static_cast<unsigned long long>(c_.w.seed), c_.w.threads,
      static_cast<unsigned long long>(c_.w.ops), c_.plant.empty() ? "" : (" planted " + c_.plant).c_str(),
      static_cast<unsigned long long>(p.crash_point), p.node, p.thread.c_str(), windows_text(p.windows).c_str(),
      p.node, p.choice.describe().c_str(), dropped.empty() ? "-" : dropped.c_str(), what.c_str(), self_.c_str(),
      file.c_str(), saved ? "" : " (COULD NOT SAVE)", rerun_command(p.crash_point).c_str());
  std::fflush(stdout);
}

bool Explorer::workload(unsigned t) {
  ThreadModel model;
  Acks& acks = *acked_[t];
  pthread_setname_np(pthread_self(), ("workload-" + std::to_string(t)).c_str());
  for (std::uint64_t i = 0; i < c_.w.ops && !stopping(); ++i) {
    const Op op = op_at(c_.w, t, i);
    acks.running.store(i + 1, std::memory_order_release);
    const std::string e = run_checked(*store_, t, op, &model);
    acks.running.store(0, std::memory_order_release);
    if (!e.empty()) {
      std::fprintf(stderr, "workload: thread %u op %llu: %s\n", t, static_cast<unsigned long long>(i), e.c_str());
      workload_failed_ = true;
      return false;
    }
    std::lock_guard lock(acks.mu);
    acks.count = i + 1;
    if (op.kind == Op::kSync) acks.synced = i;  // the ones before it
  }
  return true;
}

int Explorer::run() {
  ::setenv("PMEM2_FORCE_GRANULARITY", c_.granularity.c_str(), 1);
  engine::planted::bugs.store(plant_mask(c_.plant));
  rng_.seed(c_.w.seed * 7919 + c_.w.threads);
  make_nodes();
  remote::testing::set_connect_hook(&connect_sim);
  std::vector<std::string> names;
  for (unsigned i = 0; i < c_.nodes; ++i) names.push_back(std::to_string(i));
  Options o;
  o.engine = c_.engine;
  o.memnodes = node_specs("sim", names);
  o.force = true;
  // Ten minutes: a crash point stops a client for as long as its images
  // take to dispatch, and no merge holder may give up, and no waiter time
  // out, for that.
  o.set("sephash.lock_lease_ms", 600000);  // race: twice its remote timeout
  o.remote_timeout_ms = 300000;
  o.set("sephash.initial_depth", 1);
  o.set("sephash.max_depth", 10);
  o.set("sephash.main_max_slots", c_.sephash_main_max_slots);
  o.set("race.initial_depth", 1);
  o.set("race.max_depth", 10);
  o.set("race.groups", c_.race_groups);
  if (Status s = Store::create("", o, &store_); !s.ok()) {
    for (Node& n : g_nodes) {
      n.pool.reset();
      ::unlink(n.path.c_str());
    }
    usage("cannot create the index: " + s.to_string());
  }

  verifiers_.resize(c_.verifiers);
  for (unsigned i = 0; i < c_.verifiers; ++i) spawn(&verifiers_[i], i);
  for (unsigned t = 0; t < c_.w.threads; ++t) acked_.push_back(std::make_unique<Acks>());

  const auto start = std::chrono::steady_clock::now();
  Stats shape;
  // The nodes as they are now are durable (every batch of the create
  // completed); from here on every fence is a crash point.
  for (unsigned i = 0; i < c_.nodes; ++i) {
    g_nodes[i].sim = std::make_unique<PersistenceSim>(g_nodes[i].pool->region());
    g_nodes[i].sim->set_crash_point_hook([this, i](const PersistenceSim& s) { at_crash_point(i, s); });
  }
  {
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < c_.w.threads; ++t) threads.emplace_back([this, t] { workload(t); });
    for (std::thread& th : threads) th.join();
  }
  shape = store_->stats();
  // Closing hands free blocks back to the nodes: crash points too.
  (void)store_->close();
  store_.reset();
  for (Child& v : verifiers_) {
    if (v.busy) collect(&v);
  }
  for (Child& v : verifiers_) stop(&v);
  for (Node& n : g_nodes) n.sim.reset();
  for (Node& n : g_nodes) {
    n.pool.reset();
    ::unlink(n.path.c_str());
  }
  remote::testing::set_connect_hook(nullptr);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::printf(
      "engine %s nodes %u seed %llu threads %u ops %llu granularity %s%s: %llu crash points, %llu explored, "
      "%llu crash images, %llu violations, largest dirty set %llu, %llu merges, %llu splits, %.1f s\n",
      c_.engine.c_str(), c_.nodes, static_cast<unsigned long long>(c_.w.seed), c_.w.threads,
      static_cast<unsigned long long>(c_.w.ops), c_.granularity.c_str(),
      c_.plant.empty() ? "" : (" planted " + c_.plant).c_str(), static_cast<unsigned long long>(points_),
      static_cast<unsigned long long>(points_explored_), static_cast<unsigned long long>(images_),
      static_cast<unsigned long long>(violations_.load()), static_cast<unsigned long long>(largest_dirty_),
      static_cast<unsigned long long>(shape.property(c_.engine + ".merges")),
      static_cast<unsigned long long>(shape.property(c_.engine + ".splits")), seconds);
  if (!c_.summary.empty()) {
    if (FILE* f = std::fopen(c_.summary.c_str(), "a")) {
      std::fprintf(f,
                   "{\"engine\":\"%s\",\"nodes\":%u,\"seed\":%llu,\"threads\":%u,\"ops\":%llu,"
                   "\"granularity\":\"%s\",\"durability\":\"strict\",\"planted\":\"%s\",\"crash_points\":%llu,"
                   "\"explored\":%llu,\"images\":%llu,\"violations\":%llu,\"merges\":%llu,\"splits\":%llu,"
                   "\"seconds\":%.1f}\n",
                   c_.engine.c_str(), c_.nodes, static_cast<unsigned long long>(c_.w.seed), c_.w.threads,
                   static_cast<unsigned long long>(c_.w.ops), c_.granularity.c_str(), c_.plant.c_str(),
                   static_cast<unsigned long long>(points_), static_cast<unsigned long long>(points_explored_),
                   static_cast<unsigned long long>(images_), static_cast<unsigned long long>(violations_.load()),
                   static_cast<unsigned long long>(shape.property(c_.engine + ".merges")),
                   static_cast<unsigned long long>(shape.property(c_.engine + ".splits")), seconds);
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
  unsigned nodes = 0;
  std::uint64_t node_size = 0;
  unsigned lease_ms = 0, timeout_ms = 0;
  try {
    w.seed = std::stoull(r.field("seed"));
    w.threads = static_cast<unsigned>(std::stoul(r.field("threads")));
    w.ops = std::stoull(r.field("ops"));
    w.keys = std::stoull(r.field("keys"));
    nodes = static_cast<unsigned>(std::stoul(r.field("nodes")));
    node_size = std::stoull(r.field("node_size"));
    lease_ms = static_cast<unsigned>(std::stoul(r.field("lease_ms")));
    timeout_ms = static_cast<unsigned>(std::stoul(r.field("timeout_ms")));
  } catch (const std::exception&) {
    usage(c.replay + " is not a memory-node reproducer (a field is missing or not a number)");
  }
  if (nodes == 0 || nodes > 8 || node_size == 0 || r.image.size() != nodes * node_size) {
    usage(c.replay + ": its image is not " + r.field("nodes") + " nodes of " + r.field("node_size") + " bytes");
  }
  ::setenv("PMEM2_FORCE_GRANULARITY", r.field("granularity").c_str(), 1);
  std::vector<std::string> files;
  for (unsigned n = 0; n < nodes; ++n) {
    files.push_back(c.dir + "/pmhash-mnreplay-" + std::to_string(::getpid()) + "-node" + std::to_string(n) + ".pool");
  }
  std::printf("replaying %s: engine %s, %u nodes, seed %s threads %s, crash point %s at node %s, %s\n",
              c.replay.c_str(), r.field("engine").c_str(), nodes, r.field("seed").c_str(),
              r.field("threads").c_str(), r.field("crash_point").c_str(), r.field("crashed_node").c_str(),
              r.field("choice").c_str());
  int violations = 0;
  for (unsigned attempt = 1; attempt <= c.attempts && violations == 0; ++attempt) {
    for (unsigned n = 0; n < nodes; ++n) {
      if (!write_file(files[n], r.image.data() + n * node_size, node_size)) usage("cannot write " + files[n]);
    }
    Oracle oracle(w);
    const std::string result = verify_nodes(oracle, files, parse_windows(r.field("windows")), lease_ms, timeout_ms);
    if (!result.empty()) {
      ++violations;
      std::printf("VIOLATION (attempt %u) %s\n", attempt, result.c_str());
    }
  }
  for (const std::string& f : files) ::unlink(f.c_str());
  if (violations == 0) {
    std::printf("attached and verified %u times: no violation\n", c.attempts);
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
    ::setenv("PMEM2_FORCE_GRANULARITY", "cache_line", 1);
    return verify_server(c);
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) usage("cannot find my own executable");
  self[n] = '\0';
  Explorer explorer(c, self);
  return explorer.run();
}
