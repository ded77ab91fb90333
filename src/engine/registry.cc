// engine/registry.cc - engines by name.
#include <array>

#include "engine/clevel/clevel.h"
#include "engine/dali/dali.h"
#include "engine/index.h"
#include "engine/nehash/nehash.h"
#include "engine/pmeh/pmeh.h"
#include "engine/race/race.h"
#include "engine/sephash/sephash.h"

namespace pmhash::engine {
namespace {

const std::array<const EngineInfo*, 6>& engines() {
  static const std::array<const EngineInfo*, 6> all = {
      &clevel::kEngineInfo, &dali::kEngineInfo,    &nehash::kEngineInfo,
      &pmeh::kEngineInfo,   &sephash::kEngineInfo, &race::kEngineInfo};
  return all;
}

}  // namespace

const EngineInfo* find_engine(std::string_view name) {
  for (const EngineInfo* e : engines()) {
    if (e->name == name) return e;
  }
  return nullptr;
}

std::string engine_names() {
  std::string out;
  for (const EngineInfo* e : engines()) {
    if (!out.empty()) out += ", ";
    out += e->name;
  }
  return out;
}

std::string remote_engine_names() {
  std::string out;
  for (const EngineInfo* e : engines()) {
    if (e->create_remote == nullptr) continue;
    if (!out.empty()) out += ", ";
    out += e->name;
  }
  return out;
}

std::vector<std::string> engine_list() {
  std::vector<std::string> out;
  for (const EngineInfo* e : engines()) {
    if (!e->in_progress) out.emplace_back(e->name);
  }
  return out;
}

}  // namespace pmhash::engine
