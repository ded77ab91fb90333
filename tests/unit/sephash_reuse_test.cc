// Unit tests of sephash's block ownership when a batch fails without
// saying whether it ran (sephash.h, "Reclamation", lost replies): a push
// or pop of a free record, or a merge's publish, whose reply is lost after
// it ran, or whose request runs only after the client gave up on it
// (remote/remote_testing.h, set_fate_hook). No block may then be
// owned twice. Two witnesses, on shm memory nodes:
//   - a ledger of every block any client of the process takes and frees
//     (sephash_testing.h, set_block_hook): no block is taken while it, or part
//     of it, is taken, and only taken blocks are freed;
//   - once every client has closed, a scan of the nodes: the blocks the
//     index names (CurSegs, MainSegs, the items of live entries) and the
//     blocks on the free stacks (records and their entries) overlap
//     nowhere;
// and every key written reads back, and check() passes.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

#include "engine/sephash/layout.h"
#include "engine/sephash/sephash.h"
#include "engine/sephash/sephash_testing.h"
#include "pmhash/store.h"
#include "remote/client.h"
#include "remote/remote_testing.h"
#include "remote_engine_test.h"

namespace pmhash {
namespace {

namespace sh = engine::sephash;
using remote::Fate;
using remote::Op;
using remote::Verb;
using sh::BlockUse;
using testing::key_of;
using testing::Model;

// Every block taken and not freed since, per node by offset.
class Ledger {
 public:
  void use(BlockUse use, unsigned node, std::uint64_t off, std::uint64_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    std::map<std::uint64_t, std::uint64_t>& taken = taken_[node];
    const std::string what = "node " + std::to_string(node) + " block " + std::to_string(off) +
                             " (" + std::to_string(bytes) + " bytes)";
    if (use == BlockUse::kFreed) {
      auto it = taken.find(off);
      if (it == taken.end() || it->second != bytes) {
        add_error(what + " freed, but it was not taken");
      } else {
        taken.erase(it);
      }
      return;
    }
    ++takes_;
    auto next = taken.lower_bound(off);
    if (next != taken.end() && next->first < off + bytes) {
      add_error(what + " taken while block " + std::to_string(next->first) + " is taken");
      return;
    }
    if (next != taken.begin() && std::prev(next)->first + std::prev(next)->second > off) {
      add_error(what + " taken while block " + std::to_string(std::prev(next)->first) +
                " is taken");
      return;
    }
    taken.emplace(off, bytes);
  }

  std::uint64_t takes() const {
    std::lock_guard<std::mutex> g(mu_);
    return takes_;
  }
  std::uint64_t error_count() const {
    std::lock_guard<std::mutex> g(mu_);
    return errors_;
  }
  std::string first_errors() const {
    std::lock_guard<std::mutex> g(mu_);
    std::string out;
    for (const std::string& e : first_) out += "\n  " + e;
    return out;
  }

