// pmhash-server's network side and commands (tools/server), in process:
// replies as Redis gives them, pipelining, hostile clients that cannot take
// the server down or its memory, limits, passwords and shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/store.h"
#include "resp_client.h"
#include "scratch_file.h"
#include "server/commands.h"
#include "server/server.h"
#include "subprocess.h"

namespace pmhash::server {
namespace {

using test::RespClient;

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerConfig config = {}) {
    config.port = 0;
    if (config.workers == 0) config.workers = 2;
    Options options;
    options.pool_size = 256ull << 20;
    ASSERT_TRUE(Store::create(dir_.str() + "/server.pool", options, &store_).ok());
    server_ = std::make_unique<Server>(store_.get(), config);
    const Status s = server_->start();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  void TearDown() override {
    if (server_) {
      server_->stop();
      server_->wait();
      server_.reset();
    }
    if (store_) {
      EXPECT_TRUE(store_->close().ok());
    }
  }

  std::uint16_t port() const { return server_->port(); }

  // Waits, without sleeping, until `done` holds or 20 s pass.
  template <typename F>
  static bool eventually(F done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  pmhash::testing::ScratchDir dir_{"pmhash-server"};
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, StringCommandsAnswerAsRedisDoes) {
  start();
  RespClient c(port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.call({"PING"}), "PONG");
  EXPECT_EQ(c.call({"ping", "hi"}), "hi");
  EXPECT_EQ(c.call({"ECHO", "a b"}), "a b");
  EXPECT_EQ(c.call({"GET", "k"}), "(nil)");
  EXPECT_EQ(c.call({"SET", "k", "v1"}), "OK");
  EXPECT_EQ(c.call({"GET", "k"}), "v1");
  EXPECT_EQ(c.call({"SET", "k", "v2", "NX"}), "(nil)");
  EXPECT_EQ(c.call({"SET", "k", "v2", "XX"}), "OK");
  EXPECT_EQ(c.call({"SET", "other", "x", "xx"}), "(nil)");
  EXPECT_EQ(c.call({"SET", "k", "v", "NX", "XX"}), "(error) ERR syntax error");
  EXPECT_EQ(c.call({"SETNX", "k", "v3"}), "(integer) 0");
  EXPECT_EQ(c.call({"SETNX", "n", "1"}), "(integer) 1");
  EXPECT_EQ(c.call({"GET", "k"}), "v2");
  EXPECT_EQ(c.call({"STRLEN", "k"}), "(integer) 2");
  EXPECT_EQ(c.call({"STRLEN", "none"}), "(integer) 0");
  EXPECT_EQ(c.call({"TYPE", "k"}), "string");
  EXPECT_EQ(c.call({"TYPE", "none"}), "none");
  EXPECT_EQ(c.call({"MGET", "k", "none", "n"}), "[v2, (nil), 1]");
  EXPECT_EQ(c.call({"EXISTS", "k", "none", "n", "k"}), "(integer) 3");
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 2");
  EXPECT_EQ(c.call({"KEYS", "*"}).size(), std::string("[k, n]").size());
  EXPECT_EQ(c.call({"KEYS", "[k]"}), "[k]");
  EXPECT_EQ(c.call({"DEL", "k", "none", "n"}), "(integer) 2");
  EXPECT_EQ(c.call({"UNLINK", "k"}), "(integer) 0");
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 0");
  EXPECT_EQ(c.call({"SELECT", "0"}), "OK");
  EXPECT_EQ(c.call({"SELECT", "1"}), "(error) ERR DB index is out of range");
  EXPECT_EQ(c.call({"GET"}), "(error) ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c.call({"NOSUCH", "a"}), "(error) ERR unknown command 'NOSUCH', with args beginning with: 'a' ");
}

TEST_F(ServerTest, ValuesKeepEveryByte) {
  start();
  RespClient c(port());
  std::string value(100000, '\0');
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 7);
  EXPECT_EQ(c.call({"SET", std::string("k\r\n\0", 4), value}), "OK");
  EXPECT_EQ(c.call({"GET", std::string("k\r\n\0", 4)}), value);
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  RespClient c(port());
  std::string batch;
  for (int i = 0; i < 2000; ++i) batch += RespClient::encode({"SET", "key" + std::to_string(i), std::to_string(i)});
  for (int i = 0; i < 2000; ++i) batch += RespClient::encode({"GET", "key" + std::to_string(i)});
  batch += "PING\r\n";
  ASSERT_TRUE(c.send_raw(batch));
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(c.reply(), "OK") << i;
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(c.reply(), std::to_string(i)) << i;
  EXPECT_EQ(c.reply(), "PONG");
}

TEST_F(ServerTest, InlineCommandsAreUnderstood) {
  start();
  RespClient c(port());
  ASSERT_TRUE(c.send_raw("SET greeting \"hello world\"\r\nGET greeting\nEXISTS greeting\r\n"));
  EXPECT_EQ(c.reply(), "OK");
  EXPECT_EQ(c.reply(), "hello world");
  EXPECT_EQ(c.reply(), "(integer) 1");
}

TEST_F(ServerTest, HelloSwitchesToResp3) {
  start();
  RespClient c(port());
  const std::string hello = c.call({"HELLO", "3"});
  EXPECT_EQ(hello.rfind("{server: redis, version: ", 0), 0u) << hello;
  EXPECT_NE(hello.find("proto: (integer) 3"), std::string::npos) << hello;
  EXPECT_NE(c.call({"CLIENT", "INFO"}).find(" resp=3 "), std::string::npos);
  EXPECT_EQ(c.call({"HELLO", "4"}), "(error) NOPROTO unsupported protocol version");
  EXPECT_EQ(c.call({"CLIENT", "SETNAME", "worker-1"}), "OK");
  EXPECT_EQ(c.call({"CLIENT", "GETNAME"}), "worker-1");
  EXPECT_NE(c.call({"CLIENT", "LIST"}).find("name=worker-1"), std::string::npos);
}

TEST_F(ServerTest, InfoReportsTheStoreAndTheServer) {
  start();
  RespClient c(port());
  EXPECT_EQ(c.call({"SET", "a", "1"}), "OK");
  const std::string info = c.call({"INFO"});
  for (const char* field : {"# Server\r\n", "redis_version:", "connected_clients:1\r\n", "# Persistence\r\n",
                            "pmhash_engine:" , "db0:keys=1\r\n", "total_commands_processed:"}) {
    EXPECT_NE(info.find(field), std::string::npos) << field << " in\n" << info;
  }
  // The engine's properties, each under its name.
  const std::string engine_section = c.call({"INFO", "pmhash"});
  const Stats st = store_->stats();
  ASSERT_FALSE(st.properties.empty());
  for (const Property& p : st.properties) {
    std::string field = p.name;
    std::replace(field.begin(), field.end(), '.', '_');
    EXPECT_NE(engine_section.find(field + ":"), std::string::npos) << field << " in\n" << engine_section;
  }
  const std::string keyspace = c.call({"INFO", "keyspace"});
  EXPECT_EQ(keyspace.find("# Server"), std::string::npos);
  EXPECT_NE(keyspace.find("db0:keys=1\r\n"), std::string::npos);
  EXPECT_EQ(c.call({"COMMAND", "COUNT"}).rfind("(integer) ", 0), 0u);
  EXPECT_EQ(c.call({"CONFIG", "GET", "save", "APPENDONLY"}), "[save, , appendonly, no]");
  EXPECT_EQ(c.call({"CONFIG", "GET", "pmhash-dur*"}), "[pmhash-durability, strict]");
  EXPECT_EQ(c.call({"CONFIG", "SET", "maxclients", "7"}).rfind("(error) ERR CONFIG SET maxclients: ", 0), 0u);
  EXPECT_EQ(c.call({"COMMAND", "INFO", "get", "nosuch"}).rfind("[[get, (integer) 2, [", 0), 0u);
}

TEST_F(ServerTest, ProtocolErrorsAreAnsweredThenTheConnectionCloses) {
  start();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"*abc\r\n", "(error) ERR Protocol error: invalid multibulk length"},
      {"*1\r\n$9223372036854775808\r\n", "(error) ERR Protocol error: invalid bulk length"},
      {"*2\r\n$3\r\nGET\r\n$-7\r\n", "(error) ERR Protocol error: invalid bulk length"},
      {"*1\r\n+PING\r\n", "(error) ERR Protocol error: expected '$', got '+'"},
      {"SET a \"unclosed\r\n", "(error) ERR Protocol error: unbalanced quotes in request"},
  };
  RespClient bystander(port());
  for (const auto& [bytes, error] : cases) {
    RespClient c(port());
    ASSERT_TRUE(c.send_raw(bytes));
    EXPECT_EQ(c.reply(), error) << bytes;
    EXPECT_TRUE(c.closed_by_server()) << bytes;
    EXPECT_EQ(bystander.call({"PING"}), "PONG");
  }
}

