// tests/unit/crash_oracle_test.cc - the shared-key crash oracle
// (tests/crash/oracle.h) on small hand-made histories: it must flag a read
// of a write that a crash then took back, a lost acknowledged write and a
// stale read, accept every legal recovery, and leave writes in flight free
// either way; under epoch durability it must hold only what the epoch
// promise holds (rules E1-E4).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "crash/oracle.h"
#include "crash/workload.h"

namespace pmhash::crashtest {
namespace {

using durable::Event;
using durable::kAbsent;
using durable::kInFlight;

// A completed call (must and binds), or one in flight (end kInFlight).
Event write(Event::Kind kind, std::int64_t id, std::uint64_t start, std::uint64_t end, bool changed = true) {
  Event e;
  e.kind = kind;
  e.write = kind == Event::kRemove ? kAbsent : id;
  e.start = start;
  e.end = end;
  e.must = e.binds = end != kInFlight;
  e.changed = changed;
  return e;
}

Event get(std::int64_t observed, std::uint64_t start, std::uint64_t end) {
  Event e;
  e.kind = Event::kGet;
  e.start = start;
  e.end = end;
  e.must = e.binds = true;
  e.observed = observed;
  return e;
}

TEST(DurableRegister, ReadOfAWriteInFlightThatTheCrashLostIsFlagged) {
  // t0 inserts 1 (its drain not done at the crash); t1's get returned 1.
  const std::vector<Event> h = {write(Event::kInsert, 1, 0, kInFlight), get(1, 1, 2)};
  EXPECT_FALSE(durable::explainable(h, kAbsent));
  EXPECT_TRUE(durable::explainable(h, 1));
}

TEST(DurableRegister, WriteInFlightMayBeKeptOrLost) {
  const std::vector<Event> h = {write(Event::kUpsert, 1, 0, 1), write(Event::kUpsert, 2, 2, kInFlight),
                                write(Event::kRemove, 0, 3, kInFlight)};
  EXPECT_TRUE(durable::explainable(h, 1));       // both lost
  EXPECT_TRUE(durable::explainable(h, 2));       // the upsert kept
  EXPECT_TRUE(durable::explainable(h, kAbsent));  // the remove kept
  EXPECT_FALSE(durable::explainable(h, 7));      // no such write
}

TEST(DurableRegister, AcknowledgedWriteLostIsFlagged) {
  const std::vector<Event> h = {write(Event::kInsert, 1, 0, 1)};
  EXPECT_FALSE(durable::explainable(h, kAbsent));
  EXPECT_TRUE(durable::explainable(h, 1));
}

TEST(DurableRegister, ObservedWriteMayBeOverwrittenByAWriteInFlight) {
  // get saw 1 (in flight); 2 (in flight, begun after the get returned) may
  // have overwritten it; a lost 1 needs 2 and cannot leave the key absent.
  const std::vector<Event> h = {write(Event::kInsert, 1, 0, kInFlight), get(1, 1, 2),
                                write(Event::kUpsert, 2, 3, kInFlight)};
  EXPECT_TRUE(durable::explainable(h, 1));
  EXPECT_TRUE(durable::explainable(h, 2));
  EXPECT_FALSE(durable::explainable(h, kAbsent));
}

TEST(DurableRegister, AlreadyExistsAndNotFoundDependOnWhatTheySaw) {
  // AlreadyExists from t1 saw t0's insert in flight: it must have survived.
  const std::vector<Event> exists = {write(Event::kInsert, 1, 0, kInFlight),
                                     write(Event::kInsert, 2, 1, 2, /*changed=*/false)};
  EXPECT_FALSE(durable::explainable(exists, kAbsent));
  EXPECT_TRUE(durable::explainable(exists, 1));
  // NotFound from a get after an acknowledged insert saw a remove in flight.
  const std::vector<Event> gone = {write(Event::kInsert, 1, 0, 1), write(Event::kRemove, 0, 2, kInFlight),
                                   get(kAbsent, 3, 4)};
  EXPECT_FALSE(durable::explainable(gone, 1));
  EXPECT_TRUE(durable::explainable(gone, kAbsent));
  // An update's NotFound on a key never written binds nothing more.
  const std::vector<Event> never = {write(Event::kUpdate, 1, 0, 1, /*changed=*/false)};
  EXPECT_TRUE(durable::explainable(never, kAbsent));
}

TEST(DurableRegister, StaleReadIsFlaggedWhateverRecovers) {
  const std::vector<Event> h = {write(Event::kUpsert, 1, 0, 1), write(Event::kUpsert, 2, 2, 3), get(1, 4, 5)};
  EXPECT_FALSE(durable::explainable(h, 2));
  EXPECT_FALSE(durable::explainable(h, 1));
}

TEST(DurableRegister, OverlappingWritesRecoverInEitherOrder) {
  const std::vector<Event> h = {write(Event::kUpsert, 1, 0, 3), write(Event::kUpsert, 2, 1, 2)};
  EXPECT_TRUE(durable::explainable(h, 1));
  EXPECT_TRUE(durable::explainable(h, 2));
  EXPECT_FALSE(durable::explainable(h, kAbsent));
  // A get that overlapped both may have seen either, or nothing.
  std::vector<Event> with_get = h;
  with_get.push_back(get(kAbsent, 0, 4));
  EXPECT_TRUE(durable::explainable(with_get, 2));
}

TEST(DurableRegister, OptionalWriteThatReturnedMayBeLeftOut) {
  // (Epoch durability, E2: an acknowledged write of a failed epoch.)
  Event lost = write(Event::kUpsert, 1, 0, 1);
  lost.must = false;
  const std::vector<Event> h = {lost, write(Event::kUpsert, 2, 2, kInFlight)};
  EXPECT_TRUE(durable::explainable(h, kAbsent));
  EXPECT_TRUE(durable::explainable(h, 1));
  EXPECT_TRUE(durable::explainable(h, 2));
}

TEST(DurableRegister, LongHistoryIsCheckedQuickly) {
  // 3000 calls, pairs of them overlapping, then one write in flight per
  // thread: the search stays about linear (a failing one too).
  std::vector<Event> h;
  std::uint64_t seq = 0;
  for (std::int64_t i = 0; i < 1000; ++i) {
    h.push_back(write(Event::kUpsert, i, seq, seq + 3));
    h.push_back(get(i, seq + 4, seq + 5));
    h.push_back(get(i, seq + 1, seq + 6));  // overlaps the upsert
    seq += 7;
  }
  h.push_back(write(Event::kUpsert, 5000, seq, kInFlight));
  h.push_back(write(Event::kInsert, 5001, seq + 1, kInFlight));
  EXPECT_TRUE(durable::explainable(h, 999));
  EXPECT_TRUE(durable::explainable(h, 5000));
  EXPECT_FALSE(durable::explainable(h, 5001));  // the key was present: an insert changes nothing
  EXPECT_FALSE(durable::explainable(h, 998));
  EXPECT_FALSE(durable::explainable(h, kAbsent));
}

// --- the mapping from recorded calls (rules R1-R2, E1-E4) -------------------

class SharedHistory : public ::testing::Test {
 protected:
  SharedHistory() {
    w_.seed = 3;
    w_.threads = 2;
    w_.ops = 400;
    w_.keys = 1;  // every call is on key s0
  }

