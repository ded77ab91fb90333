// Unit tests of the tcp transport and the memory-node daemon's loop
// (src/remote/tcp_transport.cc, server.cc): verbs over loopback, a node
// that dies (clear error, no hang), one that stops answering (timeout),
// and a restart from the pool file that serves every completed write.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "remote/client.h"
#include "remote/memnode.h"
#include "remote/server.h"
#include "memnode_daemon.h"
#include "scratch_file.h"

namespace pmhash {
namespace {

using remote::Batch;
using remote::Client;

using testing::Daemon;

class RemoteTcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.str() + "/mn0";
    const Status s = remote::create_memnode(path_, 8u << 20, false);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::unique_ptr<Client> client(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    remote::ConnectOptions o;
    o.timeout = timeout;
    std::unique_ptr<Client> c;
    const Status s = Client::connect({"tcp:127.0.0.1:" + std::to_string(port)}, o, &c);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return c;
  }
  static std::uint64_t at(std::uint64_t i) { return remote::kFirstAllocatable + 8 * i; }

  testing::ScratchDir dir_{"pmhash-remote-tcp"};
  std::string path_;
};

TEST_F(RemoteTcpTest, VerbsOverLoopbackBehaveAsOnShm) {
  Daemon d(path_, 0);
  ASSERT_NE(d.port(), 0);
  auto c = client(d.port());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node_size(0), 8u << 20);
  const std::string text = "over the loopback, 0123456789";
  std::string back(text.size(), '\0');
  std::uint64_t word = 0;
  Batch b;
  b.write(0, at(1) + 3, text.data(), static_cast<std::uint32_t>(text.size()))
      .read(0, at(1) + 3, back.data(), static_cast<std::uint32_t>(back.size()))
      .cas(0, at(0), 0, 7)
      .cas(0, at(0), 0, 9)
      .faa(0, at(0), 5)
      .read(0, at(0), &word, 8);
  const Status s = c->exec_sync(b);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(back, text);
  EXPECT_EQ(b.result(2), 0u);
  EXPECT_EQ(b.result(3), 7u);
  EXPECT_EQ(b.result(4), 7u);
  EXPECT_EQ(word, 12u);
  Batch bad;
  bad.read(0, 0, &word, 8);
  EXPECT_TRUE(c->exec_sync(bad).is_invalid_argument());
}

TEST_F(RemoteTcpTest, ADeadNodeFailsFastAndARestartServesItsData) {
  const std::string text = "written before the node died";
  std::uint16_t port = 0;
  std::unique_ptr<Client> c;
  {
    Daemon d(path_, 0);
    port = d.port();
    c = client(port);
    Batch b;
    b.write(0, at(10), text.data(), static_cast<std::uint32_t>(text.size()));
    ASSERT_TRUE(c->exec_sync(b).ok());
    d.kill(SIGKILL);
    std::uint64_t v = 0;
    Batch r;
    r.read(0, at(10), &v, 8);
    const Status s = c->exec_sync(r);
    EXPECT_TRUE(s.is_io_error()) << s.to_string();
    EXPECT_NE(s.to_string().find("tcp:127.0.0.1"), std::string::npos) << s.to_string();
  }
  // Restarted on the same port from the same pool: the same client
  // reconnects and reads what it wrote.
  Daemon again(path_, port);
  ASSERT_EQ(again.port(), port);
  std::string back(text.size(), '\0');
  Batch r;
  r.read(0, at(10), back.data(), static_cast<std::uint32_t>(back.size()));
  const Status s = c->exec_sync(r);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(back, text);
}

TEST_F(RemoteTcpTest, ASilentNodeTimesOutInsteadOfHanging) {
  Daemon d(path_, 0);
  auto c = client(d.port(), std::chrono::milliseconds(300));
  d.signal(SIGSTOP);
  std::uint64_t v = 0;
  Batch r;
  r.read(0, at(20), &v, 8);
  const Status s = c->exec_sync(r);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_NE(s.to_string().find("did not answer within 300 ms"), std::string::npos) << s.to_string();
  d.signal(SIGCONT);
  // The connection was dropped; the next batch connects again.
  const Status again = c->exec_sync(r);
  EXPECT_TRUE(again.ok()) << again.to_string();
}

TEST_F(RemoteTcpTest, AnUnreachableNodeIsAClearError) {
  // A port nobody listens on: bind one, note it, close it.
  std::uint16_t port = 0;
  {
    Daemon d(path_, 0);
    port = d.port();
  }
  std::unique_ptr<Client> c;
  remote::ConnectOptions o;
  o.timeout = std::chrono::milliseconds(500);
  const Status s = Client::connect({"tcp:127.0.0.1:" + std::to_string(port)}, o, &c);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_NE(s.to_string().find("cannot connect"), std::string::npos) << s.to_string();
  EXPECT_TRUE(Client::connect({"tcp:127.0.0.1:99999"}, o, &c).is_invalid_argument());
  EXPECT_TRUE(Client::connect({"tcp:nohost"}, o, &c).is_invalid_argument());
}

}  // namespace
}  // namespace pmhash