TEST_F(ServerTest, GarbageBytesLeaveTheServerServing) {
  start();
  std::string garbage(1 << 20, '\0');
  std::uint64_t x = 88172645463325252ull;
  for (char& ch : garbage) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ch = static_cast<char>(x);
  }
  for (int round = 0; round < 4; ++round) {
    RespClient c(port());
    c.send_raw(std::string_view(garbage).substr(static_cast<std::size_t>(round) * 1000));
    // Whatever it answers, the server ends the conversation or keeps it.
  }
  RespClient c(port());
  EXPECT_EQ(c.call({"PING"}), "PONG");
}

TEST_F(ServerTest, AHalfSentRequestRunsNothing) {
  start();
  {
    RespClient c(port());
    ASSERT_TRUE(c.send_raw("*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$60000000\r\n0123456789"));
  }
  RespClient c(port());
  EXPECT_EQ(c.call({"PING"}), "PONG");
  EXPECT_EQ(c.call({"EXISTS", "half"}), "(integer) 0");
}

TEST_F(ServerTest, AClientThatReadsNoRepliesIsPausedNotBuffered) {
  ServerConfig config;
  config.output_pause = 256 * 1024;
  start(config);
  const std::string value(16 * 1024, 'v');
  RespClient setup(port());
  ASSERT_EQ(setup.call({"SET", "big", value}), "OK");

  // 10,000 GETs sent without reading: 160 MB of replies if nothing held
  // the client back.
  constexpr int kRequests = 10000;
  RespClient greedy(port());
  std::string batch;
  for (int i = 0; i < kRequests; ++i) batch += RespClient::encode({"GET", "big"});
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    greedy.send_raw(batch);
    sent = true;
  });
  ASSERT_TRUE(eventually([&] { return server_->counters().output_pauses.load() > 0; }));
  // Meanwhile everyone else is served.
  RespClient other(port());
  EXPECT_EQ(other.call({"PING"}), "PONG");
  EXPECT_EQ(other.call({"GET", "big"}), value);
  // Now read every reply: the server resumes as they drain.
  for (int i = 0; i < kRequests; ++i) ASSERT_EQ(greedy.reply(), value) << i;
  sender.join();
  EXPECT_TRUE(sent);
  // Unsent replies never exceeded the pause by more than one reply.
  EXPECT_LE(server_->counters().output_high_water.load(), config.output_pause + value.size() + 64);
}

