// pmhash/options.h - how a Store is created and opened.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

// Size limits of keys and values (docs/architecture.md, "Keys and hashing").
#include "pmhash/limits.h"

namespace pmhash {

// When the effect of a call becomes durable.
enum class Durability : unsigned char {
  // When a call returns, its effect survives any crash.
  kStrict,
  // A call's effect survives a crash once its epoch has been made durable;
  // Store::sync() waits for that. Only engines built for it accept it.
  kEpoch,
};

// How Store::get reads.
struct ReadOptions {
  // Read the latest state that is already durable, without taking locks:
  // what the store would recover to after a crash now. dali reads the
  // state as of two epochs ago (with Durability::kEpoch a write acknowledged
  // in the last ~2 epochs may not be seen yet; serializable, not strictly).
  // With Durability::kStrict every engine's plain get already answers only
  // from durable state (Store::get), so a snapshot read also sees every
  // write acknowledged before it.
  bool snapshot = false;
};

// The options of a Store. The options every engine understands are typed
// fields; an engine's own options are set by name, "<engine>.<option>"
// (pmhash/engines.h lists them with their types, defaults, ranges and docs;
// `pmhash engines` prints them):
//
//   Options o;
//   o.engine = "pmeh";
//   o.set("pmeh.zone_bits", 6).set("pmeh.workers", "4");
//
// Create and open check the options of the engine they start: an unknown
// name or a value outside its range is InvalidArgument naming the valid
// ones, and so is a name whose prefix is no engine. Options of another
// engine are ignored, so that one Options (a configuration file, a
// benchmark over several engines) may carry settings for several engines.
struct Options {
  // The engine. Empty (the default): on create, the default engine of where
  // the index goes (default_engine() in pmhash/engines.h: of a pool file,
  // or of memory nodes when `memnodes` is set); on open, whatever engine the
  // pool or the memory nodes hold. A name that differs from what an open
  // finds is refused.
  std::string engine = {};

  // Size of the pool file to create, in bytes (create only).
  std::uint64_t pool_size = std::uint64_t{1} << 30;

  // Replace an existing file on create. Without it, create refuses to touch
  // an existing file.
  bool force = false;

  Durability durability = Durability::kStrict;
  // Length of an epoch in milliseconds, for engines that persist by epochs
  // (EngineDescriptor::capabilities.epoch): with kEpoch, at most about two
  // epochs of acknowledged work are lost in a crash. 1 .. 60000.
  unsigned epoch_ms = 10;

  // --- engines whose index lives on memory nodes -----------------------
  // The memory nodes that hold the index: comma-separated "shm:PATH" (a
  // memory-node pool file mapped by this process) or "tcp:HOST:PORT" (a
  // pmhash-memnode daemon). The store's path is then unused: pass "".
  // Node 0 holds the index root and the directory; segments are spread
  // over all nodes. Every client must name the nodes in the same order.
  // Create with an empty `engine` makes default_engine(kMemoryNodes); open
  // with an empty one takes whatever engine node 0 holds
  // (Store::remote_engines()).
  std::string memnodes = {};
  // tcp memory nodes started with --secret-file: the same secret file (32
  // to 4096 bytes, mode 600). The client then proves it holds the secret
  // and connects only to nodes that prove it too. Empty: the file named by
  // the environment variable PMHASH_MEMNODE_SECRET_FILE, if set, else
  // none. Errors at open/create: InvalidArgument for a file too short,
  // too long or readable by others, or a node that refuses the client or
  // cannot prove the secret.
  std::string memnode_secret_file = {};
  // A remote round trip not answered in this long fails with IOError. 0
  // (the default): half the index's lease, which is what clients should
  // use. An explicit value may not exceed half the lease (create and open
  // refuse it, naming both numbers), because both the lock lease's and the
  // generation fence's safety assume that a batch executes within lease/2
  // of being posted. 0 .. 300000.
  unsigned remote_timeout_ms = 0;
  // shm only: injected round-trip latency in nanoseconds (emulates a network
  // hop; 0 is CXL-style direct access).
  unsigned remote_latency_ns = 0;

  // --- engine options by name ------------------------------------------
  // Sets an engine option from its text ("6", "true", "0.05") or a typed
  // value. The value is checked when a store starts (or earlier, by
  // check_option() in pmhash/engines.h). Returns *this.
  Options& set(std::string_view name, std::string_view value);
  // Its own overload: a string literal would otherwise convert to bool.
  Options& set(std::string_view name, const char* value) {
    return set(name, std::string_view(value));
  }
  Options& set(std::string_view name, bool value);
  Options& set(std::string_view name, double value);
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Options& set(std::string_view name, T value) {
    return set(name, std::string_view(std::to_string(value)));
  }
  // An enumeration sets its number.
  template <typename T>
    requires std::is_enum_v<T>
  Options& set(std::string_view name, T value) {
    return set(name, static_cast<std::underlying_type_t<T>>(value));
  }
  // Forgets a value set for `name`: the option takes its default again.
  void unset(std::string_view name);

  // The text set for `name`; nullopt when none was set.
  std::optional<std::string> get(std::string_view name) const;
  // The value `name` takes: the one set, else the engine's default (from
  // its descriptor). Empty when nothing was set and no engine has the
  // option.
  std::string value(std::string_view name) const;

  // What set() recorded, by name. Front ends that copy options between
  // stores may copy this map; everyone else uses set() and get().
  std::map<std::string, std::string, std::less<>> engine_options = {};
};

}  // namespace pmhash