  // The first operation of thread t with `want`, from index `from` on.
  std::uint64_t find(unsigned t, bool (*want)(const Op&), std::uint64_t from = 0) const {
    for (std::uint64_t i = from; i < w_.ops; ++i) {
      if (want(shared_op_at(w_, t, i))) return i;
    }
    ADD_FAILURE() << "no such operation";
    return 0;
  }

  static Call call(unsigned t, std::uint64_t i, std::uint64_t start, std::uint64_t end,
                   Call::Answer answer = Call::kOk, std::int64_t observed = kAbsent, std::uint64_t epoch = 0) {
    Call c;
    c.thread = t;
    c.index = i;
    c.start = start;
    c.end = end;
    c.answer = answer;
    c.observed = observed;
    c.epoch = epoch;
    return c;
  }

  static bool is_insert(const Op& op) { return op.kind == Op::kInsert; }
  static bool is_plain_get(const Op& op) { return op.kind == Op::kGet && !is_snapshot_get(op); }
  static bool is_snapshot(const Op& op) { return is_snapshot_get(op); }
  static bool is_sync(const Op& op) { return op.kind == Op::kSync; }

  WorkloadSpec w_;
};

TEST_F(SharedHistory, EveryWriteValueNamesItsWrite) {
  for (unsigned t = 0; t < w_.threads; ++t) {
    for (std::uint64_t i = 0; i < w_.ops; ++i) {
      const Op op = shared_op_at(w_, t, i);
      if (op.kind == Op::kInsert || op.kind == Op::kUpdate || op.kind == Op::kUpsert) {
        ASSERT_EQ(shared_write_of(w_, op.value), shared_write_id(t, i)) << op.value;
      }
    }
  }
  EXPECT_EQ(shared_write_of(w_, "w3.0.1"), -2);  // cut short
  EXPECT_EQ(shared_write_of(w_, "#zzzzzz"), -2);
}

TEST_F(SharedHistory, CallsSurviveTheirTextForm) {
  const std::vector<Call> calls = {call(0, 5, 1, 2, Call::kOk, 81, 4), call(1, 7, 3, Call::kOpen),
                                   call(1, 9, 4, 6, Call::kAlreadyExists, kAbsent, 9)};
  std::vector<Call> back;
  ASSERT_TRUE(parse_calls(calls_text(calls), &back));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].observed, 81);
  EXPECT_EQ(back[0].epoch, 4u);
  EXPECT_EQ(back[1].end, Call::kOpen);
  EXPECT_EQ(back[2].answer, Call::kAlreadyExists);
  EXPECT_FALSE(parse_calls("1,2,3", &back));
}

