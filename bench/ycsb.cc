// bench/ycsb.cc - workload table, key space and stream generation (ycsb.h).
#include "ycsb.h"

#include <algorithm>
#include <charconv>
#include <numeric>

#include "pmhash/engines.h"

namespace pmhash::bench {
namespace {

Mix mix_of(double read, double update, double insert, double del, double rmw, double txn = 0) {
  Mix m;
  m.share[static_cast<std::size_t>(OpType::kRead)] = read;
  m.share[static_cast<std::size_t>(OpType::kUpdate)] = update;
  m.share[static_cast<std::size_t>(OpType::kInsert)] = insert;
  m.share[static_cast<std::size_t>(OpType::kDelete)] = del;
  m.share[static_cast<std::size_t>(OpType::kRmw)] = rmw;
  m.share[static_cast<std::size_t>(OpType::kTxn)] = txn;
  return m;
}

std::string describe(const Mix& m) {
  std::string out;
  for (std::size_t i = 0; i < kOpTypes; ++i) {
    if (m.share[i] <= 0) continue;
    if (!out.empty()) out += ", ";
    const int percent = static_cast<int>(m.share[i] * 100 + 0.5);
    out += std::to_string(percent) + "% " + kOpNames[i];
  }
  return out;
}

WorkloadSpec make(std::string name, Mix mix, Distribution d) {
  WorkloadSpec spec;
  spec.name = std::move(name);
  spec.mix = mix;
  spec.description = describe(mix);
  spec.distribution = d;
  return spec;
}

// "R/I/U/D" with four integer percentages summing to 100.
std::optional<WorkloadSpec> parse_mixed(std::string_view name, std::string_view shares,
                                        std::string* error) {
  int percent[4];
  std::string_view rest = shares;
  for (int i = 0; i < 4; ++i) {
    const std::size_t slash = rest.find('/');
    const std::string_view field = i < 3 ? rest.substr(0, slash) : rest;
    if ((i < 3 && slash == std::string_view::npos) || field.empty()) {
      *error = "workload '" + std::string(name) + "': expected mixed:R/I/U/D (four percentages)";
      return std::nullopt;
    }
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), percent[i]);
    if (ec != std::errc() || end != field.data() + field.size() || percent[i] < 0 ||
        percent[i] > 100) {
      *error = "workload '" + std::string(name) + "': '" + std::string(field) +
               "' is not a percentage from 0 to 100";
      return std::nullopt;
    }
    if (i < 3) rest.remove_prefix(slash + 1);
  }
  if (percent[0] + percent[1] + percent[2] + percent[3] != 100) {
    *error = "workload '" + std::string(name) + "': the percentages must sum to 100";
    return std::nullopt;
  }
  return make(std::string(name),
              mix_of(percent[0] / 100.0, percent[2] / 100.0, percent[1] / 100.0,
                     percent[3] / 100.0, 0),
              Distribution::kUniform);
}

Distribution distribution_of(KeyChoice keys) {
  switch (keys) {
    case KeyChoice::kUniform: return Distribution::kUniform;
    case KeyChoice::kZipfian: return Distribution::kZipfian;
    case KeyChoice::kLatest: return Distribution::kLatest;
  }
  return Distribution::kUniform;
}

// An engine's paper workload, described as "50% read, 50% insert (new
// keys), uniform: " and where it comes from.
WorkloadSpec from_paper(const PaperWorkload& w) {
  WorkloadSpec spec = make(std::string(w.name),
                           mix_of(w.read / 100.0, w.update / 100.0, w.insert / 100.0,
                                  w.remove / 100.0, 0),
                           distribution_of(w.keys));
  if (w.insert != 0) spec.description += " (new keys)";
  spec.description += ", " + distribution_name(spec.distribution) + ": " + std::string(w.doc);
  return spec;
}

}  // namespace

