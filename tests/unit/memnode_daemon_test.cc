// Unit tests of the memory-node daemon's defences (src/remote/server.cc,
// node_session.cc, handshake.cc, tools/memnode): the requests whose READ
// lengths overflowed 32 bits, pipelined huge READs never read, half-sent
// huge bodies, the connection cap, the idle timeout, running out of file
// descriptors, authentication with a shared secret, and pmhash-memnode's
// command line. Each runs against the real daemon loop, in a forked child
// (tests/memnode_daemon.h) or as the pmhash-memnode program (where its
// memory is measured), over loopback.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "memnode_daemon.h"
#include "remote/client.h"
#include "remote/handshake.h"
#include "remote/memnode.h"
#include "remote/server.h"
#include "remote/wire.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash {
namespace {

namespace hs = remote::handshake;
namespace wire = remote::wire;
using remote::Batch;
using remote::Client;
using testing::Daemon;
using testing::MemnodeProcess;

constexpr std::uint64_t kMiB = 1u << 20;

// ThreadSanitizer keeps shadow memory for what the program touches, several
// times its size (its documentation: 5-10x), in the daemon's anonymous
// memory too; the memory tests allow for it under TSan. (AddressSanitizer's
// shadow, an eighth, fits in the bound's base allowance.)
#if defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kShadowFactor = 10;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr std::uint64_t kShadowFactor = 10;
#else
constexpr std::uint64_t kShadowFactor = 1;
#endif
#else
constexpr std::uint64_t kShadowFactor = 1;
#endif

// A hash of a whole file, to show a pool is byte-for-byte unchanged.
std::uint64_t file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(4 * kMiB);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_64bits_update(st, buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  const std::uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// A connection the test drives byte by byte: the bootstrap through
// handshake::ClientSide, then frames built by hand.
class Raw {
 public:
  explicit Raw(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Raw() { close(); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Runs the bootstrap; OK once admitted.
  Status bootstrap(const hs::Secret* secret = nullptr, int timeout_ms = 10000) {
    if (!connected_) return Status::IOError("not connected");
    hs::ClientSide boot(secret, "raw");
    std::vector<char> got, hello;
    Status error;
    std::size_t used = 0;
    while ((used = boot.on_node_hello(got, &hello, &error)) == 0) {
      if (!receive_some(&got, timeout_ms)) return Status::IOError("no hello");
    }
    if (!error.ok()) return error;
    got.erase(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(used));
    if (!send_all(hello)) return Status::IOError("cannot send the hello");
    while ((used = boot.on_verdict(got, &error)) == 0) {
      if (!receive_some(&got, timeout_ms)) return Status::IOError("no verdict");
    }
    return error;
  }

  bool send_all(const std::vector<char>& bytes) {
    std::size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads exactly n bytes, waiting at most timeout_ms for each piece.
  bool read_exact(void* dst, std::size_t n, int timeout_ms = 20000) {
    auto* p = static_cast<char*>(dst);
    std::size_t at = 0;
    while (at < n) {
      pollfd pf{fd_, POLLIN, 0};
      if (::poll(&pf, 1, timeout_ms) != 1) return false;
      const ssize_t got = ::recv(fd_, p + at, n - at, 0);
      if (got <= 0) return false;
      at += static_cast<std::size_t>(got);
    }
    return true;
  }

  // One response: its header, and its body (when no longer than max_body).
  bool read_response(wire::FrameHeader* h, std::string* body, std::size_t max_body = 1u << 20) {
    if (!read_exact(h, sizeof(*h))) return false;
    if (h->body > max_body) return false;
    body->resize(h->body);
    return read_exact(body->data(), h->body);
  }

  // Waits up to timeout_ms for the daemon to close the connection (EOF or
  // reset; any data first is discarded).
  bool wait_closed(int timeout_ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[65536];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pf{fd_, POLLIN | POLLRDHUP, 0};
      if (::poll(&pf, 1, static_cast<int>(left.count())) != 1) return false;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
    }
  }

 private:
  bool receive_some(std::vector<char>* got, int timeout_ms) {
    pollfd pf{fd_, POLLIN, 0};
    if (::poll(&pf, 1, timeout_ms) != 1) return false;
    char buf[2048];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    got->insert(got->end(), buf, buf + n);
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
};

void append_header(std::vector<char>* out, std::uint64_t tag, std::uint32_t body, std::uint32_t count) {
  const wire::FrameHeader h{wire::kRequestMagic, body, tag, count, 0};
  const auto* p = reinterpret_cast<const char*>(&h);
  out->insert(out->end(), p, p + sizeof(h));
}

void append_op(std::vector<char>* out, remote::Verb verb, std::uint32_t len, std::uint64_t off) {
  const wire::WireOp w{static_cast<std::uint8_t>(verb), {}, len, off, 0, 0};
  const auto* p = reinterpret_cast<const char*>(&w);
  out->insert(out->end(), p, p + sizeof(w));
}

// A request of `n` READs of `len` bytes at `off`, built by hand (the
// client library refuses such a batch before it is sent).
std::vector<char> reads(std::uint64_t tag, unsigned n, std::uint32_t len, std::uint64_t off) {
  std::vector<char> out;
  append_header(&out, tag, static_cast<std::uint32_t>(n * sizeof(wire::WireOp)), n);
  for (unsigned i = 0; i < n; ++i) append_op(&out, remote::Verb::kRead, len, off);
  return out;
}

class MemnodeDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv(hs::kSecretFileEnv); }

  std::string make_node(std::uint64_t size, const std::string& name = "mn") {
    const std::string path = dir_.str() + "/" + name;
    const Status s = remote::create_memnode(path, size, false);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return path;
  }

  std::string make_secret(const std::string& name, std::size_t bytes = 32, mode_t mode = 0600) {
    const std::string path = dir_.str() + "/" + name;
    std::string data(bytes, '\0');
    std::random_device rd;
    for (char& c : data) c = static_cast<char>(rd());
    std::ofstream(path, std::ios::binary) << data;
    ::chmod(path.c_str(), mode);
    return path;
  }

  static std::unique_ptr<Client> client(const std::string& spec, const std::string& secret = "",
                                        Status* status = nullptr,
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    remote::ConnectOptions o;
    o.timeout = timeout;
    o.secret_file = secret;
    std::unique_ptr<Client> c;
    const Status s = Client::connect({spec}, o, &c);
    if (status != nullptr) *status = s;
    return s.ok() ? std::move(c) : nullptr;
  }

  // A round trip that reads the node's root and a word of its heap.
  static Status served(Client& c) {
    char root[64];
    std::uint64_t word = 1;
    Batch b;
    b.read(0, remote::kFirstUsable, root, sizeof(root)).read(0, remote::kFirstAllocatable, &word, 8);
    const Status s = c.exec_sync(b);
    if (s.ok() && std::memcmp(root, remote::kMemNodeMagic, 8) != 0) {
      return Status::Corruption("the root read back without its magic");
    }
    return s;
  }

  testing::ScratchDir dir_{"pmhash-memnode-daemon"};
};

// The two requests whose READ lengths sum past 2^32: the daemon kept the sum
// in 32 bits, sized the response by the truncated value, and wrote the
// READs past it into the node's mapping.
struct OverflowCase {
  std::uint64_t node_size;
  unsigned reads;
  std::size_t request_bytes;
};

class OverflowTest : public MemnodeDaemonTest, public ::testing::WithParamInterface<OverflowCase> {};

TEST_P(OverflowTest, AReadSumPast32BitsIsRefusedAndTheNodeAndPoolSurvive) {
  const OverflowCase oc = GetParam();
  const std::string pool = make_node(oc.node_size);
  Daemon d(pool, 0);
  ASSERT_NE(d.port(), 0);
  auto c = client(d.spec());
  ASSERT_TRUE(c);
  ASSERT_TRUE(served(*c).ok());
  const std::uint64_t before = file_hash(pool);

  Raw attacker(d.port());
  ASSERT_TRUE(attacker.bootstrap().ok());
  const std::uint32_t len = static_cast<std::uint32_t>(oc.node_size - remote::kFirstAllocatable);
  const std::vector<char> req = reads(7, oc.reads, len, remote::kFirstAllocatable);
  ASSERT_EQ(req.size(), oc.request_bytes);
  ASSERT_GT(std::uint64_t{oc.reads} * len, std::uint64_t{1} << 32);  // the sum wraps 32 bits
  ASSERT_TRUE(attacker.send_all(req));
  // Meanwhile, a real client is served.
  EXPECT_TRUE(served(*c).ok());
  wire::FrameHeader h{};
  std::string text;
  ASSERT_TRUE(attacker.read_response(&h, &text));
  EXPECT_EQ(h.magic, wire::kResponseMagic);
  EXPECT_EQ(h.tag, 7u);
  EXPECT_EQ(h.count, wire::status_code(Status::InvalidArgument("")));
  EXPECT_NE(text.find(std::to_string(wire::kMaxBody)), std::string::npos) << text;
  // The connection stays usable: a small READ on it is answered.
  ASSERT_TRUE(attacker.send_all(reads(8, 1, 8, remote::kFirstAllocatable)));
  ASSERT_TRUE(attacker.read_response(&h, &text));
  EXPECT_EQ(h.tag, 8u);
  EXPECT_EQ(h.count, 0u);
  EXPECT_EQ(text.size(), 8u);

  EXPECT_TRUE(d.alive());
  EXPECT_TRUE(served(*c).ok());
  EXPECT_EQ(file_hash(pool), before);
}

INSTANTIATE_TEST_SUITE_P(
    OverflowingRequests, OverflowTest,
    ::testing::Values(OverflowCase{64 * kMiB, 65, 2080 + sizeof(wire::FrameHeader)},
                      OverflowCase{1024 * kMiB, 5, 160 + sizeof(wire::FrameHeader)}),
    [](const ::testing::TestParamInfo<OverflowCase>& i) {
      return std::to_string(i.param.reads) + "ReadsOn" + std::to_string(i.param.node_size >> 20) + "MiB";
    });

TEST_F(MemnodeDaemonTest, TheClientRefusesABatchWhoseResponseExceedsTheFrameBound) {
  const std::string pool = make_node(64 * kMiB);
  Daemon d(pool, 0);
  auto c = client(d.spec());
  ASSERT_TRUE(c);
  std::vector<char> buf(40 * kMiB);
  Batch b;
  b.read(0, remote::kFirstAllocatable, buf.data(), 40 * kMiB)
      .read(0, remote::kFirstAllocatable, buf.data(), 40 * kMiB);
  const Status s = c->exec_sync(b);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.to_string().find("split the batch"), std::string::npos) << s.to_string();
  EXPECT_TRUE(served(*c).ok());
}

// The options the memory tests start pmhash-memnode with, as flags and as
// ServerOptions (for memory_bound()).
struct Limits {
  unsigned max_connections = 64;
  std::uint64_t budget_mib = 128;
  double frame_timeout_s = 1.0;

  std::vector<std::string> flags() const {
    return {"--max-connections", std::to_string(max_connections), "--buffer-memory",
            std::to_string(budget_mib) + "M", "--frame-timeout", std::to_string(frame_timeout_s)};
  }
  // The documented bound (remote::memory_bound), times kShadowFactor.
  std::uint64_t bound() const {
    remote::ServerOptions o;
    o.max_connections = max_connections;
    o.buffer_budget = budget_mib * kMiB;
    return remote::memory_bound(o) * kShadowFactor;
  }
};

TEST_F(MemnodeDaemonTest, PipelinedHugeReadsNeverReadKeepTheDaemonUnderItsMemoryBound) {
  const std::string pool = make_node(64 * kMiB);
  // A budget of one largest frame: the attacker's first response takes it
  // all, so the real client's large READ below is served only once the
  // daemon has closed the attacker for making no progress.
  // The frame timeout that closes the attacker also closes a real client
  // stalled that long: 3 s, so that a sanitizer build on a loaded machine
  // moving 63 MiB never stalls as long.
  Limits lim;
  lim.budget_mib = 65;
  lim.frame_timeout_s = 3.0;
  MemnodeProcess m(PMHASH_MEMNODE_PATH, pool, lim.flags());
  ASSERT_NE(m.port(), 0);
  auto c = client(m.spec());
  ASSERT_TRUE(c);
  ASSERT_TRUE(served(*c).ok());
  const std::uint64_t before = file_hash(pool);
  const std::uint64_t rss_before = m.rss_anon();

  // 24 pipelined READs of 63 MiB (1,344 bytes), whose responses are never read.
  Raw attacker(m.port());
  ASSERT_TRUE(attacker.bootstrap().ok());
  std::vector<char> pipeline;
  for (unsigned i = 0; i < 24; ++i) {
    const std::vector<char> one = reads(100 + i, 1, 63 * kMiB, remote::kFirstAllocatable);
    pipeline.insert(pipeline.end(), one.begin(), one.end());
  }
  ASSERT_EQ(pipeline.size(), 1344u);
  ASSERT_TRUE(attacker.send_all(pipeline));
  std::uint64_t rss_max = 0;
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(served(*c).ok());  // served throughout
    rss_max = std::max(rss_max, m.rss_anon());
  }
  // A real client's own 63 MiB READ waits for the budget the attacker
  // holds, and is served once the daemon has closed the attacker.
  std::vector<char> big(63 * kMiB);
  Batch b;
  b.read(0, remote::kFirstAllocatable, big.data(), static_cast<std::uint32_t>(big.size()));
  const Status s = c->exec_sync(b);
  EXPECT_TRUE(s.ok()) << s.to_string();
  rss_max = std::max(rss_max, m.rss_anon());
  EXPECT_TRUE(served(*c).ok());
  EXPECT_TRUE(m.alive());
  EXPECT_LT(rss_max, lim.bound());
  EXPECT_EQ(file_hash(pool), before);
  std::cout << "RssAnon: " << (rss_before >> 10) << " KiB before, at most " << (rss_max >> 10)
            << " KiB under 24 pipelined 63 MiB READs (bound " << (lim.bound() >> 10) << " KiB)\n";
}

TEST_F(MemnodeDaemonTest, SixteenHalfSentHugeBodiesKeepTheDaemonUnderItsMemoryBound) {
  const std::string pool = make_node(128 * kMiB);
  // The budget takes two such frames at a time; the others wait, unread,
  // until the daemon closes the two for not completing them.
  Limits lim;
  lim.frame_timeout_s = 0.5;
  MemnodeProcess m(PMHASH_MEMNODE_PATH, pool, lim.flags());
  ASSERT_NE(m.port(), 0);
  auto c = client(m.spec());
  ASSERT_TRUE(c);
  ASSERT_TRUE(served(*c).ok());
  const std::uint64_t before = file_hash(pool);
  const std::uint64_t rss_before = m.rss_anon();

  // 16 connections each announce a WRITE with a 64 MiB body and send all
  // of it but the last byte, as far as the daemon takes it.
  constexpr unsigned kConns = 16;
  const std::uint32_t len = wire::kMaxBody - sizeof(wire::WireOp);
  std::vector<std::unique_ptr<Raw>> conns;
  std::vector<std::size_t> sent(kConns, 0);
  std::vector<bool> closed(kConns, false);  // by the daemon, as far as the test saw
  std::vector<char> frame;
  append_header(&frame, 1, wire::kMaxBody, 1);
  append_op(&frame, remote::Verb::kWrite, len, remote::kFirstAllocatable);
  const std::size_t total = frame.size() + len - 1;
  frame.resize(total, 'x');
  for (unsigned i = 0; i < kConns; ++i) {
    conns.push_back(std::make_unique<Raw>(m.port()));
    ASSERT_TRUE(conns.back()->bootstrap().ok());
    ::fcntl(conns.back()->fd(), F_SETFL, O_NONBLOCK);
  }
  std::uint64_t rss_max = 0;
  for (;;) {
    std::vector<pollfd> wait;
    for (unsigned i = 0; i < kConns; ++i) {
      while (sent[i] < total && !closed[i]) {
        const ssize_t n = ::send(conns[i]->fd(), frame.data() + sent[i], total - sent[i], MSG_NOSIGNAL);
        if (n > 0) {
          sent[i] += static_cast<std::size_t>(n);
        } else {
          closed[i] = errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
          if (errno != EINTR) break;
        }
      }
      if (sent[i] < total && !closed[i]) wait.push_back({conns[i]->fd(), POLLOUT, 0});
    }
    EXPECT_TRUE(served(*c).ok());  // served throughout
    rss_max = std::max(rss_max, m.rss_anon());
    // Until no connection's socket takes more: the daemon reads none of
    // them any more (a connection it reads would free its socket buffer
    // well within the second).
    if (wait.empty() || ::poll(wait.data(), wait.size(), 1000) == 0) break;
  }
  rss_max = std::max(rss_max, m.rss_anon());
  EXPECT_LT(rss_max, lim.bound());
  // No frame completes: each connection is closed after the frame timeout.
  for (auto& r : conns) EXPECT_TRUE(r->wait_closed(30000));
  EXPECT_TRUE(served(*c).ok());
  const std::uint64_t rss_after = m.rss_anon();
  EXPECT_LT(rss_after, rss_before + 16 * kMiB);  // the frame buffers went back
  EXPECT_TRUE(m.alive());
  EXPECT_EQ(file_hash(pool), before);
  std::cout << "RssAnon: " << (rss_before >> 10) << " KiB before, at most " << (rss_max >> 10)
            << " KiB under 16 half-sent 64 MiB bodies, " << (rss_after >> 10)
            << " KiB after they were closed (bound " << (lim.bound() >> 10) << " KiB)\n";
}

TEST_F(MemnodeDaemonTest, ConnectionsBeyondTheCapAreRefusedWithAReason) {
  const std::string pool = make_node(8 * kMiB);
  remote::ServerOptions o;
  o.max_connections = 3;
  Daemon d(pool, o);
  ASSERT_NE(d.port(), 0);
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<Raw>(d.port()));
    ASSERT_TRUE(held.back()->bootstrap().ok());
  }
  Status s;
  EXPECT_FALSE(client(d.spec(), "", &s));
  EXPECT_TRUE(s.is_busy()) << s.to_string();
  EXPECT_NE(s.to_string().find("--max-connections"), std::string::npos) << s.to_string();
  // One closes: a new client is admitted once the daemon has seen it go
  // (each attempt is a whole connection set-up, so a few suffice).
  held.pop_back();
  std::unique_ptr<Client> c;
  for (int attempt = 0; attempt < 100 && !c; ++attempt) c = client(d.spec(), "", &s);
  ASSERT_TRUE(c) << s.to_string();
  EXPECT_TRUE(served(*c).ok());
}