TEST_F(SharedHistory, StrictFlagsAReadOfALostWriteAndAcceptsItKept) {
  const std::uint64_t ins = find(0, is_insert);
  const std::uint64_t rd = find(1, is_plain_get);
  const std::int64_t id = shared_write_id(0, ins);
  SharedCrash crash;
  crash.point = 3;
  crash.calls = {call(0, ins, 0, Call::kOpen), call(1, rd, 1, 2, Call::kOk, id)};
  const SharedOracle oracle(w_);
  const std::string flagged = oracle.check(crash, {}, ~std::uint64_t{0});
  EXPECT_NE(flagged.find("in flight at the crash"), std::string::npos) << flagged;
  EXPECT_EQ(oracle.check(crash, {{0, shared_op_at(w_, 0, ins).value}}, ~std::uint64_t{0}), "");
  // Crashed before the get returned: the insert is free either way.
  crash.point = 2;
  EXPECT_EQ(oracle.check(crash, {}, ~std::uint64_t{0}), "");
  // A value no write wrote is flagged.
  EXPECT_NE(oracle.check(crash, {{0, "w3.0.1.torn"}}, ~std::uint64_t{0}), "");
}

TEST_F(SharedHistory, EpochHoldsOnlyPromisedWritesAndDurableReads) {
  const std::uint64_t ins = find(0, is_insert);
  const std::uint64_t rd = find(1, is_plain_get);
  const std::uint64_t snap = find(1, is_snapshot);
  const std::uint64_t sync = find(1, is_sync);
  const std::int64_t id = shared_write_id(0, ins);
  const SharedOracle oracle(w_);
  SharedCrash crash;
  crash.epoch = true;
  crash.point = 10;
  // E3: a newest-state get of a write of a failed epoch binds nothing.
  crash.calls = {call(0, ins, 0, Call::kOpen), call(1, rd, 1, 2, Call::kOk, id, 5)};
  EXPECT_EQ(oracle.check(crash, {}, 5), "");
  // E4: a snapshot get of it says it was durable: it must be there.
  crash.calls = {call(0, ins, 0, Call::kOpen), call(1, snap, 1, 2, Call::kOk, id, 5)};
  EXPECT_NE(oracle.check(crash, {}, 5), "");
  EXPECT_EQ(oracle.check(crash, {{0, shared_op_at(w_, 0, ins).value}}, 5), "");
  // E1/E2: an acknowledged insert that returned in epoch 5 is promised when
  // the first failed epoch is 6, not when it is 5.
  crash.calls = {call(0, ins, 0, 1, Call::kOk, kAbsent, 5)};
  EXPECT_EQ(oracle.check(crash, {}, 5), "");
  EXPECT_NE(oracle.check(crash, {}, 6), "");
  // E1: ... or when a sync began after it returned and returned itself.
  crash.calls = {call(0, ins, 0, 1, Call::kOk, kAbsent, 5), call(1, sync, 2, 3, Call::kOk, kAbsent, 7)};
  EXPECT_NE(oracle.check(crash, {}, 5), "");
  crash.point = 3;  // the sync had not returned
  EXPECT_EQ(oracle.check(crash, {}, 5), "");
}

// The per-thread workload mixes swaps in: each kind appears, only outside
// transactions, and a swap's effect on the model is that of the plain
// write it stands for.
TEST(ThreadWorkload, SwapsAreMixedInOutsideTransactionsWithThePlainWritesEffects) {
  WorkloadSpec w;
  w.seed = 11;
  w.ops = 4000;
  w.keys = 50;
  w.transactions = true;
  std::map<Op::Kind, unsigned> seen;
  ThreadModel model;
  for (std::uint64_t i = 0; i < w.ops; ++i) {
    const Op op = op_at(w, 0, i);
    ++seen[op.kind];
    for (const Op& step : op.steps) {
      EXPECT_TRUE(step.kind != Op::kSwapIn && step.kind != Op::kSwap && step.kind != Op::kSwapOut) << i;
    }
    if (op.kind == Op::kSwapIn || op.kind == Op::kSwap || op.kind == Op::kSwapOut) {
      Op plain = op;
      plain.kind = op.kind == Op::kSwapIn ? Op::kInsert : op.kind == Op::kSwap ? Op::kUpdate : Op::kRemove;
      ThreadModel by_plain = model;
      const bool plain_changes = apply_op(plain, &by_plain);
      EXPECT_EQ(apply_op(op, &model), plain_changes) << i;
      EXPECT_EQ(model, by_plain) << i;
      EXPECT_EQ(op.kind == Op::kSwapOut, op.value.empty()) << i;
    } else {
      apply_op(op, &model);
    }
  }
  EXPECT_GT(seen[Op::kSwapIn], 20u);
  EXPECT_GT(seen[Op::kSwap], 20u);
  EXPECT_GT(seen[Op::kSwapOut], 20u);
  EXPECT_GT(seen[Op::kInsert], seen[Op::kSwapIn]);
}

}  // namespace
}  // namespace pmhash::crashtest
