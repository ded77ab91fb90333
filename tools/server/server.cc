// server/server.cc - listening, connections and workers (server/server.h).
#include "server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pmhash/engines.h"
#include "server/commands.h"

namespace pmhash::server {
namespace {

// epoll data words of the two descriptors every worker shares; connections
// are keyed by their descriptor, which is never this large.
constexpr std::uint64_t kListenKey = ~std::uint64_t{0};
constexpr std::uint64_t kStopKey = ~std::uint64_t{0} - 1;
constexpr std::uint64_t kInboxKey = ~std::uint64_t{0} - 2;

constexpr std::size_t kReadChunk = 64 * 1024;
// Default workers on page granularity (server.h, "How many workers").
constexpr unsigned kWorkersWaitingOnFileSyncs = 16;
// A connection's input or output buffer keeps at most this much capacity
// while idle; more is given back after a large request or reply.
constexpr std::size_t kIdleCapacity = 64 * 1024;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::string peer_address(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

std::uint64_t unix_now() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace

class Server::Worker {
 public:
  Worker(Server* server, SessionRegistry* sessions) : server_(server), sessions_(sessions) {}
  ~Worker() {
    for (const Handoff& h : inbox_) ::close(h.fd);
    if (inbox_fd_ >= 0) ::close(inbox_fd_);
    if (epfd_ >= 0) ::close(epfd_);
  }

  // The worker's epoll set and inbox; run() starts its thread.
  Status prepare() {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return Status::IOError(errno_text("epoll_create1"));
    epoll_event ev{};
    // EPOLLEXCLUSIVE: one worker wakes per incoming connection.
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.u64 = kListenKey;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, server_->listen_fd_, &ev) != 0) {
      return Status::IOError(errno_text("epoll_ctl(listen)"));
    }
    ev.events = EPOLLIN;
    ev.data.u64 = kStopKey;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, server_->stop_fd_, &ev) != 0) {
      return Status::IOError(errno_text("epoll_ctl(stop)"));
    }
    inbox_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (inbox_fd_ < 0) return Status::IOError(errno_text("eventfd"));
    ev.events = EPOLLIN;
    ev.data.u64 = kInboxKey;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, inbox_fd_, &ev) != 0) {
      return Status::IOError(errno_text("epoll_ctl(inbox)"));
    }
    return Status::OK();
  }

  // After every worker's prepare(): a running worker may hand a connection
  // to any other, whose inbox must exist by then.
  void run() { thread_ = std::thread([this] { loop(); }); }

  void join() {
    if (thread_.joinable()) thread_.join();
  }

  // Connections this worker serves (read by the acceptor to balance).
  std::size_t load() const { return load_.load(std::memory_order_relaxed); }

  // Hands an accepted connection to this worker from another one's thread.
  void hand_off(int fd, std::string address) {
    load_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      inbox_.push_back(Handoff{fd, std::move(address)});
    }
    const std::uint64_t one = 1;
    (void)!::write(inbox_fd_, &one, sizeof(one));
  }

 private:
  struct Conn {
    int fd = -1;
    Session session;
    RequestParser parser;
    std::string in;
    std::size_t in_off = 0;  // bytes of `in` already consumed by requests
    std::string out;
    std::size_t out_off = 0;  // bytes of `out` already sent
    bool eof = false;         // the peer sent everything it will send
    bool quit = false;        // run nothing more; close once `out` is sent
    std::uint32_t events = 0; // the interest registered with epoll

    explicit Conn(const RequestLimits& limits) : parser(limits) {}
    std::size_t pending() const { return out.size() - out_off; }
  };

  void loop() {
    epoll_event events[128];
    bool stopping = false;
    while (!stopping) {
      const int n = ::epoll_wait(epfd_, events, 128, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      // Group persistence: the requests of every connection that woke run
      // in one write group, and their replies are sent once it has ended,
      // when all of it is durable (Store::begin_write_group).
      std::vector<int>& woke = woke_;
      woke.clear();
      const bool grouped = server_->config_.write_groups;
      if (grouped) server_->store_->begin_write_group();
      for (int i = 0; i < n; ++i) {
        const std::uint64_t key = events[i].data.u64;
        if (key == kStopKey) {
          stopping = true;
        } else if (key == kListenKey) {
          accept_all();
        } else if (key == kInboxKey) {
          take_inbox();
        } else {
          auto it = conns_.find(static_cast<int>(key));
          if (it == conns_.end()) continue;
          Conn& c = *it->second;
          if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) read_from(c);
          if (c.fd < 0) {
            conns_.erase(it);
          } else {
            woke.push_back(c.fd);
          }
        }
      }
      if (grouped) server_->store_->end_write_group();
      for (int fd : woke) {
        auto it = conns_.find(fd);
        if (it == conns_.end()) continue;
        write_to(*it->second);
        if (it->second->fd < 0) conns_.erase(it);
      }
    }
    for (auto& [fd, c] : conns_) close_conn(*c);
    conns_.clear();
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = ::accept4(server_->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;  // EAGAIN: none left; EMFILE and the like: try at the next wake-up
      }
      ServerCounters& counters = server_->counters_;
      counters.connections_received.fetch_add(1, std::memory_order_relaxed);
      if (counters.connected.fetch_add(1, std::memory_order_relaxed) >= server_->config_.max_clients) {
        counters.connected.fetch_sub(1, std::memory_order_relaxed);
        counters.connections_rejected.fetch_add(1, std::memory_order_relaxed);
        static constexpr char kFull[] = "-ERR max number of clients reached\r\n";
        (void)!::send(fd, kFull, sizeof(kFull) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      // To the worker with the fewest connections: the one that wakes for
      // the listening socket would otherwise take a whole burst of them
      // (a benchmark's fifty clients on one thread of eight).
      Worker* to = this;
      for (const auto& w : server_->workers_) {
        if (w->load() < to->load()) to = w.get();
      }
      if (to != this) {
        to->hand_off(fd, peer_address(addr));
      } else {
        load_.fetch_add(1, std::memory_order_relaxed);
        adopt(fd, peer_address(addr));
      }
    }
  }

  void take_inbox() {
    std::uint64_t n = 0;
    (void)!::read(inbox_fd_, &n, sizeof(n));
    std::vector<Handoff> taken;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      taken.swap(inbox_);
    }
    for (Handoff& h : taken) adopt(h.fd, std::move(h.address));
  }

  void adopt(int fd, std::string address) {
    ServerCounters& counters = server_->counters_;
    {
      auto c = std::make_unique<Conn>(server_->config_.limits);
      c->fd = fd;
      c->session.id = server_->next_client_id_.fetch_add(1, std::memory_order_relaxed);
      c->session.address = std::move(address);
      c->session.connected_unix = unix_now();
      c->session.authenticated = server_->config_.requirepass.empty();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = static_cast<std::uint64_t>(fd);
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        counters.connected.fetch_sub(1, std::memory_order_relaxed);
        load_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      c->events = ev.events;
      sessions_->add(&c->session);
      conns_.emplace(fd, std::move(c));
    }
  }

  void read_from(Conn& c) {
    if (!c.eof && !c.quit && c.pending() <= server_->config_.output_pause) {
      char buf[kReadChunk];
      const ssize_t r = ::read(c.fd, buf, sizeof(buf));
      if (r > 0) {
        server_->counters_.bytes_in.fetch_add(static_cast<std::uint64_t>(r), std::memory_order_relaxed);
        c.in.append(buf, static_cast<std::size_t>(r));
      } else if (r == 0) {
        c.eof = true;
      } else if (errno != EAGAIN && errno != EINTR) {
        close_conn(c);
        return;
      }
    }
    run_requests(c);  // the replies are sent after the loop's write group
  }

  // Runs the complete requests buffered, until the input runs out, the
  // client's unsent output passes output_pause, or a request ends it.
  void run_requests(Conn& c) {
    const ServerConfig& config = server_->config_;
    ServerCounters& counters = server_->counters_;
    ReplyWriter writer(&c.out, c.session.protocol);
    while (!c.quit && c.pending() <= config.output_pause) {
      const RequestParser::Result r = c.parser.parse(std::string_view(c.in).substr(c.in_off));
      if (r == RequestParser::Result::kIncomplete) break;
      if (r == RequestParser::Result::kError) {
        counters.protocol_errors.fetch_add(1, std::memory_order_relaxed);
        writer.error("ERR " + c.parser.error());
        c.quit = true;
        break;
      }
      writer.set_protocol(c.session.protocol);
      execute(*server_, *sessions_, c.session, c.parser.args(), writer);
      counters.commands.fetch_add(1, std::memory_order_relaxed);
      c.in_off += c.parser.consumed();
      if (c.session.close_after_reply) c.quit = true;
      std::uint64_t high = counters.output_high_water.load(std::memory_order_relaxed);
      while (c.pending() > high &&
             !counters.output_high_water.compare_exchange_weak(high, c.pending(), std::memory_order_relaxed)) {
      }
      if (c.pending() > config.output_limit) {
        counters.output_limit_closes.fetch_add(1, std::memory_order_relaxed);
        close_conn(c);
        return;
      }
    }
    // Drop what requests consumed; an incomplete request stays at the front.
    if (c.in_off != 0) {
      c.in.erase(0, c.in_off);
      c.in_off = 0;
    }
    if (c.in.empty() && c.in.capacity() > kIdleCapacity) c.in.shrink_to_fit();
    if (c.pending() > config.output_pause) counters.output_pauses.fetch_add(1, std::memory_order_relaxed);
    // The loop stops below the pause only when no complete request is left:
    // after the peer's end of input, nothing more will come to run.
    if (c.eof && c.pending() <= config.output_pause) c.quit = true;
  }

  void write_to(Conn& c) {
    while (c.pending() > 0) {
      const ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.pending(), MSG_NOSIGNAL);
      if (w > 0) {
        server_->counters_.bytes_out.fetch_add(static_cast<std::uint64_t>(w), std::memory_order_relaxed);
        c.out_off += static_cast<std::size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) break;
      close_conn(c);
      return;
    }
    if (c.pending() == 0) {
      c.out.clear();
      c.out_off = 0;
      if (c.out.capacity() > kIdleCapacity) c.out.shrink_to_fit();
      if (c.quit) {
        close_conn(c);
        return;
      }
      // Output drained below the pause: requests that waited may run now.
      if (!c.in.empty()) {
        run_requests(c);
        if (c.fd < 0) return;
        if (c.pending() > 0) {
          write_to(c);
          return;
        }
      }
    }
    watch(c);
  }

  // Registers the interest the connection's state calls for: input while
  // its output is below the pause, output while some is unsent.
  void watch(Conn& c) {
    if (c.pending() == 0 && (c.quit || c.eof)) {
      // Nothing more to read or to send: the conversation is over.
      close_conn(c);
      return;
    }
    // No EPOLLRDHUP: a peer's end of input shows as a read of 0 bytes, and
    // level-triggered EPOLLRDHUP would fire without pause while a paused
    // connection is not read.
    std::uint32_t want = 0;
    if (!c.eof && !c.quit && c.pending() <= server_->config_.output_pause) want |= EPOLLIN;
    if (c.pending() > 0) want |= EPOLLOUT;
    if (want == c.events) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = static_cast<std::uint64_t>(c.fd);
    if (::epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) {
      close_conn(c);
      return;
    }
    c.events = want;
  }

  void close_conn(Conn& c) {
    if (c.fd < 0) return;
    sessions_->remove(&c.session);
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c.fd = -1;
    server_->counters_.connected.fetch_sub(1, std::memory_order_relaxed);
    load_.fetch_sub(1, std::memory_order_relaxed);
  }

  struct Handoff {
    int fd;
    std::string address;
  };

  Server* server_;
  SessionRegistry* sessions_;
  int epfd_ = -1;
  int inbox_fd_ = -1;  // eventfd: hand_off() put connections in inbox_
  std::mutex inbox_mu_;
  std::vector<Handoff> inbox_;
  std::atomic<std::size_t> load_{0};
  std::thread thread_;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::vector<int> woke_;  // connections run in this round of the loop
};

