// engine/remote_common/properties.h - the properties every memory-node
// engine reports: what its sessions exchanged with the nodes.
//
// Each memory-node engine declares them under its own prefix
// ("sephash.round_trips", "race.round_trips") before its own properties,
// with with_remote_counters<"engine">({...}) in its descriptor, and
// SessionPool::fill_stats fills them under the same prefix from one list
// (kRemoteCounters), so the declared names and the filled ones cannot
// drift apart.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>
#include <utility>

#include "pmhash/engines.h"

namespace pmhash::engine::remote_index {

// A counter's name after the engine's prefix, and its doc.
struct RemoteCounter {
  std::string_view suffix;
  std::string_view doc;
};

// In the order they are declared and filled.
inline constexpr RemoteCounter kRemoteCounters[] = {
    {"round_trips", "round trips to the memory nodes (one per batch sent), since open"},
    {"remote_verbs", "verbs (reads, writes, CAS, FAA) the batches carried, since open"},
    {"remote_bytes", "payload bytes the verbs moved, both directions, since open"},
};
inline constexpr std::size_t kRemoteCounterCount = std::size(kRemoteCounters);

// A string literal as a template argument (an engine's name).
template <std::size_t N>
struct Literal {
  char text[N];
  constexpr Literal(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT: implicit on purpose
  constexpr std::string_view view() const { return {text, N - 1}; }
};

// "<engine>.<suffix of counter i>", NUL-terminated, in static storage.
template <Literal Engine, std::size_t I>
inline constexpr auto kRemoteCounterName = [] {
  constexpr std::string_view engine = Engine.view();
  constexpr std::string_view suffix = kRemoteCounters[I].suffix;
  std::array<char, engine.size() + 1 + suffix.size() + 1> name{};
  std::copy(engine.begin(), engine.end(), name.begin());
  name[engine.size()] = '.';
  std::copy(suffix.begin(), suffix.end(), name.begin() + engine.size() + 1);
  return name;
}();

// The engine's descriptor properties: the remote counters named
// "<Engine>.<suffix>", then the engine's own `own`.
template <Literal Engine, std::size_t N>
constexpr std::array<PropertySpec, kRemoteCounterCount + N> with_remote_counters(
    const PropertySpec (&own)[N]) {
  std::array<PropertySpec, kRemoteCounterCount + N> all{};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((all[I] = PropertySpec{std::string_view(kRemoteCounterName<Engine, I>.data(),
                                             kRemoteCounterName<Engine, I>.size() - 1),
                            kRemoteCounters[I].doc}),
     ...);
  }(std::make_index_sequence<kRemoteCounterCount>{});
  for (std::size_t i = 0; i < N; ++i) all[kRemoteCounterCount + i] = own[i];
  return all;
}

}  // namespace pmhash::engine::remote_index
