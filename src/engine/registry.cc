// engine/registry.cc - the one list of engines: their descriptors
// (pmhash/engines.h) and the hooks the store calls (engine/index.h).
#include <array>
#include <cstring>

#include "engine/clevel/clevel.h"
#include "engine/dali/dali.h"
#include "engine/index.h"
#include "engine/nehash/nehash.h"
#include "engine/pmeh/pmeh.h"
#include "engine/race/race.h"
#include "engine/sephash/sephash.h"
#include "pmhash/engines.h"

// Each engine's descriptor, defined in its folder (descriptor.cc).
namespace pmhash::engine::clevel { extern const EngineDescriptor kDescriptor; }
namespace pmhash::engine::dali { extern const EngineDescriptor kDescriptor; }
namespace pmhash::engine::nehash { extern const EngineDescriptor kDescriptor; }
namespace pmhash::engine::pmeh { extern const EngineDescriptor kDescriptor; }
namespace pmhash::engine::sephash { extern const EngineDescriptor kDescriptor; }
namespace pmhash::engine::race { extern const EngineDescriptor kDescriptor; }

namespace pmhash {

namespace {

constexpr std::array<const EngineDescriptor*, 6> kDescriptors = {
    &engine::clevel::kDescriptor, &engine::dali::kDescriptor,    &engine::nehash::kDescriptor,
    &engine::pmeh::kDescriptor,   &engine::sephash::kDescriptor, &engine::race::kDescriptor};

}  // namespace

std::span<const EngineDescriptor* const> all_engines() { return kDescriptors; }

std::vector<const EngineDescriptor*> finished_engines() {
  std::vector<const EngineDescriptor*> out;
  for (const EngineDescriptor* e : kDescriptors) {
    if (!e->in_progress) out.push_back(e);
  }
  return out;
}

const EngineDescriptor* find_engine(std::string_view name) {
  for (const EngineDescriptor* e : kDescriptors) {
    if (e->name == name) return e;
  }
  return nullptr;
}

const EngineDescriptor* default_engine(Location location) {
  for (const EngineDescriptor* e : kDescriptors) {
    if (!e->in_progress && e->location == location) return e;
  }
  return nullptr;
}

const OptionSpec* find_option(const EngineDescriptor& engine, std::string_view name) {
  for (const OptionSpec& o : engine.options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

}  // namespace pmhash

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