Server::Server(Store* store, ServerConfig config)
    : store_(store),
      config_(std::move(config)),
      keyspace_(std::make_unique<Keyspace>(store, config_.clock)),
      sessions_(std::make_unique<SessionRegistry>()) {
  const EngineDescriptor* engine = find_engine(store_->describe().engine);
  transactions_ = engine != nullptr && engine->capabilities.transactions;
}

Server::~Server() {
  stop();
  wait();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

Status Server::start() {
  if (config_.bind == "localhost") config_.bind = "127.0.0.1";
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool loopback = false;
  if (auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_pton(AF_INET, config_.bind.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(config_.port);
    len = sizeof(sockaddr_in);
    loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
  } else if (auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
             ::inet_pton(AF_INET6, config_.bind.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(config_.port);
    len = sizeof(sockaddr_in6);
    loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
  } else {
    return Status::InvalidArgument("bind address '" + config_.bind +
                                   "' is not an IPv4 or IPv6 address");
  }
  if (!loopback && config_.requirepass.empty()) {
    return Status::InvalidArgument("refusing to listen on " + config_.bind +
                                   " without a password: only loopback addresses are served "
                                   "without --requirepass");
  }
  if (config_.max_clients == 0) return Status::InvalidArgument("max clients must be at least 1");

  listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::IOError(errno_text("socket"));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Status::IOError(errno_text(("bind " + config_.bind + ":" + std::to_string(config_.port)).c_str()));
  }
  if (::listen(listen_fd_, 511) != 0) return Status::IOError(errno_text("listen"));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  port_ = bound.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                                     : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);

  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd_ < 0) return Status::IOError(errno_text("eventfd"));
  started_unix_ = unix_now();
  last_save_unix_.store(started_unix_);

  unsigned n = config_.workers;
  if (n == 0) {
    n = store_->describe().granularity == "page" ? kWorkersWaitingOnFileSyncs
                                              : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  }
  // Every worker exists before any runs: a worker that accepts reads the
  // others' loads to pick where a connection goes.
  for (unsigned i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(this, sessions_.get()));
  for (auto& w : workers_) {
    if (Status s = w->prepare(); !s.ok()) {
      workers_.clear();  // none runs yet
      return s;
    }
  }
  for (auto& w : workers_) w->run();
  keyspace_->start_sweeper(config_.expire_sweep_ms);
  return Status::OK();
}

std::vector<std::size_t> Server::worker_loads() const {
  std::vector<std::size_t> loads;
  for (const auto& w : workers_) loads.push_back(w->load());
  return loads;
}

void Server::stop() {
  if (stop_fd_ < 0) return;
  const std::uint64_t one = 1;
  // Level-triggered and never read: every worker sees it.
  (void)!::write(stop_fd_, &one, sizeof(one));
}

void Server::wait() {
  for (auto& w : workers_) w->join();
  // No command runs now; the sweeper is the last user of the store.
  keyspace_->stop_sweeper();
}

}  // namespace pmhash::server
