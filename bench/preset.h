// bench/preset.h - named presets of pmhash-bench: one flag that stands for
// a whole command line of flags.
//
//   peers-8b   the shape the native peers (Dash-EH, P-CLHT) are measured in:
//              every finished pool engine in each durability it offers
//              (engine_modes in pmhash/engines.h), 8-byte keys and
//              values, 4M records loaded by 2 threads into a pool in
//              /dev/shm (cache_line),
//              then on the same store (--sequence) 4M uniform reads,
//              4M negative reads, 4M updates, 4M inserts of new keys and
//              the delete of every loaded record, each by 2 threads.
//
// Expansion is textual and happens before the flags are parsed:
// `--preset NAME` (or `--preset=NAME`) is replaced, where it stands, by the
// preset's flags, leaving out every flag the command line gives itself
// (anywhere, before or after the preset). So a flag given explicitly always
// wins: `--preset peers-8b --records 1000000` loads 1M records and keeps the
// rest of the preset. A flag counts as given when an argument is exactly
// that flag or starts with the flag followed by '='.
#pragma once

#include <string>
#include <vector>

namespace pmhash::bench {

// One flag of a preset and its value ("" for a flag without a value).
struct PresetFlag {
  std::string flag;
  std::string value;
};

// The names of the presets, for --help and error messages.
std::vector<std::string> preset_names();

// The flags preset `name` stands for, in order; throws Failure (workload.h)
// naming the known presets when there is no such preset.
std::vector<PresetFlag> preset_flags(const std::string& name);

// `args` (without the program name) with every --preset expanded as the
// head of this file says. Throws Failure for an unknown preset or a
// --preset without a name.
std::vector<std::string> expand_presets(const std::vector<std::string>& args);

}  // namespace pmhash::bench
