// engine/registry.cc - engines by name.
#include <array>
#include <cstring>

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

const EngineInfo* find_remote_engine(const char* magic) {
  for (const EngineInfo* e : engines()) {
    if (e->remote_magic != nullptr && std::memcmp(e->remote_magic, magic, 8) == 0) return e;
  }
  return nullptr;
}

std::vector<std::string> engine_list(bool remote) {
  std::vector<std::string> out;
  for (const EngineInfo* e : engines()) {
    if (!e->in_progress && (e->create_remote != nullptr) == remote) out.emplace_back(e->name);
  }
  return out;
}

}  // namespace pmhash::engine