 private:
  void add_error(std::string e) {
    if (first_.size() < 10) first_.push_back(std::move(e));
    ++errors_;
  }
  mutable std::mutex mu_;
  std::map<unsigned, std::map<std::uint64_t, std::uint64_t>> taken_;
  std::uint64_t takes_ = 0, errors_ = 0;
  std::vector<std::string> first_;
};

// The batches of the free stacks (layout.h, FreeTable; sephash.cc,
// push_record and pop_record), known by their verbs. A push writes a
// record and CASes the head to it; a pop CASes the head to the record
// below (another offset); a CAS that keeps the head's offset only moves
// its tag (what a client does to settle a lost push or pop).
bool is_push(std::span<const Op> ops, std::uint64_t table) {
  return ops.size() == 2 && ops[0].verb == Verb::kWrite && ops[0].len == sh::kFreeRecordBytes &&
         ops[1].verb == Verb::kCas && ops[1].off == table;
}
bool is_pop(std::span<const Op> ops, std::uint64_t table) {
  return ops.size() == 1 && ops[0].verb == Verb::kCas && ops[0].off == table &&
         sh::head_off(ops[0].arg1) != sh::head_off(ops[0].arg0);
}
bool is_stack(std::span<const Op> ops, std::uint64_t table) {
  return std::any_of(ops.begin(), ops.end(),
                     [&](const Op& op) { return op.verb == Verb::kCas && op.off == table; });
}
// A merge's or split's publish: the slots rewritten, then the meta.
bool is_publish(std::span<const Op> ops) {
  return ops.size() >= 2 && ops.back().verb == Verb::kWrite && ops.back().len == 8 &&
         std::any_of(ops.begin(), ops.end(), [](const Op& op) {
           return op.verb == Verb::kWrite && op.len == sh::kCurSlots * 8;
         });
}

class SepHashReuseTest : public testing::RemoteEngineTest {
 protected:
  void SetUp() override {
    RemoteEngineTest::SetUp();
    sh::testing::set_block_hook(
        [this](BlockUse use, unsigned node, std::uint64_t off, std::uint64_t bytes) {
          ledger_.use(use, node, off, bytes);
        });
  }
  void TearDown() override {
    remote::testing::set_fate_hook(nullptr);
    sh::testing::set_block_hook(nullptr);
  }

  Options options() const override {
    Options o;
    o.engine = "sephash";
    o.memnodes = "shm:" + nodes_[0] + ",shm:" + nodes_[1];
    // Small segments: a few thousand keys merge and split often.
    o.set("sephash.initial_depth", 1);
    o.set("sephash.main_max_slots", 2 * sh::kCurSlots);
    o.set("sephash.max_depth", 12);
    return o;
  }

  std::unique_ptr<remote::Client> connect() const {
    std::unique_ptr<remote::Client> c;
    const Status s = remote::Client::connect({"shm:" + nodes_[0], "shm:" + nodes_[1]}, {}, &c);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return c;
  }

  sh::IndexRoot root() const {
    sh::IndexRoot r{};
    auto c = connect();
    if (!c) return r;
    remote::Batch b;
    b.read(0, sh::kRootOff, &r, sizeof(r));
    EXPECT_TRUE(c->exec_sync(b).ok());
    return r;
  }

  // The ledger holds no error, and it saw blocks taken.
  void expect_ledger_clean() const {
    EXPECT_GT(ledger_.takes(), 0u);
    EXPECT_EQ(ledger_.error_count(), 0u) << ledger_.first_errors();
  }

