// bench/remote_bench.cc - pmhash-bench's runs of the engines on memory
// nodes (remote_bench.h): throughput and remote traffic, with client
// processes.
//
//   pmhash-bench --engine sephash,race --transport shm,tcp
//       --latency-ns 0,2000 --threads 1,2,4 --workload insert,read,a,b,c
//       --records 200000 --key-size 8 --value-size 8
//
// Every engine of --engine runs each combination in turn, on fresh nodes
// of the same transport, with the same workload.
// For every combination it makes fresh memory nodes (pool files in --pool;
// for tcp, a pmhash-memnode loop per node in a child process on loopback),
// creates the index, and forks the client processes. "insert" measures the
// load phase: the clients insert --records keys, each its own share. The
// other workloads load first (untimed), then run --ops operations spread
// over the clients: read (100% reads), YCSB A (50% reads, 50% updates), B
// (95/5), C (100% reads), keys drawn scrambled-zipfian (0.99). Keys are the
// code-format records of tools/common/records.h, --key-size bytes; values
// --value-size bytes. Clients start together (a pipe
// barrier) and report operations, time and their Stats counters; a wrong
// answer (a missing key, a failed write) fails the run.
//
// Output: one line per run (engine, throughput, round trips, verbs and
// bytes per operation, merges, splits, bytes splits wrote, and the remote
// KiB merges freed, allocations reused and new space took), with --csv a
// CSV file that also has the bytes written per split, and with --json the
// pmhash-bench/1 document (remote_bench.h).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "key_chooser.h"
#include "pmhash/engines.h"
#include "pmhash/memnode.h"
#include "pmhash/store.h"
#include "records.h"
#include "remote_bench.h"
#include "report.h"

namespace pmhash::bench {
namespace {

using Config = RemoteConfig;

// What a client process reports.
struct Report {
  std::uint64_t ops = 0;
  std::uint64_t ns = 0;
  std::uint64_t wrong = 0;
  std::uint64_t round_trips = 0, verbs = 0, bytes = 0, merges = 0, splits = 0, moved = 0;
  std::uint64_t freed = 0, reused = 0, bumped = 0;  // remote bytes (Stats::remote_bytes_*)
  char error[256] = {};
};


// A memory-node daemon loop in a child process.
pid_t start_daemon(const std::string& pool, const std::string& secret_file, std::uint16_t* port) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::unique_ptr<pmhash::remote::Server> srv;
    pmhash::remote::ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.secret_file = secret_file;
    const Status s = pmhash::remote::Server::start(pool, so, &srv);
    const std::uint16_t got = s.ok() ? srv->port() : 0;
    [[maybe_unused]] ssize_t n = ::write(fds[1], &got, sizeof(got));
    ::close(fds[1]);
    if (!s.ok()) ::_exit(1);
    ::_exit(srv->run().ok() ? 0 : 1);
  }
  ::close(fds[1]);
  *port = 0;
  [[maybe_unused]] ssize_t n = ::read(fds[0], port, sizeof(*port));
  ::close(fds[0]);
  return pid;
}

struct Run {
  std::string engine;
  std::string transport;
  unsigned latency_ns;
  unsigned clients;
  std::string workload;
};

// The body of client `c` of `n`: opens the store, waits for the go byte,
// runs its share, reports.
Report client(const Config& cfg, const Options& o, const Run& run, unsigned c, int go_fd) {
  Report r;
  auto fail = [&](const std::string& what) {
    std::snprintf(r.error, sizeof(r.error), "%s", what.c_str());
    return r;
  };
  std::unique_ptr<Store> st;
  if (Status s = Store::open("", o, &st); !s.ok()) return fail("open: " + s.to_string());
  const bool load = run.workload == "insert";
  const std::uint64_t ops = load ? cfg.records : (cfg.ops ? cfg.ops : cfg.records);
  const std::uint64_t from = ops * c / run.clients, to = ops * (c + 1) / run.clients;
  unsigned read_pct = 100;
  if (run.workload == "a") read_pct = 50;
  if (run.workload == "b") read_pct = 95;
  std::mt19937_64 rng(cfg.seed * 1000 + c);
  pmhash::bench::Zipfian zipf(cfg.records);
  const std::string value(cfg.value_size, 'v'), value2(cfg.value_size, 'w');
  const records::RecordGen keys(records::Format::kCode, cfg.seed, cfg.key_size, cfg.value_size);
  std::string k(cfg.key_size, '\0');
  char go = 0;
  if (::read(go_fd, &go, 1) != 1) return fail("no start signal");
  const pmhash::Stats before = st->stats();
  const auto t0 = std::chrono::steady_clock::now();
  std::string got;
  for (std::uint64_t i = from; i < to; ++i) {
    if (load) {
      keys.key(i, k.data());
      if (!st->insert(k, value).ok()) ++r.wrong;
      continue;
    }
    const std::uint64_t rec = pmhash::bench::fnv1a64(zipf.next(rng)) % cfg.records;
    keys.key(rec, k.data());
    if (rng() % 100 < read_pct) {
      if (!st->get(k, &got).ok()) ++r.wrong;
    } else {
      if (!st->update(k, (i & 1) ? value2 : value).ok()) ++r.wrong;
    }
  }
  r.ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now() - t0)
                                        .count());
  r.ops = to - from;
  const pmhash::Stats after = st->stats();
  // The engine's property "<engine>.<counter>" counted in this run (0 when
  // the engine keeps no such counter).
  const auto counted = [&](const char* counter) {
    const std::string name = after.engine + "." + counter;
    return after.property(name) - before.property(name);
  };
  r.round_trips = counted("round_trips");
  r.verbs = counted("remote_verbs");
  r.bytes = counted("remote_bytes");
  r.merges = counted("merges");
  r.splits = counted("splits");
  r.moved = counted("split_bytes");
  r.freed = counted("bytes_freed");
  r.reused = counted("bytes_reused");
  r.bumped = counted("bytes_bumped");
  if (Status s = st->close(); !s.ok()) return fail("close: " + s.to_string());
  return r;
}