TEST_F(MemnodeDaemonTest, AClientIdlePastTheIdleTimeoutIsServedOnItsNextCall) {
  const std::string pool = make_node(8 * kMiB);
  remote::ServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(200);
  Daemon d(pool, o);
  ASSERT_NE(d.port(), 0);
  auto c = client(d.spec());
  ASSERT_TRUE(c);
  ASSERT_TRUE(served(*c).ok());
  // A connection made after the client's last call goes idle later than
  // the client's: once the daemon closes it, it has closed the client's
  // too, at the latest in the same sweep, which has ended once the daemon
  // sends the next connection its hello.
  Raw later(d.port());
  ASSERT_TRUE(later.bootstrap().ok());
  ASSERT_TRUE(later.wait_closed(30000));
  Raw after(d.port());
  ASSERT_TRUE(after.bootstrap().ok());
  const Status s = served(*c);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(served(*c).ok());
}

TEST_F(MemnodeDaemonTest, RunningOutOfDescriptorsDoesNotMakeTheDaemonSpinAndItRecovers) {
  const std::string pool = make_node(8 * kMiB);
  // The child may open at most 8 more descriptors (new ones are numbered
  // from the lowest free one, below the limit): start() takes some, and a
  // few connections get the rest.
  Daemon d(pool, remote::ServerOptions{}, [] {
    const int lowest = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::close(lowest);
    const rlim_t n = static_cast<rlim_t>(lowest) + 8;
    const rlimit r{n, n};
    ::setrlimit(RLIMIT_NOFILE, &r);
  });
  ASSERT_NE(d.port(), 0);
  std::vector<std::unique_ptr<Raw>> held;
  std::unique_ptr<Raw> waiting;
  for (int i = 0; i < 16 && !waiting; ++i) {
    auto r = std::make_unique<Raw>(d.port());
    if (r->bootstrap(nullptr, 300).ok()) {
      held.push_back(std::move(r));
    } else {
      waiting = std::move(r);  // in the kernel's backlog: the daemon cannot accept it
    }
  }
  ASSERT_FALSE(held.empty());
  ASSERT_TRUE(waiting) << "the daemon never ran out of descriptors";
  // While connections wait, the daemon uses next to no CPU time: another
  // one waits a second for a hello that does not come.
  const std::uint64_t cpu_before = d.cpu_ticks();
  {
    Raw another(d.port());
    char byte;
    EXPECT_FALSE(another.read_exact(&byte, 1, 1000));
  }
  const std::uint64_t cpu_used = d.cpu_ticks() - cpu_before;
  EXPECT_LT(cpu_used, static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK) / 5))
      << "the daemon spun: " << cpu_used << " ticks in a second";
  // A connection closes: the daemon accepts again, and the waiting
  // connection gets its hello.
  held.pop_back();
  char hello[4];
  ASSERT_TRUE(waiting->read_exact(hello, sizeof(hello), 10000));
  std::uint32_t magic;
  std::memcpy(&magic, hello, 4);
  EXPECT_EQ(magic, hs::kNodeHelloMagic);
  EXPECT_TRUE(d.alive());
}

