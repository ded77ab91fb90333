// pmhash-server's read-modify-write and expiry commands on every pool
// engine, in process: counters, APPEND, GETSET, GETDEL, GETEX, SET's
// options, MSET and MSETNX, EXPIRE and its relatives against a clock the
// test moves, deadlines kept across a restart, values that look like the
// expiry header, increments from several connections at once that must
// all count, SCAN and RANDOMKEY, and MULTI/EXEC/WATCH (one store
// transaction where the engine has them, refused elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
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

// A SCAN reply as RespClient renders it, "[cursor, [k1, k2]]": the cursor
// and the keys (keys in these tests hold no ", " or brackets).
bool parse_scan(const std::string& reply, std::string* cursor, std::vector<std::string>* keys) {
  const std::size_t open = reply.find(", [");
  if (reply.size() < 6 || reply.front() != '[' || open == std::string::npos ||
      reply.compare(reply.size() - 2, 2, "]]") != 0) {
    return false;
  }
  *cursor = reply.substr(1, open - 1);
  keys->clear();
  const std::string list = reply.substr(open + 3, reply.size() - open - 5);
  for (std::size_t from = 0; !list.empty() && from <= list.size();) {
    const std::size_t comma = std::min(list.find(", ", from), list.size());
    keys->push_back(list.substr(from, comma - from));
    from = comma + 2;
  }
  return true;
}

// A whole SCAN with the given options after the cursor: each key and how
// often it came.
std::map<std::string, int> scan_all(RespClient& c, const std::vector<std::string>& options,
                                    int* calls = nullptr) {
  std::map<std::string, int> seen;
  std::string cursor = "0";
  int n = 0;
  do {
    std::vector<std::string> request = {"SCAN", cursor};
    request.insert(request.end(), options.begin(), options.end());
    const std::string reply = c.call(request);
    std::vector<std::string> keys;
    EXPECT_TRUE(parse_scan(reply, &cursor, &keys)) << reply;
    if (!parse_scan(reply, &cursor, &keys)) break;
    for (const std::string& k : keys) ++seen[k];
    ++n;
  } while (cursor != "0" && n < 100000);
  if (calls != nullptr) *calls = n;
  return seen;
}

TEST_P(ServerCommands, ScanPassesEveryKeyAndFiltersByMatchAndType) {
  RespClient c(port());
  for (int i = 0; i < 600; ++i) {
    ASSERT_EQ(c.call({"SET", (i % 3 == 0 ? "user:" : "item:") + std::to_string(i), "v"}), "OK");
  }
  int calls = 0;
  std::map<std::string, int> all = scan_all(c, {"COUNT", "25"}, &calls);
  EXPECT_EQ(all.size(), 600u);
  for (const auto& [k, n] : all) EXPECT_EQ(n, 1) << k;
  EXPECT_GE(calls, 2);
  EXPECT_LE(calls, 600 / 25 + 1);
  std::map<std::string, int> users = scan_all(c, {"MATCH", "user:*", "COUNT", "1000"}, &calls);
  EXPECT_EQ(users.size(), 200u);
  for (const auto& [k, n] : users) EXPECT_EQ(k.rfind("user:", 0), 0u) << k;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(scan_all(c, {"TYPE", "string"}).size(), 600u);
  EXPECT_TRUE(scan_all(c, {"TYPE", "list"}).empty());
  // An expired key is not passed; a removed one neither.
  ASSERT_EQ(c.call({"PEXPIRE", "item:1", "5"}), "(integer) 1");
  ASSERT_EQ(c.call({"DEL", "item:2"}), "(integer) 1");
  now_ += 5;
  all = scan_all(c, {});
  EXPECT_EQ(all.size(), 598u);
  EXPECT_EQ(all.count("item:1"), 0u);
  EXPECT_EQ(all.count("item:2"), 0u);
  // Errors as Redis's.
  EXPECT_EQ(c.call({"SCAN", "x"}), "(error) ERR invalid cursor");
  EXPECT_EQ(c.call({"SCAN", "-1"}), "(error) ERR invalid cursor");
  EXPECT_EQ(c.call({"SCAN", "18446744073709551616"}), "(error) ERR invalid cursor");
  EXPECT_EQ(c.call({"SCAN", "0", "COUNT", "0"}), "(error) ERR syntax error");
  EXPECT_EQ(c.call({"SCAN", "0", "COUNT", "x"}), "(error) ERR value is not an integer or out of range");
  EXPECT_EQ(c.call({"SCAN", "0", "COUNT"}), "(error) ERR syntax error");
  EXPECT_EQ(c.call({"SCAN", "0", "SOON", "1"}), "(error) ERR syntax error");
  // Any cursor a client sends is a position: the scan goes on from it and ends.
  for (const std::string cursor : {"1", "18446744073709551615", "9223372036854775808", "12345"}) {
    std::string next = cursor;
    int n = 0;
    do {
      std::vector<std::string> keys;
      const std::string reply = c.call({"SCAN", next, "COUNT", "50"});
      ASSERT_TRUE(parse_scan(reply, &next, &keys)) << reply;
    } while (next != "0" && ++n < 1000);
    EXPECT_EQ(next, "0") << "from " << cursor;
  }
}