TEST_F(ServerTest, MaxClientsRefusesTheNextWithRedisError) {
  ServerConfig config;
  config.max_clients = 5;
  start(config);
  std::vector<std::unique_ptr<RespClient>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(std::make_unique<RespClient>(port()));
    ASSERT_EQ(clients.back()->call({"PING"}), "PONG");
  }
  RespClient sixth(port());
  EXPECT_EQ(sixth.reply(), "(error) ERR max number of clients reached");
  EXPECT_TRUE(sixth.closed_by_server());
  clients.pop_back();
  ASSERT_TRUE(eventually([&] { return server_->counters().connected.load() < 5; }));
  RespClient again(port());
  EXPECT_EQ(again.call({"PING"}), "PONG");
  EXPECT_EQ(server_->counters().connections_rejected.load(), 1u);
}

// A burst of connections is spread over the workers: the worker that wakes
// for the listening socket hands each to the one with the fewest (else one
// thread of four would serve all forty while three idle).
TEST_F(ServerTest, ABurstOfConnectionsIsSpreadOverTheWorkers) {
  ServerConfig config;
  config.workers = 4;
  start(config);
  std::vector<std::unique_ptr<RespClient>> clients;
  for (int i = 0; i < 40; ++i) clients.push_back(std::make_unique<RespClient>(port()));
  for (auto& c : clients) ASSERT_EQ(c->call({"PING"}), "PONG");
  const std::vector<std::size_t> loads = server_->worker_loads();
  ASSERT_EQ(loads.size(), 4u);
  std::size_t total = 0;
  for (std::size_t n : loads) {
    total += n;
    EXPECT_GE(n, 8u) << "a worker serves too few of the forty";
  }
  EXPECT_EQ(total, 40u);
  clients.resize(10);  // closed: their workers count them out
  ASSERT_TRUE(eventually([&] {
    const auto now = server_->worker_loads();
    std::size_t sum = 0;
    for (std::size_t n : now) sum += n;
    return sum == 10;
  }));
}