// Forks `run.clients` clients, starts them together, sums their reports;
// the slowest client's time is the run's.
bool run_clients(const Config& cfg, const Options& o, const Run& run, Report* sum) {
  std::vector<pid_t> pids;
  std::vector<int> go, back;
  for (unsigned c = 0; c < run.clients; ++c) {
    int g[2], b[2];
    if (::pipe(g) != 0 || ::pipe(b) != 0) return false;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(g[1]);
      ::close(b[0]);
      const Report r = client(cfg, o, run, c, g[0]);
      [[maybe_unused]] ssize_t n = ::write(b[1], &r, sizeof(r));
      ::_exit(0);
    }
    ::close(g[0]);
    ::close(b[1]);
    pids.push_back(pid);
    go.push_back(g[1]);
    back.push_back(b[0]);
  }
  for (int fd : go) {
    [[maybe_unused]] ssize_t n = ::write(fd, "g", 1);
    ::close(fd);
  }
  bool ok = true;
  *sum = Report{};
  for (unsigned c = 0; c < run.clients; ++c) {
    Report r;
    if (::read(back[c], &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) {
      std::cerr << "client " << c << " died\n";
      ok = false;
    } else if (r.error[0] != 0 || r.wrong != 0) {
      std::cerr << "client " << c << ": " << (r.error[0] ? r.error : "") << " wrong answers "
                << r.wrong << "\n";
      ok = false;
    }
    ::close(back[c]);
    ::waitpid(pids[c], nullptr, 0);
    sum->ops += r.ops;
    sum->ns = std::max(sum->ns, r.ns);
    sum->round_trips += r.round_trips;
    sum->verbs += r.verbs;
    sum->bytes += r.bytes;
    sum->merges += r.merges;
    sum->splits += r.splits;
    sum->moved += r.moved;
    sum->freed += r.freed;
    sum->reused += r.reused;
    sum->bumped += r.bumped;
  }
  return ok;
}

// A JSON number per operation, null without operations.
nlohmann::json per_op(std::uint64_t total, std::uint64_t ops) {
  return ops == 0 ? nlohmann::json() : nlohmann::json(static_cast<double>(total) / static_cast<double>(ops));
}

// One run of the pmhash-bench/1 document (remote_bench.h).
nlohmann::json run_json(const Run& run, const Report& r) {
  const double seconds = static_cast<double>(r.ns) / 1e9;
  const nlohmann::json phase = {
      {"ops", r.ops},
      {"seconds", seconds},
      {"ops_per_s", seconds > 0 ? static_cast<double>(r.ops) / seconds : 0.0},
      {"round_trips_per_op", per_op(r.round_trips, r.ops)},
      {"verbs_per_op", per_op(r.verbs, r.ops)},
      {"bytes_per_op", per_op(r.bytes, r.ops)},
      {"merges", r.merges},
      {"splits", r.splits},
      {"split_bytes", r.moved},
      {"split_bytes_per_split", per_op(r.moved, r.splits)},
      {"freed_bytes", r.freed},
      {"reused_bytes", r.reused},
      {"new_bytes", r.bumped}};
  const bool load = run.workload == "insert";
  return {{"engine", run.engine},
          {"series", run.engine},
          {"kind", "memnode"},
          {"durability", "strict"},
          {"threads", run.clients},
          {"clients", run.clients},
          {"transport", run.transport},
          {"latency_ns", run.latency_ns},
          {"workload", run.workload},
          {"load", load ? phase : nlohmann::json()},
          {"run", load ? nlohmann::json() : phase}};
}

