// pmhash-memnode: a memory node for the tcp transport (src/remote). Serves
// one-sided verbs on a memory-node pool file until SIGINT or SIGTERM; runs
// no index logic.
//
//   pmhash-memnode --pool /dev/shm/mn0 --create --size 1G --listen 127.0.0.1:7000
#include <csignal>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "remote/memnode.h"
#include "remote/server.h"

namespace {

pmhash::remote::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pmhash-memnode: serves a memory-node pool's bytes to pmhash clients over tcp"};
  std::string pool;
  std::string listen = "127.0.0.1:7000";
  std::uint64_t size = 0;
  bool create = false;
  bool force = false;
  app.add_option("--pool", pool, "the memory-node pool file")->required();
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  app.add_flag("--create", create, "create the pool first (with --size)");
  app.add_option("--size", size, "pool size for --create: bytes, or with K, M, G (binary)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--force", force, "with --create: replace an existing file");
  CLI11_PARSE(app, argc, argv);

  if (create) {
    if (size == 0) {
      std::cerr << "pmhash-memnode: --create needs --size\n";
      return 2;
    }
    if (pmhash::Status s = pmhash::remote::create_memnode(pool, size, force); !s.ok()) {
      std::cerr << "pmhash-memnode: " << s.to_string() << "\n";
      return 1;
    }
  }
  std::unique_ptr<pmhash::remote::Server> server;
  if (pmhash::Status s = pmhash::remote::Server::start(pool, listen, &server); !s.ok()) {
    std::cerr << "pmhash-memnode: " << s.to_string() << "\n";
    return 1;
  }
  g_server = server.get();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // The port line is what scripts and tests wait for.
  std::cout << "pmhash-memnode: serving " << pool << " on port " << server->port() << std::endl;
  const pmhash::Status s = server->run();
  g_server = nullptr;
  if (!s.ok()) {
    std::cerr << "pmhash-memnode: " << s.to_string() << "\n";
    return 1;
  }
  return 0;
}