TEST_F(ServerTest, WithAPasswordEveryCommandBeforeAuthIsRefused) {
  ServerConfig config;
  config.requirepass = "s3cret";
  start(config);
  RespClient c(port());
  EXPECT_EQ(c.call({"GET", "k"}), "(error) NOAUTH Authentication required.");
  EXPECT_EQ(c.call({"PING"}), "(error) NOAUTH Authentication required.");
  EXPECT_EQ(c.call({"HELLO", "3"}).rfind("(error) NOAUTH", 0), 0u);
  EXPECT_EQ(c.call({"AUTH", "wrong"}), "(error) WRONGPASS invalid username-password pair or user is disabled.");
  EXPECT_EQ(c.call({"AUTH", "other", "s3cret"}),
            "(error) WRONGPASS invalid username-password pair or user is disabled.");
  EXPECT_EQ(c.call({"GET", "k"}), "(error) NOAUTH Authentication required.");
  EXPECT_EQ(c.call({"AUTH", "s3cret"}), "OK");
  EXPECT_EQ(c.call({"GET", "k"}), "(nil)");

  RespClient d(port());
  EXPECT_EQ(d.call({"HELLO", "3", "AUTH", "default", "s3cret"}).rfind("{server: redis", 0), 0u);
  EXPECT_EQ(d.call({"SET", "k", "v"}), "OK");
}

TEST_F(ServerTest, AuthWithoutAPasswordConfiguredIsAnError) {
  start();
  RespClient c(port());
  EXPECT_EQ(c.call({"AUTH", "x"}).rfind("(error) ERR AUTH <password> called without any password", 0), 0u);
}

TEST_F(ServerTest, NoAddressBeyondLoopbackWithoutAPassword) {
  Options options;
  options.pool_size = 64ull << 20;
  ASSERT_TRUE(Store::create(dir_.str() + "/bind.pool", options, &store_).ok());
  for (const char* bind : {"0.0.0.0", "::", "192.0.2.1"}) {
    ServerConfig config;
    config.bind = bind;
    config.port = 0;
    Server server(store_.get(), config);
    const Status s = server.start();
    EXPECT_TRUE(s.is_invalid_argument()) << bind << ": " << s.to_string();
    EXPECT_NE(s.message().find("without a password"), std::string::npos) << s.to_string();
  }
  ServerConfig config;
  config.bind = "not-an-address";
  Server server(store_.get(), config);
  EXPECT_TRUE(server.start().is_invalid_argument());
}

TEST_F(ServerTest, ShutdownStopsTheServer) {
  start();
  RespClient c(port());
  EXPECT_EQ(c.call({"SET", "k", "v"}), "OK");
  ASSERT_TRUE(c.send_raw(RespClient::encode({"SHUTDOWN"})));
  EXPECT_TRUE(c.closed_by_server());
  server_->wait();
  server_.reset();
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  std::unique_ptr<Store> reopened;
  ASSERT_TRUE(Store::open(dir_.str() + "/server.pool", Options{}, &reopened).ok());
  EXPECT_TRUE(reopened->stats().clean_shutdown);
  std::string value;
  EXPECT_TRUE(reopened->get("k", &value).ok());
  EXPECT_EQ(value, "v");
}

// The real redis-cli (Debian's redis-tools, installed by scripts/bootstrap.sh).
constexpr const char* kRedisCli = "/usr/bin/redis-cli";

TEST_F(ServerTest, RedisCliRunsCommandsInBothProtocols) {
  start();
  const std::string p = std::to_string(port());
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"-p", p});
    return pmhash::testing::run_program(kRedisCli, args);
  };
  EXPECT_EQ(cli({"set", "greeting", "hello world"}).out, "OK\n");
  EXPECT_EQ(cli({"get", "greeting"}).out, "hello world\n");
  EXPECT_EQ(cli({"-3", "get", "greeting"}).out, "hello world\n");
  EXPECT_EQ(cli({"exists", "greeting", "nothing"}).out, "1\n");
  EXPECT_EQ(cli({"dbsize"}).out, "1\n");
  EXPECT_NE(cli({"info", "persistence"}).out.find("pmhash_engine:"), std::string::npos);
  EXPECT_EQ(cli({"select", "3"}).out.rfind("ERR DB index is out of range\n", 0), 0u);
}

