// engine/registry.cc - the one list of engines: their hooks (engine/index.h),
// each pointing at its descriptor (pmhash/engines.h); the option checks and
// the by-name options of pmhash/options.h.
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "engine/clevel/clevel.h"
#include "engine/dali/dali.h"
#include "engine/index.h"
#include "engine/nehash/nehash.h"
#include "engine/option_values.h"
#include "engine/pmeh/pmeh.h"
#include "engine/race/race.h"
#include "engine/sephash/sephash.h"
#include "pmhash/engines.h"
#include "pmhash/options.h"

namespace pmhash::engine {
namespace {

// The engines of this build, in the order every list shows them.
constexpr std::array<const EngineInfo*, 6> kEngines = {
    &clevel::kEngineInfo, &dali::kEngineInfo,    &nehash::kEngineInfo,
    &pmeh::kEngineInfo,   &sephash::kEngineInfo, &race::kEngineInfo};

const std::array<const EngineDescriptor*, kEngines.size()>& descriptors() {
  static const auto all = [] {
    std::array<const EngineDescriptor*, kEngines.size()> out{};
    for (std::size_t i = 0; i < kEngines.size(); ++i) out[i] = kEngines[i]->descriptor;
    return out;
  }();
  return all;
}

std::string join_names(bool remote_only) {
  std::string out;
  for (const EngineInfo* e : kEngines) {
    if (remote_only && e->create_remote == nullptr) continue;
    if (!out.empty()) out += ", ";
    out += e->descriptor->name;
  }
  return out;
}

}  // namespace

const EngineInfo* find_engine(std::string_view name) {
  for (const EngineInfo* e : kEngines) {
    if (e->descriptor->name == name) return e;
  }
  return nullptr;
}

std::string engine_names() { return join_names(/*remote_only=*/false); }

std::string remote_engine_names() { return join_names(/*remote_only=*/true); }

const EngineInfo* find_remote_engine(const char* magic) {
  for (const EngineInfo* e : kEngines) {
    if (e->remote_magic != nullptr && std::memcmp(e->remote_magic, magic, 8) == 0) return e;
  }
  return nullptr;
}

std::vector<std::string> engine_list(Location location) {
  std::vector<std::string> out;
  for (const EngineDescriptor* e : finished_engines()) {
    if (e->location == location) out.emplace_back(e->name);
  }
  return out;
}

// --- option values -----------------------------------------------------

bool parse_unsigned(std::string_view text, std::uint64_t* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end;
}

bool parse_bool(std::string_view text, bool* out) {
  if (text == "true" || text == "on" || text == "1" || text == "yes") {
    *out = true;
    return true;
  }
  if (text == "false" || text == "off" || text == "0" || text == "no") {
    *out = false;
    return true;
  }
  return false;
}

bool parse_double(std::string_view text, double* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end && std::isfinite(*out);
}

namespace {

// The spec of a full option name, which the calling engine declares; a name
// it does not declare is a programming error of that engine.
const OptionSpec& spec_of(std::string_view name) {
  const EngineDescriptor* e = option_engine(name);
  const OptionSpec* spec = e != nullptr ? find_option(*e, name) : nullptr;
  if (spec == nullptr) {
    std::fprintf(stderr, "pmhash: no engine declares the option '%.*s'\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return *spec;
}

// The option's value as set, when it is valid, else its default: the store
// has checked what it starts an engine with, so the fallback serves only
// callers that start an engine directly (tests).
std::string_view text_of(const Options& options, const OptionSpec& spec) {
  const auto it = options.engine_options.find(spec.name);
  if (it == options.engine_options.end()) return spec.default_value;
  if (!check_option(spec.name, it->second).ok()) return spec.default_value;
  return it->second;
}

}  // namespace

std::uint64_t option_unsigned(const Options& options, std::string_view name) {
  std::uint64_t v = 0;
  parse_unsigned(text_of(options, spec_of(name)), &v);
  return v;
}

bool option_bool(const Options& options, std::string_view name) {
  bool v = false;
  parse_bool(text_of(options, spec_of(name)), &v);
  return v;
}

double option_double(const Options& options, std::string_view name) {
  double v = 0;
  parse_double(text_of(options, spec_of(name)), &v);
  return v;
}

}  // namespace pmhash::engine

namespace pmhash {

std::span<const EngineDescriptor* const> all_engines() { return engine::descriptors(); }

std::vector<const EngineDescriptor*> finished_engines() {
  std::vector<const EngineDescriptor*> out;
  for (const EngineDescriptor* e : all_engines()) {
    if (!e->in_progress) out.push_back(e);
  }
  return out;
}

const EngineDescriptor* find_engine(std::string_view name) {
  const engine::EngineInfo* e = engine::find_engine(name);
  return e != nullptr ? e->descriptor : nullptr;
}

const EngineDescriptor* default_engine(Location location) {
  for (const EngineDescriptor* e : all_engines()) {
    if (!e->in_progress && e->location == location) return e;
  }
  return nullptr;
}

std::vector<std::string> engine_modes(Location location) {
  std::vector<std::string> out;
  for (const EngineDescriptor* e : finished_engines()) {
    if (e->location != location) continue;
    if (e->capabilities.strict) out.push_back(std::string(e->name) + ":strict");
    if (e->capabilities.epoch) out.push_back(std::string(e->name) + ":epoch");
  }
  return out;
}

std::vector<const PaperWorkload*> paper_workloads() {
  std::vector<const PaperWorkload*> out;
  for (const EngineDescriptor* e : all_engines()) {
    for (const PaperWorkload& w : e->workloads) out.push_back(&w);
  }
  return out;
}

const PaperWorkload* find_paper_workload(std::string_view name) {
  for (const PaperWorkload* w : paper_workloads()) {
    if (w->name == name) return w;
  }
  return nullptr;
}

std::uint64_t generic_pool_bytes(const PoolDemand& demand) {
  const std::uint64_t per_key = 200 + 2 * (demand.key_size + demand.value_size);
  return demand.keys * per_key;
}

const OptionSpec* find_option(const EngineDescriptor& engine, std::string_view name) {
  for (const OptionSpec& o : engine.options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

const EngineDescriptor* option_engine(std::string_view name) {
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) return nullptr;
  return find_engine(name.substr(0, dot));
}

std::string_view option_type_name(OptionType type) {
  switch (type) {
    case OptionType::kUnsigned: return "unsigned";
    case OptionType::kBool: return "bool";
    case OptionType::kDouble: return "double";
  }
  return "unknown";
}

namespace {

std::string number_text(double v) {
  char buf[32];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  return ec == std::errc() ? std::string(buf, p) : std::to_string(v);
}

// Whether `v` is one of the comma-separated `allowed` values.
bool is_allowed(std::string_view allowed, double v) {
  while (!allowed.empty()) {
    const std::size_t comma = allowed.find(',');
    double a = 0;
    if (engine::parse_double(allowed.substr(0, comma), &a) && a == v) return true;
    if (comma == std::string_view::npos) break;
    allowed.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

std::string option_range(const OptionSpec& option) {
  if (option.type == OptionType::kBool) return "true or false";
  if (!option.allowed.empty()) {
    std::string out;
    std::string_view rest = option.allowed;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      if (!out.empty()) out += ", ";
      out += rest.substr(0, comma);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    return out;
  }
  return number_text(option.min) + ".." + number_text(option.max);
}

Status check_option(std::string_view name, std::string_view value) {
  const EngineDescriptor* engine = option_engine(name);
  if (engine == nullptr) {
    return Status::InvalidArgument("'" + std::string(name) +
                                   "' names no engine: engine options are <engine>.<option>, "
                                   "engines: " + engine::engine_names());
  }
  const OptionSpec* spec = find_option(*engine, name);
  if (spec == nullptr) {
    std::string names;
    for (const OptionSpec& o : engine->options) {
      names += (names.empty() ? "" : ", ") + std::string(o.name);
    }
    return Status::InvalidArgument(std::string(engine->name) + " has no option '" +
                                   std::string(name) + "'; its options: " +
                                   (names.empty() ? std::string("none") : names));
  }
  const std::string got = ", got '" + std::string(value) + "'";
  const std::string must = std::string(spec->name) + " must be " +
                           (spec->allowed.empty() ? "" : "one of ") + option_range(*spec);
  double v = 0;
  switch (spec->type) {
    case OptionType::kBool: {
      bool b = false;
      if (!engine::parse_bool(value, &b)) return Status::InvalidArgument(must + got);
      return Status::OK();
    }
    case OptionType::kUnsigned: {
      std::uint64_t u = 0;
      if (!engine::parse_unsigned(value, &u)) return Status::InvalidArgument(must + got);
      v = static_cast<double>(u);
      break;
    }
    case OptionType::kDouble:
      if (!engine::parse_double(value, &v)) return Status::InvalidArgument(must + got);
      break;
  }
  if (v < spec->min || v > spec->max ||
      (!spec->allowed.empty() && !is_allowed(spec->allowed, v))) {
    return Status::InvalidArgument(must + ", got " + std::string(value));
  }
  return Status::OK();
}

// --- Options: engine options by name ------------------------------------

Options& Options::set(std::string_view name, std::string_view value) {
  engine_options.insert_or_assign(std::string(name), std::string(value));
  return *this;
}

Options& Options::set(std::string_view name, bool value) {
  return set(name, std::string_view(value ? "true" : "false"));
}

Options& Options::set(std::string_view name, double value) {
  return set(name, std::string_view(number_text(value)));
}

void Options::unset(std::string_view name) {
  if (const auto it = engine_options.find(name); it != engine_options.end()) {
    engine_options.erase(it);
  }
}

std::optional<std::string> Options::get(std::string_view name) const {
  const auto it = engine_options.find(name);
  if (it == engine_options.end()) return std::nullopt;
  return it->second;
}

std::string Options::value(std::string_view name) const {
  if (std::optional<std::string> v = get(name)) return *v;
  const EngineDescriptor* engine = option_engine(name);
  const OptionSpec* spec = engine != nullptr ? find_option(*engine, name) : nullptr;
  return spec != nullptr ? std::string(spec->default_value) : std::string();
}

}  // namespace pmhash