  // With no client open: the blocks the index names and the blocks on the
  // free stacks overlap nowhere.
  void expect_no_block_twice() const {
    struct Range {
      unsigned node;
      std::uint64_t off, bytes;
      std::string what;
    };
    std::vector<Range> ranges;
    auto c = connect();
    ASSERT_NE(c, nullptr);
    const sh::IndexRoot r = root();
    auto exec = [&](remote::Batch& b) {
      const Status s = c->exec_sync(b);
      EXPECT_TRUE(s.ok()) << s.to_string();
      return s.ok();
    };
    // The index: the segments of the directory, their MainSegs and items.
    std::vector<sh::RAddr> dir(std::size_t{1} << r.global_depth);
    remote::Batch b;
    b.read(0, r.directory, dir.data(), static_cast<std::uint32_t>(dir.size() * 8));
    ASSERT_TRUE(exec(b));
    std::unordered_set<sh::RAddr> segs(dir.begin(), dir.end());
    for (sh::RAddr seg : segs) {
      const unsigned node = sh::raddr_node(seg);
      const std::uint64_t off = sh::raddr_off(seg);
      std::uint64_t meta = 0;
      std::vector<std::uint64_t> slots(sh::kCurSlots);
      b.clear();
      b.read(node, off + sh::kMetaOff, &meta, 8);
      b.read(node, off + sh::kSlotsOff, slots.data(), sh::kCurSlots * 8);
      ASSERT_TRUE(exec(b));
      ASSERT_EQ(meta & sh::kMetaLock, 0u) << "segment " << off << " is locked";
      ranges.push_back({node, off, sh::kCurSegBytes, "CurSeg"});
      std::vector<std::uint64_t> entries;
      for (std::uint64_t s : slots) {
        if (sh::slot_live(s, sh::meta_sign(meta))) entries.push_back(s);
      }
      if (const unsigned n = sh::meta_main_len(meta); n != 0) {
        const std::uint64_t units = std::bit_ceil((sh::main_bytes(n) + 63) / 64);
        ranges.push_back({node, sh::meta_main_off(meta), units * 64, "MainSeg"});
        std::vector<std::uint64_t> main(n);
        b.clear();
        b.read(node, sh::meta_main_off(meta) + sh::kPrefixBytes, main.data(), n * 8);
        ASSERT_TRUE(exec(b));
        entries.insert(entries.end(), main.begin(), main.end());
      }
      for (std::uint64_t e : entries) {
        std::uint64_t units = sh::slot_len(e);
        if (units == 0) {
          sh::ItemHeader h{};
          b.clear();
          b.read(node, sh::slot_item(e), &h, sizeof(h));
          ASSERT_TRUE(exec(b));
          units = (sizeof(h) + std::uint64_t{h.key_len} + h.value_len + 63) / 64;
        }
        ranges.push_back({node, sh::slot_item(e), units * 64, "item"});
      }
    }
    // The stacks: every record and the blocks it lists.
    for (unsigned node = 0; node < 2; ++node) {
      std::uint64_t head = 0;
      b.clear();
      b.read(node, r.free_table, &head, 8);
      ASSERT_TRUE(exec(b));
      std::vector<std::uint64_t> rec(sh::kFreeRecordBytes / 8);
      unsigned records = 0;
      for (std::uint64_t at = sh::head_off(head); at != 0; at = rec[0]) {
        ASSERT_LT(++records, 100000u) << "node " << node << ": the stack has a cycle";
        b.clear();
        b.read(node, at, rec.data(), sh::kFreeRecordBytes);
        ASSERT_TRUE(exec(b));
        ASSERT_LE(rec[1], sh::kFreeRecordEntries);
        ranges.push_back({node, at, sh::kFreeRecordBytes, "free record"});
        for (std::uint64_t i = 0; i < rec[1]; ++i) {
          ranges.push_back({node, sh::entry_off(rec[2 + i]), sh::entry_units(rec[2 + i]) * 64,
                            "free block of the record at " + std::to_string(at)});
        }
      }
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
      return a.node != b.node ? a.node < b.node : a.off < b.off;
    });
    unsigned overlaps = 0;
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      const Range& a = ranges[i - 1];
      const Range& z = ranges[i];
      if (a.node != z.node || a.off + a.bytes <= z.off) continue;
      if (++overlaps <= 10) {
        ADD_FAILURE() << "node " << a.node << ": " << a.what << " at " << a.off << " ("
                      << a.bytes << " bytes) and " << z.what << " at " << z.off << " ("
                      << z.bytes << " bytes) overlap";
      }
    }
    EXPECT_EQ(overlaps, 0u) << "of " << ranges.size() << " blocks";
    EXPECT_GT(ranges.size(), 1000u);
  }

  // Writes that a lost reply may fail: made again until they succeed
  // (an upsert twice, or a remove twice, leaves what once would).
  static void upsert(Store& st, const std::string& k, const std::string& v, Model* model,
                     std::atomic<unsigned>* failures = nullptr) {
    for (unsigned attempt = 0;; ++attempt) {
      const Status s = st.upsert(k, v);
      if (s.ok()) break;
      ASSERT_TRUE(s.is_io_error()) << k << ": " << s.to_string();
      ASSERT_LT(attempt, 50u) << k << ": " << s.to_string();
      if (failures != nullptr) failures->fetch_add(1);
    }
    (*model)[k] = v;
  }
  static void remove(Store& st, const std::string& k, Model* model,
                     std::atomic<unsigned>* failures = nullptr) {
    for (unsigned attempt = 0;; ++attempt) {
      const Status s = st.remove(k);
      if (s.ok() || (attempt > 0 && s.is_not_found())) break;
      ASSERT_TRUE(s.is_io_error()) << k << ": " << s.to_string();
      ASSERT_LT(attempt, 50u) << k << ": " << s.to_string();
      if (failures != nullptr) failures->fetch_add(1);
    }
    model->erase(k);
  }

