// pmhash-memnode: a memory node for the tcp transport (src/remote). Creates
// a memory-node pool, or serves one's bytes as one-sided verbs until SIGINT
// or SIGTERM; runs no index logic.
//
//   pmhash-memnode --pool /dev/shm/mn0 --create --size 1G          (create, exit)
//   pmhash-memnode --pool /dev/shm/mn0 --listen 127.0.0.1:7000      (serve)
//   pmhash-memnode --pool /dev/shm/mn0 --listen 0.0.0.0:7000 --secret-file /etc/pmhash/secret
#include <csignal>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "pmhash/memnode.h"

namespace {

pmhash::remote::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

std::string mib(std::uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

int main(int argc, char** argv) {
  pmhash::remote::ServerOptions defaults;
  defaults.listen.clear();
  const std::uint64_t per_connection = defaults.limits.in_allowance + defaults.limits.out_allowance +
                                       pmhash::remote::kConnectionOverhead;
  CLI::App app{
      "pmhash-memnode: serves a memory-node pool's bytes to pmhash clients over tcp.\n"
      "Without --secret-file it listens only on loopback (127.0.0.0/8); with one, only\n"
      "clients holding the same secret file are served (and they check the node too).\n"
      "Memory: anonymous memory stays below " + mib(pmhash::remote::kBaseMemory) +
      " + max-connections x " + std::to_string(per_connection >> 10) + " KiB +\n"
      "buffer-memory (" + mib(pmhash::remote::memory_bound(defaults)) + " with the defaults)."};
  std::string pool;
  std::uint64_t size = 0;
  bool create = false;
  bool force = false;
  pmhash::remote::ServerOptions o = defaults;
  double idle_s = o.idle_timeout.count() / 1000.0;
  double frame_s = o.frame_timeout.count() / 1000.0;
  std::uint64_t budget = o.buffer_budget;
  app.add_option("--pool", pool, "the memory-node pool file")->required();
  app.add_flag("--create", create, "create the pool (with --size); without --listen, then exit");
  app.add_option("--size", size, "pool size for --create: bytes, or with K, M, G (binary)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--force", force, "with --create: replace an existing file");
  app.add_option("--listen", o.listen,
                 "HOST:PORT to serve on (port 0: any free one); without a secret file only a "
                 "loopback address");
  app.add_option("--secret-file", o.secret_file,
                 "admit only clients that prove they hold this file's secret (32 to 4096 bytes, "
                 "mode 600; e.g. head -c 32 /dev/urandom > FILE && chmod 600 FILE); clients take "
                 "the same file from PMHASH_MEMNODE_SECRET_FILE or their --secret-file");
  app.add_option("--max-connections", o.max_connections,
                 "connections served at once; more are refused with a message")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--idle-timeout", idle_s, "seconds after which an idle connection is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e7));
  app.add_option("--frame-timeout", frame_s,
                 "seconds a connection may hold an unfinished frame or unsent responses "
                 "without progress before it is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e7));
  app.add_option("--buffer-memory", budget,
                 "buffer bytes for frames and responses beyond each connection's own " +
                     std::to_string((per_connection - pmhash::remote::kConnectionOverhead) >> 10) +
                     " KiB, for all connections together (K, M, G; at least " +
                     mib(pmhash::remote::kMinBufferBudget) + ")")
      ->transform(CLI::AsSizeValue(false))
      ->default_str(mib(o.buffer_budget));
  CLI11_PARSE(app, argc, argv);
  o.idle_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(idle_s * 1000));
  o.frame_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(frame_s * 1000));
  o.buffer_budget = budget;

  if (!create && o.listen.empty()) {
    std::cerr << "pmhash-memnode: nothing to do: give --listen HOST:PORT to serve the pool, "
                 "or --create --size N to create it\n";
    return 2;
  }
  if (create) {
    if (size == 0) {
      std::cerr << "pmhash-memnode: --create needs --size\n";
      return 2;
    }
    if (pmhash::Status s = pmhash::remote::create_memnode(pool, size, force); !s.ok()) {
      std::cerr << "pmhash-memnode: " << s.to_string() << "\n";
      return 1;
    }
    if (o.listen.empty()) {
      std::cout << "pmhash-memnode: created " << pool << "\n";
      return 0;
    }
  }
  std::unique_ptr<pmhash::remote::Server> server;
  if (pmhash::Status s = pmhash::remote::Server::start(pool, o, &server); !s.ok()) {
    std::cerr << "pmhash-memnode: " << s.to_string() << "\n";
    return 1;
  }
  g_server = server.get();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // The port line is what scripts and tests wait for.
  std::cout << "pmhash-memnode: serving " << pool << " on port " << server->port()
            << (o.secret_file.empty() ? "" : " (clients must hold the secret)") << std::endl;
  const pmhash::Status s = server->run();
  g_server = nullptr;
  if (!s.ok()) {
    std::cerr << "pmhash-memnode: " << s.to_string() << "\n";
    return 1;
  }
  return 0;
}
