// remote/tcp_transport.cc - the tcp transport: a connection to a
// pmhash-memnode daemon (remote/server.h), frames of remote/wire.h.
//
// post() encodes the batch and sends it whole (waiting for the socket at
// most until the timeout); poll() reads what has arrived, matches responses
// to the batches in flight in post order, and copies READ bytes and
// CAS/FAA results into the batch's ops. The first batch in flight that is
// overdue by the timeout fails with IOError together with every batch
// behind it, and the connection is dropped (a late response could not be
// told apart from one to a later batch). So is a connection the daemon
// closes, or one that delivers a malformed frame. The next post() then
// connects again: a daemon restarted from its pool file is reachable with
// all its completed writes, without the client doing anything.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "remote/memnode.h"
#include "remote/net.h"
#include "remote/transport.h"
#include "remote/wire.h"

namespace pmhash::remote {

namespace {

using Clock = std::chrono::steady_clock;

class TcpTransport final : public Transport {
 public:
  TcpTransport(std::string name, std::uint32_t addr, std::uint16_t port, const ConnectOptions& o)
      : name_(std::move(name)), addr_(addr), port_(port), timeout_(o.timeout) {}
  ~TcpTransport() override { drop(); }

  // Connects and reads the hello; IOError naming the node on failure.
  Status open() {
    const auto deadline = Clock::now() + timeout_;
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) return fail("socket: " + net::errno_text(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port_);
    sa.sin_addr.s_addr = addr_;
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 && errno != EINPROGRESS) {
      return fail("cannot connect: " + net::errno_text(errno));
    }
    if (!wait_for(POLLOUT, deadline)) return fail("no connection within the timeout");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail("cannot connect: " + net::errno_text(err));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    wire::FrameHeader hello{};
    std::size_t got = 0;
    while (got < sizeof(hello)) {
      const ssize_t n = ::recv(fd_, reinterpret_cast<char*>(&hello) + got, sizeof(hello) - got, 0);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
        continue;
      }
      if (n == 0) return fail("the daemon closed the connection before its hello");
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail("cannot read the hello: " + net::errno_text(errno));
      }
      if (!wait_for(POLLIN, deadline)) return fail("no hello within the timeout");
    }
    if (hello.magic != wire::kHelloMagic || hello.count != kMemNodeLayoutVersion) {
      return fail("not a pmhash-memnode of this version (bad hello)");
    }
    size_ = hello.tag;
    return Status::OK();
  }

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return size_; }

  Status post(std::uint64_t tag, std::span<Op> ops) override {
    if (fd_ < 0) {
      if (Status s = open(); !s.ok()) return s;
    }
    if (Status s = validate(name_, size_, ops); !s.ok()) return s;
    send_buf_.clear();
    if (Status s = wire::encode_request(tag, ops, &send_buf_); !s.ok()) return s;
    const auto deadline = Clock::now() + timeout_;
    std::size_t sent = 0;
    while (sent < send_buf_.size()) {
      const ssize_t n = ::send(fd_, send_buf_.data() + sent, send_buf_.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // The daemon is not reading; its responses may be what fills the
        // pipe, so take them in while we wait.
        read_available();
        if (fd_ >= 0 && wait_for(POLLOUT, deadline)) continue;
        if (fd_ >= 0) lose("did not take a request within " + ms(timeout_));
        break;
      }
      lose("connection lost: " + net::errno_text(errno));
      break;
    }
    // Even a failed send is reported through poll(), like every other loss.
    if (fd_ < 0) {
      failed_.push_back({tag, Status::IOError("memory node " + name_ + ": " + last_loss_)});
    } else {
      pending_.push_back({tag, ops, Clock::now() + timeout_});
    }
    return Status::OK();
  }

  void poll(std::vector<Completion>* done, std::chrono::nanoseconds wait) override {
    if (!failed_.empty()) {
      for (Completion& c : failed_) done->push_back(std::move(c));
      failed_.clear();
      return;
    }
    if (pending_.empty()) return;
    const std::size_t before = done->size();
    read_available();
    take_responses(done);
    if (done->size() == before && failed_.empty() && fd_ >= 0) {
      const auto until = std::min(Clock::now() + wait, pending_.front().deadline);
      if (wait_for(POLLIN, until)) {
        read_available();
        take_responses(done);
      }
    }
    if (!pending_.empty() && Clock::now() >= pending_.front().deadline) {
      lose("did not answer within " + ms(timeout_));
    }
    for (Completion& c : failed_) done->push_back(std::move(c));
    failed_.clear();
  }

  std::size_t in_flight() const override { return pending_.size() + failed_.size(); }

 private:
  struct Pending {
    std::uint64_t tag;
    std::span<Op> ops;
    Clock::time_point deadline;
  };

  static std::string ms(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

  Status fail(const std::string& why) {
    drop();
    return Status::IOError("memory node " + name_ + ": " + why);
  }

  void drop() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    in_.clear();
  }

  // The connection is gone: every batch in flight fails with `why`.
  void lose(const std::string& why) {
    drop();
    last_loss_ = why;
    for (const Pending& p : pending_) {
      failed_.push_back({p.tag, Status::IOError("memory node " + name_ + ": " + why)});
    }
    pending_.clear();
  }

  bool wait_for(short events, Clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd_, events, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
      if (rc > 0) return true;
      if (rc == 0) return false;
      if (errno != EINTR) return false;
    }
  }

  void read_available() {
    char buf[65536];
    while (fd_ >= 0) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        in_.insert(in_.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      lose(n == 0 ? "the daemon closed the connection" : "connection lost: " + net::errno_text(errno));
      return;
    }
  }

  void take_responses(std::vector<Completion>* done) {
    std::size_t at = 0;
    while (in_.size() - at >= sizeof(wire::FrameHeader)) {
      wire::FrameHeader h;
      std::memcpy(&h, in_.data() + at, sizeof(h));
      if (h.magic != wire::kResponseMagic || pending_.empty() || h.tag != pending_.front().tag) {
        lose("a response that matches no request (protocol error)");
        return;
      }
      if (in_.size() - at - sizeof(h) < h.body) break;
      const char* body = in_.data() + at + sizeof(h);
      Pending p = pending_.front();
      pending_.pop_front();
      if (h.count != 0) {
        done->push_back({p.tag, wire::status_from(h.count, std::string(body, h.body))});
      } else if (h.body != wire::response_body(p.ops)) {
        lose("a response of the wrong length (protocol error)");
        return;
      } else {
        std::size_t pos = 0;
        for (Op& op : p.ops) {
          if (op.verb == Verb::kRead) {
            std::memcpy(op.local, body + pos, op.len);
            pos += op.len;
          } else if (op.verb != Verb::kWrite) {
            std::memcpy(&op.result, body + pos, 8);
            pos += 8;
          }
        }
        done->push_back({p.tag, Status::OK()});
      }
      at += sizeof(h) + h.body;
    }
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(at));
  }

  std::string name_;
  std::uint32_t addr_;
  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::uint64_t size_ = 0;
  int fd_ = -1;
  std::vector<char> in_;
  std::vector<char> send_buf_;
  std::deque<Pending> pending_;
  std::vector<Completion> failed_;
  std::string last_loss_;
};

}  // namespace

Status connect_tcp(const std::string& spec, const std::string& address,
                   const ConnectOptions& options, std::unique_ptr<Transport>* out) {
  std::string host;
  std::uint16_t port = 0;
  if (Status s = net::split_address(address, &host, &port); !s.ok()) return s;
  std::uint32_t addr = 0;
  if (Status s = net::resolve(host, &addr); !s.ok()) return s;
  auto t = std::make_unique<TcpTransport>(spec, addr, port, options);
  if (Status s = t->open(); !s.ok()) return s;
  *out = std::move(t);
  return Status::OK();
}

}  // namespace pmhash::remote