  // Keys [from, to) written, then [from, from + removed) removed: the
  // removes' merges free two blocks per key and take one, so the client
  // holds a surplus and pushes records of it to the stacks.
  static void fill_and_empty(Store& st, unsigned from, unsigned to, unsigned removed,
                             Model* model, std::atomic<unsigned>* failures = nullptr) {
    for (unsigned i = from; i < to; ++i) {
      ASSERT_NO_FATAL_FAILURE(upsert(st, key_of(i), "v" + std::to_string(i), model, failures));
    }
    for (unsigned i = from; i < from + removed; ++i) {
      ASSERT_NO_FATAL_FAILURE(remove(st, key_of(i), model, failures));
    }
  }

  // Keys [from, to) written with values of their own.
  static void write_keys(Store& st, unsigned from, unsigned to, Model* model) {
    for (unsigned i = from; i < to; ++i) {
      ASSERT_NO_FATAL_FAILURE(upsert(st, key_of(i), "w" + std::to_string(i), model));
    }
  }

  // With every client closed: the ledger is clean, nothing on the nodes
  // overlaps, and everything written reads back through a new client.
  void expect_all_holds(const Model& model) {
    expect_ledger_clean();
    ASSERT_NO_FATAL_FAILURE(expect_no_block_twice());
    auto d = open(options());
    ASSERT_NE(d, nullptr);
    ASSERT_NO_FATAL_FAILURE(expect_holds(*d, model));
    ASSERT_TRUE(d->close().ok());
  }

  Ledger ledger_;
};

// The fate of the one batch each test picks.
class SepHashLostReplyTest : public SepHashReuseTest,
                             public ::testing::WithParamInterface<Fate> {};

std::string fate_name(const ::testing::TestParamInfo<Fate>& info) {
  return info.param == Fate::kLoseReply ? "ReplyLost" : "RequestLate";
}

// A client pushes a record of its surplus; the push runs but its reply is
// lost (or the request runs only after the client gave up on it). The
// client must not keep blocks that are on the stack: it and another
// client then allocate from the same sizes at once, a third takes all
// the rest, and no block is ever held twice.
TEST_P(SepHashLostReplyTest, ABlockPushedWithoutAReplyIsNeverHandedOutTwice) {
  auto a = create(options());
  ASSERT_NE(a, nullptr);
  const std::uint64_t table = root().free_table;
  std::atomic<unsigned> fired{0};
  const Fate fate = GetParam();
  remote::testing::set_fate_hook([&](unsigned, std::span<const Op> ops) {
    if (!is_push(ops, table) || fired.fetch_add(1) != 0) return Fate::kDeliver;
    return fate;
  });
  Model model;
  ASSERT_NO_FATAL_FAILURE(fill_and_empty(*a, 0, 8000, 8000, &model));
  ASSERT_GE(fired.load(), 2u);  // the first push was the one, and others followed
  // The client knows what became of it: pushed (the reply was lost), or
  // not, and then the record's block may still be written by the late
  // request: given up.
  const std::uint64_t leaked = a->stats().property("sephash.bytes_leaked");
  if (fate == Fate::kLoseReply) {
    EXPECT_EQ(leaked, 0u);
  } else {
    EXPECT_EQ(leaked, sh::kFreeRecordBytes);
  }
  auto b = open(options());
  ASSERT_NE(b, nullptr);
  Model mb;
  std::jthread tb([&] { write_keys(*b, 100000, 104000, &mb); });
  ASSERT_NO_FATAL_FAILURE(write_keys(*a, 200000, 204000, &model));
  tb.join();
  ASSERT_TRUE(a->close().ok());
  ASSERT_TRUE(b->close().ok());
  a.reset();
  b.reset();
  auto c = open(options());
  ASSERT_NE(c, nullptr);
  ASSERT_NO_FATAL_FAILURE(write_keys(*c, 300000, 316000, &model));
  EXPECT_GT(c->stats().property("sephash.blocks_reused"), 2000u);  // it took what a and b handed back
  ASSERT_TRUE(c->close().ok());
  c.reset();
  model.insert(mb.begin(), mb.end());
  ASSERT_NO_FATAL_FAILURE(expect_all_holds(model));
}

