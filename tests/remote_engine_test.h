// tests/remote_engine_test.h - what the tests of the engines on memory
// nodes (sephash, race) share: two fresh memory nodes per test, create and
// open through the Store API, a whole-index check against a model, the
// single-client model run, threads with their own models, client
// processes (forked) checked against models the parent recomputes, and
// the membership checks: wrong node lists refused at attach, a forced
// create fencing the clients of the old index, concurrent creates, the
// timeout bounded by the stored lease; and the scan helpers (a scan whose
// calls straddle resize steps, a cursor inside a part that resized).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "memnode_daemon.h"
#include "pmhash/store.h"
#include "remote/memnode.h"
#include "scratch_file.h"

namespace pmhash::testing {

using Model = std::map<std::string, std::string>;

inline std::string key_of(unsigned i) { return "key-" + std::to_string(i); }
inline std::string value_of(unsigned i, unsigned round) {
  return "value-" + std::to_string(i) + "-" + std::to_string(round) +
         std::string(i % 7 == 0 ? 300 : 0, 'v');  // some items longer than one slot's units
}

class RemoteEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int n = 0; n < 2; ++n) {
      nodes_.push_back(dir_.str() + "/mn" + std::to_string(n));
      const Status s = remote::create_memnode(nodes_.back(), 64u << 20, false);
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
  }

  // The engine's options on the two nodes (small structures, so that a few
  // thousand keys resize often).
  virtual Options options() const = 0;

  std::unique_ptr<Store> create(const Options& o) {
    std::unique_ptr<Store> st;
    const Status s = Store::create("", o, &st);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return st;
  }
  std::unique_ptr<Store> open(const Options& o) {
    std::unique_ptr<Store> st;
    const Status s = Store::open("", o, &st);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return st;
  }

  static void expect_holds(Store& st, const Model& model) {
    for (const auto& [k, v] : model) {
      std::string got;
      const Status s = st.get(k, &got);
      ASSERT_TRUE(s.ok()) << k << ": " << s.to_string();
      ASSERT_EQ(got, v) << k;
    }
    Model seen;
    ASSERT_TRUE(st.for_each([&](std::string_view k, std::string_view v) {
                    EXPECT_TRUE(seen.emplace(std::string(k), std::string(v)).second)
                        << "for_each gave " << k << " twice";
                    return true;
                  }).ok());
    EXPECT_EQ(seen, model);
    EXPECT_EQ(st.size(), model.size());
    const Status c = st.check();
    EXPECT_TRUE(c.ok()) << c.to_string();
  }

  // expect_holds, then again through another client attached to the same
  // nodes after this one closed.
  void expect_holds_here_and_reopened(std::unique_ptr<Store> st, const Model& model) {
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
    ASSERT_TRUE(st->close().ok());
    auto again = open(options());
    ASSERT_NE(again, nullptr);
    ASSERT_NO_FATAL_FAILURE(expect_holds(*again, model));
  }

  // Inserts key_of(from .. to-1) with value_of(i, 0), into the model too
  // (each after its insert returned).
  static void load(Store& st, unsigned from, unsigned to, Model* model) {
    for (unsigned i = from; i < to; ++i) {
      const Status s = st.insert(key_of(i), value_of(i, 0));
      ASSERT_TRUE(s.ok()) << key_of(i) << ": " << s.to_string();
      model->emplace(key_of(i), value_of(i, 0));
    }
  }

  // `steps` random inserts, updates, upserts, removes and gets of `keys`
  // keys, each answer checked against *model.
  static void run_model(Store& st, unsigned steps, unsigned keys, Model* model) {
    std::mt19937 rng(7);
    for (unsigned step = 0; step < steps; ++step) {
      const unsigned i = rng() % keys;
      const std::string k = key_of(i);
      const std::string v = value_of(i, step);
      const bool present = model->count(k) != 0;
      std::string got;
      switch (rng() % 5) {
        case 0: {
          const Status s = st.insert(k, v);
          ASSERT_EQ(s.is_already_exists(), present) << s.to_string();
          if (!present) {
            ASSERT_TRUE(s.ok()) << s.to_string();
          }
          model->emplace(k, v);
          break;
        }
        case 1: {
          const Status s = st.update(k, v);
          ASSERT_EQ(s.is_not_found(), !present) << s.to_string();
          if (present) (*model)[k] = v;
          break;
        }
        case 2:
          ASSERT_TRUE(st.upsert(k, v).ok());
          (*model)[k] = v;
          break;
        case 3: {
          const Status s = st.remove(k);
          ASSERT_EQ(s.is_not_found(), !present) << s.to_string();
          model->erase(k);
          break;
        }
        default: {
          const Status s = st.get(k, &got);
          ASSERT_EQ(s.ok(), present) << k << ": " << s.to_string();
          if (present) {
            ASSERT_EQ(got, (*model)[k]);
          }
        }
      }
    }
  }

  // 4 threads (4 clients of one store), each upserting and removing its
  // own keys against its own model and reading them back; then the whole
  // index against the union of the models.
  static void run_threads(Store& st) {
    constexpr unsigned kThreads = 4, kThreadKeys = 1500;
    std::vector<Model> models(kThreads);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(t);
        Model& m = models[t];
        for (unsigned step = 0; step < 4000; ++step) {
          const unsigned i = t * kThreadKeys + rng() % kThreadKeys;
          const std::string k = key_of(i);
          const std::string v = value_of(i, step);
          if (rng() % 4 == 0) {
            const Status s = st.remove(k);
            EXPECT_EQ(s.is_not_found(), m.count(k) == 0) << s.to_string();
            m.erase(k);
          } else {
            EXPECT_TRUE(st.upsert(k, v).ok());
            m[k] = v;
          }
          std::string got;
          const Status s = st.get(k, &got);
          EXPECT_EQ(s.ok(), m.count(k) != 0) << s.to_string();
        }
      });
    }
    for (auto& th : threads) th.join();
    Model all;
    for (const Model& m : models) all.insert(m.begin(), m.end());
    ASSERT_NO_FATAL_FAILURE(expect_holds(st, all));
  }

  // Several client processes on the same memory nodes, each writing its
  // own keys (checking every answer against its own model) while reading
  // the others'; the parent then checks the whole index against the
  // models, which it recomputes from the same seeds.
  static constexpr unsigned kProcs = 4, kKeys = 800;

  // The ops of process p, applied to `model`; with a store, each is also
  // run and its answer compared. False on the first wrong answer.
  static bool run_ops(unsigned p, unsigned steps, Model* model, Store* st) {
    std::mt19937 rng(100 + p);
    for (unsigned step = 0; step < steps; ++step) {
      const unsigned i = p * kKeys + rng() % kKeys;
      const std::string k = key_of(i);
      const std::string v = value_of(i, step);
      const bool present = model->count(k) != 0;
      const unsigned op = rng() % 4;
      const unsigned other = ((p + 1) % kProcs) * kKeys + rng() % kKeys;
      if (op == 0) {
        model->erase(k);
      } else {
        (*model)[k] = v;
      }
      if (st == nullptr) continue;
      Status s;
      if (op == 0) {
        s = st->remove(k);
        if (s.is_not_found() != !present) return false;
      } else if (op == 1) {
        s = present ? st->update(k, v) : st->insert(k, v);
        if (!s.ok()) return false;
      } else {
        if (!st->upsert(k, v).ok()) return false;
      }
      std::string got;
      s = st->get(key_of(other), &got);  // another process's key: any answer but an error
      if (!s.ok() && !s.is_not_found()) return false;
      s = st->get(k, &got);
      if (s.ok() != (model->count(k) != 0) || (s.ok() && got != (*model)[k])) return false;
    }
    return true;
  }

  // The union of the models of all processes after `steps` steps.
  static Model all_models(unsigned steps) {
    Model all;
    for (unsigned p = 0; p < kProcs; ++p) {
      Model m;
      run_ops(p, steps, &m, nullptr);
      all.insert(m.begin(), m.end());
    }
    return all;
  }

  // (Over tcp every round trip is a socket exchange with a daemon process,
  // on a machine shared with the build: fewer steps.)
  void run_processes(const Options& o, unsigned steps) {
    auto st = create(o);
    ASSERT_NE(st, nullptr);
    ASSERT_TRUE(st->close().ok());
    std::vector<pid_t> pids;
    for (unsigned p = 0; p < kProcs; ++p) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        std::unique_ptr<Store> mine;
        if (!Store::open("", o, &mine).ok()) ::_exit(2);
        Model model;
        const bool ok = run_ops(p, steps, &model, mine.get());
        ::_exit(ok && mine->close().ok() ? 0 : 1);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    }
    st = open(o);
    ASSERT_NE(st, nullptr);
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, all_models(steps)));
  }

  // The refusals of every engine on memory nodes, whose messages name
  // `engine`; leaves on the nodes of `o` an index holding "k" -> "v".
  void expect_refuses_bad_input(const Options& o, const std::string& engine) {
    std::unique_ptr<Store> st;
    // Open before any create: the nodes hold no index.
    Status s = Store::open("", o, &st);
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    EXPECT_NE(s.message().find("holds no " + engine + " index"), std::string::npos) << s.to_string();
    // A path as well as memory nodes.
    s = Store::create(dir_.str() + "/pool", o, &st);
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    // No memory nodes.
    Options none = o;
    none.memnodes.clear();
    s = Store::create(dir_.str() + "/pool", none, &st);
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    EXPECT_NE(s.message().find("memnodes"), std::string::npos) << s.to_string();
    // A memory node that is not one, and an empty entry.
    Options bad = o;
    bad.memnodes = "shm:" + dir_.str() + "/nothing";
    EXPECT_FALSE(Store::create("", bad, &st).ok());
    bad.memnodes = "shm:" + nodes_[0] + ",";
    EXPECT_TRUE(Store::create("", bad, &st).is_invalid_argument());
    // Epoch durability.
    Options epoch = o;
    epoch.durability = Durability::kEpoch;
    EXPECT_TRUE(Store::create("", epoch, &st).is_invalid_argument());

    st = create(o);
    ASSERT_NE(st, nullptr);
    ASSERT_TRUE(st->insert("k", "v").ok());
    EXPECT_TRUE(st->insert(std::string(kMaxKeySize + 1, 'k'), "v").is_invalid_argument());
    ASSERT_TRUE(st->close().ok());
    // A second create does not wipe the index; a client naming one node of two is refused.
    s = Store::create("", o, &st);
    EXPECT_TRUE(s.is_already_exists()) << s.to_string();
    Options one = o;
    one.memnodes = "shm:" + nodes_[0];
    s = Store::open("", one, &st);
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    EXPECT_NE(s.message().find("spans 2 memory nodes, 1 given"), std::string::npos) << s.to_string();
    st = open(o);
    ASSERT_NE(st, nullptr);
    std::string got;
    ASSERT_TRUE(st->get("k", &got).ok());
    EXPECT_EQ(got, "v");
  }

  // Inserts 500-byte values into the index of `o`, whose only node is the
  // 4 MiB pool `small`, until NoSpace, which must name the node; what was
  // stored must all be there.
  void expect_full_node_keeps_data(const Options& o, const std::string& small) {
    auto st = create(o);
    ASSERT_NE(st, nullptr);
    Model model;
    Status s;
    for (unsigned i = 0; i < 200000; ++i) {
      s = st->insert(key_of(i), std::string(500, 'x'));
      if (!s.ok()) break;
      model.emplace(key_of(i), std::string(500, 'x'));
    }
    ASSERT_TRUE(s.is_no_space()) << s.to_string();
    EXPECT_NE(s.message().find(small), std::string::npos) << s.to_string();
    EXPECT_GT(model.size(), 1000u);
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
  }

  // Node 0 on shm, node 1 a daemon over loopback, 3000 keys stored. The
  // daemon killed: calls on node 1 fail with IOError naming it within the
  // timeout (no hang). Restarted from its pool file on the same port: every
  // completed write is there, and writes work again.
  void expect_dead_node_fails_calls_and_restart_serves_them() {
    auto daemon = std::make_unique<Daemon>(nodes_[1], 0);
    const std::uint16_t port = daemon->port();
    ASSERT_NE(port, 0);
    Options o = options();
    o.memnodes = "shm:" + nodes_[0] + ",tcp:127.0.0.1:" + std::to_string(port);
    o.remote_timeout_ms = 500;
    auto st = create(o);
    ASSERT_NE(st, nullptr);
    Model model;
    for (unsigned i = 0; i < 3000; ++i) {
      ASSERT_TRUE(st->insert(key_of(i), value_of(i, 0)).ok());
      model.emplace(key_of(i), value_of(i, 0));
    }
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
    daemon->kill(SIGKILL);
    unsigned failed = 0;
    for (unsigned i = 0; i < 64; ++i) {
      std::string got;
      const Status s = st->get(key_of(i), &got);
      if (!s.ok()) {
        EXPECT_TRUE(s.is_io_error()) << s.to_string();
        EXPECT_NE(s.message().find("127.0.0.1"), std::string::npos) << s.to_string();
        ++failed;
      }
    }
    EXPECT_GT(failed, 0u) << "some of 64 keys live on node 1";
    daemon = std::make_unique<Daemon>(nodes_[1], port);
    ASSERT_EQ(daemon->port(), port);
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
    for (unsigned i = 0; i < 64; ++i) {
      ASSERT_TRUE(st->upsert(key_of(i), "after").ok()) << key_of(i);
      model[key_of(i)] = "after";
    }
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
  }

  // run_processes on two memory-node daemons over loopback (the same pools).
  void run_processes_on_tcp(unsigned steps) {
    Daemon d0(nodes_[0], 0), d1(nodes_[1], 0);
    ASSERT_NE(d0.port(), 0);
    ASSERT_NE(d1.port(), 0);
    Options o = options();
    o.memnodes = "tcp:127.0.0.1:" + std::to_string(d0.port()) + ",tcp:127.0.0.1:" +
                 std::to_string(d1.port());
    run_processes(o, steps);
  }

  // ---- membership (engine/remote_common/remote_index.h) ----

  // A fresh memory node "<dir>/<name>" of the fixture's size.
  std::string make_node(const std::string& name) {
    const std::string path = dir_.str() + "/" + name;
    const Status s = remote::create_memnode(path, 64u << 20, false);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return path;
  }

  // A digest of a file's bytes, per MiB: equal digests, equal files (up to
  // hash collisions), without holding two copies of 64 MiB nodes.
  static std::vector<std::size_t> digest(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << path;
    std::vector<std::size_t> out;
    std::string chunk(1u << 20, '\0');
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      out.push_back(std::hash<std::string_view>{}(
          std::string_view(chunk.data(), static_cast<std::size_t>(in.gcount()))));
    }
    return out;
  }
  static std::vector<std::vector<std::size_t>> digests(const std::vector<std::string>& paths) {
    std::vector<std::vector<std::size_t>> out;
    for (const std::string& p : paths) out.push_back(digest(p));
    return out;
  }

  static bool one_line(const std::string& m) { return m.find('\n') == std::string::npos; }

  // An attach with `list` as its memory nodes is refused with one line that
  // says `what` about the node at `position` (and names `spec`), with the
  // engine named and without (the open that takes what node 0 holds).
  void expect_attach_refused(const std::string& list, const std::string& position,
                             const std::string& spec, const std::string& what) {
    for (const bool named : {true, false}) {
      Options o = options();
      o.memnodes = list;
      if (!named) o.engine.clear();
      std::unique_ptr<Store> st;
      const Status s = Store::open("", o, &st);
      const std::string m = s.message();
      EXPECT_TRUE(s.is_invalid_argument()) << list << ": " << s.to_string();
      EXPECT_NE(m.find(position), std::string::npos) << list << ": " << m;
      EXPECT_NE(m.find(spec), std::string::npos) << list << ": " << m;
      EXPECT_NE(m.find(what), std::string::npos) << list << ": " << m;
      EXPECT_TRUE(one_line(m)) << m;
      EXPECT_EQ(st, nullptr);
    }
  }

  // An index on three nodes, and another index on two more: every wrong
  // list of them (a node twice, a fresh node in each slot, swapped order,
  // a node of the other index, a node missing or extra) is refused at
  // attach, naming the position; no byte of any node changes; the right
  // list still opens the index.
  void expect_wrong_node_lists_refused() {
    const std::string n0 = nodes_[0], n1 = nodes_[1], n2 = make_node("mn2");
    const std::string fresh = make_node("fresh"), y0 = make_node("y0"), y1 = make_node("y1");
    auto spec = [](const std::string& p) { return "shm:" + p; };
    auto list = [&](std::initializer_list<std::string> ps) {
      std::string l;
      for (const std::string& p : ps) l += (l.empty() ? "" : ",") + spec(p);
      return l;
    };
    Options x = options();
    x.memnodes = list({n0, n1, n2});
    {
      auto st = create(x);
      ASSERT_NE(st, nullptr);
      ASSERT_TRUE(st->insert("k", "v").ok());
      ASSERT_TRUE(st->close().ok());
      Options y = options();
      y.memnodes = list({y0, y1});
      auto other = create(y);
      ASSERT_NE(other, nullptr);
      ASSERT_TRUE(other->insert("k", "other").ok());
      ASSERT_TRUE(other->close().ok());
    }
    const std::vector<std::string> all = {n0, n1, n2, fresh, y0, y1};
    const auto before = digests(all);

    expect_attach_refused(list({n0, n0, n2}), "positions 0 and 1", spec(n0), "same memory node");
    expect_attach_refused(list({n0, n1, n1}), "positions 1 and 2", spec(n1), "same memory node");
    expect_attach_refused(list({fresh, n1, n2}), "(position 0)", spec(fresh), "holds no");
    expect_attach_refused(list({n0, fresh, n2}), "(position 1)", spec(fresh), "fresh memory node");
    expect_attach_refused(list({n0, n1, fresh}), "(position 2)", spec(fresh), "fresh memory node");
    expect_attach_refused(list({n1, n0, n2}), "(position 0)", spec(n1), "node 1 of the index");
    expect_attach_refused(list({n0, n2, n1}), "(position 1)", spec(n2),
                          "the index's node 2: give the nodes in the order");
    expect_attach_refused(list({n0, y1, n2}), "(position 1)", spec(y1), "another index");
    expect_attach_refused(list({y0, n1}), "(position 1)", spec(n1), "another index");
    expect_attach_refused(list({n0, n1}), "position 2", "spans 3 memory nodes, 2 given", "missing");
    expect_attach_refused(list({n0, n1, n2, fresh}), "(position 3)", spec(fresh),
                          "spans 3 memory nodes, 4 given");

    EXPECT_TRUE(digests(all) == before) << "a refused attach changed a memory node";
    auto st = open(x);
    ASSERT_NE(st, nullptr);
    std::string got;
    ASSERT_TRUE(st->get("k", &got).ok());
    EXPECT_EQ(got, "v");
  }

  // The same over tcp: daemons serving the index's nodes and a fresh one;
  // a node twice, swapped order and a fresh node are refused; the pool
  // files stay as they were.
  void expect_wrong_node_lists_refused_over_tcp() {
    const std::string fresh = make_node("fresh");
    Daemon d0(nodes_[0], 0), d1(nodes_[1], 0), df(fresh, 0);
    ASSERT_NE(d0.port(), 0);
    ASSERT_NE(d1.port(), 0);
    ASSERT_NE(df.port(), 0);
    auto spec = [](const Daemon& d) { return "tcp:127.0.0.1:" + std::to_string(d.port()); };
    Options x = options();
    x.memnodes = spec(d0) + "," + spec(d1);
    {
      auto st = create(x);
      ASSERT_NE(st, nullptr);
      ASSERT_TRUE(st->insert("k", "v").ok());
      ASSERT_TRUE(st->close().ok());
    }
    const std::vector<std::string> all = {nodes_[0], nodes_[1], fresh};
    const auto before = digests(all);
    expect_attach_refused(spec(d0) + "," + spec(d0), "positions 0 and 1", spec(d0),
                          "same memory node");
    expect_attach_refused(spec(d1) + "," + spec(d0), "(position 0)", spec(d1),
                          "node 1 of the index");
    expect_attach_refused(spec(d0) + "," + spec(df), "(position 1)", spec(df),
                          "fresh memory node");
    EXPECT_TRUE(digests(all) == before) << "a refused attach changed a memory node";
    auto st = open(x);
    ASSERT_NE(st, nullptr);
    std::string got;
    ASSERT_TRUE(st->get("k", &got).ok());
    EXPECT_EQ(got, "v");
  }

  static void expect_created_again(const Status& s, const std::string& call) {
    EXPECT_TRUE(s.is_invalid_argument()) << call << ": " << s.to_string();
    EXPECT_NE(s.message().find("created again"), std::string::npos) << call << ": " << s.to_string();
    EXPECT_NE(s.message().find("open the index again"), std::string::npos) << call << ": "
                                                                           << s.to_string();
    EXPECT_TRUE(one_line(s.message())) << s.message();
  }

  // A client of an index writes on (a thread) while another creates the
  // index again with force (`o` has a short lease): once the create has
  // returned, every call of the old client fails with the clear error
  // (get, insert, upsert, remove, for_each, also its close) and writes
  // nothing: the nodes' bytes stay as they were, and the new index holds
  // exactly what was written to it, and passes check().
  void expect_forced_create_fences_old_clients(const Options& o) {
    auto old = create(o);
    ASSERT_NE(old, nullptr);
    Model old_model;
    ASSERT_NO_FATAL_FAILURE(load(*old, 0, 300, &old_model));
    std::atomic<unsigned> written{0};
    std::atomic<bool> stopped{false};
    Status stop;
    std::thread writer([&] {
      for (unsigned i = 0;; ++i) {
        const Status s = old->upsert("old-" + std::to_string(i), "x");
        if (!s.ok()) {
          stop = s;
          break;
        }
        written.fetch_add(1);
        written.notify_all();
      }
      stopped = true;
      written.fetch_add(1);
      written.notify_all();
    });
    // The writer is under way (or already failed) before the create starts.
    for (unsigned seen = written.load(); seen < 50 && !stopped; seen = written.load()) {
      written.wait(seen);
    }
    Options force = o;
    force.force = true;
    auto fresh = create(force);
    writer.join();
    ASSERT_NE(fresh, nullptr);
    ASSERT_NO_FATAL_FAILURE(expect_created_again(stop, "the writer's last upsert"));
    Model model;
    ASSERT_NO_FATAL_FAILURE(load(*fresh, 1000, 1300, &model));
    const auto before = digests(nodes_);
    std::string got;
    expect_created_again(old->get(key_of(0), &got), "get");
    expect_created_again(old->get(key_of(1000), &got), "get of a new key");
    expect_created_again(old->insert("late", "x"), "insert");
    expect_created_again(old->upsert(key_of(1001), "x"), "upsert");
    expect_created_again(old->remove(key_of(1002)), "remove");
    expect_created_again(old->for_each([](std::string_view, std::string_view) { return true; }),
                         "for_each");
    EXPECT_TRUE(digests(nodes_) == before) << "the old client wrote to the memory nodes";
    (void)old->close();
    old.reset();
    EXPECT_TRUE(digests(nodes_) == before) << "the old client's close wrote to the memory nodes";
    ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(fresh), model));
  }

  // Creates on fresh nodes from four threads at once: exactly one wins;
  // the others are refused in one line and change nothing of its index.
  void expect_concurrent_creates_have_one_winner() {
    constexpr unsigned kCreators = 4;
    std::vector<std::unique_ptr<Store>> stores(kCreators);
    std::vector<Status> got(kCreators);
    std::latch start(kCreators);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kCreators; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        got[t] = Store::create("", options(), &stores[t]);
      });
    }
    for (auto& th : threads) th.join();
    unsigned won = kCreators;
    for (unsigned t = 0; t < kCreators; ++t) {
      if (got[t].ok()) {
        EXPECT_EQ(won, kCreators) << "two creates both won";
        won = t;
        continue;
      }
      EXPECT_TRUE(got[t].is_already_exists()) << got[t].to_string();
      EXPECT_TRUE(one_line(got[t].message())) << got[t].message();
    }
    ASSERT_LT(won, kCreators) << "no create won";
    Model model;
    ASSERT_NO_FATAL_FAILURE(load(*stores[won], 0, 500, &model));
    ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(stores[won]), model));
  }

  // An index whose lease is `lease` ms (made with `o`): an open with a
  // remote timeout above lease/2 is refused, naming both numbers; lease/2
  // and 0 (which takes lease/2) are accepted.
  void expect_timeout_above_half_the_lease_refused(const Options& o, unsigned lease) {
    {
      auto st = create(o);
      ASSERT_NE(st, nullptr);
      ASSERT_TRUE(st->insert("k", "v").ok());
      ASSERT_TRUE(st->close().ok());
    }
    Options slow = options();
    slow.remote_timeout_ms = lease / 2 + 1;
    std::unique_ptr<Store> st;
    const Status s = Store::open("", slow, &st);
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    EXPECT_NE(s.message().find(std::to_string(lease / 2 + 1) + " ms"), std::string::npos)
        << s.to_string();
    EXPECT_NE(s.message().find(std::to_string(lease) + " ms"), std::string::npos) << s.to_string();
    EXPECT_TRUE(one_line(s.message())) << s.message();
    for (const unsigned timeout : {lease / 2, 0u}) {
      Options fine = options();
      fine.remote_timeout_ms = timeout;
      auto ok = open(fine);
      ASSERT_NE(ok, nullptr) << timeout;
      std::string got;
      EXPECT_TRUE(ok->get("k", &got).ok()) << timeout;
    }
  }

  // ---- Store::scan (each engine's header, "Scan") ----
  // Each key one scan passed, with the number of times.
  using Passes = std::map<std::string, int>;

  // One scan call; its keys counted into *passes. Returns *next (0 also
  // on an error, which is a test failure).
  static std::uint64_t scan_call(Store& st, std::uint64_t cursor, std::size_t count,
                                 Passes* passes) {
    std::uint64_t next = 0;
    const Status s = st.scan(
        cursor, count, [&](std::string_view k, std::string_view) { ++(*passes)[std::string(k)]; },
        &next);
    EXPECT_TRUE(s.ok()) << "scan from " << cursor << ": " << s.to_string();
    return s.ok() ? next : 0;
  }

  // A whole scan from cursor 0 with `count` (at most `max_calls` calls).
  static void full_scan(Store& st, std::size_t count, Passes* passes, unsigned max_calls = 100000) {
    std::uint64_t cursor = 0;
    for (unsigned c = 0; c < max_calls; ++c) {
      cursor = scan_call(st, cursor, count, passes);
      if (cursor == 0) return;
    }
    ADD_FAILURE() << "a scan did not end in " << max_calls << " calls";
  }

  // The keys of `want` a scan passed not exactly once (or, with
  // at_least, not at all).
  static unsigned missed(const Model& want, const Passes& passes, bool at_least) {
    unsigned bad = 0;
    for (const auto& [k, v] : want) {
      const auto it = passes.find(k);
      const int n = it == passes.end() ? 0 : it->second;
      if (n == 0 || (!at_least && n != 1)) ++bad;
    }
    return bad;
  }

  // A scan made one call at a time, by step(), with whatever the test does
  // between the calls (resize steps parked in a hook). `present` is what
  // the test knows to be in the index and to stay there: at the first call
  // it becomes what the scan must pass; when the scan ends, each of those
  // keys not passed counts in `misses`, and the next step starts anew.
  struct ScanAcross {
    std::size_t count = 3;  // set at each start: about 12 calls a scan
    std::uint64_t cursor = 0;
    bool running = false;
    Model wanted;
    Passes passes;
    unsigned ended = 0, misses = 0;

    void step(Store& st, const Model& present) {
      if (!running) {
        wanted = present;
        count = std::max<std::size_t>(3, present.size() / 12);
        passes.clear();
        cursor = 0;
        running = true;
      }
      cursor = scan_call(st, cursor, count, &passes);
      if (cursor != 0) return;
      running = false;
      ++ended;
      misses += missed(wanted, passes, /*at_least=*/true);
    }
  };

  // A scan from cursor `mid` (inside a part's range: not a multiple of
  // any part's size) on an index holding `model`, in calls of 100 keys
  // separated by inserts of `between` (< 100) new keys each (from
  // key_of(next) on), so that the part holding `mid` and those after it
  // resize under the scan. Without writes during a call, every key of `model` whose
  // position (`position`, the engine's order) is >= mid is passed exactly
  // once, none below mid is, and no key twice.
  static void expect_scan_from_inside_a_part(Store& st, const Model& model, unsigned next,
                                             unsigned between, std::uint64_t mid,
                                             const std::function<std::uint64_t(const std::string&)>& position) {
    Passes passes;
    std::uint64_t cursor = mid;
    unsigned calls = 0;
    do {
      cursor = scan_call(st, cursor, 100, &passes);
      ++calls;
      for (unsigned i = 0; i < between; ++i, ++next) {
        ASSERT_TRUE(st.insert(key_of(next), value_of(next, 0)).ok());
      }
    } while (cursor != 0 && calls < 100000);
    ASSERT_EQ(cursor, 0u);
    EXPECT_GT(calls, 3u);
    unsigned above = 0;
    for (const auto& [k, v] : model) {
      const auto it = passes.find(k);
      const int n = it == passes.end() ? 0 : it->second;
      if (position(k) >= mid) {
        ++above;
        EXPECT_EQ(n, 1) << k << " at " << position(k) << " from " << mid;
      } else {
        EXPECT_EQ(n, 0) << k << " at " << position(k) << " below " << mid;
      }
    }
    EXPECT_GT(above, 0u);
    for (const auto& [k, n] : passes) EXPECT_EQ(n, 1) << k;
  }

  // Scanners against writers (the stress tests, tests/stress/*_scan_*):
  // `writers` threads of one client insert new keys (resizing the index
  // many times), update the stable keys and remove the doomed ones, while
  // `scanners` other clients (their own stores on the same nodes) run
  // whole scans one after another, with counts from 1 to 64. Every scan
  // must pass every stable key; `resizes` (a property of the writers'
  // client) must have grown by at least `min_resizes`.
  void scan_while_writers_resize(unsigned keys, unsigned writers, unsigned scanners,
                                 const std::string& resizes, std::uint64_t min_resizes) {
    auto st = create(options());
    ASSERT_NE(st, nullptr);
    Model stable, doomed;
    ASSERT_NO_FATAL_FAILURE(load(*st, 0, keys, &stable));
    ASSERT_NO_FATAL_FAILURE(load(*st, keys, 2 * keys, &doomed));
    const std::uint64_t resizes0 = st->stats().property(resizes);
    std::atomic<unsigned> writing{writers}, misses{0}, errors{0}, scans{0};
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < writers; ++w) {
      threads.emplace_back([&, w] {
        std::mt19937 rng(w);
        const unsigned base = (2 + w) * 10 * keys;
        for (unsigned i = 0; i < 3 * keys; ++i) {
          if (!st->insert(key_of(base + i), value_of(base + i, 0)).ok()) ++errors;
          const unsigned k = rng() % keys;
          if (!st->update(key_of(k), value_of(k, i + 1)).ok()) ++errors;
          // Every third step, the next doomed key of this thread's share
          // (those whose index minus `keys` is w modulo `writers`).
          const unsigned d = keys + i / 3 * writers + w;
          if (i % 3 == 0 && d < 2 * keys && !st->remove(key_of(d)).ok()) ++errors;
        }
        --writing;
      });
    }
    for (unsigned r = 0; r < scanners; ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<Store> mine;
        if (!Store::open("", options(), &mine).ok()) {
          ++errors;
          return;
        }
        unsigned round = r;
        do {
          Passes passes;
          full_scan(*mine, 1 + round++ * 13 % 64, &passes);
          misses += missed(stable, passes, /*at_least=*/true);
          ++scans;
        } while (writing.load() != 0);
        if (!mine->close().ok()) ++errors;
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(errors.load(), 0u);
    EXPECT_EQ(misses.load(), 0u);
    EXPECT_GE(scans.load(), scanners);
    EXPECT_GE(st->stats().property(resizes), resizes0 + min_resizes);
    const Status c = st->check();
    EXPECT_TRUE(c.ok()) << c.to_string();
  }

  ScratchDir dir_;
  std::vector<std::string> nodes_;
};

}  // namespace pmhash::testing
