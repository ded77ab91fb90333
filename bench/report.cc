// bench/report.cc - table, JSON and CSV output of pmhash-bench (report.h).
#include "report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>
#include <thread>

#include "pmhash/engines.h"

namespace pmhash::bench {
namespace {

using nlohmann::json;

// Milliseconds between durability points during the phase (epoch mode).
std::optional<double> durable_every_ms(const PhaseOutcome& m) {
  if (!m.before.durability_points || !m.after.durability_points) return std::nullopt;
  const std::uint64_t n = *m.after.durability_points - *m.before.durability_points;
  if (n == 0) return std::nullopt;
  return 1000 * (m.seconds + m.quiesce_seconds) / static_cast<double>(n);
}

// The engine's properties in a phase: a count since open as its share of
// the phase (after - before), the index's shape as it is after.
std::vector<TableProperty> phase_properties(const PhaseOutcome& p) {
  std::vector<TableProperty> out = p.after.properties;
  for (TableProperty& q : out) {
    if (!q.since_open) continue;
    for (const TableProperty& b : p.before.properties) {
      if (b.name == q.name) q.value -= b.value;
    }
  }
  return out;
}

// {"name": value, ...}; null for a table with no properties (a peer).
json properties_json(const std::vector<TableProperty>& properties) {
  if (properties.empty()) return nullptr;
  json j = json::object();
  for (const TableProperty& q : properties) j[q.name] = q.value;
  return j;
}

template <typename T>
json optional_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json latency_json(const Histogram& h) {
  json buckets = json::array();
  for (const auto& [bound, count] : h.buckets()) buckets.push_back({bound, count});
  return {{"count", h.count()},        {"mean", h.mean()},
          {"p50", h.percentile(0.50)}, {"p90", h.percentile(0.90)},
          {"p99", h.percentile(0.99)}, {"p999", h.percentile(0.999)},
          {"max", h.max()},            {"histogram", std::move(buckets)}};
}

std::optional<double> per_op(const std::optional<std::uint64_t>& before,
                             const std::optional<std::uint64_t>& after, std::uint64_t ops) {
  if (!before || !after || ops == 0) return std::nullopt;
  return static_cast<double>(*after - *before) / static_cast<double>(ops);
}

// Bytes per key after the phase: the table's own storage, else the DRAM the
// driver saw it allocate.
std::optional<double> bytes_per_key(const PhaseOutcome& p, std::optional<std::uint64_t> dram,
                                    std::string* kind) {
  const std::optional<std::uint64_t> bytes = p.after.bytes ? p.after.bytes : dram;
  *kind = p.after.bytes ? p.after.bytes_kind : (dram ? "dram" : "");
  if (!bytes || !p.after.items || *p.after.items == 0) return std::nullopt;
  return static_cast<double>(*bytes) / static_cast<double>(*p.after.items);
}

Mix phase_mix(const RunResult& r, const PhaseOutcome& p) {
  if (&p == &r.load) {
    Mix m;
    m.share[static_cast<std::size_t>(OpType::kInsert)] = 1;
    return m;
  }
  return r.workload.mix;
}

json phase_json(const RunResult& r, const PhaseOutcome& p, std::optional<std::uint64_t> dram) {
  const Mix mix = phase_mix(r, p);
  json mix_json = json::object();
  json latency = json::object();
  latency["all"] = latency_json(p.all);
  for (std::size_t i = 0; i < kOpTypes; ++i) {
    mix_json[kOpNames[i]] = mix.share[i];
    if (p.by_type[i].count() != 0) latency[kOpNames[i]] = latency_json(p.by_type[i]);
  }
  const double ceiling = r.ceilings ? ceiling_ops_per_s(mix, *r.ceilings).value_or(0) : 0;
  json load_factor = json::array();
  for (const auto& [ops, lf] : p.load_factor) load_factor.push_back({ops, lf});
  std::string kind;
  const std::optional<double> bpk = bytes_per_key(p, dram, &kind);
  json transactions = nullptr;
  if (mix.has(OpType::kTxn)) {
    transactions = {{"committed", p.ok},
                    {"aborts", p.txn_aborts},
                    {"retried", p.txn_retried},
                    {"reads_per_txn", kTxnReads},
                    {"writes_per_txn", kTxnWrites}};
  }
  return {
      {"ops", p.ops},
      {"seconds", p.seconds},
      {"monotonic_ns", {{"start", p.start_ns}, {"end", p.end_ns}}},
      {"ops_per_s", p.ops_per_s()},
      {"ceiling_ops_per_s", ceiling > 0 ? json(ceiling) : json(nullptr)},
      {"ceiling_fraction", ceiling > 0 ? json(p.ops_per_s() / ceiling) : json(nullptr)},
      {"mix", std::move(mix_json)},
      {"outcomes",
       {{"ok", p.ok}, {"not_found", p.not_found}, {"already_exists", p.already_exists}}},
      {"transactions", std::move(transactions)},
      {"latency_ns", std::move(latency)},
      {"timeseries",
       {{"interval_s", p.interval_s}, {"t_s", p.timeseries_t}, {"ops_per_s", p.timeseries}}},
      {"load_factor", std::move(load_factor)},
      {"flushes_per_op", optional_json(per_op(p.before.flushes, p.after.flushes, p.ops))},
      {"fences_per_op", optional_json(per_op(p.before.fences, p.after.fences, p.ops))},
      {"bytes_per_key", optional_json(bpk)},
      {"bytes_kind", kind.empty() ? json(nullptr) : json(kind)},
      {"load_factor_after", optional_json(p.after.load_factor)},
      {"slots", optional_json(p.after.slots)},
      {"properties", properties_json(phase_properties(p))},
      {"durable_every_ms", optional_json(durable_every_ms(p))},
      {"quiesce_s", p.quiesce_seconds},
      {"stream_exhausted", p.stream_exhausted},
  };
}

json open_json(const OpenMeasure& m) {
  return {{"open_ns", m.open_ns},     {"recovery_ns", m.recovery_ns},
          {"clean_shutdown", m.clean_shutdown}, {"wall_s", m.wall_s},
          {"items", m.items},
          {"slots", m.slots},         {"heap_used", m.heap_used},
          {"dram_bytes", m.dram_bytes},
          {"bytes_per_key", m.bytes_per_key()}, {"check_s", m.check_s},
          {"properties", properties_json(m.properties)}};
}

json reopen_json(const ReopenOutcome& r) {
  return {{"copy_s", r.copy_s},
          {"image_bytes", r.image_bytes},
          {"clean", open_json(r.clean)},
          {"crash", r.crash ? open_json(*r.crash) : json(nullptr)},
          {"crash_skipped", r.crash_skipped.empty() ? json(nullptr) : json(r.crash_skipped)}};
}

std::string read_first_line(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t:\"");
  const auto last = s.find_last_not_of(" \t\"");
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

// Runs a shell command and returns its first output line ("" on failure).
std::string command_output(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) return "";
  std::array<char, 256> buffer{};
  std::string out;
  if (std::fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr) out = buffer.data();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// 380ns, 1.2us, 45us, 1.3ms, 2.0s
std::string compact_ns(std::uint64_t ns) {
  if (ns < 1000) return std::to_string(ns) + "ns";
  if (ns < 10'000) return fixed(ns / 1e3, 1) + "us";
  if (ns < 1'000'000) return std::to_string(ns / 1000) + "us";
  if (ns < 10'000'000) return fixed(ns / 1e6, 1) + "ms";
  if (ns < 1'000'000'000) return std::to_string(ns / 1'000'000) + "ms";
  return fixed(ns / 1e9, 1) + "s";
}

// The durability text up to its first ':' or ' (': "strict", "epoch", "none".
std::string durability_word(const std::string& text) {
  const std::size_t end = text.find_first_of(":(");
  return trim(text.substr(0, end));
}

// The last column of a row: the durability word, and for transactions the
// attempts that aborted and were retried.
std::string durability_text(const RunResult& r, const PhaseOutcome& m) {
  std::string text = durability_word(r.durability);
  if (const auto every = durable_every_ms(m)) text += ", durable every " + fixed(*every, 1) + " ms";
  if (&m != &r.load && r.workload.mix.has(OpType::kTxn)) {
    text += ", " + std::to_string(m.txn_aborts) + " aborts";
  }
  return text;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

template <typename T>
std::string csv_optional(const std::optional<T>& v) {
  if (!v) return "";
  std::ostringstream s;
  s << *v;
  return s.str();
}

}  // namespace

std::optional<double> ceiling_ops_per_s(const Mix& mix, const Ceilings& c) {
  if (c.independent_reads_per_s <= 0 || c.persists_per_s <= 0) return std::nullopt;
  const double read = 1.0 / c.independent_reads_per_s;
  const double write = 1.0 / c.persists_per_s;
  const double cost = mix[OpType::kRead] * read +
                      (mix[OpType::kUpdate] + mix[OpType::kInsert] + mix[OpType::kDelete]) * write +
                      mix[OpType::kRmw] * (read + write) +
                      mix[OpType::kTxn] * (kTxnReads * read + kTxnWrites * write);
  if (cost <= 0) return std::nullopt;
  return 1.0 / cost;
}

nlohmann::json machine_json() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  struct utsname u {};
  ::uname(&u);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  return {{"hostname", host},
          {"cpu_model", trim(read_first_line("/proc/cpuinfo", "model name"))},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_bytes", static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size)},
          {"kernel", u.release},
          {"os", trim(read_first_line("/etc/os-release", "PRETTY_NAME="))}};
}

std::string git_revision() {
#ifdef PMHASH_SOURCE_DIR
  const std::string dir = PMHASH_SOURCE_DIR;
  const std::string rev =
      command_output("git -C '" + dir + "' rev-parse --short HEAD 2>/dev/null");
  if (rev.empty()) return "unknown";
  const std::string dirty =
      command_output("git -C '" + dir + "' status --porcelain --untracked-files=no 2>/dev/null");
  return dirty.empty() ? rev : rev + "+dirty";
#else
  return "unknown";
#endif
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json ceilings_json(const Ceilings& c) {
  return {{"threads", c.threads},
          {"granularity", c.granularity},
          {"region", c.region},
          {"region_bytes", c.region_bytes},
          {"dependent_reads_per_s", c.dependent_reads_per_s},
          {"independent_reads_per_s", c.independent_reads_per_s},
          {"persists_per_s", c.persists_per_s},
          {"nt_persists_per_s", c.nt_persists_per_s > 0 ? json(c.nt_persists_per_s) : json(nullptr)},
          {"nt16_persists_per_s",
           c.nt16_persists_per_s > 0 ? json(c.nt16_persists_per_s) : json(nullptr)},
          {"seq_read_bytes_per_s", c.seq_read_bytes_per_s},
          {"seq_write_bytes_per_s", c.seq_write_bytes_per_s},
          {"huge_page_fraction", c.huge_page_fraction},
          {"page_size", c.page_size}};
}

nlohmann::json options_json(const std::vector<std::pair<std::string, std::string>>& given) {
  json options = nullptr;
  for (const auto& [name, value] : given) {
    if (options.is_null()) options = json::object();
    std::string key = name;
    std::replace(key.begin(), key.end(), '.', '_');
    const EngineDescriptor* engine = option_engine(name);
    const OptionSpec* spec = engine != nullptr ? find_option(*engine, name) : nullptr;
    if (spec == nullptr) {
      options[key] = value;
    } else if (spec->type == OptionType::kBool) {
      options[key] = value == "true" || value == "on" || value == "1" || value == "yes";
    } else if (spec->type == OptionType::kDouble) {
      options[key] = std::stod(value);
    } else {
      options[key] = std::stoull(value);
    }
  }
  return options;
}

nlohmann::json run_json(const RunResult& r) {
  json options = options_json(r.options);
  return {{"engine", r.engine},
          {"series", r.series.empty() ? r.engine : r.series},
          {"options", std::move(options)},
          {"reopen", r.reopen ? reopen_json(*r.reopen) : json(nullptr)},
          {"sequence_step", optional_json(r.sequence_step)},
          {"kind", r.kind},
          {"durability", r.durability},
          {"durability_mode", durability_word(r.durability)},
          {"threads", r.threads},
          {"workload", r.workload.name},
          {"distribution", distribution_name(r.distribution)},
          {"load", phase_json(r, r.load, r.dram_after_load)},
          {"run", r.run ? phase_json(r, *r.run, r.dram_after_run) : json(nullptr)}};
}

nlohmann::json skipped_json(const SkippedRun& s) {
  return {{"engine", s.engine},
          {"kind", s.kind},
          {"threads", s.threads},
          {"workload", s.workload},
          {"reason", s.reason}};
}

void print_workload_header(std::ostream& out, const WorkloadSpec& spec, const std::string& params) {
  out << "\n== workload " << spec.name << ": " << spec.description << "\n   " << params << "\n";
}

namespace {
constexpr const char* kRowFormat = "%-12s %3s %9s %9s %8s %8s %8s %8s %8s %6s %6s %7s %5s  %s\n";
}

void print_row_header(std::ostream& out) {
  char line[256];
  std::snprintf(line, sizeof(line), kRowFormat, "engine", "thr", "load M/s", "run M/s", "ceiling",
                "p50", "p99", "p99.9", "max", "flush", "fence", "B/key", "lf", "durability");
  out << line;
}

void print_row(std::ostream& out, const RunResult& r) {
  print_row(out, r, r.series.empty() ? r.engine : r.series);
}

void print_sequence_header(std::ostream& out, const std::string& label) {
  out << "-- " << label << "\n";
}

void print_row(std::ostream& out, const RunResult& r, const std::string& name) {
  const PhaseOutcome& m = r.measured();
  const Mix mix = phase_mix(r, m);
  const std::optional<double> ceiling =
      r.ceilings ? ceiling_ops_per_s(mix, *r.ceilings) : std::nullopt;
  const auto flush = per_op(m.before.flushes, m.after.flushes, m.ops);
  const auto fence = per_op(m.before.fences, m.after.fences, m.ops);
  std::string kind;
  const auto bpk = bytes_per_key(m, r.run ? r.dram_after_run : r.dram_after_load, &kind);
  char line[512];
  std::snprintf(line, sizeof(line), kRowFormat, name.c_str(),
                std::to_string(r.threads).c_str(), fixed(r.load.ops_per_s() / 1e6, 3).c_str(),
                r.run ? fixed(r.run->ops_per_s() / 1e6, 3).c_str() : "-",
                ceiling ? (fixed(100 * m.ops_per_s() / *ceiling, 1) + "%").c_str() : "-",
                compact_ns(m.all.percentile(0.5)).c_str(), compact_ns(m.all.percentile(0.99)).c_str(),
                compact_ns(m.all.percentile(0.999)).c_str(), compact_ns(m.all.max()).c_str(),
                flush ? fixed(*flush, 2).c_str() : "-", fence ? fixed(*fence, 2).c_str() : "-",
                bpk ? fixed(*bpk, 0).c_str() : "-",
                m.after.load_factor ? fixed(*m.after.load_factor, 2).c_str() : "-",
                durability_text(r, m).c_str());
  out << line;
  print_properties_line(out, m);
  if (r.reopen) print_reopen(out, *r.reopen);
}

void print_properties_line(std::ostream& out, const PhaseOutcome& m) {
  std::string text;
  for (const TableProperty& q : phase_properties(m)) {
    if (q.value == 0) continue;
    text += (text.empty() ? "" : ", ") + q.name + " " + std::to_string(q.value);
  }
  if (!text.empty()) out << "             " << text << "\n";
}

void print_reopen(std::ostream& out, const ReopenOutcome& r) {
  const auto shape = [](const OpenMeasure& m) {
    std::string text = std::to_string(m.items) + " keys";
    for (const TableProperty& q : m.properties) {
      if (!q.since_open && q.value != 0) text += ", " + q.name + " " + std::to_string(q.value);
    }
    return text + ", " + fixed(m.bytes_per_key(), 1) + " heap B/key";
  };
  out << "             reopen: clean open " << fixed(r.clean.open_ns / 1e6, 2) << " ms ("
      << shape(r.clean) << ")";
  if (r.crash) {
    out << "; crash image open " << fixed(r.crash->open_ns / 1e6, 2) << " ms, recovery "
        << fixed(r.crash->recovery_ns / 1e6, 2) << " ms (" << shape(*r.crash) << ")";
  } else {
    out << "; no crash image: " << r.crash_skipped;
  }
  out << "\n";
}

void print_skipped_row(std::ostream& out, const SkippedRun& s) {
  char line[512];
  std::snprintf(line, sizeof(line), "%-12s %3u  skipped: %s\n", s.engine.c_str(), s.threads,
                s.reason.c_str());
  out << line;
}

void print_ceilings(std::ostream& out, const std::vector<Ceilings>& ceilings) {
  if (ceilings.empty()) return;
  out << "\n== ceilings of this machine (" << ceilings.front().region << ", granularity "
      << ceilings.front().granularity << ", pages " << ceilings.front().page_size << ")\n"
      << "   persists/s: 8-byte store + flush + fence; nt8, nt16: 8- or 16-byte non-temporal "
         "store + sfence\n";
  char line[256];
  constexpr const char* kFormat = "%3s %14s %14s %14s %12s %12s %12s %12s\n";
  std::snprintf(line, sizeof(line), kFormat, "thr", "dep reads/s", "indep reads/s", "persists/s",
                "nt8/s", "nt16/s", "seq rd GB/s", "seq wr GB/s");
  out << line;
  const auto rate = [](double v) { return v > 0 ? fixed(v / 1e6, 3).append("M") : std::string("-"); };
  for (const Ceilings& c : ceilings) {
    std::snprintf(line, sizeof(line), kFormat, std::to_string(c.threads).c_str(),
                  fixed(c.dependent_reads_per_s / 1e6, 2).append("M").c_str(),
                  fixed(c.independent_reads_per_s / 1e6, 2).append("M").c_str(),
                  fixed(c.persists_per_s / 1e6, 3).append("M").c_str(),
                  rate(c.nt_persists_per_s).c_str(), rate(c.nt16_persists_per_s).c_str(),
                  fixed(c.seq_read_bytes_per_s / 1e9, 2).c_str(),
                  fixed(c.seq_write_bytes_per_s / 1e9, 2).c_str());
    out << line;
  }
}

void write_csv(std::ostream& out, const std::vector<RunResult>& runs) {
  out << "engine,kind,durability,threads,workload,distribution,load_ops,load_seconds,"
         "load_ops_per_s,run_ops,run_seconds,run_ops_per_s,ceiling_fraction,p50_ns,p90_ns,"
         "p99_ns,p999_ns,max_ns,flushes_per_op,fences_per_op,bytes_per_key,bytes_kind,"
         "txn_aborts,durable_every_ms,series,slots,reopen_items,clean_open_ns,"
         "crash_open_ns,crash_recovery_ns,reopen_bytes_per_key,load_factor_after,sequence_step,"
         "properties,options\n";
  for (const RunResult& r : runs) {
    const json j = run_json(r);
    const json& m = r.run ? j["run"] : j["load"];
    auto num = [](const json& v) -> std::string {
      if (v.is_null()) return "";
      std::ostringstream s;
      s << std::setprecision(10) << v.get<double>();
      return s.str();
    };
    const json& lat = m["latency_ns"]["all"];
    out << csv_field(r.engine) << ',' << r.kind << ',' << csv_field(r.durability) << ','
        << r.threads << ',' << csv_field(r.workload.name) << ','
        << distribution_name(r.distribution) << ',' << r.load.ops << ','
        << num(j["load"]["seconds"]) << ',' << num(j["load"]["ops_per_s"]) << ','
        << csv_optional(r.run ? std::optional<std::uint64_t>(r.run->ops) : std::nullopt) << ','
        << (r.run ? num(j["run"]["seconds"]) : "") << ','
        << (r.run ? num(j["run"]["ops_per_s"]) : "") << ',' << num(m["ceiling_fraction"]) << ','
        << num(lat["p50"]) << ',' << num(lat["p90"]) << ',' << num(lat["p99"]) << ','
        << num(lat["p999"]) << ',' << num(lat["max"]) << ',' << num(m["flushes_per_op"]) << ','
        << num(m["fences_per_op"]) << ',' << num(m["bytes_per_key"]) << ','
        << (m["bytes_kind"].is_null() ? "" : m["bytes_kind"].get<std::string>()) << ','
        << (m["transactions"].is_null() ? "" : std::to_string(m["transactions"]["aborts"].get<std::uint64_t>()))
        << ',' << num(m["durable_every_ms"]) << ',' << csv_field(j["series"].get<std::string>())
        << ',' << num(m["slots"]) << ',';
    if (r.reopen) {
      const ReopenOutcome& o = *r.reopen;
      out << o.clean.items << ',' << o.clean.open_ns << ','
          << (o.crash ? std::to_string(o.crash->open_ns) : "") << ','
          << (o.crash ? std::to_string(o.crash->recovery_ns) : "") << ','
          << fixed(o.clean.bytes_per_key(), 2);
    } else {
      out << ",,,,";
    }
    out << ',' << num(m["load_factor_after"]) << ',' << csv_optional(r.sequence_step);
    // The measured phase's properties, "name=value" joined by ';'.
    std::string properties;
    for (const TableProperty& q : phase_properties(r.measured())) {
      properties += (properties.empty() ? "" : ";") + q.name + "=" + std::to_string(q.value);
    }
    out << ',' << properties;
    // The engine's options, "name=value" joined by blanks.
    std::string options;
    for (const auto& [name, value] : r.options) {
      options += (options.empty() ? "" : " ") + name + "=" + value;
    }
    out << ',' << csv_field(options) << '\n';
  }
}

}  // namespace pmhash::bench