// A client pops a record and the reply of its CAS is lost (or the CAS
// runs after the client gave up): it takes none of the record's blocks,
// which are then either still on the stack for others or nobody's.
TEST_P(SepHashLostReplyTest, APopWithoutAReplyTakesNothingThatStaysOnTheStack) {
  Model model;
  {
    auto a = create(options());
    ASSERT_NE(a, nullptr);
    ASSERT_NO_FATAL_FAILURE(fill_and_empty(*a, 0, 8000, 6000, &model));
    ASSERT_TRUE(a->close().ok());  // every block it holds goes to the stacks
  }
  const std::uint64_t table = root().free_table;
  std::atomic<unsigned> fired{0};
  const Fate fate = GetParam();
  const std::thread::id b_thread = std::this_thread::get_id();  // b's calls run here
  remote::testing::set_fate_hook([&](unsigned, std::span<const Op> ops) {
    if (std::this_thread::get_id() != b_thread || !is_pop(ops, table) ||
        fired.fetch_add(1) != 0) {
      return Fate::kDeliver;
    }
    return fate;
  });
  auto b = open(options());
  ASSERT_NE(b, nullptr);
  auto c = open(options());
  ASSERT_NE(c, nullptr);
  std::atomic<unsigned> failures{0};
  // b's first allocations pop (its chunks are empty): alone, so that the
  // stack does not change under the pop whose reply is lost.
  for (unsigned i = 200000; i < 200100; ++i) {
    ASSERT_NO_FATAL_FAILURE(upsert(*b, key_of(i), "b", &model, &failures));
  }
  ASSERT_GE(fired.load(), 1u);
  Model mc;
  std::jthread tc([&] { write_keys(*c, 100000, 106000, &mc); });
  for (unsigned i = 200100; i < 206000; ++i) {
    ASSERT_NO_FATAL_FAILURE(upsert(*b, key_of(i), "b", &model, &failures));
  }
  tc.join();
  EXPECT_GE(fired.load(), 2u);
  EXPECT_GE(failures.load(), 1u);  // the call whose pop lost its reply
  // Popped and not taken (a lost reply: the pop ran, and another client
  // popping the same head would have written the same word), or not
  // popped (late: the client's settling CAS ran first, so the pop never
  // can).
  const std::uint64_t leaked = b->stats().property("sephash.bytes_leaked");
  if (fate == Fate::kLoseReply) {
    EXPECT_GE(leaked, sh::kFreeRecordBytes);
  } else {
    EXPECT_EQ(leaked, 0u);
  }
  ASSERT_TRUE(b->close().ok());
  ASSERT_TRUE(c->close().ok());
  model.insert(mc.begin(), mc.end());
  ASSERT_NO_FATAL_FAILURE(expect_all_holds(model));
}

INSTANTIATE_TEST_SUITE_P(Fates, SepHashLostReplyTest,
                         ::testing::Values(Fate::kLoseReply, Fate::kDelay), fate_name);

