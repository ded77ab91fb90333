// remote/tcp_transport.cc - the tcp transport: a connection to a
// pmhash-memnode daemon (remote/server.h), frames of remote/wire.h.
//
// open() connects and runs the connection bootstrap (remote/handshake.h:
// the hello, and the proofs when a secret file is given or named by
// PMHASH_MEMNODE_SECRET_FILE). post() encodes the batch and sends it whole
// (waiting for the socket at most until the timeout); poll() reads what
// has arrived and hands it to wire::take_responses(), which matches
// responses to the batches in flight in post order and copies READ bytes
// and CAS/FAA results into their ops. Responses are parsed as they
// arrive, so the client buffers at most one response and one read.
//
// The first batch in flight that is overdue by the timeout fails with
// IOError together with every batch behind it, and the connection is
// dropped (a late response could not be told apart from one to a later
// batch). So is a connection the daemon closes, or one that delivers a
// malformed frame. The next post() then connects again: a daemon
// restarted from its pool file is reachable with all its completed
// writes, without the client doing anything.
//
// Idle connections. The daemon closes a connection idle past its
// --idle-timeout. Before it sends on a connection with nothing in flight,
// post() checks whether the daemon has closed it (readable, or hung up:
// with nothing in flight, nothing legitimate can be waiting) and then
// connects anew, so a client that kept an idle connection does not fail
// its next call. A request is never sent twice: a batch that may have
// reached the daemon fails with IOError instead (verbs are not
// idempotent). One race remains: a close that lands between the check and
// the send fails that batch with IOError.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "remote/handshake.h"
#include "remote/memnode.h"
#include "remote/net.h"
#include "remote/transport.h"
#include "remote/wire.h"

namespace pmhash::remote {

namespace {

using Clock = std::chrono::steady_clock;

class TcpTransport final : public Transport {
 public:
  TcpTransport(std::string name, std::uint32_t addr, std::uint16_t port, const ConnectOptions& o,
               handshake::Secret secret)
      : name_(std::move(name)), addr_(addr), port_(port), timeout_(o.timeout),
        secret_(std::move(secret)) {}
  ~TcpTransport() override { drop(); }

  // Connects and runs the bootstrap; IOError naming the node on failure,
  // or the node's refusal.
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
    // The bootstrap: the node's hello, the client's, the node's verdict.
    handshake::ClientSide boot(secret_.empty() ? nullptr : &secret_, name_);
    std::vector<char> got;
    std::vector<char> hello;
    Status error;
    std::size_t used = 0;
    while ((used = boot.on_node_hello(got, &hello, &error)) == 0) {
      if (Status s = receive_some(&got, deadline, "its hello"); !s.ok()) return s;
    }
    if (!error.ok()) {
      drop();
      return error;
    }
    got.erase(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(used));
    if (Status s = send_all(hello, deadline); !s.ok()) return s;
    while ((used = boot.on_verdict(got, &error)) == 0) {
      if (Status s = receive_some(&got, deadline, "its verdict"); !s.ok()) return s;
    }
    if (!error.ok()) {
      drop();
      return error;
    }
    if (boot.layout_version() != kMemNodeLayoutVersion) {
      return fail("memory-node layout version " + std::to_string(boot.layout_version()) +
                  ", this client reads " + std::to_string(kMemNodeLayoutVersion));
    }
    // The node says nothing more before the first request.
    if (got.size() != used) return fail("bytes after the verdict (protocol error)");
    size_ = boot.region_size();
    return Status::OK();
  }

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return size_; }

  Status post(std::uint64_t tag, std::span<Op> ops) override {
    if (fd_ >= 0 && pending_.empty() && peer_gone()) drop();
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
    if (ready_.empty() && failed_.empty() && !pending_.empty()) {
      read_available();
      if (ready_.empty() && failed_.empty() && fd_ >= 0) {
        const auto until = std::min(Clock::now() + wait, pending_.front().deadline);
        if (wait_for(POLLIN, until)) read_available();
      }
    }
    if (!pending_.empty() && Clock::now() >= pending_.front().deadline) {
      lose("did not answer within " + ms(timeout_));
    }
    // Batches answered precede those that failed with the connection.
    for (Completion& c : ready_) done->push_back(std::move(c));
    ready_.clear();
    for (Completion& c : failed_) done->push_back(std::move(c));
    failed_.clear();
  }

  std::size_t in_flight() const override { return pending_.size() + ready_.size() + failed_.size(); }

 private:
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
    for (const wire::PendingBatch& p : pending_) {
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

  // Reads what has arrived, parsing responses as they come, so that at
  // most one response and one read are buffered.
  void read_available() {
    char buf[65536];
    while (fd_ >= 0) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        in_.insert(in_.end(), buf, buf + n);
        std::string error;
        const std::size_t used = wire::take_responses(in_, &pending_, &ready_, &error);
        in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(used));
        if (!error.empty()) {
          lose(error);
          return;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      lose(n == 0 ? "the daemon closed the connection" : "connection lost: " + net::errno_text(errno));
      return;
    }
  }

  // Whether the daemon has closed this connection (or it broke): with
  // nothing in flight, anything readable is an end of file, an error, or
  // bytes out of step; none leaves the connection usable.
  bool peer_gone() {
    pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
    return ::poll(&p, 1, 0) != 0;  // ready, or poll failed: do not trust it
  }

  // Appends what arrives to `got` (bootstrap messages: about a hundred
  // bytes, at most a refusal's 1 KiB; more is a protocol error).
  Status receive_some(std::vector<char>* got, Clock::time_point deadline, const char* what) {
    char buf[2048];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        got->insert(got->end(), buf, buf + n);
        if (got->size() > 4096) return fail(std::string("an overlong ") + what + " (protocol error)");
        return Status::OK();
      }
      if (n == 0) return fail(std::string("the daemon closed the connection before ") + what);
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail(std::string("cannot read ") + what + ": " + net::errno_text(errno));
      }
      if (!wait_for(POLLIN, deadline)) return fail(std::string("no ") + what + " within the timeout");
    }
  }

  Status send_all(const std::vector<char>& bytes, Clock::time_point deadline) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLOUT, deadline)) continue;
      return fail("cannot send the hello: " + (n < 0 ? net::errno_text(errno) : std::string("closed")));
    }
    return Status::OK();
  }

  std::string name_;
  std::uint32_t addr_;
  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
  handshake::Secret secret_;
  std::uint64_t size_ = 0;
  int fd_ = -1;
  std::vector<char> in_;
  std::vector<char> send_buf_;
  std::deque<wire::PendingBatch> pending_;
  std::vector<Completion> ready_;   // answered, not yet reported
  std::vector<Completion> failed_;  // lost with the connection, not yet reported
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
  // The secret: the option's file, else the environment's, else none.
  std::string secret_file = options.secret_file;
  const bool from_env = secret_file.empty();
  if (from_env) {
    if (const char* env = std::getenv(handshake::kSecretFileEnv); env != nullptr) secret_file = env;
  }
  handshake::Secret secret;
  if (!secret_file.empty()) {
    if (Status s = handshake::Secret::load(secret_file, &secret); !s.ok()) {
      if (!from_env) return s;
      const std::string msg = s.message() + " (named by " + handshake::kSecretFileEnv + ")";
      return s.is_io_error() ? Status::IOError(msg) : Status::InvalidArgument(msg);
    }
  }
  auto t = std::make_unique<TcpTransport>(spec, addr, port, options, std::move(secret));
  if (Status s = t->open(); !s.ok()) return s;
  *out = std::move(t);
  return Status::OK();
}

}  // namespace pmhash::remote
