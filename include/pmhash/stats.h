// pmhash/stats.h - what Store::stats() reports: a common core that means
// the same on every engine, and the engine's own named properties.
//
// The core fields are kept by every engine of a location (a pool-file
// field is 0 or empty on memory nodes). Everything particular to one
// engine - its levels, splits, moved bytes, remote verbs - is a property
// named "<engine>.<counter>": the engine's descriptor (pmhash/engines.h,
// EngineDescriptor::properties) declares each one with its doc, and
// stats() reports exactly those, in the descriptor's order. Front ends
// print properties by name without knowing the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pmhash {

// One engine counter: its full name ("nehash.splits") and its value.
struct Property {
  std::string name;
  std::uint64_t value = 0;
};

// A copy taken when stats() ran; later operations do not change it.
struct Stats {
  std::string engine;
  std::string granularity;       // byte, cache_line, page, none; "remote" on memory nodes
  std::uint64_t pool_size = 0;   // bytes of the pool file (memory nodes: of all nodes)
  std::uint64_t heap_used = 0;   // bytes of the heap handed out (0 on memory nodes)
  std::uint64_t heap_free = 0;   // bytes of the heap still free (0 on memory nodes)
  std::uint64_t items = 0;       // live keys
  std::uint64_t slots = 0;       // index capacity in key slots
  double load_factor = 0;        // items / slots
  bool resizing = false;         // a resize or split is in progress
  bool clean_shutdown = true;    // false: this open ran crash recovery
  std::uint64_t recovery_ns = 0; // time open spent in recovery
  std::uint64_t open_ns = 0;     // time the last open took, clean or not (0 after create)
  std::uint64_t dram_bytes = 0;  // DRAM the index keeps beside the pool
  std::uint64_t flushes = 0;     // cache-line flushes issued since open
  std::uint64_t fences = 0;      // drains (store fences) issued since open
  // Durability::kEpoch, on engines with Capabilities::epoch; 0 / empty
  // (swept: true) otherwise.
  std::uint64_t epoch = 0;          // the epoch operations run in now
  std::uint64_t durable_epoch = 0;  // every operation of an epoch <= this is durable
  std::vector<std::uint64_t> failed_epochs;  // epochs lost to crashes
  bool swept = true;                // false until the post-crash heap sweep ends

  // The engine's properties, in its descriptor's order.
  std::vector<Property> properties;

  // The value of the property `name`; nullopt when this engine has none
  // of that name.
  std::optional<std::uint64_t> find_property(std::string_view name) const {
    for (const Property& p : properties) {
      if (p.name == name) return p.value;
    }
    return std::nullopt;
  }
  // The value of the property `name`, 0 when there is none.
  std::uint64_t property(std::string_view name) const { return find_property(name).value_or(0); }
  // Appends a property (engines fill them in descriptor order).
  void add_property(std::string_view name, std::uint64_t value) {
    properties.push_back(Property{std::string(name), value});
  }
};

}  // namespace pmhash