// --- authentication ----------------------------------------------------

TEST_F(MemnodeDaemonTest, ANodeWithASecretRefusesClientsWithoutItBeforeAnyVerb) {
  const std::string pool = make_node(8 * kMiB);
  const std::string secret = make_secret("secret");
  const std::string wrong = make_secret("wrong");
  remote::ServerOptions o;
  o.secret_file = secret;
  Daemon d(pool, o);
  ASSERT_NE(d.port(), 0);
  const std::uint64_t before = file_hash(pool);

  Status s;
  EXPECT_FALSE(client(d.spec(), "", &s));
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("requires the shared secret"), std::string::npos) << s.to_string();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);

  EXPECT_FALSE(client(d.spec(), wrong, &s));
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("does not match"), std::string::npos) << s.to_string();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);

  // A peer that skips the bootstrap and sends a WRITE at once is refused
  // without the WRITE running.
  {
    Raw raw(d.port());
    std::vector<char> write;
    append_header(&write, 1, sizeof(wire::WireOp) + 8, 1);
    append_op(&write, remote::Verb::kWrite, 8, remote::kFirstAllocatable);
    write.insert(write.end(), 8, 'w');
    char hello[hs::kNodeHelloBytes];
    ASSERT_TRUE(raw.read_exact(hello, sizeof(hello)));
    ASSERT_TRUE(raw.send_all(write));
    char verdict[hs::kVerdictBytes];
    ASSERT_TRUE(raw.read_exact(verdict, sizeof(verdict)));
    std::uint32_t magic, status;
    std::memcpy(&magic, verdict, 4);
    std::memcpy(&status, verdict + 4, 4);
    EXPECT_EQ(magic, hs::kVerdictMagic);
    EXPECT_NE(status, 0u);
    EXPECT_TRUE(raw.wait_closed(10000));
  }
  EXPECT_EQ(file_hash(pool), before);

  auto c = client(d.spec(), secret, &s);
  ASSERT_TRUE(c) << s.to_string();
  EXPECT_TRUE(served(*c).ok());
  // The environment variable names the file when the option does not.
  ASSERT_EQ(::setenv(hs::kSecretFileEnv, secret.c_str(), 1), 0);
  auto from_env = client(d.spec(), "", &s);
  ::unsetenv(hs::kSecretFileEnv);
  ASSERT_TRUE(from_env) << s.to_string();
  EXPECT_TRUE(served(*from_env).ok());
}

