#include "remote/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "remote/memnode.h"
#include "remote/net.h"
#include "remote/transport.h"

namespace pmhash::remote {

struct ServerLoop::Connection {
  Connection(int f, NodeSession::Node* node, Clock::time_point now)
      : fd(f), session(node), last_progress(now) {}
  int fd;
  NodeSession session;
  std::uint32_t events = 0;            // the epoll interest set now
  std::uint64_t progress = 0;          // session.progress() when last noted
  Clock::time_point last_progress;     // when it last made progress
};

std::uint64_t memory_bound(const ServerOptions& o) {
  const std::uint64_t per = std::uint64_t{o.limits.in_allowance} + o.limits.out_allowance +
                            kConnectionOverhead;
  return kBaseMemory + std::uint64_t{o.max_connections} * per + o.buffer_budget;
}

Status ServerLoop::start(const std::string& pool_path, const ServerOptions& options,
                         std::unique_ptr<ServerLoop>* out) {
  const std::string who = "pmhash-memnode " + options.listen;
  if (options.max_connections == 0 || options.idle_timeout.count() <= 0 ||
      options.frame_timeout.count() <= 0) {
    return Status::InvalidArgument(who + ": --max-connections, --idle-timeout and " +
                                   "--frame-timeout must be positive");
  }
  if (options.buffer_budget < kMinBufferBudget) {
    return Status::InvalidArgument(who + ": a buffer budget of " +
                                   std::to_string(options.buffer_budget) + " bytes is below " +
                                   std::to_string(kMinBufferBudget) +
                                   " (one frame of the largest size must fit)");
  }
  if (options.limits.in_allowance < 4096 || options.limits.out_allowance < 16384) {
    return Status::InvalidArgument(who + ": connection allowances below 4 KiB in, 16 KiB out");
  }
  std::string host;
  std::uint16_t port = 0;
  if (Status s = net::split_address(options.listen, &host, &port); !s.ok()) return s;
  std::uint32_t addr = 0;
  if (Status s = net::resolve(host, &addr); !s.ok()) return s;
  const bool loopback = (ntohl(addr) >> 24) == 127;
  if (options.secret_file.empty() && !loopback) {
    return Status::InvalidArgument(
        who + ": refusing to listen beyond loopback without a secret, since whoever reaches the "
        "port could read and write every byte of the pool. Give --secret-file FILE (32 or more "
        "random bytes, mode 600: head -c 32 /dev/urandom > FILE && chmod 600 FILE) and the same "
        "file to every client (PMHASH_MEMNODE_SECRET_FILE, or --secret-file of pmhash and "
        "pmhash-bench), or listen on 127.0.0.1");
  }
  auto srv = std::unique_ptr<ServerLoop>(new ServerLoop());
  srv->pool_path_ = pool_path;
  srv->options_ = options;
  if (!options.secret_file.empty()) {
    if (Status s = handshake::Secret::load(options.secret_file, &srv->secret_); !s.ok()) return s;
  }
  if (Status s = open_memnode(pool_path, /*shared=*/false, &srv->pool_); !s.ok()) return s;
  srv->budget_ = std::make_unique<MemoryBudget>(options.buffer_budget);
  srv->node_.region = &srv->pool_->region();
  srv->node_.name = "memory node " + pool_path;
  srv->node_.secret = srv->secret_.empty() ? nullptr : &srv->secret_;
  srv->node_.layout_version = kMemNodeLayoutVersion;
  srv->node_.budget = srv->budget_.get();
  srv->node_.limits = options.limits;
  srv->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (srv->listen_fd_ < 0) return Status::IOError(who + ": socket: " + net::errno_text(errno));
  const int one = 1;
  ::setsockopt(srv->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = addr;
  if (::bind(srv->listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return Status::IOError(who + ": cannot bind: " + net::errno_text(errno));
  }
  if (::listen(srv->listen_fd_, 128) != 0) {
    return Status::IOError(who + ": cannot listen: " + net::errno_text(errno));
  }
  socklen_t len = sizeof(sa);
  ::getsockname(srv->listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  srv->port_ = ntohs(sa.sin_port);
  srv->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  srv->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (srv->stop_fd_ < 0 || srv->epoll_fd_ < 0) {
    return Status::IOError(who + ": eventfd/epoll: " + net::errno_text(errno));
  }
  for (int fd : {srv->listen_fd_, srv->stop_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(srv->epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  *out = std::move(srv);
  return Status::OK();
}

ServerLoop::~ServerLoop() {
  for (auto& [fd, c] : connections_) ::close(fd);
  connections_.clear();  // the sessions give their grants back to budget_
  for (int fd : {listen_fd_, stop_fd_, epoll_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void ServerLoop::stop() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof(one));
}

Status ServerLoop::run() {
  epoll_event events[64];
  // Timeouts are checked a few times per shortest timeout (so a
  // connection is closed at most 25% late), at least every second.
  const auto shortest = std::min(options_.idle_timeout, options_.frame_timeout);
  const auto interval = std::clamp(shortest / 4, std::chrono::milliseconds(5),
                                   std::chrono::milliseconds(1000));
  auto next_sweep = Clock::now() + interval;
  for (;;) {
    int wait_ms = -1;
    if (!connections_.empty() || accept_paused_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_sweep - Clock::now());
      wait_ms = static_cast<int>(std::max<std::int64_t>(0, left.count()) + 1);
    }
    const int n = ::epoll_wait(epoll_fd_, events, 64, wait_ms);
    if (n < 0 && errno != EINTR) {
      return Status::IOError("pmhash-memnode: epoll_wait: " + net::errno_text(errno));
    }
    const auto now = Clock::now();
    const std::uint64_t budget_before = budget_->used();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) return Status::OK();
      if (fd == listen_fd_) {
        accept_all();
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      const bool was_busy = c.session.busy();
      // HUP: the peer shut both directions (or reset): nothing sent to it
      // can arrive any more.
      bool keep = (events[i].events & (EPOLLERR | EPOLLHUP)) == 0;
      if (keep && (events[i].events & EPOLLIN)) keep = on_readable(c);
      if (keep && (events[i].events & EPOLLOUT)) keep = flush(c);
      if (keep) {
        note(c, was_busy, now);
        watch(c);
      } else {
        close_connection(fd);
      }
    }
    if (budget_->used() < budget_before) wake_waiters();
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + interval;
    }
  }
}

void ServerLoop::note(Connection& c, bool was_busy, Clock::time_point now) {
  if (c.session.progress() != c.progress || (!was_busy && c.session.busy())) {
    c.progress = c.session.progress();
    c.last_progress = now;
  }
}

void ServerLoop::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors or memory: stop watching the listening socket
      // (a level-triggered epoll would report it again at once, forever)
      // until a connection closes or kAcceptRetry passes.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pause_accepting();
      }
      return;  // EAGAIN: none left
    }
    if (connections_.size() >= options_.max_connections) {
      refuse(fd, Status::Busy("pmhash-memnode on port " + std::to_string(port_) + " serves " +
                              std::to_string(options_.max_connections) +
                              " connections, its maximum (--max-connections): close idle "
                              "clients or raise the limit"));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>(fd, &node_, Clock::now());
    c->progress = c->session.progress();
    epoll_event ev{};
    ev.events = 0;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    Connection& ref = *c;
    connections_[fd] = std::move(c);
    if (flush(ref)) {
      watch(ref);
    } else {
      close_connection(fd);
    }
  }
}

void ServerLoop::refuse(int fd, const Status& why) {
  // A fresh socket's send buffer takes these few bytes at once; if not,
  // the client sees the connection closed instead.
  std::vector<char> verdict;
  handshake::refusal(why, &verdict);
  [[maybe_unused]] const ssize_t n = ::send(fd, verdict.data(), verdict.size(), MSG_NOSIGNAL);
  ::close(fd);
}

void ServerLoop::pause_accepting() {
  if (!accept_paused_) {
    epoll_event ev{};
    ev.events = 0;
    ev.data.fd = listen_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accept_paused_ = true;
  }
  accept_resume_at_ = Clock::now() + kAcceptRetry;
}

void ServerLoop::resume_accepting() {
  if (!accept_paused_) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  accept_paused_ = false;
}

bool ServerLoop::on_readable(Connection& c) {
  NodeSession& s = c.session;
  // At most a few reads per event, so that one busy client does not
  // starve the others (epoll reports it again).
  for (int round = 0; round < 4; ++round) {
    const std::size_t want = s.want_input();
    if (want == 0) break;
    const ssize_t n = ::recv(c.fd, s.input_space(), want, 0);
    if (n > 0) {
      s.received(static_cast<std::size_t>(n));
      s.process();
      if (!flush(c)) return false;
      if (static_cast<std::size_t>(n) < want) break;
      continue;
    }
    if (n == 0) return false;  // the client closed
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  return !(s.done() && s.output().empty());
}

bool ServerLoop::flush(Connection& c) {
  NodeSession& s = c.session;
  for (;;) {
    const std::span<const char> out = s.output();
    if (out.empty()) {
      if (s.done()) return false;
      // Drained: requests held back by the output bound may run now.
      const std::uint64_t before = s.progress();
      s.process();
      if (s.output().empty() || s.progress() == before) return !(s.done() && s.output().empty());
      continue;
    }
    const ssize_t n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      s.sent(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
}

void ServerLoop::watch(Connection& c) {
  std::uint32_t want = 0;
  if (c.session.want_input() > 0) want |= EPOLLIN;
  if (!c.session.output().empty()) want |= EPOLLOUT;
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = c.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = want;
}

void ServerLoop::close_connection(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(fd);
  // A descriptor is free again.
  resume_accepting();
}

void ServerLoop::wake_waiters() {
  const auto now = Clock::now();
  std::vector<int> gone;
  for (auto& [fd, c] : connections_) {
    if (!c->session.waiting_for_memory()) continue;
    const bool was_busy = c->session.busy();
    c->session.process();
    if (!flush(*c)) {
      gone.push_back(fd);
      continue;
    }
    note(*c, was_busy, now);
    watch(*c);
  }
  for (int fd : gone) close_connection(fd);
}

void ServerLoop::sweep(Clock::time_point now) {
  std::vector<int> expired;
  for (auto& [fd, c] : connections_) {
    // Waiting for the budget is the daemon's doing, not the client's: its
    // timeout starts once the memory is granted.
    if (c->session.waiting_for_memory()) {
      c->last_progress = now;
      continue;
    }
    const auto limit = c->session.busy() ? options_.frame_timeout : options_.idle_timeout;
    if (now - c->last_progress > limit) expired.push_back(fd);
  }
  const std::uint64_t budget_before = budget_->used();
  for (int fd : expired) close_connection(fd);
  if (budget_->used() < budget_before) wake_waiters();
  if (accept_paused_ && now >= accept_resume_at_) resume_accepting();
}

// The public Server: the loop behind a pointer, so that pmhash/memnode.h
// shows none of its members.

Server::Server(std::unique_ptr<ServerLoop> loop) : loop_(std::move(loop)) {}
Server::~Server() = default;

Status Server::start(const std::string& pool_path, const ServerOptions& options,
                     std::unique_ptr<Server>* out) {
  std::unique_ptr<ServerLoop> loop;
  if (Status s = ServerLoop::start(pool_path, options, &loop); !s.ok()) return s;
  out->reset(new Server(std::move(loop)));
  return Status::OK();
}

Status Server::start(const std::string& pool_path, const std::string& listen,
                     std::unique_ptr<Server>* out) {
  ServerOptions o;
  o.listen = listen;
  return start(pool_path, o, out);
}

std::uint16_t Server::port() const { return loop_->port(); }
const std::string& Server::pool_path() const { return loop_->pool_path(); }
Status Server::run() { return loop_->run(); }
void Server::stop() { loop_->stop(); }

}  // namespace pmhash::remote
