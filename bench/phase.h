// bench/phase.h - one timed phase of pmhash-bench: T worker threads drive a
// Table through pre-generated operations while the calling thread samples.
//
// Timing. Workers line up on a barrier with the sampling thread; each takes
// steady_clock when the barrier opens and when its last operation returns.
// The phase lasts from the earliest start to the latest end, so a straggler
// counts (as in YCSB, throughput is operations / wall time of the phase).
//
// Per operation a worker reads the time-stamp counter once (histogram.h):
// the latency of an operation is the time from the previous reading to this
// one. Latencies go to per-thread, per-operation-type histograms, merged
// after the phase.
//
// Sampling. The calling thread wakes every 10 ms and reads the workers'
// progress counters: it records the throughput of every 100 ms interval (a
// stall during a resize shows as a dip) and draws a progress bar on stderr
// when stderr is a terminal and the phase has run for more than a second.
// Sampling never synchronises anything: the end of the phase is detected
// through an atomic count of finished workers.
//
// Load factor (load phases of tables that report one): worker 0 reads the
// table's load factor each time it has inserted another 10,000 / T keys,
// about every 10,000 inserts of all workers together, and records it with
// the sum of all workers' progress at that moment. It is a worker, not the
// sampling thread, because with as many workers as cores the sampling thread
// may not be scheduled for many milliseconds. The reading is kept out of the
// next operation's latency.
//
// Checking. Every operation's outcome is compared with the expected one
// (ycsb.h, "Expected outcomes"); the first unexpected outcome of each worker
// is kept, and the driver fails the run if there was any: a benchmark of a
// broken table is not a result.
//
// Transactions (txn workload). A transaction is one operation: one call of
// Table::transact, timed from the previous operation's end to its commit,
// retries included. Its outcome is OK only if every read found its record
// and the update committed; the attempts the table aborted and retried are
// counted (txn_aborts), as are the transactions that needed a retry
// (txn_retried).
#pragma once

#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "histogram.h"
#include "table.h"
#include "workload.h"
#include "ycsb.h"

namespace pmhash::bench {

struct PhaseOutcome {
  std::string name;  // "load" or "run"
  std::uint64_t ops = 0;
  double seconds = 0;
  // The phase's first start and last end on steady_clock (CLOCK_MONOTONIC
  // on Linux), ns: what a profile recorded with that clock (perf record
  // -k CLOCK_MONOTONIC) is split by, to charge each sample to its phase.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  Histogram all;
  Histogram by_type[kOpTypes];
  std::uint64_t ok = 0;
  std::uint64_t not_found = 0;
  std::uint64_t already_exists = 0;
  std::uint64_t unexpected = 0;
  std::string first_unexpected;
  std::uint64_t txn_aborts = 0;   // attempts aborted and retried
  std::uint64_t txn_retried = 0;  // transactions with at least one retry
  double interval_s = 0.1;
  std::vector<double> timeseries;    // ops/s of each interval
  std::vector<double> timeseries_t;  // end of each interval, s since the start
  std::vector<std::pair<std::uint64_t, double>> load_factor;  // (ops done, load factor)
  bool stream_exhausted = false;  // --duration: the stream ended first
  TableStats before;
  TableStats after;  // after quiesce
  double quiesce_seconds = 0;

