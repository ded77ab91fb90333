// pmhash-server: one pmhash store behind the Redis protocol.
//
//   pmhash-server --pool ./data/server.pool --create
//   redis-cli -p 6379 set greeting hello
//
// Serves a pool file (--pool, any pool engine) or memory nodes (--memnodes,
// the engines that live there) until SIGTERM, SIGINT or SHUTDOWN, then
// closes the store cleanly. Flags may also come from a file (--config FILE,
// lines "name = value" with the long flag names). Engine options are
// `-o NAME=VALUE` (repeatable; `pmhash engines` lists them), checked against
// the descriptors before anything is opened. docs/server.md has the
// commands and what each promises.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "pmhash/engines.h"
#include "pmhash/store.h"
#include "server/server.h"

namespace {

using pmhash::Status;
using pmhash::Store;
using pmhash::server::Server;
using pmhash::server::ServerConfig;

Server* g_server = nullptr;

void on_signal(int) {
  // Async-signal-safe: stop() writes an eventfd.
  if (g_server != nullptr) g_server->stop();
}

int fail(const std::string& text, int code = 1) {
  std::cerr << "pmhash-server: " << text << "\n";
  return code;
}

// "64M", "1G", "4096": bytes.
bool parse_size(const std::string& text, std::uint64_t* out) {
  if (text.empty()) return false;
  std::size_t end = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &end);
  } catch (...) {
    return false;
  }
  int shift = 0;
  if (end + 1 == text.size()) {
    switch (text[end]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: return false;
    }
  } else if (end != text.size()) {
    return false;
  }
  if (shift != 0 && v > (~0ull >> shift)) return false;
  *out = static_cast<std::uint64_t>(v) << shift;
  return true;
}

