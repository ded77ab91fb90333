// pmhash-server's read-modify-write and expiry commands on every pool
// engine, in process: counters, APPEND, GETSET, GETDEL, GETEX, SET's
// options, MSET and MSETNX, EXPIRE and its relatives against a clock the
// test moves, deadlines kept across a restart, values that look like the
// expiry header, and increments from several connections at once that must
// all count.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/store.h"
#include "resp_client.h"
#include "scratch_file.h"
#include "server/keyspace.h"
#include "server/server.h"

namespace pmhash::server {
namespace {

using test::RespClient;

constexpr std::uint64_t kStart = 1'900'000'000'000;  // ms since the epoch, in 2030

class ServerCommands : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    options_.engine = GetParam();
    options_.pool_size = 128ull << 20;
    ASSERT_TRUE(Store::create(path(), options_, &store_).ok());
    start();
  }

  void start() {
    ServerConfig config;
    config.port = 0;
    config.workers = 2;
    config.clock = [this] { return now_.load(); };
    // Sweeps run only when the test calls sweep().
    config.expire_sweep_ms = 3'600'000;
    server_ = std::make_unique<Server>(store_.get(), config);
    const Status s = server_->start();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  void stop() {
    server_->stop();
    server_->wait();
    server_.reset();
  }

  void restart() {
    stop();
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    ASSERT_TRUE(Store::open(path(), options_, &store_).ok());
    start();
  }

  void TearDown() override {
    if (server_) stop();
    if (store_) {
      EXPECT_TRUE(store_->close().ok());
    }
  }

  std::string path() const { return dir_.str() + "/server.pool"; }
  std::uint16_t port() const { return server_->port(); }
  bool has_transactions() {
    std::unique_ptr<Transaction> txn;
    return store_->transaction(&txn).ok();
  }

  pmhash::testing::ScratchDir dir_{"pmhash-server-commands"};
  Options options_;
  std::atomic<std::uint64_t> now_{kStart};
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

TEST_P(ServerCommands, CountersAnswerAsRedisDoes) {
  RespClient c(port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.call({"INCR", "n"}), "(integer) 1");
  EXPECT_EQ(c.call({"INCRBY", "n", "41"}), "(integer) 42");
  EXPECT_EQ(c.call({"DECR", "n"}), "(integer) 41");
  EXPECT_EQ(c.call({"DECRBY", "n", "-9"}), "(integer) 50");
  EXPECT_EQ(c.call({"GET", "n"}), "50");
  EXPECT_EQ(c.call({"INCRBY", "n", "x"}), "(error) ERR value is not an integer or out of range");
  EXPECT_EQ(c.call({"SET", "s", "abc"}), "OK");
  EXPECT_EQ(c.call({"INCR", "s"}), "(error) ERR value is not an integer or out of range");
  EXPECT_EQ(c.call({"GET", "s"}), "abc");
  EXPECT_EQ(c.call({"SET", "big", "9223372036854775807"}), "OK");
  EXPECT_EQ(c.call({"INCR", "big"}), "(error) ERR increment or decrement would overflow");
  EXPECT_EQ(c.call({"GET", "big"}), "9223372036854775807");
  EXPECT_EQ(c.call({"DECRBY", "n", "-9223372036854775808"}), "(error) ERR decrement would overflow");
  EXPECT_EQ(c.call({"SET", "f", "10.50"}), "OK");
  EXPECT_EQ(c.call({"INCRBYFLOAT", "f", "0.1"}), "10.6");
  EXPECT_EQ(c.call({"INCRBYFLOAT", "f", "-5.6"}), "5");
  EXPECT_EQ(c.call({"INCRBYFLOAT", "g", "5.0e3"}), "5000");
  EXPECT_EQ(c.call({"INCRBYFLOAT", "f", "abc"}), "(error) ERR value is not a valid float");
  EXPECT_EQ(c.call({"INCRBYFLOAT", "s", "1"}), "(error) ERR value is not a valid float");
  EXPECT_EQ(c.call({"INCRBYFLOAT", "f", "inf"}), "(error) ERR increment would produce NaN or Infinity");
  EXPECT_EQ(c.call({"GET", "f"}), "5");
}

TEST_P(ServerCommands, ReadModifyWriteCommandsAnswerAsRedisDoes) {
  RespClient c(port());
  EXPECT_EQ(c.call({"APPEND", "a", "Hello"}), "(integer) 5");
  EXPECT_EQ(c.call({"APPEND", "a", " World"}), "(integer) 11");
  EXPECT_EQ(c.call({"GET", "a"}), "Hello World");
  EXPECT_EQ(c.call({"GETSET", "a", "new"}), "Hello World");
  EXPECT_EQ(c.call({"GETSET", "fresh", "x"}), "(nil)");
  EXPECT_EQ(c.call({"GET", "a"}), "new");
  EXPECT_EQ(c.call({"GETDEL", "a"}), "new");
  EXPECT_EQ(c.call({"GETDEL", "a"}), "(nil)");
  EXPECT_EQ(c.call({"EXISTS", "a"}), "(integer) 0");
  EXPECT_EQ(c.call({"SET", "k", "v1", "GET"}), "(nil)");
  EXPECT_EQ(c.call({"SET", "k", "v2", "GET"}), "v1");
  EXPECT_EQ(c.call({"SET", "k", "v3", "NX", "GET"}), "v2");
  EXPECT_EQ(c.call({"GET", "k"}), "v2");
  EXPECT_EQ(c.call({"SET", "absent", "v", "XX", "GET"}), "(nil)");
  EXPECT_EQ(c.call({"EXISTS", "absent"}), "(integer) 0");
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "0"}), "(error) ERR invalid expire time in 'set' command");
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "x"}), "(error) ERR value is not an integer or out of range");
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "10", "PX", "10"}), "(error) ERR syntax error");
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "10", "KEEPTTL"}), "(error) ERR syntax error");
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "99999999999999999"}), "(error) ERR invalid expire time in 'set' command");
  EXPECT_EQ(c.call({"GET", "k"}), "v2");
  EXPECT_EQ(c.call({"SETNX", "k", "other"}), "(integer) 0");
  EXPECT_EQ(c.call({"SETNX", "k2", "v"}), "(integer) 1");
}