// Every fifth merge or split publish runs and loses its reply. The holder
// reads the segment back, sees its own publish (meta and seq), and goes on
// as if the reply had come: it frees what the merge dropped, nothing
// else, and the call succeeds.
TEST_F(SepHashReuseTest, AMergeWhosePublishReplyIsLostFreesOnlyWhatItDropped) {
  auto a = create(options());
  ASSERT_NE(a, nullptr);
  std::atomic<unsigned> publishes{0}, lost{0};
  remote::testing::set_fate_hook([&](unsigned, std::span<const Op> ops) {
    if (!is_publish(ops) || publishes.fetch_add(1) % 5 != 4) return Fate::kDeliver;
    lost.fetch_add(1);
    return Fate::kLoseReply;
  });
  Model model;
  std::atomic<unsigned> failures{0};
  std::mt19937 rng(5);
  for (unsigned step = 0; step < 16000; ++step) {
    const unsigned i = rng() % 3000;
    if (rng() % 4 == 0 && model.count(key_of(i)) != 0) {
      ASSERT_NO_FATAL_FAILURE(remove(*a, key_of(i), &model, &failures));
    } else {
      ASSERT_NO_FATAL_FAILURE(
          upsert(*a, key_of(i), testing::value_of(i, step), &model, &failures));
    }
  }
  const Stats st = a->stats();
  EXPECT_GE(lost.load(), 10u);
  EXPECT_GE(st.property("sephash.splits"), 4u);  // splits too
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(st.property("sephash.bytes_leaked"), 0u);
  EXPECT_GT(st.property("sephash.blocks_reused"), 1000u);
  ASSERT_TRUE(a->close().ok());
  a.reset();
  ASSERT_NO_FATAL_FAILURE(expect_all_holds(model));
}

// Three clients at once fill, empty and write new keys of their own while
// every second batch of the free stacks (pushes, pops, and the CASes that
// settle them) loses its reply or runs late, in turn; they close (handing
// back what they hold, through the same losses), and a fourth takes it
// all, through the same losses too.
TEST_F(SepHashReuseTest, ClientsLosingEverySecondStackReplyNeverShareABlock) {
  {
    auto st = create(options());
    ASSERT_NE(st, nullptr);
    ASSERT_TRUE(st->close().ok());
  }
  const std::uint64_t table = root().free_table;
  std::atomic<unsigned> stack_batches{0}, replies_lost{0}, requests_late{0};
  remote::testing::set_fate_hook([&](unsigned, std::span<const Op> ops) {
    if (!is_stack(ops, table)) return Fate::kDeliver;
    const unsigned n = stack_batches.fetch_add(1);
    if (n % 2 == 0) return Fate::kDeliver;
    if (n % 4 == 1) {
      replies_lost.fetch_add(1);
      return Fate::kLoseReply;
    }
    requests_late.fetch_add(1);
    return Fate::kDelay;
  });
  constexpr unsigned kClients = 3;
  std::vector<Model> models(kClients);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto st = open(options());
      ASSERT_NE(st, nullptr);
      const unsigned base = 100000 * (t + 1);
      ASSERT_NO_FATAL_FAILURE(fill_and_empty(*st, base, base + 6000, 5000, &models[t]));
      // New keys: first from its own free blocks, then from the records
      // the others pushed, while they do the same.
      for (unsigned i = base + 6000; i < base + 12000; ++i) {
        ASSERT_NO_FATAL_FAILURE(upsert(*st, key_of(i), "again", &models[t]));
      }
      // The hand-back's failures are leaks, not errors of close.
      EXPECT_TRUE(st->close().ok());
    });
  }
  for (auto& th : threads) th.join();
  Model all;
  for (const Model& m : models) all.insert(m.begin(), m.end());
  {
    auto d = open(options());
    ASSERT_NE(d, nullptr);
    ASSERT_NO_FATAL_FAILURE(write_keys(*d, 900000, 912000, &all));
    EXPECT_GT(d->stats().property("sephash.blocks_reused"), 100u);  // it took what the others handed back
    ASSERT_TRUE(d->close().ok());
  }
  remote::testing::set_fate_hook(nullptr);
  EXPECT_GE(replies_lost.load(), 3u);
  EXPECT_GE(requests_late.load(), 3u);
  ASSERT_NO_FATAL_FAILURE(expect_all_holds(all));
}

}  // namespace
}  // namespace pmhash