TEST_F(MemnodeDaemonTest, AClientWithASecretRefusesANodeWithoutOne) {
  const std::string pool = make_node(8 * kMiB);
  const std::string secret = make_secret("secret");
  Daemon d(pool, 0);
  Status s;
  EXPECT_FALSE(client(d.spec(), secret, &s));
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("runs without a secret"), std::string::npos) << s.to_string();
}

TEST_F(MemnodeDaemonTest, AWeakSecretFileIsRefusedWithHowToFixIt) {
  const std::string pool = make_node(8 * kMiB);
  Daemon d(pool, 0);
  Status s;
  const std::string open = make_secret("open", 32, 0644);
  EXPECT_FALSE(client(d.spec(), open, &s));
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("chmod 600"), std::string::npos) << s.to_string();
  const std::string shorter = make_secret("short", 16);
  EXPECT_FALSE(client(d.spec(), shorter, &s));
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("needs 32"), std::string::npos) << s.to_string();
  hs::Secret loaded;
  EXPECT_TRUE(hs::Secret::load(open, &loaded).is_invalid_argument());
  remote::ServerOptions o;
  o.secret_file = shorter;
  std::unique_ptr<remote::Server> srv;
  EXPECT_TRUE(remote::Server::start(make_node(8 * kMiB, "mn2"), o, &srv).is_invalid_argument());
}