// Raises the open-file limit to what max_clients needs (a descriptor per
// client, and some for the store and the listener); when the hard limit is
// lower, serves fewer clients and says so, as Redis does.
void fit_file_limit(ServerConfig* config) {
  constexpr unsigned kReserved = 32;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t want = static_cast<rlim_t>(config->max_clients) + kReserved;
  if (lim.rlim_cur < want) {
    lim.rlim_cur = std::min(want, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < want) {
    const unsigned fit = lim.rlim_cur > kReserved ? static_cast<unsigned>(lim.rlim_cur - kReserved) : 1;
    std::cerr << "pmhash-server: the open-file limit is " << lim.rlim_cur << ": serving at most "
              << fit << " clients instead of " << config->max_clients << "\n";
    config->max_clients = fit;
  }
}

bool read_password_file(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read the password file " + path;
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string pw = text.str();
  while (!pw.empty() && (pw.back() == '\n' || pw.back() == '\r')) pw.pop_back();
  if (pw.empty()) {
    *error = "the password file " + path + " is empty";
    return false;
  }
  *out = pw;
  return true;
}

// The first engine option that belongs to another engine than `engine`, as
// an error message; nothing when all are its own.
std::optional<std::string> foreign_option(const pmhash::Options& options, const std::string& engine) {
  for (const auto& [name, value] : options.engine_options) {
    const pmhash::EngineDescriptor* owner = pmhash::option_engine(name);
    if (owner != nullptr && owner->name != engine) {
      return "-o " + name + " applies to engine " + std::string(owner->name) + " only, not " + engine;
    }
  }
  return std::nullopt;
}

int run(int argc, char** argv) {
  CLI::App app{"pmhash-server: a pmhash store behind the Redis protocol (RESP2 and RESP3)"};
  app.set_config("--config", "", "read flags from a file (lines \"name = value\")");
  std::string pool;
  std::string memnodes;
  std::string engine;
  std::string size_text = "1G";
  std::string durability = "strict";
  unsigned epoch_ms = 10;
  bool create = false;
  bool force = false;
  std::string requirepass_file;
  std::vector<std::string> engine_options;
  ServerConfig config;
  unsigned port = config.port;
  app.add_option("--pool", pool, "the pool file to serve");
  app.add_option("--memnodes", memnodes, "serve the index on these memory nodes instead of a pool");
  app.add_flag("--create", create, "create the pool (or index) when it does not exist yet");
  app.add_flag("--force", force, "with --create: replace an existing pool");
  app.add_option("--engine", engine, "engine of a pool --create makes (default: the registry's first)");
  app.add_option("--size", size_text, "size of a pool --create makes: bytes, or a number with K, M, G or T")
      ->capture_default_str();
  app.add_option("--durability", durability, "strict or epoch")->check(CLI::IsMember({"strict", "epoch"}))
      ->capture_default_str();
  app.add_option("--epoch-ms", epoch_ms, "epoch length in milliseconds (durability epoch)")
      ->check(CLI::Range(1u, 60000u))->capture_default_str();
  app.add_option("--bind", config.bind, "address to listen on (other than loopback only with a password)")
      ->capture_default_str();
  app.add_option("--port", port, "TCP port (0: any free one)")->check(CLI::Range(0u, 65535u))
      ->capture_default_str();
  app.add_option("--workers", config.workers, "worker threads (0: one per hardware thread, at most 8; 16 on an ordinary file)")
      ->check(CLI::Range(0u, 256u))->capture_default_str();
  std::string write_groups = "on";
  app.add_option("--write-groups", write_groups,
                 "share durability waits among the writes of one round of a worker (group persistence)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_option("--max-clients", config.max_clients, "connections served at once")
      ->check(CLI::Range(1u, 1000000u))->capture_default_str();
  app.add_option("--requirepass", config.requirepass, "password clients must AUTH with");
  app.add_option("--requirepass-file", requirepass_file, "read the password from this file");
  app.add_option("-o,--option", engine_options,
                 "an engine option NAME=VALUE, repeatable ('pmhash engines' lists them)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (pool.empty() == memnodes.empty()) return fail("give either --pool or --memnodes", 2);
  config.write_groups = write_groups == "on";
  if (!requirepass_file.empty()) {
    if (!config.requirepass.empty()) return fail("give --requirepass or --requirepass-file, not both", 2);
    std::string error;
    if (!read_password_file(requirepass_file, &config.requirepass, &error)) return fail(error, 2);
  }
  config.port = static_cast<std::uint16_t>(port);
  config.durability = durability;

  pmhash::Options options;
  // No engine named: a create makes the default engine of where the index
  // lives, an open takes whatever the pool or the nodes hold.
  options.engine = engine;
  options.memnodes = memnodes;
  options.durability = durability == "epoch" ? pmhash::Durability::kEpoch : pmhash::Durability::kStrict;
  options.epoch_ms = epoch_ms;
  options.force = force;
  if (!parse_size(size_text, &options.pool_size)) return fail("--size: not a size: " + size_text, 2);
  // Engine options are checked against the descriptors before anything is
  // opened: a name of no engine, an option the engine lacks or a value out
  // of range is a usage error naming the valid ones.
  for (const std::string& text : engine_options) {
    const std::size_t eq = text.find('=');
    if (eq == std::string::npos) return fail("-o " + text + ": not NAME=VALUE ('pmhash engines' lists the names)", 2);
    const std::string name = text.substr(0, eq);
    const std::string value = text.substr(eq + 1);
    if (Status st = pmhash::check_option(name, value); !st.ok()) return fail("-o " + text + ": " + st.message(), 2);
    options.set(name, value);
  }

  // The engine a create makes is known now: refuse another engine's option
  // before a pool is made for nothing.
  const bool creates = create && (pool.empty() || force || ::access(pool.c_str(), F_OK) != 0);
  if (creates) {
    const std::string made =
        !engine.empty() ? engine
                        : std::string(pmhash::default_engine(pool.empty() ? pmhash::Location::kMemoryNodes
                                                                          : pmhash::Location::kPoolFile)
                                          ->name);
    if (std::optional<std::string> wrong = foreign_option(options, made)) return fail(*wrong, 2);
  }

  std::unique_ptr<Store> store;
  const std::string where = pool.empty() ? memnodes : pool;
  Status s;
  if (!pool.empty()) {
    // --create makes the pool only when it is missing (or with --force), so
    // the same command starts the server again after a stop or a crash.
    const bool exists = ::access(pool.c_str(), F_OK) == 0;
    if (create && (force || !exists)) {
      pmhash::Options create_options = options;
      if (create_options.engine.empty()) {
        create_options.engine = std::string(pmhash::default_engine(pmhash::Location::kPoolFile)->name);
      }
      s = Store::create(pool, create_options, &store);
    } else {
      s = Store::open(pool, options, &store);
    }
  } else {
    s = Store::open("", options, &store);
    if (!s.ok() && create) s = Store::create("", options, &store);
  }
  if (!s.ok()) return fail(where + ": " + s.to_string());
  // An option of another engine than the one served would be ignored
  // silently: on a command line that is a mistake.
  if (std::optional<std::string> wrong = foreign_option(options, store->describe().engine)) {
    store->close();
    return fail(*wrong + " (the engine of " + where + ")", 2);
  }

  fit_file_limit(&config);
  Server server(store.get(), config);
  g_server = &server;
  if (Status st = server.start(); !st.ok()) {
    g_server = nullptr;
    store->close();
    return fail(st.to_string(), st.is_invalid_argument() ? 2 : 1);
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const pmhash::Store::Description st = store->describe();
  std::cout << "pmhash-server: " << st.engine << " at " << where << " ("
            << (st.clean_shutdown ? "clean" : "recovered in " + std::to_string(st.recovery_ns / 1000) + " us")
            << "), ready on " << config.bind << ":" << server.port() << std::endl;

  server.wait();
  g_server = nullptr;
  const Status closed = store->close();
  if (!closed.ok()) return fail("closing " + where + ": " + closed.to_string());
  std::cout << "pmhash-server: closed " << where << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