// A bad flag: the message, exit status 2.
int usage(const std::string& what) {
  std::cerr << "pmhash-bench: " << what << "\n";
  return 2;
}

template <typename T>
bool member(const std::vector<T>& set, const T& item) {
  return std::find(set.begin(), set.end(), item) != set.end();
}

}  // namespace

bool is_remote_engine(const std::string& engine) {
  return member(Store::remote_engines(), engine.substr(0, engine.find(':')));
}

void add_remote_options(CLI::App& app, RemoteFlags* flags) {
  app.add_option("--transport", flags->transports,
                 "memory-node engines: shm, tcp (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"shm", "tcp"}))
      ->capture_default_str();
  app.add_option("--latency-ns", flags->latencies,
                 "memory-node engines, shm: injected round-trip latencies to sweep")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--nodes", flags->nodes, "memory-node engines: memory nodes")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--node-size", flags->node_size, "memory-node engines: bytes per node (K, M, G)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--secret-file", flags->secret_file,
                 "memory-node engines, tcp: start the nodes with this secret file and connect "
                 "with it");
}

int run_remote(const RemoteConfig& config) {
  const Config& cfg = config;
  for (const std::string& e : cfg.engines) {
    if (!is_remote_engine(e) || e.find(':') != std::string::npos) {
      std::string known;
      for (const std::string& r : Store::remote_engines()) known += (known.empty() ? "" : ", ") + r;
      return usage("--engine " + e + ": runs on memory nodes take only engines that live there (" +
                   known + "), without a durability suffix");
    }
  }
  for (const std::string& w : cfg.workloads) {
    if (!member<std::string>({"insert", "read", "a", "b", "c"}, w)) {
      return usage("--workload " + w + ": memory-node engines run insert, read, a, b or c");
    }
  }
  for (unsigned c : cfg.clients) {
    if (c < 1 || c > 64) return usage("--threads: 1 to 64 client processes");
  }
  if (cfg.records < 1 || cfg.records > (std::uint64_t{1} << 30)) {
    return usage("--records: 1 to 2^30 for memory-node engines");
  }
  if (cfg.key_size < records::kMinCodeKeySize || cfg.value_size < 1 || cfg.value_size > 4096) {
    return usage("memory-node engines take --key-size of at least 8 and --value-size of 1 to 4096");
  }
  nlohmann::json runs = nlohmann::json::array();
  std::ofstream csv;
  if (!cfg.csv_path.empty()) {
    csv.open(cfg.csv_path);
    if (!csv) {
      std::cerr << "pmhash-bench: cannot write " << cfg.csv_path << "\n";
      return 2;
    }
    csv << "engine,transport,latency_ns,clients,workload,ops,mops,round_trips_per_op,"
           "verbs_per_op,bytes_per_op,merges,splits,split_bytes,split_bytes_per_split,"
           "freed_bytes,reused_bytes,new_bytes\n";
  }
  std::printf("%-8s %-4s %7s %3s %-6s %9s %8s %8s %9s %7s %6s %11s %9s %9s %9s\n", "engine",
              "net", "lat_ns", "cli", "work", "Mops/s", "rtt/op", "verbs/op", "bytes/op", "merges",
              "splits", "split_bytes", "freed_KiB", "reuse_KiB", "new_KiB");
  bool all_ok = true;
  for (const std::string& transport : cfg.flags.transports) {
    for (unsigned lat : cfg.flags.latencies) {
      if (transport == "tcp" && lat != cfg.flags.latencies.front()) continue;  // shm only
      for (unsigned clients : cfg.clients) {
        for (const std::string& workload : cfg.workloads) {
          for (const std::string& engine : cfg.engines) {
            const Run run{engine, transport, transport == "shm" ? lat : 0, clients, workload};
            std::vector<std::string> pools;
            std::vector<pid_t> daemons;
            std::string specs;
            for (unsigned n = 0; n < cfg.flags.nodes; ++n) {
              pools.push_back(cfg.dir + "/pmhash-bench-" + std::to_string(::getpid()) +
                              "-mn" + std::to_string(n));
              if (Status s = pmhash::remote::create_memnode(pools.back(), cfg.flags.node_size, true);
                  !s.ok()) {
                std::cerr << "pmhash-bench: " << s.to_string() << "\n";
                return 1;
              }
              if (transport == "tcp") {
                std::uint16_t port = 0;
                daemons.push_back(start_daemon(pools.back(), cfg.flags.secret_file, &port));
                if (port == 0) {
                  std::cerr << "pmhash-bench: daemon for " << pools.back() << " failed\n";
                  return 1;
                }
                specs += (specs.empty() ? "" : ",") + std::string("tcp:127.0.0.1:") + std::to_string(port);
              } else {
                specs += (specs.empty() ? "" : ",") + std::string("shm:") + pools.back();
              }
            }
            Options o;
            o.engine = engine;
            o.memnodes = specs;
            o.memnode_secret_file = cfg.flags.secret_file;
            o.remote_latency_ns = run.latency_ns;
            // A loaded machine may take long for a round trip. An engine
            // that keeps its lock lease as an option needs it at least
            // twice the timeout (EngineDescriptor::lease_option); the
            // others derive their lease from the timeout.
            o.remote_timeout_ms = 10000;
            const EngineDescriptor* descriptor = find_engine(engine);
            if (descriptor != nullptr && !descriptor->lease_option.empty()) {
              o.set(descriptor->lease_option, 2 * o.remote_timeout_ms);
            }
            for (const std::string& e : cfg.engine_options) {
              const std::size_t eq = e.find('=');
              o.set(e.substr(0, eq), e.substr(eq + 1));
            }
            std::unique_ptr<Store> st;
            bool ok = true;
            if (Status s = Store::create("", o, &st); !s.ok() || !st->close().ok()) {
              std::cerr << "pmhash-bench: create: " << s.to_string() << "\n";
              ok = false;
            }
            Report r;
            if (ok && workload != "insert") {
              ok = run_clients(cfg, o, Run{engine, transport, run.latency_ns, clients, "insert"}, &r);
            }
            if (ok) ok = run_clients(cfg, o, run, &r);
            if (ok) {
              const double ops = static_cast<double>(r.ops);
              std::printf("%-8s %-4s %7u %3u %-6s %9.3f %8.2f %8.2f %9.1f %7llu %6llu %11llu "
                          "%9llu %9llu %9llu\n",
                          engine.c_str(), transport.c_str(), run.latency_ns, clients,
                          workload.c_str(), ops / static_cast<double>(r.ns) * 1e3,
                          static_cast<double>(r.round_trips) / ops, static_cast<double>(r.verbs) / ops,
                          static_cast<double>(r.bytes) / ops, static_cast<unsigned long long>(r.merges),
                          static_cast<unsigned long long>(r.splits),
                          static_cast<unsigned long long>(r.moved),
                          static_cast<unsigned long long>(r.freed / 1024),
                          static_cast<unsigned long long>(r.reused / 1024),
                          static_cast<unsigned long long>(r.bumped / 1024));
              std::fflush(stdout);
              runs.push_back(run_json(run, r));
              if (csv) {
                csv << engine << "," << transport << "," << run.latency_ns << "," << clients << ","
                    << workload << "," << r.ops << "," << ops / static_cast<double>(r.ns) * 1e3 << ","
                    << static_cast<double>(r.round_trips) / ops << ","
                    << static_cast<double>(r.verbs) / ops << "," << static_cast<double>(r.bytes) / ops
                    << "," << r.merges << "," << r.splits << "," << r.moved << ","
                    << (r.splits != 0 ? static_cast<double>(r.moved) / static_cast<double>(r.splits) : 0.0)
                    << "," << r.freed << "," << r.reused << "," << r.bumped << "\n";
              }
            }
            all_ok &= ok;
            for (pid_t d : daemons) {
              ::kill(d, SIGTERM);
              ::waitpid(d, nullptr, 0);
            }
            for (const std::string& p : pools) ::unlink(p.c_str());
          }
        }
      }
    }
  }
  if (!cfg.json_path.empty()) {
    nlohmann::json doc;
    doc["format"] = "pmhash-bench/1";
    doc["command"] = cfg.command;
    doc["git_revision"] = git_revision();
    doc["started_at"] = utc_now();
    doc["machine"] = machine_json();
    doc["config"] = {{"workloads", cfg.workloads},
                     {"records", cfg.records},
                     {"ops", cfg.ops != 0 ? cfg.ops : cfg.records},
                     {"key_size", cfg.key_size},
                     {"value_size", cfg.value_size},
                     {"engines", cfg.engines},
                     {"threads", cfg.clients},
                     {"transports", cfg.flags.transports},
                     {"latencies_ns", cfg.flags.latencies},
                     {"nodes", cfg.flags.nodes},
                     {"node_size", cfg.flags.node_size},
                     {"pool_dir", cfg.dir},
                     {"seed", cfg.seed}};
    doc["ceilings"] = nlohmann::json::array();
    doc["runs"] = std::move(runs);
    doc["skipped"] = nlohmann::json::array();
    std::ofstream out(cfg.json_path);
    out << doc.dump() << "\n";
    out.close();
    if (!out) {
      std::cerr << "pmhash-bench: cannot write " << cfg.json_path << "\n";
      return 1;
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace pmhash::bench