std::optional<WorkloadSpec> parse_workload(std::string_view name, std::string* error) {
  using D = Distribution;
  if (name == "load") {
    WorkloadSpec spec = make("load", mix_of(0, 0, 1, 0, 0), D::kUniform);
    spec.run_phase = false;
    spec.description = "load phase only: 100% insert";
    spec.distribution_fixed = true;
    return spec;
  }
  if (name == "a") return make("a", mix_of(0.5, 0.5, 0, 0, 0), D::kZipfian);
  if (name == "b") return make("b", mix_of(0.95, 0.05, 0, 0, 0), D::kZipfian);
  if (name == "c") return make("c", mix_of(1, 0, 0, 0, 0), D::kZipfian);
  if (name == "d") return make("d", mix_of(0.95, 0, 0.05, 0, 0), D::kLatest);
  if (name == "f") return make("f", mix_of(0.5, 0, 0, 0, 0.5), D::kZipfian);
  if (name == "insert") {
    WorkloadSpec spec = make("insert", mix_of(0, 0, 1, 0, 0), D::kUniform);
    spec.distribution_fixed = true;
    return spec;
  }
  if (name == "read") return make("read", mix_of(1, 0, 0, 0, 0), D::kUniform);
  if (name == "read-neg") {
    WorkloadSpec spec = make("read-neg", mix_of(1, 0, 0, 0, 0), D::kUniform);
    spec.negative_reads = true;
    spec.distribution_fixed = true;
    spec.description = "100% read of never-inserted keys";
    return spec;
  }
  if (name == "update") return make("update", mix_of(0, 1, 0, 0, 0), D::kUniform);
  if (name == "delete") {
    WorkloadSpec spec = make("delete", mix_of(0, 0, 0, 1, 0), D::kUniform);
    spec.distinct_deletes = true;
    spec.distribution_fixed = true;
    spec.description = "100% delete, each record once";
    return spec;
  }
  if (name == "txn") {
    WorkloadSpec spec = make("txn", mix_of(0, 0, 0, 0, 0, 1), D::kUniform);
    spec.description = "transactions of " + std::to_string(kTxnReads) + " reads + " +
                       std::to_string(kTxnWrites) + " update (YCSB+T)";
    return spec;
  }
  // A workload of an engine's paper (pmhash/engines.h, PaperWorkload).
  if (const PaperWorkload* paper = find_paper_workload(name)) return from_paper(*paper);
  constexpr std::string_view kMixed = "mixed:";
  if (name.starts_with(kMixed)) return parse_mixed(name, name.substr(kMixed.size()), error);
  *error = "unknown workload '" + std::string(name) + "' (workloads: " + workload_names() + ")";
  return std::nullopt;
}

std::string workload_names() {
  std::string out =
      "load, a, b, c, d, f, insert, read, read-neg, update, delete, mixed:R/I/U/D, txn";
  for (const PaperWorkload* w : paper_workloads()) out += ", " + std::string(w->name);
  return out;
}

std::string paper_workloads_help() {
  std::string out;
  for (const PaperWorkload* w : paper_workloads()) {
    std::string error;
    const std::optional<WorkloadSpec> spec = parse_workload(w->name, &error);
    if (!out.empty()) out += "; ";
    out += std::string(w->name) + ": " + (spec ? spec->description : error);
  }
  return out;
}

KeySpace::KeySpace(std::size_t key_size, std::size_t value_size, std::uint64_t seed)
    : gen_(records::Format::kCode, seed, key_size, value_size) {
  if (key_size < kMinBinaryKeySize) {
    throw Failure("key size " + std::to_string(key_size) + " is too small: keys need at least " +
                  std::to_string(kMinBinaryKeySize) + " bytes to be distinct");
  }
  values_.resize(kValuePool * value_size);
  for (std::size_t i = 0; i < kValuePool; ++i) gen_.value(i, 0, values_.data() + i * value_size);
}

LoadKeys::LoadKeys(const KeySpace& space, std::uint64_t records)
    : records_(records), key_size_(space.key_size()) {
  keys_.resize(records * key_size_);
  for (std::uint64_t r = 0; r < records; ++r) space.key(r, keys_.data() + r * key_size_);
}

namespace {

// The type of the next operation: the first whose cumulative share exceeds u.
OpType draw_type(const Mix& mix, double u) {
  double cumulative = 0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < kOpTypes; ++i) {
    if (mix.share[i] <= 0) continue;
    last = i;
    cumulative += mix.share[i];
    if (u < cumulative) return static_cast<OpType>(i);
  }
  return static_cast<OpType>(last);  // rounding: u just below 1
}

std::uint64_t workload_salt(std::string_view name) {
  std::uint64_t h = 0;
  for (char c : name) h = mix(h ^ static_cast<unsigned char>(c));
  return h;
}

