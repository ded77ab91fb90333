#include "remote/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "remote/memnode.h"
#include "remote/net.h"
#include "remote/transport.h"
#include "remote/wire.h"

namespace pmhash::remote {

struct Server::Connection {
  int fd = -1;
  std::vector<char> in;   // bytes received, not yet a whole request
  std::vector<char> out;  // responses not yet sent
  std::size_t out_sent = 0;
  bool want_write = false;
  std::vector<Op> ops;    // scratch
};

Status Server::start(const std::string& pool_path, const std::string& listen,
                     std::unique_ptr<Server>* out) {
  std::string host;
  std::uint16_t port = 0;
  if (Status s = net::split_address(listen, &host, &port); !s.ok()) return s;
  std::uint32_t addr = 0;
  if (Status s = net::resolve(host, &addr); !s.ok()) return s;
  auto srv = std::unique_ptr<Server>(new Server());
  srv->pool_path_ = pool_path;
  if (Status s = open_memnode(pool_path, /*shared=*/false, &srv->pool_); !s.ok()) return s;
  const std::string who = "pmhash-memnode " + listen;
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

Server::~Server() {
  for (auto& [fd, c] : connections_) ::close(fd);
  for (int fd : {listen_fd_, stop_fd_, epoll_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void Server::stop() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof(one));
}

Status Server::run() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("pmhash-memnode: epoll_wait: " + net::errno_text(errno));
    }
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
      bool keep = (events[i].events & (EPOLLERR | EPOLLHUP)) == 0 || (events[i].events & EPOLLIN);
      if (keep && (events[i].events & EPOLLIN)) keep = serve(c);
      if (keep && (events[i].events & EPOLLOUT)) keep = flush_out(c);
      if (!keep) close_connection(fd);
    }
  }
}

void Server::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection that went away meanwhile
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    const wire::FrameHeader hello{wire::kHelloMagic, 0, pool_->region().size(),
                                  kMemNodeLayoutVersion, 0};
    c->out.assign(reinterpret_cast<const char*>(&hello),
                  reinterpret_cast<const char*>(&hello) + sizeof(hello));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    Connection& ref = *c;
    connections_[fd] = std::move(c);
    if (!flush_out(ref)) close_connection(fd);
  }
}

bool Server::serve(Connection& c) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(c.fd, buf, sizeof(buf));
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      continue;
    }
    if (n == 0) return false;  // the client closed
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  std::size_t at = 0;
  media::Region& region = pool_->region();
  while (c.in.size() - at >= sizeof(wire::FrameHeader)) {
    wire::FrameHeader h;
    std::memcpy(&h, c.in.data() + at, sizeof(h));
    if (h.magic != wire::kRequestMagic || h.body > wire::kMaxBody) return false;
    if (c.in.size() - at - sizeof(h) < h.body) break;  // the rest is still coming
    const std::span<const char> body(c.in.data() + at + sizeof(h), h.body);
    if (!wire::decode_request(body, h.count, &c.ops)) return false;
    at += sizeof(h) + h.body;
    const Status s = validate("memory node " + pool_path_, region.size(), c.ops,
                              /*check_buffers=*/false);
    wire::FrameHeader r{wire::kResponseMagic, 0, h.tag, wire::status_code(s), 0};
    const std::size_t start = c.out.size();
    if (!s.ok()) {
      r.body = static_cast<std::uint32_t>(s.message().size());
      c.out.resize(start + sizeof(r) + r.body);
      std::memcpy(c.out.data() + start, &r, sizeof(r));
      std::memcpy(c.out.data() + start + sizeof(r), s.message().data(), r.body);
      continue;
    }
    r.body = static_cast<std::uint32_t>(wire::response_body(c.ops));
    c.out.resize(start + sizeof(r) + r.body);
    std::memcpy(c.out.data() + start, &r, sizeof(r));
    // READs land straight in the response; CAS/FAA results are copied
    // after the batch ran.
    std::size_t pos = start + sizeof(r);
    for (Op& op : c.ops) {
      if (op.verb == Verb::kRead) {
        op.local = c.out.data() + pos;
        pos += op.len;
      } else if (op.verb != Verb::kWrite) {
        pos += 8;
      }
    }
    execute(region, c.ops);
    pos = start + sizeof(r);
    for (const Op& op : c.ops) {
      if (op.verb == Verb::kRead) {
        pos += op.len;
      } else if (op.verb != Verb::kWrite) {
        std::memcpy(c.out.data() + pos, &op.result, 8);
        pos += 8;
      }
    }
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(at));
  return flush_out(c);
}

bool Server::flush_out(Connection& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  }
  const bool want = !c.out.empty();
  if (want != c.want_write) {
    epoll_event ev{};
    ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
    ev.data.fd = c.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_write = want;
  }
  return true;
}

void Server::close_connection(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(fd);
}

}  // namespace pmhash::remote