TEST_F(MemnodeDaemonTest, ThePmhashCommandPassesItsSecretFileToTheNodes) {
  const std::string pool = make_node(64 * kMiB);
  const std::string secret = make_secret("secret");
  remote::ServerOptions o;
  o.secret_file = secret;
  Daemon d(pool, o);
  ASSERT_NE(d.port(), 0);
  const auto pmhash = [&](std::vector<std::string> args) { return testing::run_program(PMHASH_CLI_PATH, args); };
  const auto refused = pmhash({"create", "--memnodes", d.spec()});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("requires the shared secret"), std::string::npos) << refused.err;
  const auto made = pmhash({"create", "--memnodes", d.spec(), "--secret-file", secret});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const auto put = pmhash({"put", "--memnodes", d.spec(), "--secret-file", secret, "k", "v"});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  ASSERT_EQ(::setenv(hs::kSecretFileEnv, secret.c_str(), 1), 0);  // the children inherit it
  const auto got = pmhash({"get", "--memnodes", d.spec(), "k"});
  ::unsetenv(hs::kSecretFileEnv);
  EXPECT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "v\n");
}

TEST_F(MemnodeDaemonTest, AClientNamesAnOlderDaemonsProtocol) {
  // A listener that answers as daemons before the bootstrap did: a
  // 24-byte hello carrying the memory-node layout version 1.
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof(sa);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::accept(lfd, nullptr, nullptr);
    const wire::FrameHeader old{hs::kNodeHelloMagic, 0, 8 * kMiB, 1, 0};
    [[maybe_unused]] const ssize_t n = ::send(fd, &old, sizeof(old), MSG_NOSIGNAL);
    char byte;
    [[maybe_unused]] const ssize_t m = ::recv(fd, &byte, 1, 0);  // until the client closes
    ::_exit(0);
  }
  ::close(lfd);
  Status s;
  EXPECT_FALSE(client("tcp:127.0.0.1:" + std::to_string(ntohs(sa.sin_port)), "", &s));
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("speaks memory-node protocol 1"), std::string::npos) << s.to_string();
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// --- pmhash-memnode -----------------------------------------------------