TEST_P(ServerCommands, RandomKeyAnswersALiveKeyOrNil) {
  RespClient c(port());
  EXPECT_EQ(c.call({"RANDOMKEY"}), "(nil)");
  for (int i = 0; i < 40; ++i) ASSERT_EQ(c.call({"SET", "k" + std::to_string(i), "v"}), "OK");
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string k = c.call({"RANDOMKEY"});
    ASSERT_EQ(c.call({"EXISTS", k}), "(integer) 1") << k;
    seen.insert(k);
  }
  EXPECT_GE(seen.size(), 5u) << "RANDOMKEY keeps answering the same few keys";
  // Every key expired: nil, without a sweep.
  for (int i = 0; i < 40; ++i) ASSERT_EQ(c.call({"PEXPIRE", "k" + std::to_string(i), "1"}), "(integer) 1");
  now_ += 1;
  EXPECT_EQ(c.call({"RANDOMKEY"}), "(nil)");
}

// MULTI ... EXEC is one store transaction where the engine has them, and
// refused where it has not.
TEST_P(ServerCommands, MultiExecRunsTheBlockAsOneTransactionOrIsRefused) {
  RespClient c(port());
  if (!has_transactions()) {
    EXPECT_EQ(c.call({"WATCH", "a"}).rfind("(error) ERR WATCH needs an engine with transactions", 0), 0u);
    EXPECT_EQ(c.call({"MULTI"}).rfind("(error) ERR MULTI needs an engine with transactions", 0), 0u);
    // The block is refused whole: what a client pipelined after MULTI does
    // not run, one by one, outside a transaction.
    EXPECT_EQ(c.call({"SET", "a", "1"}).rfind("(error) ERR not run: MULTI was refused", 0), 0u);
    EXPECT_EQ(c.call({"EXEC"}), "(error) EXECABORT Transaction discarded because of previous errors.");
    EXPECT_EQ(c.call({"EXISTS", "a"}), "(integer) 0");
    EXPECT_EQ(c.call({"MULTI"}).rfind("(error) ERR MULTI needs", 0), 0u);
    EXPECT_EQ(c.call({"INCR", "a"}).rfind("(error) ERR not run", 0), 0u);
    EXPECT_EQ(c.call({"DISCARD"}), "OK");
    EXPECT_EQ(c.call({"INCR", "a"}), "(integer) 1");
    EXPECT_EQ(c.call({"EXEC"}), "(error) ERR EXEC without MULTI");
    EXPECT_EQ(c.call({"DISCARD"}), "(error) ERR DISCARD without MULTI");
    return;
  }
  EXPECT_EQ(c.call({"EXEC"}), "(error) ERR EXEC without MULTI");
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"MULTI"}), "(error) ERR MULTI calls can not be nested");
  EXPECT_EQ(c.call({"SET", "a", "1"}), "QUEUED");
  EXPECT_EQ(c.call({"INCR", "a"}), "QUEUED");
  EXPECT_EQ(c.call({"SET", "w", "word"}), "QUEUED");
  EXPECT_EQ(c.call({"INCR", "w"}), "QUEUED");  // fails alone, the rest applies (Redis)
  EXPECT_EQ(c.call({"MSET", "b", "x", "c", "y"}), "QUEUED");
  EXPECT_EQ(c.call({"GET", "a"}), "QUEUED");
  RespClient other(port());
  EXPECT_EQ(other.call({"GET", "a"}), "(nil)") << "a queued write ran before EXEC";
  EXPECT_EQ(c.call({"EXEC"}),
            "[OK, (integer) 2, OK, (error) ERR value is not an integer or out of range, OK, 2]");
  EXPECT_EQ(other.call({"MGET", "a", "w", "b", "c"}), "[2, word, x, y]");
  // DISCARD drops the block.
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"SET", "a", "dropped"}), "QUEUED");
  EXPECT_EQ(c.call({"DISCARD"}), "OK");
  EXPECT_EQ(c.call({"GET", "a"}), "2");
  // A request refused while queuing spoils the block.
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"SET", "a", "spoiled"}), "QUEUED");
  EXPECT_EQ(c.call({"NOSUCHCOMMAND"}).rfind("(error) ERR unknown command", 0), 0u);
  EXPECT_EQ(c.call({"GET"}), "(error) ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c.call({"EXEC"}), "(error) EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c.call({"GET", "a"}), "2");
  // Commands that cannot run inside a store transaction are refused.
  for (const std::vector<std::string>& refused :
       {std::vector<std::string>{"KEYS", "*"}, {"SCAN", "0"}, {"FLUSHDB"}, {"WATCH", "a"}}) {
    EXPECT_EQ(c.call({"MULTI"}), "OK");
    EXPECT_EQ(c.call(refused), "(error) ERR Command not allowed inside a transaction") << refused[0];
    EXPECT_EQ(c.call({"EXEC"}), "(error) EXECABORT Transaction discarded because of previous errors.");
  }
  EXPECT_EQ(c.call({"DBSIZE"}), "(integer) 4");
}