TEST_P(ServerCommands, KeysExpireAtTheirDeadline) {
  RespClient c(port());
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "10"}), "OK");
  EXPECT_EQ(c.call({"TTL", "k"}), "(integer) 10");
  EXPECT_EQ(c.call({"PTTL", "k"}), "(integer) 10000");
  EXPECT_EQ(c.call({"TTL", "none"}), "(integer) -2");
  EXPECT_EQ(c.call({"SET", "p", "v"}), "OK");
  EXPECT_EQ(c.call({"TTL", "p"}), "(integer) -1");
  now_ += 9'999;
  EXPECT_EQ(c.call({"GET", "k"}), "v");
  EXPECT_EQ(c.call({"PTTL", "k"}), "(integer) 1");
  now_ += 1;
  // Expired: absent to every command at once.
  EXPECT_EQ(c.call({"GET", "k"}), "(nil)");
  EXPECT_EQ(c.call({"EXISTS", "k"}), "(integer) 0");
  EXPECT_EQ(c.call({"TTL", "k"}), "(integer) -2");
  EXPECT_EQ(c.call({"KEYS", "*"}), "[p]");
  EXPECT_EQ(c.call({"SET", "k", "again", "NX"}), "OK");
  EXPECT_EQ(c.call({"TTL", "k"}), "(integer) -1");
  // APPEND and INCR keep the deadline; SET drops it, KEEPTTL keeps it.
  EXPECT_EQ(c.call({"SETEX", "c", "100", "1"}), "OK");
  EXPECT_EQ(c.call({"INCR", "c"}), "(integer) 2");
  EXPECT_EQ(c.call({"APPEND", "c", "0"}), "(integer) 2");
  EXPECT_EQ(c.call({"TTL", "c"}), "(integer) 100");
  EXPECT_EQ(c.call({"SET", "c", "x", "KEEPTTL"}), "OK");
  EXPECT_EQ(c.call({"TTL", "c"}), "(integer) 100");
  EXPECT_EQ(c.call({"SET", "c", "y"}), "OK");
  EXPECT_EQ(c.call({"TTL", "c"}), "(integer) -1");
  EXPECT_EQ(c.call({"PSETEX", "c", "1500", "z"}), "OK");
  EXPECT_EQ(c.call({"TTL", "c"}), "(integer) 2");  // 1.5 s rounds as Redis rounds
  EXPECT_EQ(c.call({"PERSIST", "c"}), "(integer) 1");
  EXPECT_EQ(c.call({"PERSIST", "c"}), "(integer) 0");
  EXPECT_EQ(c.call({"TTL", "c"}), "(integer) -1");
  EXPECT_EQ(c.call({"SETEX", "c", "0", "z"}), "(error) ERR invalid expire time in 'setex' command");
  // GETEX
  EXPECT_EQ(c.call({"GETEX", "c", "PX", "500"}), "z");
  EXPECT_EQ(c.call({"PTTL", "c"}), "(integer) 500");
  EXPECT_EQ(c.call({"GETEX", "c", "PERSIST"}), "z");
  EXPECT_EQ(c.call({"PTTL", "c"}), "(integer) -1");
  EXPECT_EQ(c.call({"GETEX", "c", "EXAT", std::to_string(kStart / 1000 + 60'000)}), "z");
  EXPECT_EQ(c.call({"GETEX", "none", "EX", "5"}), "(nil)");
  // DEL of an expired key counts nothing.
  EXPECT_EQ(c.call({"SET", "d", "v", "PX", "5"}), "OK");
  now_ += 5;
  EXPECT_EQ(c.call({"DEL", "d", "p"}), "(integer) 1");
}

TEST_P(ServerCommands, ExpireAndItsConditions) {
  RespClient c(port());
  EXPECT_EQ(c.call({"EXPIRE", "none", "10"}), "(integer) 0");
  EXPECT_EQ(c.call({"SET", "k", "v"}), "OK");
  EXPECT_EQ(c.call({"EXPIRE", "k", "100", "XX"}), "(integer) 0");
  EXPECT_EQ(c.call({"EXPIRE", "k", "100", "GT"}), "(integer) 0");  // no deadline: infinitely far
  EXPECT_EQ(c.call({"EXPIRE", "k", "100", "NX"}), "(integer) 1");
  EXPECT_EQ(c.call({"EXPIRE", "k", "50", "NX"}), "(integer) 0");
  EXPECT_EQ(c.call({"EXPIRE", "k", "50", "GT"}), "(integer) 0");
  EXPECT_EQ(c.call({"EXPIRE", "k", "200", "GT"}), "(integer) 1");
  EXPECT_EQ(c.call({"EXPIRE", "k", "300", "LT"}), "(integer) 0");
  EXPECT_EQ(c.call({"PEXPIRE", "k", "20000", "LT"}), "(integer) 1");
  EXPECT_EQ(c.call({"TTL", "k"}), "(integer) 20");
  EXPECT_EQ(c.call({"EXPIREAT", "k", std::to_string(kStart / 1000 + 30)}), "(integer) 1");
  EXPECT_EQ(c.call({"TTL", "k"}), "(integer) 30");
  EXPECT_EQ(c.call({"PEXPIREAT", "k", std::to_string(kStart + 40'000), "XX"}), "(integer) 1");
  EXPECT_EQ(c.call({"PTTL", "k"}), "(integer) 40000");
  EXPECT_EQ(c.call({"EXPIRE", "k", "1", "NX", "XX"}),
            "(error) ERR NX and XX, GT or LT options at the same time are not compatible");
  EXPECT_EQ(c.call({"EXPIRE", "k", "1", "GT", "LT"}),
            "(error) ERR GT and LT options at the same time are not compatible");
  EXPECT_EQ(c.call({"EXPIRE", "k", "1", "SOON"}), "(error) ERR Unsupported option SOON");
  EXPECT_EQ(c.call({"EXPIRE", "k", "x"}), "(error) ERR value is not an integer or out of range");
  EXPECT_EQ(c.call({"EXPIRE", "k", "9223372036854775807"}), "(error) ERR invalid expire time in 'expire' command");
  EXPECT_EQ(c.call({"PTTL", "k"}), "(integer) 40000");
  // A deadline not in the future removes the key.
  EXPECT_EQ(c.call({"EXPIRE", "k", "-1"}), "(integer) 1");
  EXPECT_EQ(c.call({"EXISTS", "k"}), "(integer) 0");
}

TEST_P(ServerCommands, TheSweepRemovesExpiredKeysAndInfoCountsThem) {
  RespClient c(port());
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(c.call({"SET", "k" + std::to_string(i), "v", "PX", std::to_string(1 + i % 2 * 1000)}), "OK");
  }
  ASSERT_EQ(c.call({"SET", "stays", "v"}), "OK");
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 51");
  now_ += 1;
  std::uint64_t removed = 0;
  ASSERT_TRUE(server_->keyspace().sweep(&removed).ok());
  EXPECT_EQ(removed, 25u);
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 26");
  const std::string info = c.call({"INFO", "stats"});
  EXPECT_NE(info.find("expired_keys:25\r\n"), std::string::npos) << info;
  EXPECT_TRUE(store_->check().ok());
}

TEST_P(ServerCommands, DeadlinesSurviveARestart) {
  {
    RespClient c(port());
    ASSERT_EQ(c.call({"SET", "k", "v", "EX", "100"}), "OK");
    ASSERT_EQ(c.call({"SET", "gone", "v", "PX", "10"}), "OK");
    ASSERT_EQ(c.call({"SET", "p", "v"}), "OK");
  }
  restart();
  now_ += 10;
  RespClient c(port());
  EXPECT_EQ(c.call({"PTTL", "k"}), "(integer) 99990");
  EXPECT_EQ(c.call({"GET", "k"}), "v");
  EXPECT_EQ(c.call({"GET", "gone"}), "(nil)");
  EXPECT_EQ(c.call({"TTL", "p"}), "(integer) -1");
}

TEST_P(ServerCommands, ValuesThatLookLikeTheHeaderReadBackExactly) {
  RespClient c(port());
  const std::string mark("\xff\x00T\x01", 4);
  const std::string tricky = mark + std::string(8, '\x01') + "tail";
  EXPECT_EQ(c.call({"SET", "t", tricky}), "OK");
  EXPECT_EQ(c.call({"GET", "t"}), tricky);
  EXPECT_EQ(c.call({"TTL", "t"}), "(integer) -1");
  EXPECT_EQ(c.call({"SET", "m", mark}), "OK");
  EXPECT_EQ(c.call({"GET", "m"}), mark);
  EXPECT_EQ(c.call({"STRLEN", "m"}), "(integer) 4");
  // Written by another program: a short value with the mark reads as it is.
  ASSERT_TRUE(store_->upsert("raw", mark + "ab").ok());
  EXPECT_EQ(c.call({"GET", "raw"}), mark + "ab");
  // Without a deadline the store holds the value's own bytes.
  ASSERT_EQ(c.call({"SET", "plain", "bytes"}), "OK");
  std::string stored;
  ASSERT_TRUE(store_->get("plain", &stored).ok());
  EXPECT_EQ(stored, "bytes");
}

TEST_P(ServerCommands, MsetSetsEveryKeyAndMsetnxNeedsTransactionsForSeveral) {
  RespClient c(port());
  EXPECT_EQ(c.call({"MSET", "a", "1", "b", "2"}), "OK");
  EXPECT_EQ(c.call({"MGET", "a", "b"}), "[1, 2]");
  EXPECT_EQ(c.call({"MSET", "a", "1", "b"}), "(error) ERR wrong number of arguments for 'mset' command");
  EXPECT_EQ(c.call({"MSETNX", "a", "9"}), "(integer) 0");
  EXPECT_EQ(c.call({"MSETNX", "c", "3"}), "(integer) 1");
  if (has_transactions()) {
    EXPECT_EQ(c.call({"MSETNX", "d", "4", "a", "9"}), "(integer) 0");
    EXPECT_EQ(c.call({"EXISTS", "d"}), "(integer) 0");
    EXPECT_EQ(c.call({"MSETNX", "d", "4", "e", "5"}), "(integer) 1");
    EXPECT_EQ(c.call({"MGET", "d", "e", "a"}), "[4, 5, 1]");
  } else {
    EXPECT_EQ(c.call({"MSETNX", "d", "4", "e", "5"}).rfind("(error) ERR MSETNX of several keys needs an engine with transactions", 0), 0u);
    EXPECT_EQ(c.call({"EXISTS", "d", "e"}), "(integer) 0");
  }
  EXPECT_EQ(c.call({"FLUSHDB"}), "OK");
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 0");
  EXPECT_EQ(c.call({"FLUSHALL", "NOW"}), "(error) ERR syntax error");
}

// Connections increment shared counters at once: every increment counts,
// on every engine.
TEST_P(ServerCommands, ConcurrentIncrementsFromSeveralConnectionsAllCount) {
  constexpr int kClients = 4;
  constexpr int kEach = 400;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      RespClient c(port());
      for (int i = 0; i < kEach; ++i) {
        const std::string key = "counter" + std::to_string((t + i) % 3);
        if (c.call({"INCR", key}).rfind("(integer) ", 0) != 0) ++errors;
        if (c.call({"APPEND", "log", "x"}).rfind("(integer) ", 0) != 0) ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  RespClient c(port());
  std::int64_t total = 0;
  for (int k = 0; k < 3; ++k) total += std::stoll(c.call({"GET", "counter" + std::to_string(k)}));
  EXPECT_EQ(total, kClients * kEach);
  EXPECT_EQ(c.call({"STRLEN", "log"}), "(integer) " + std::to_string(kClients * kEach));
}

INSTANTIATE_TEST_SUITE_P(Engines, ServerCommands, ::testing::ValuesIn(Store::engines()),
                         [](const auto& info) { return info.param; });

TEST(ServerValues, EncodingRoundTripsDeadlinesAndValues) {
  for (const std::string& v : {std::string(), std::string("x"), std::string("\xff\x00T\x01", 4),
                               std::string("\xff\x00T\x01rest of it", 14)}) {
    for (std::uint64_t d : {std::uint64_t{0}, std::uint64_t{1}, kStart, ~std::uint64_t{0}}) {
      const std::string stored = encode_entry(v, d);
      const Decoded back = decode_entry(stored);
      EXPECT_EQ(back.value, v);
      EXPECT_EQ(back.deadline_ms, d);
    }
  }
  EXPECT_EQ(encode_entry("plain", 0), "plain");
}

}  // namespace
}  // namespace pmhash::server