TEST_F(MemnodeDaemonTest, MemnodeRefusesANonLoopbackListenWithoutASecret) {
  const std::string pool = make_node(8 * kMiB);
  for (const char* address : {"0.0.0.0:0", "10.1.2.3:7000"}) {
    const auto r = testing::run_program(PMHASH_MEMNODE_PATH, {"--pool", pool, "--listen", address});
    EXPECT_EQ(r.exit_code, 1) << address << ": " << r.err;
    EXPECT_NE(r.err.find("--secret-file"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("127.0.0.1"), std::string::npos) << r.err;
  }
  const auto none = testing::run_program(PMHASH_MEMNODE_PATH, {"--pool", pool});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("--listen"), std::string::npos) << none.err;
}

TEST_F(MemnodeDaemonTest, MemnodeCreateWithoutListenCreatesThePoolAndExits) {
  const std::string pool = dir_.str() + "/created";
  const auto r = testing::run_program(PMHASH_MEMNODE_PATH,
                                      {"--pool", pool, "--create", "--size", "8M"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::unique_ptr<remote::Transport> shm;
  const Status s = remote::connect("shm:" + pool, remote::ConnectOptions{}, &shm);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(shm->size(), 8 * kMiB);
  // A second node made the same way needs no port either.
  const auto again = testing::run_program(PMHASH_MEMNODE_PATH,
                                          {"--pool", pool + "2", "--create", "--size", "8M"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST_F(MemnodeDaemonTest, MemnodeHelpStatesTheMemoryBound) {
  const auto r = testing::run_program(PMHASH_MEMNODE_PATH, {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("anonymous memory stays below"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace pmhash
