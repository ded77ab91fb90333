// bench/preset.cc - the presets of pmhash-bench and their expansion
// (preset.h).
#include "preset.h"

#include <algorithm>

#include "pmhash/engines.h"
#include "workload.h"

namespace pmhash::bench {
namespace {

constexpr const char* kPresetFlag = "--preset";

struct Preset {
  const char* name;
  std::vector<PresetFlag> flags;
};

// Every finished pool engine in each durability it offers, "NAME:strict,
// NAME:epoch,...", in the registry's order.
std::string pool_engine_modes() {
  std::string out;
  for (const std::string& mode : engine_modes(Location::kPoolFile)) {
    out += (out.empty() ? "" : ",") + mode;
  }
  return out;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"peers-8b",
       {{"--engine", pool_engine_modes()},
        {"--workload", "read,read-neg,update,insert,delete"},
        {"--sequence", ""},
        {"--records", "4000000"},
        {"--key-size", "8"},
        {"--value-size", "8"},
        {"--threads", "2"},
        {"--distribution", "uniform"},
        {"--pool", "/dev/shm"},
        {"--granularity", "cache_line"}}},
  };
  return all;
}

std::string known_list() {
  std::string out;
  for (const std::string& n : preset_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The flag an argument gives ("--records" for "--records" and
// "--records=5"), or "" when it is not a long flag.
std::string flag_of(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return "";
  return arg.substr(0, arg.find('='));
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.emplace_back(p.name);
  return names;
}

std::vector<PresetFlag> preset_flags(const std::string& name) {
  for (const Preset& p : presets()) {
    if (name == p.name) return p.flags;
  }
  throw Failure("--preset: unknown preset '" + name + "' (presets: " + known_list() + ")");
}

std::vector<std::string> expand_presets(const std::vector<std::string>& args) {
  std::vector<std::string> given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string flag = flag_of(args[i]);
    if (flag.empty() || flag == kPresetFlag) continue;
    given.push_back(flag);
  }
  auto explicit_flag = [&](const std::string& flag) {
    return std::find(given.begin(), given.end(), flag) != given.end();
  };
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (flag_of(args[i]) != kPresetFlag) {
      out.push_back(args[i]);
      continue;
    }
    std::string name;
    if (args[i].size() > std::string(kPresetFlag).size()) {
      name = args[i].substr(std::string(kPresetFlag).size() + 1);  // --preset=NAME
    } else if (i + 1 < args.size()) {
      name = args[++i];
    }
    if (name.empty()) throw Failure("--preset needs a name (presets: " + known_list() + ")");
    for (const PresetFlag& f : preset_flags(name)) {
      if (explicit_flag(f.flag)) continue;
      out.push_back(f.flag);
      if (!f.value.empty()) out.push_back(f.value);
    }
  }
  return out;
}

}  // namespace pmhash::bench