TEST_P(ServerCommands, WatchMakesExecRunOnlyIfTheKeysStayAsTheyWere) {
  RespClient c(port());
  RespClient other(port());
  if (!has_transactions()) {
    EXPECT_EQ(c.call({"WATCH", "balance"}).rfind("(error) ERR WATCH needs an engine with transactions", 0), 0u);
    return;
  }
  ASSERT_EQ(c.call({"SET", "balance", "10"}), "OK");
  // Unchanged: EXEC runs.
  EXPECT_EQ(c.call({"WATCH", "balance", "absent"}), "OK");
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"DECRBY", "balance", "3"}), "QUEUED");
  EXPECT_EQ(c.call({"EXEC"}), "[(integer) 7]");
  // Changed by another client between WATCH and EXEC: nothing runs.
  EXPECT_EQ(c.call({"WATCH", "balance"}), "OK");
  EXPECT_EQ(other.call({"INCR", "balance"}), "(integer) 8");
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"SET", "balance", "0"}), "QUEUED");
  EXPECT_EQ(c.call({"SET", "side", "effect"}), "QUEUED");
  EXPECT_EQ(c.call({"EXEC"}), "(nil)");
  EXPECT_EQ(c.call({"MGET", "balance", "side"}), "[8, (nil)]");
  // EXEC forgets the watched keys: a change after it does not matter.
  EXPECT_EQ(other.call({"SET", "balance", "9"}), "OK");
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"GET", "balance"}), "QUEUED");
  EXPECT_EQ(c.call({"EXEC"}), "[9]");
  // A watched absent key that appears, one that expires, UNWATCH.
  EXPECT_EQ(c.call({"WATCH", "fresh"}), "OK");
  EXPECT_EQ(other.call({"SET", "fresh", "x"}), "OK");
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"GET", "fresh"}), "QUEUED");
  EXPECT_EQ(c.call({"EXEC"}), "(nil)");
  ASSERT_EQ(c.call({"SET", "short", "v", "PX", "10"}), "OK");
  EXPECT_EQ(c.call({"WATCH", "short"}), "OK");
  now_ += 10;
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"SET", "side", "effect"}), "QUEUED");
  EXPECT_EQ(c.call({"EXEC"}), "(nil)");
  EXPECT_EQ(c.call({"WATCH", "balance"}), "OK");
  EXPECT_EQ(c.call({"UNWATCH"}), "OK");
  EXPECT_EQ(other.call({"SET", "balance", "1"}), "OK");
  EXPECT_EQ(c.call({"MULTI"}), "OK");
  EXPECT_EQ(c.call({"SET", "side", "effect"}), "QUEUED");
  EXPECT_EQ(c.call({"EXEC"}), "[OK]");
}

// Transfers between two counters from several connections, each a MULTI
// block, and readers that read both in one block: every reader sees the
// sum unchanged, and no transfer is lost.
TEST_P(ServerCommands, ConcurrentExecBlocksAreIsolatedAndAllApply) {
  if (!has_transactions()) {
    RespClient c(port());
    EXPECT_EQ(c.call({"MULTI"}).rfind("(error) ERR MULTI needs an engine with transactions", 0), 0u);
    EXPECT_EQ(c.call({"DISCARD"}), "OK");
    return;
  }
  constexpr int kWriters = 3;
  constexpr int kEach = 150;
  {
    RespClient c(port());
    ASSERT_EQ(c.call({"MSET", "from", "1000", "to", "0"}), "OK");
  }
  std::atomic<int> errors{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&] {
      RespClient c(port());
      for (int i = 0; i < kEach; ++i) {
        if (c.call({"MULTI"}) != "OK") ++errors;
        if (c.call({"DECR", "from"}) != "QUEUED") ++errors;
        if (c.call({"INCR", "to"}) != "QUEUED") ++errors;
        const std::string r = c.call({"EXEC"});
        if (r.rfind("[(integer) ", 0) != 0) ++errors;
      }
    });
  }
  std::atomic<int> torn{0};
  std::thread reader([&] {
    RespClient c(port());
    while (!done.load()) {
      c.call({"MULTI"});
      c.call({"GET", "from"});
      c.call({"GET", "to"});
      const std::string r = c.call({"EXEC"});  // "[a, b]"
      const std::size_t comma = r.find(", ");
      if (r.size() < 5 || comma == std::string::npos) {
        ++errors;
        continue;
      }
      const long a = std::stol(r.substr(1, comma - 1));
      const long b = std::stol(r.substr(comma + 2, r.size() - comma - 3));
      if (a + b != 1000) ++torn;
    }
  });
  for (std::thread& t : threads) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "a reader's block saw half a transfer";
  RespClient c(port());
  EXPECT_EQ(c.call({"MGET", "from", "to"}),
            "[" + std::to_string(1000 - kWriters * kEach) + ", " + std::to_string(kWriters * kEach) + "]");
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