TEST_F(ServerTest, RedisCliPipeMassInsertionLandsEveryKey) {
  start();
  pmhash::testing::ScratchDir scratch("pmhash-server-pipe");
  const std::string file = scratch.str() + "/commands";
  std::string commands;
  for (int i = 0; i < 20000; ++i) {
    commands += RespClient::encode({"SET", "pipe:" + std::to_string(i), "value " + std::to_string(i)});
  }
  pmhash::testing::write_file(file, commands);
  const auto r = pmhash::testing::run_program(
      "/bin/sh", {"-c", std::string(kRedisCli) + " -p " + std::to_string(port()) + " --pipe < " + file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("errors: 0, replies: 20000"), std::string::npos) << r.out;
  RespClient c(port());
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 20000");
  EXPECT_EQ(c.call({"GET", "pipe:12345"}), "value 12345");
}

TEST_F(ServerTest, RedisCliScanListsEveryKeyOnce) {
  start();
  RespClient c(port());
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(c.call({"SET", "scan:" + std::to_string(i), "v"}), "OK");
  ASSERT_EQ(c.call({"SET", "other", "v"}), "OK");
  const auto r = pmhash::testing::run_program(
      kRedisCli, {"-p", std::to_string(port()), "--scan", "--pattern", "scan:*"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> keys;
  std::size_t lines = 0;
  for (std::size_t from = 0; from < r.out.size();) {
    const std::size_t nl = r.out.find('\n', from);
    if (nl == std::string::npos) break;
    keys.insert(r.out.substr(from, nl - from));
    ++lines;
    from = nl + 1;
  }
  EXPECT_EQ(lines, 3000u);
  EXPECT_EQ(keys.size(), 3000u);
  EXPECT_EQ(keys.count("scan:2999"), 1u);
  EXPECT_EQ(keys.count("other"), 0u);
}

TEST_F(ServerTest, RedisCliStatReadsTheServersCounters) {
  start();
  RespClient c(port());
  for (int i = 0; i < 42; ++i) ASSERT_EQ(c.call({"SET", "k" + std::to_string(i), "v"}), "OK");
  // --stat prints a row per interval until stopped; timeout(1) stops it,
  // and stdbuf makes it write each row as it comes (a pipe is not a tty).
  const auto r = pmhash::testing::run_program(
      "/usr/bin/timeout",
      {"1", "/usr/bin/stdbuf", "-oL", kRedisCli, "-p", std::to_string(port()), "--stat", "-i", "0.2"});
  EXPECT_NE(r.out.find("keys"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("\n42 "), std::string::npos) << r.out;
}

TEST(GlobMatch, FollowsRedisPatterns) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("h?llo", "hello"));
  EXPECT_FALSE(glob_match("h?llo", "hllo"));
  EXPECT_TRUE(glob_match("h*llo", "heeeello"));
  EXPECT_TRUE(glob_match("h[ae]llo", "hallo"));
  EXPECT_FALSE(glob_match("h[ae]llo", "hillo"));
  EXPECT_TRUE(glob_match("h[^e]llo", "hallo"));
  EXPECT_FALSE(glob_match("h[^e]llo", "hello"));
  EXPECT_TRUE(glob_match("h[a-b]llo", "hbllo"));
  EXPECT_TRUE(glob_match("h\\*llo", "h*llo"));
  EXPECT_FALSE(glob_match("h\\*llo", "hello"));
  EXPECT_TRUE(glob_match("user:*:name", "user:42:name"));
  EXPECT_FALSE(glob_match("user:*:name", "user:42:age"));
  EXPECT_TRUE(glob_match("HeLLo", "hello", /*nocase=*/true));
  // A pattern made to back-track exponentially in a naive matcher.
  EXPECT_FALSE(glob_match(std::string(30, '*') + "b", std::string(10000, 'a')));
}

}  // namespace
}  // namespace pmhash::server