  double ops_per_s() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

// Where each worker's operations come from.
struct PhaseWork {
  // Load phase: the keys of records [0, N), thread t inserting slice t.
  const LoadKeys* load = nullptr;
  // Run phase: one stream per thread.
  const std::vector<OpStream>* streams = nullptr;
  const KeySpace* space = nullptr;
  // Run phase with --duration: stop at the deadline; streams of workloads
  // without inserts or deletes are replayed from the start until then.
  std::optional<std::chrono::duration<double>> duration;
  bool replay = false;
  bool negative_reads = false;
  std::string progress_label;  // shown in the progress bar
};

namespace detail {

struct alignas(64) Worker {
  Histogram by_type[kOpTypes];
  std::uint64_t ok = 0;
  std::uint64_t not_found = 0;
  std::uint64_t already_exists = 0;
  std::uint64_t txn_aborts = 0;
  std::uint64_t txn_retried = 0;
  Tally tally;
  bool exhausted = false;
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
  std::vector<std::pair<std::uint64_t, double>> load_factor;  // worker 0 only
  alignas(64) std::atomic<std::uint64_t> progress{0};
};

using Workers = std::vector<std::unique_ptr<Worker>>;

inline std::uint64_t total_progress(const Workers& workers) {
  std::uint64_t done = 0;
  for (const auto& w : workers) done += w->progress.load(std::memory_order_relaxed);
  return done;
}

inline std::string quoted(std::string_view key) { return "'" + printable_key(key) + "'"; }

// Counts the outcome of one operation; `expect_absent`: the key was never
// inserted, NotFound is the only right answer.
inline void classify(Worker& w, const Status& s, bool must, bool expect_absent, OpType type,
                     std::string_view key) {
  if (type == OpType::kTxn && !s.ok()) {
    // Every transaction must commit; the table's message names the key.
    if (s.is_not_found()) ++w.not_found;
    w.tally.fail("txn (first key " + quoted(key) + "): " + s.to_string());
    return;
  }
  if (s.ok()) {
    ++w.ok;
    if (expect_absent) w.tally.fail(std::string(kOpNames[static_cast<int>(type)]) + " " +
                                    quoted(key) + ": found a key that was never inserted");
  } else if (s.is_not_found()) {
    ++w.not_found;
    if (must && !expect_absent) {
      w.tally.fail(std::string(kOpNames[static_cast<int>(type)]) + " " + quoted(key) +
                   ": NotFound, but the key must be present");
    }
  } else if (s.is_already_exists()) {
    ++w.already_exists;
    if (must) {
      w.tally.fail(std::string(kOpNames[static_cast<int>(type)]) + " " + quoted(key) +
                   ": AlreadyExists, but the key is new");
    }
  } else {
    w.tally.fail(std::string(kOpNames[static_cast<int>(type)]) + " " + quoted(key) + ": " +
                 s.to_string());
  }
}

// One transaction of the txn workload; `keys` holds kTxnKeys keys of
// key_size bytes, the reads first.
inline Status execute_txn(Table& table, const char* keys, std::size_t key_size,
                          std::string_view value, std::string& buffer, Worker& w) {
  std::string_view reads[kTxnReads];
  for (std::size_t k = 0; k < kTxnReads; ++k) reads[k] = {keys + k * key_size, key_size};
  static_assert(kTxnWrites == 1, "TxnRequest carries one write");
  const TxnRequest request{reads, {keys + kTxnReads * key_size, key_size}, value};
  std::uint64_t aborts = 0;
  const Status s = table.transact(request, &buffer, &aborts);
  w.txn_aborts += aborts;
  w.txn_retried += aborts != 0 ? 1 : 0;
  return s;
}

inline Status execute(Table& table, OpType type, std::string_view key, std::string_view value,
                      std::string& buffer) {
  switch (type) {
    case OpType::kRead: return table.get(key, &buffer);
    case OpType::kUpdate: return table.update(key, value);
    case OpType::kInsert: return table.insert(key, value);
    case OpType::kDelete: return table.remove(key);
    case OpType::kRmw: {
      Status s = table.get(key, &buffer);
      if (!s.ok()) return s;
      return table.update(key, value);
    }
    case OpType::kTxn: break;  // execute_txn
  }
  return Status::InvalidArgument("unknown operation");
}

inline constexpr std::uint64_t kLoadFactorEvery = 10'000;

inline void run_load_slice(Table& table, const PhaseWork& work, unsigned t, unsigned threads,
                           bool sample_load_factor, const Workers& workers) {
  Worker& w = *workers[t];
  const TickClock& clock = TickClock::get();
  const std::uint64_t n = work.load->records();
  const std::uint64_t begin = n * t / threads;
  const std::uint64_t end = n * (t + 1) / threads;
  const std::uint64_t stride = std::max<std::uint64_t>(1, kLoadFactorEvery / threads);
  const bool sampler = sample_load_factor && t == 0;
  Histogram& hist = w.by_type[static_cast<int>(OpType::kInsert)];
  std::uint64_t last = clock.ticks();
  for (std::uint64_t r = begin; r < end; ++r) {
    const std::string_view key = work.load->key(r);
    const Status s = table.insert(key, work.space->value(r));
    classify(w, s, true, false, OpType::kInsert, key);
    const std::uint64_t now = clock.ticks();
    hist.record(clock.to_ns(now - last));
    last = now;
    const std::uint64_t done = r - begin + 1;
    w.progress.store(done, std::memory_order_relaxed);
    if (sampler && done % stride == 0) {
      if (const auto lf = table.stats().load_factor) {
        w.load_factor.emplace_back(total_progress(workers), *lf);
      }
      last = clock.ticks();
    }
  }
}

inline void run_stream(Table& table, const PhaseWork& work, unsigned t, unsigned threads,
                       Worker& w) {
  const TickClock& clock = TickClock::get();
  const OpStream& stream = (*work.streams)[t];
  const std::size_t key_size = work.space->key_size();
  const std::size_t stride = stream.keys_per_op * key_size;
  const std::uint64_t n = stream.size();
  if (n == 0) return;
  const bool timed = work.duration.has_value();
  const auto deadline =
      timed ? w.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(*work.duration)
            : std::chrono::steady_clock::time_point::max();
  std::string buffer;
  std::uint64_t last = clock.ticks();
  std::uint64_t done = 0;
  for (std::uint64_t i = 0;; ++i) {
    if (i == n) {
      if (!timed || !work.replay) {
        w.exhausted = timed;
        break;
      }
      i = 0;
    }
    const std::uint8_t op = stream.ops[i];
    const auto type = static_cast<OpType>(op & OpStream::kTypeMask);
    const char* keys = stream.keys.data() + i * stride;
    const std::string_view key(keys, key_size);
    const std::string_view value = work.space->value(i * threads + stream.first_op);
    const Status s = type == OpType::kTxn
                         ? execute_txn(table, keys, key_size, value, buffer, w)
                         : execute(table, type, key, value, buffer);
    classify(w, s, (op & OpStream::kMustSucceed) != 0, work.negative_reads, type, key);
    const std::uint64_t now = clock.ticks();
    w.by_type[static_cast<int>(type)].record(clock.to_ns(now - last));
    last = now;
    w.progress.store(++done, std::memory_order_relaxed);
    if (timed && (done & 127) == 0 && std::chrono::steady_clock::now() >= deadline) break;
  }
}

// Draws "label [#####.....]  45%  1.23 Mops/s" on stderr, in place.
inline void draw_progress(const std::string& label, double fraction, double ops_per_s) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(std::min(1.0, fraction) * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %3d%%  %.2f Mops/s ", label.c_str(), bar.c_str(),
               static_cast<int>(std::min(1.0, fraction) * 100), ops_per_s / 1e6);
  std::fflush(stderr);
}

}  // namespace detail

// Runs one phase on `threads` threads and returns its measurements. The
// phase is the load phase if work.load is set, else the run phase.
inline PhaseOutcome run_phase(Table& table, const PhaseWork& work, unsigned threads,
                              std::chrono::seconds quiesce_timeout) {
  using clock = std::chrono::steady_clock;
  PhaseOutcome out;
  out.name = work.load != nullptr ? "load" : "run";
  out.before = table.stats();
  const bool sample_load_factor = work.load != nullptr && out.before.load_factor.has_value();
  std::uint64_t expected_ops = 0;
  if (work.load != nullptr) {
    expected_ops = work.load->records();
  } else {
    for (const OpStream& s : *work.streams) expected_ops += s.size();
  }

  detail::Workers workers;
  for (unsigned t = 0; t < threads; ++t) workers.push_back(std::make_unique<detail::Worker>());
  std::atomic<unsigned> finished{0};
  std::barrier start_line(static_cast<std::ptrdiff_t>(threads) + 1);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      detail::Worker& w = *workers[t];
      table.thread_begin();
      start_line.arrive_and_wait();
      w.start = clock::now();
      if (work.load != nullptr) {
        detail::run_load_slice(table, work, t, threads, sample_load_factor, workers);
      } else {
        detail::run_stream(table, work, t, threads, w);
      }
      w.end = clock::now();
      finished.fetch_add(1, std::memory_order_release);
      table.thread_end();
    });
  }

  // Sampling, on this thread, until every worker has finished.
  const bool bar = ::isatty(STDERR_FILENO) != 0;
  const auto tick = std::chrono::milliseconds(10);
  const auto interval = std::chrono::duration<double>(out.interval_s);
  start_line.arrive_and_wait();
  const auto t0 = clock::now();
  auto next_tick = t0;
  auto interval_start = t0;
  std::uint64_t interval_ops = 0;
  bool drew = false;
  while (true) {
    next_tick += tick;
    std::this_thread::sleep_until(next_tick);
    const bool all_done = finished.load(std::memory_order_acquire) == threads;
    const std::uint64_t done = detail::total_progress(workers);
    const auto now = clock::now();
    const std::chrono::duration<double> elapsed = now - interval_start;
    if (elapsed >= interval || all_done) {
      if (elapsed >= interval / 5 || out.timeseries.empty()) {
        out.timeseries.push_back(static_cast<double>(done - interval_ops) / elapsed.count());
        out.timeseries_t.push_back(std::chrono::duration<double>(now - t0).count());
      }
      interval_start = now;
      interval_ops = done;
      if (bar && now - t0 > std::chrono::seconds(1) && !all_done) {
        const double fraction =
            work.duration ? std::chrono::duration<double>(now - t0) / *work.duration
                          : static_cast<double>(done) / static_cast<double>(std::max<std::uint64_t>(1, expected_ops));
        detail::draw_progress(work.progress_label, fraction, out.timeseries.back());
        drew = true;
      }
    }
    if (all_done) break;
  }
  for (auto& th : pool) th.join();
  if (drew) std::fprintf(stderr, "\r%*s\r", 80, "");

  auto first_start = clock::time_point::max();
  auto last_end = clock::time_point::min();
  for (const auto& w : workers) {
    first_start = std::min(first_start, w->start);
    last_end = std::max(last_end, w->end);
    for (std::size_t i = 0; i < kOpTypes; ++i) {
      out.by_type[i].merge(w->by_type[i]);
      out.all.merge(w->by_type[i]);
    }
    out.ok += w->ok;
    out.not_found += w->not_found;
    out.already_exists += w->already_exists;
    out.txn_aborts += w->txn_aborts;
    out.txn_retried += w->txn_retried;
    out.unexpected += w->tally.unexpected;
    if (out.first_unexpected.empty()) out.first_unexpected = w->tally.first_error;
    out.stream_exhausted = out.stream_exhausted || w->exhausted;
    for (const auto& point : w->load_factor) out.load_factor.push_back(point);
  }
  out.ops = out.all.count();
  out.seconds = std::chrono::duration<double>(last_end - first_start).count();
  out.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(first_start.time_since_epoch()).count();
  out.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(last_end.time_since_epoch()).count();

  const auto quiesce_start = clock::now();
  if (!table.quiesce(quiesce_timeout)) {
    throw Failure(table.name() + ": background work of the " + out.name +
                  " phase still running " + std::to_string(quiesce_timeout.count()) +
                  " s after it ended");
  }
  out.quiesce_seconds = std::chrono::duration<double>(clock::now() - quiesce_start).count();
  out.after = table.stats();
  return out;
}

}  // namespace pmhash::bench