// The txn workload's streams: per transaction kTxnKeys distinct loaded
// records from the chooser, reads first, then the updates. A record already
// in the transaction is drawn again, up to kRedraws times; then the next
// record not in it is taken (on a tiny table scrambled zipfian ranks collide,
// and fewer than kTxnKeys records may be reachable at all; there are at
// least kTxnKeys records, so this ends).
std::vector<OpStream> generate_txn_streams(const KeySpace& space, const StreamParams& params,
                                           std::uint64_t n, std::vector<OpStream> streams) {
  const unsigned threads = static_cast<unsigned>(streams.size());
  const std::size_t key_size = space.key_size();
  std::mt19937_64 rng(mix(params.seed) ^ workload_salt("txn"));
  KeyChooser chooser(params.distribution, params.records, params.zipf);
  for (std::uint64_t j = 0; j < n; ++j) {
    constexpr unsigned kRedraws = 64;
    std::uint64_t records[kTxnKeys];
    for (std::size_t k = 0; k < kTxnKeys; ++k) {
      const auto taken = [&](std::uint64_t r) {
        return std::find(records, records + k, r) != records + k;
      };
      std::uint64_t r = chooser.next(rng);
      for (unsigned tries = 1; taken(r) && tries < kRedraws; ++tries) r = chooser.next(rng);
      while (taken(r)) r = (r + 1) % params.records;
      records[k] = r;
    }
    OpStream& s = streams[j % threads];
    char* out = s.keys.data() + s.ops.size() * kTxnKeys * key_size;
    for (std::size_t k = 0; k < kTxnKeys; ++k) space.key(records[k], out + k * key_size);
    s.ops.push_back(static_cast<std::uint8_t>(static_cast<std::uint8_t>(OpType::kTxn) |
                                              OpStream::kMustSucceed));
  }
  return streams;
}

}  // namespace

std::vector<OpStream> generate_streams(const WorkloadSpec& spec, const KeySpace& space,
                                       const StreamParams& params) {
  const unsigned threads = params.threads == 0 ? 1 : params.threads;
  const std::uint64_t n = run_ops(spec, params.records, params.ops);
  const std::size_t key_size = space.key_size();
  const bool txn = spec.mix.has(OpType::kTxn);
  if (txn && params.records < kTxnKeys) {
    throw Failure("workload txn: each transaction touches " + std::to_string(kTxnKeys) +
                  " distinct records, but only " + std::to_string(params.records) +
                  " are loaded (use --records " + std::to_string(kTxnKeys) + " or more)");
  }
  const std::size_t keys_per_op = txn ? kTxnKeys : 1;
  std::vector<OpStream> streams(threads);
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t share = n / threads + (t < n % threads ? 1 : 0);
    streams[t].ops.reserve(share);
    streams[t].keys.resize(share * keys_per_op * key_size);
    streams[t].keys_per_op = keys_per_op;
    streams[t].first_op = t;
  }
  if (n == 0) return streams;
  if (txn) return generate_txn_streams(space, params, n, std::move(streams));

  std::mt19937_64 rng(mix(params.seed) ^ workload_salt(spec.name));
  KeyChooser chooser(spec.distribution, params.records, params.zipf);
  std::vector<std::uint32_t> delete_order;
  if (spec.distinct_deletes) {
    // The first n entries of a seeded shuffle of the records.
    delete_order.resize(params.records);
    std::iota(delete_order.begin(), delete_order.end(), std::uint32_t{0});
    for (std::uint64_t i = 0; i < n; ++i) {
      std::swap(delete_order[i], delete_order[i + rng() % (params.records - i)]);
    }
  }
  const bool deletes = spec.mix.has(OpType::kDelete);
  std::uint64_t next_insert = params.records;

  for (std::uint64_t j = 0; j < n; ++j) {
    const OpType type = draw_type(spec.mix, unit_interval(rng));
    std::uint64_t record = 0;
    bool must = false;
    if (type == OpType::kInsert) {
      record = next_insert++;
      chooser.inserted();
      must = true;
    } else if (spec.distinct_deletes) {
      record = delete_order[j];
      must = true;
    } else if (spec.negative_reads) {
      record = KeySpace::kNegativeBase + j;
      must = true;  // must be NotFound
    } else {
      record = chooser.next(rng);
      must = !deletes && record < params.records;
    }
    OpStream& s = streams[j % threads];
    space.key(record, s.keys.data() + s.ops.size() * key_size);
    s.ops.push_back(static_cast<std::uint8_t>(static_cast<std::uint8_t>(type) |
                                              (must ? OpStream::kMustSucceed : 0)));
  }
  return streams;
}

}  // namespace pmhash::bench
