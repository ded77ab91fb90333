// engine/option_values.h - an engine's options as typed values.
//
// Engines read their options (Options::set, "<engine>.<option>") once, when
// they start, into a config struct of typed fields (e.g. pmeh::Config); no
// option is looked up by name on an operation's path. The store has checked
// the values against the engine's descriptor (check_option in
// pmhash/engines.h) before it starts the engine, so these parse text that is
// known to be valid; a value that is not (an engine started directly, in a
// test) reads as the option's default. Asking for an option no engine
// declares is a bug of the caller and aborts.
#pragma once

#include <cstdint>
#include <string_view>

#include "pmhash/options.h"

namespace pmhash::engine {

// The option's value: the one set in `options`, else its default.
std::uint64_t option_unsigned(const Options& options, std::string_view name);
bool option_bool(const Options& options, std::string_view name);
double option_double(const Options& options, std::string_view name);

// Parses an option's text; false when it is not of the type. Booleans are
// true/false, on/off, 1/0 or yes/no; numbers are decimal.
bool parse_unsigned(std::string_view text, std::uint64_t* out);
bool parse_bool(std::string_view text, bool* out);
bool parse_double(std::string_view text, double* out);

}  // namespace pmhash::engine
