// tools/cli/main.cc - `pmhash`, the command-line tool over include/pmhash/.
//
//   pmhash create POOL [--engine E] [--size 1G] [--force] [-o NAME=VALUE ...]
//   pmhash put POOL KEY VALUE          insert or replace
//   pmhash put POOL KEY --value-file FILE   the value is FILE's bytes ("-": stdin)
//   pmhash get POOL KEY                print the value and a newline
//   pmhash del POOL KEY
//   pmhash scan POOL [--skip-damaged]  one "key<TAB>value" line per key
//   pmhash load POOL --records N [--threads T] [--key-size B] [--value-size B] [--seed S]
//   pmhash info POOL [--json]
//   pmhash check POOL                  print "ok" when Store::check() passes
//   pmhash engines                     every engine: what it is, its options, its properties
//   pmhash engines --names|--modes pool|memnodes   the finished engines (NAME or NAME:durability), one per line
//
// Every command but create takes --engine E: the engine the pool must hold
// (empty, the default, accepts whatever it holds). Every command takes
// --durability strict|epoch and --epoch-ms N (Options::durability and
// Options::epoch_ms; epoch needs an engine that persists by epochs: pmhash engines --modes pool).
// Every command that creates or opens a store takes engine options,
// `-o NAME=VALUE`, repeatable (Options::set; `pmhash engines` lists them):
// a name of no engine, an option the engine does not have or a value out
// of its range is a usage error, found before anything is opened, and so is
// an option of another engine than the pool's.
//
// Engines. The registry (pmhash/engines.h) is the only list: create
// accepts every engine Store::create accepts, its help lists them, and
// `pmhash engines` prints each one's summary, location, capabilities,
// options and properties.
//
// Memory nodes. Every command takes --memnodes SPECS instead of POOL for an
// index that lives on memory nodes (Options::memnodes: shm:PATH or
// tcp:HOST:PORT, comma-separated, in the same order on every client; the
// nodes made beforehand with pmhash-memnode --create):
//   pmhash create --memnodes shm:/dev/shm/mn0,tcp:10.0.0.2:7000 [--engine sephash|race]
//   pmhash put --memnodes shm:/dev/shm/mn0,tcp:10.0.0.2:7000 KEY VALUE
// create's engine is then the default of memory nodes unless --engine says
// otherwise; --size
// does not apply (the nodes have their sizes) and --force replaces an index
// of another engine on the nodes.
//
// Exit codes and errors. 0: success. 1: the store refused (the message is its
// Status message, naming the pool), a key was not found, check() failed or
// stdout could not be written. 2: a usage error (bad or missing argument,
// unknown command or flag). Every error is exactly one line on stderr that
// starts with "pmhash: "; CLI11's own error output (several lines, with a
// help hint) is never printed. `--help` prints help to stdout and exits 0.
//
// Damaged pools. scan stops at the first entry whose bytes fail validation
// (Corruption, exit 1). With --skip-damaged it prints every readable pair,
// then one line on stderr with the number of entries skipped as damaged;
// the exit status is 1 when any was skipped, 0 when none was.
//
// Creating. create builds the pool in a hidden temporary file beside it
// (".NAME.creating-PID") and renames it into place only once the pool is
// complete and closed, so a create that is killed or fails leaves nothing
// under the pool's name (at most the temporary file). Without --force an
// existing file is never replaced; with --force, a pool that another
// process holds open is not replaced either (Busy).
//
// Pools. Every command that opens a pool closes it again before it exits,
// also the read-only ones, so a pool the tool has touched is marked as
// cleanly shut down and its next open runs no recovery. The tool uses only
// the public headers; it knows nothing of the engines.
//
// Records of `load`. Record i (0 <= i < N) is a pure function of
// (i, --seed, --key-size, --value-size), so another run, or another program,
// can rebuild any key that a load inserted: the decimal records of
// tools/common/records.h (key(i) the zero-padded decimal of a seeded
// permutation of [0, 10^min(key-size, 19)), repeated up to key-size bytes;
// load refuses more records than that space holds). pmhash-readback loads
// the same records.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/status.h"
#include "pmhash/store.h"
#include "records.h"

namespace {

using pmhash::Status;
using pmhash::Store;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// ---------------------------------------------------------------------------
// Error output: one line on stderr, always prefixed "pmhash: ".

std::string one_line(std::string text) {
  std::replace_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

void print_error(const std::string& text) {
  std::fprintf(stderr, "pmhash: %s\n", one_line(text).c_str());
  std::fflush(stderr);
}

int usage_error(const std::string& text) {
  print_error(text);
  return kExitUsage;
}

// A store error names the pool: Status messages are expected to, and the
// tool adds the path when one does not.
int store_error(const std::string& path, const Status& status) {
  std::string text = status.message();
  if (text.empty()) text = std::string(Status::code_name(status.code()));
  if (text.find(path) == std::string::npos) text = path + ": " + text;
  print_error(text);
  return kExitFailed;
}

// ---------------------------------------------------------------------------
// Standard output. Values may hold any bytes, so output goes through fwrite;
// a failed write (a full disk, a closed pipe) ends the command with exit 1.

bool write_out(std::string_view bytes) {
  return std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size();
}

int finish_output(int rc) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    print_error(std::string("cannot write to standard output: ") + std::strerror(errno));
    return kExitFailed;
  }
  return rc;
}

// ---------------------------------------------------------------------------
// Argument checks. They run as CLI11 validators, so their message arrives as
// "<option>: <message>" in a CLI::ValidationError.

bool parse_u64(std::string_view text, std::uint64_t* out, bool* too_large) {
  *too_large = false;
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, *out);
  if (stop != end) return false;
  if (ec == std::errc::result_out_of_range) *too_large = true;
  return ec == std::errc();
}

// An unsigned decimal in [lo, hi].
CLI::Validator number_in(std::uint64_t lo, std::uint64_t hi) {
  auto check = [lo, hi](std::string& text) -> std::string {
    std::uint64_t v = 0;
    bool too_large = false;
    if (!parse_u64(text, &v, &too_large) && !too_large) {
      return "value '" + text + "' is not a number";
    }
    if (too_large || v < lo || v > hi) {
      return "value " + text + " is out of range [" + std::to_string(lo) + ", " +
             std::to_string(hi) + "]";
    }
    return {};
  };
  return CLI::Validator(check, "", "number");
}

// An engine option, NAME=VALUE, checked against the engines' descriptors
// (pmhash::check_option): the error names the valid engines, options or
// values.
CLI::Validator engine_option() {
  auto check = [](std::string& text) -> std::string {
    const std::size_t eq = text.find('=');
    if (eq == std::string::npos) {
      return "'" + text + "' is not NAME=VALUE ('pmhash engines' lists the names)";
    }
    const Status s = pmhash::check_option(std::string_view(text).substr(0, eq),
                                          std::string_view(text).substr(eq + 1));
    return s.ok() ? std::string() : s.message();
  };
  return CLI::Validator(check, "", "NAME=VALUE");
}

// Bytes, optionally with a binary suffix K, M, G or T (either case):
// "64M" is 64 << 20. Rewrites the text to the plain byte count.
CLI::Validator byte_size() {
  auto convert = [](std::string& text) -> std::string {
    const std::string bad = "value '" + text +
                            "' is not a size (use bytes or a number with a K, M, G or T "
                            "suffix, e.g. 512M)";
    std::string_view digits = text;
    unsigned shift = 0;
    if (!digits.empty()) {
      switch (digits.back()) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        case 'T': case 't': shift = 40; break;
        default: break;
      }
      if (shift != 0) digits.remove_suffix(1);
    }
    std::uint64_t n = 0;
    bool too_large = false;
    if (!parse_u64(digits, &n, &too_large) && !too_large) return bad;
    if (too_large || n > (UINT64_MAX >> shift)) return "value '" + text + "' is too large";
    if (n == 0) return "value '" + text + "' is not a positive size";
    text = std::to_string(n << shift);
    return {};
  };
  return CLI::Validator(convert, "", "size");
}

// ---------------------------------------------------------------------------
// Opening pools.

// Closes `store`; a failed close turns the exit code into 1.
int close_store(const std::string& path, Store& store, int rc) {
  if (Status s = store.close(); !s.ok()) return store_error(path, s);
  return rc;
}

// A usage error when an engine option given with -o belongs to another
// engine than `engine`; nothing otherwise. (The store would ignore it: one
// Options may carry several engines' settings; on the command line it is a
// mistake.) `of`: what holds the engine, for the message ("" when it was
// chosen on the command line).
std::optional<int> check_option_engines(const pmhash::Options& options, std::string_view engine,
                                        const std::string& of = {}) {
  for (const auto& [name, value] : options.engine_options) {
    const pmhash::EngineDescriptor* owner = pmhash::option_engine(name);
    if (owner != nullptr && owner->name != engine) {
      return usage_error("-o " + name + " applies to engine " + std::string(owner->name) +
                         " only, not " + std::string(engine) +
                         (of.empty() ? std::string() : " (the engine of " + of + ")"));
    }
  }
  return std::nullopt;
}

// Opens the pool at `path`, runs `body` on it and closes it. An engine
// option (-o) for another engine than the pool's closes it untouched and
// makes the command a usage error.
// `label`: what error messages name (the path, or the memory nodes).
int with_pool(const std::string& path, const std::string& label, const pmhash::Options& options,
              const std::function<int(Store&)>& body) {
  std::unique_ptr<Store> store;
  if (Status s = Store::open(path, options, &store); !s.ok()) return store_error(label, s);
  if (std::optional<int> rc = check_option_engines(options, store->describe().engine, label)) {
    return close_store(label, *store, *rc);
  }
  const int rc = body(*store);
  return close_store(label, *store, rc);
}

int key_not_found(std::string_view key) {
  print_error("key '" + std::string(key) + "' not found");
  return kExitFailed;
}

// ---------------------------------------------------------------------------
// Arguments of all commands. Only one command runs, so they share one struct.

struct Args {
  std::string pool;     // empty with --memnodes
  std::string memnodes;
  std::string secret_file;  // --secret-file: Options::memnode_secret_file
  std::string create_engine;  // empty: the default engine of the pool file or memory nodes
  std::string open_engine;  // empty: whatever the pool holds
  std::uint64_t size = pmhash::Options{}.pool_size;
  bool force = false;
  // -o NAME=VALUE, each checked against the descriptors when parsed
  std::vector<std::string> engine_options;
  std::string key;
  std::string value;
  std::string value_file;  // put --value-file ("-": stdin)
  bool value_given = false;
  bool skip_damaged = false;  // scan --skip-damaged
  bool json = false;
  // load
  std::uint64_t records = 0;
  unsigned threads = 1;
  std::size_t key_size = 16;
  std::size_t value_size = 16;
  std::uint64_t seed = 0;
  // durability
  std::string durability = "strict";
  unsigned epoch_ms = pmhash::Options{}.epoch_ms;
  // engines --names / --modes LOCATION: one word per line, for scripts
  std::string list_names;
  std::string list_modes;
};

// What error messages name: the pool file, or the memory nodes.
std::string target(const Args& a) {
  return a.memnodes.empty() ? a.pool : "memory nodes " + a.memnodes;
}

pmhash::Options store_options(const Args& a, const std::string& engine) {
  pmhash::Options options;
  options.engine = engine;
  options.memnodes = a.memnodes;
  options.memnode_secret_file = a.secret_file;
  options.durability =
      a.durability == "epoch" ? pmhash::Durability::kEpoch : pmhash::Durability::kStrict;
  options.epoch_ms = a.epoch_ms;
  for (const std::string& o : a.engine_options) {
    const std::size_t eq = o.find('=');  // present: the parser checked it
    options.set(std::string_view(o).substr(0, eq), std::string_view(o).substr(eq + 1));
  }
  return options;
}

// Opens the pool of a command (with_pool) under the command's options.
int open_pool(const Args& a, const std::function<int(Store&)>& body) {
  const pmhash::Options options = store_options(a, a.open_engine);
  if (!a.open_engine.empty()) {
    if (std::optional<int> rc = check_option_engines(options, a.open_engine)) return *rc;
  }
  return with_pool(a.pool, target(a), options, body);
}

// ---------------------------------------------------------------------------
// create, put, get, del, scan, check

// create for a pool file (see the top of the file): the pool is built under
// a temporary name in the same directory (same file system: the rename is
// atomic) and renamed into place once it is complete and closed.
int create_pool_file(const Args& a, pmhash::Options options) {
  const std::string& path = a.pool;
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty()) return usage_error("POOL: '" + path + "' names a directory, not a pool file");
  // Refused at once when the name is taken (without --force) or the pool
  // there is open (with --force), so no pool is built for nothing. A lock
  // on the old file is held until the rename: no open can slip in between.
  int old_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct Closer {
    int& fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{old_fd};
  if (old_fd >= 0) {
    if (!a.force) {
      return store_error(path, Status::AlreadyExists("pool " + path +
                                                     ": file exists (use --force to replace it)"));
    }
    if (::flock(old_fd, LOCK_EX | LOCK_NB) != 0) {
      return store_error(path, Status::Busy("pool " + path +
                                            ": in use (another process has it open); not replaced"));
    }
  } else if (errno != ENOENT) {
    return store_error(path, Status::IOError("pool " + path + ": cannot open: " +
                                             std::strerror(errno)));
  }
  const std::string temp = (dir == "/" ? "" : dir) + "/." + name + ".creating-" +
                           std::to_string(::getpid());
  options.force = true;  // a temporary file left by a killed create of this pid
  {
    std::unique_ptr<Store> store;
    Status s = Store::create(temp, options, &store);
    if (s.ok()) s = store->close();
    if (!s.ok()) {
      ::unlink(temp.c_str());
      std::string text = s.message();
      // Errors name the file the user asked for.
      for (std::size_t at; (at = text.find(temp)) != std::string::npos;) text.replace(at, temp.size(), path);
      return store_error(path, Status::IOError(text));
    }
  }
  // Without --force the name must still be free: link() fails on a name
  // that exists, where rename() would replace it.
  const bool placed = a.force ? ::rename(temp.c_str(), path.c_str()) == 0
                              : ::link(temp.c_str(), path.c_str()) == 0;
  const int err = errno;
  ::unlink(temp.c_str());
  if (!placed) {
    return store_error(path, err == EEXIST ? Status::AlreadyExists("pool " + path + ": file exists (use --force to replace it)")
                                           : Status::IOError("pool " + path + ": cannot rename the new pool into place: " +
                                                             std::strerror(err)));
  }
  // The new name is durable before create reports success.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    const bool synced = ::fsync(dir_fd) == 0;
    const int sync_err = errno;
    ::close(dir_fd);
    if (!synced) {
      return store_error(path, Status::IOError("pool " + path + ": cannot sync directory " + dir +
                                               ": " + std::strerror(sync_err)));
    }
  }
  return kExitOk;
}

int cmd_create(const Args& a) {
  std::string engine = a.create_engine;
  if (engine.empty()) {
    const pmhash::EngineDescriptor* d = pmhash::default_engine(
        a.memnodes.empty() ? pmhash::Location::kPoolFile : pmhash::Location::kMemoryNodes);
    if (d != nullptr) engine = d->name;
  }
  pmhash::Options options = store_options(a, engine);
  if (std::optional<int> rc = check_option_engines(options, engine)) return *rc;
  options.pool_size = a.size;
  options.force = a.force;
  if (a.memnodes.empty()) return create_pool_file(a, options);
  std::unique_ptr<Store> store;
  if (Status s = Store::create(a.pool, options, &store); !s.ok()) return store_error(target(a), s);
  return close_store(target(a), *store, kExitOk);
}

// Reads the value of put --value-file: the file's bytes, or stdin's for "-".
// At most one byte more than the largest value is read, so that a larger
// one is refused without reading it whole.
std::optional<int> read_value_file(const std::string& file, std::string* out) {
  FILE* f = file == "-" ? stdin : std::fopen(file.c_str(), "rb");
  if (f == nullptr) {
    return usage_error("--value-file: cannot open '" + file + "': " + std::strerror(errno));
  }
  out->clear();
  char buf[65536];
  bool too_large = false;
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    out->append(buf, n);
    if (out->size() > pmhash::kMaxValueSize) {
      too_large = true;
      break;
    }
    if (n < sizeof buf) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  if (f != stdin) std::fclose(f);
  const std::string shown = file == "-" ? std::string("standard input") : "'" + file + "'";
  if (failed) return usage_error("--value-file: cannot read " + shown + ": " + std::strerror(err));
  if (too_large) {
    return usage_error("--value-file: " + shown + " holds more than " +
                       std::to_string(pmhash::kMaxValueSize) +
                       " bytes, the largest value a pool takes");
  }
  return std::nullopt;
}

int cmd_put(const Args& a) {
  if (a.value_given == !a.value_file.empty()) {
    return usage_error("put takes the value either as VALUE or with --value-file, exactly one");
  }
  std::string from_file;
  if (!a.value_file.empty()) {
    if (std::optional<int> rc = read_value_file(a.value_file, &from_file)) return *rc;
  }
  const std::string& value = a.value_file.empty() ? a.value : from_file;
  return open_pool(a, [&](Store& store) {
    if (Status s = store.upsert(a.key, value); !s.ok()) return store_error(target(a), s);
    return kExitOk;
  });
}

int cmd_get(const Args& a) {
  return open_pool(a, [&](Store& store) {
    std::string value;
    Status s = store.get(a.key, &value);
    if (s.is_not_found()) return key_not_found(a.key);
    if (!s.ok()) return store_error(target(a), s);
    value.push_back('\n');
    write_out(value);
    return finish_output(kExitOk);
  });
}

int cmd_del(const Args& a) {
  return open_pool(a, [&](Store& store) {
    Status s = store.remove(a.key);
    if (s.is_not_found()) return key_not_found(a.key);
    if (!s.ok()) return store_error(target(a), s);
    return kExitOk;
  });
}

int cmd_scan(const Args& a) {
  return open_pool(a, [&](Store& store) {
    std::string line;
    auto print = [&](std::string_view key, std::string_view value) {
      line.assign(key);
      line.push_back('\t');
      line.append(value);
      line.push_back('\n');
      return write_out(line);  // stop at the first failed write
    };
    std::uint64_t skipped = 0;
    Status s = a.skip_damaged ? store.salvage(print, &skipped) : store.for_each(print);
    if (!s.ok()) {
      finish_output(kExitOk);  // what was read before the error is kept
      return store_error(target(a), s);
    }
    const int rc = finish_output(kExitOk);
    if (rc != kExitOk || skipped == 0) return rc;
    print_error("pool " + target(a) + ": scan skipped " + std::to_string(skipped) +
                " damaged entr" + (skipped == 1 ? "y" : "ies") +
                " (the pairs printed are every one that could be read)");
    return kExitFailed;
  });
}

int cmd_check(const Args& a) {
  return open_pool(a, [&](Store& store) {
    if (Status s = store.check(); !s.ok()) return store_error(target(a), s);
    write_out("ok\n");
    return finish_output(kExitOk);
  });
}

// ---------------------------------------------------------------------------
// engines: everything the registry knows, nothing the CLI knows itself

std::string capability_list(const pmhash::Capabilities& c) {
  const std::pair<bool, const char*> all[] = {
      {c.strict, "durability strict"},     {c.epoch, "durability epoch"},
      {c.transactions, "transactions"},    {c.snapshot_reads, "snapshot reads"},
      {c.shrink, "shrink"},                {c.background_threads, "background threads"}};
  std::string out;
  for (const auto& [has, name] : all) {
    if (has) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

pmhash::Location location_of(const std::string& word) {
  return word == "memnodes" ? pmhash::Location::kMemoryNodes : pmhash::Location::kPoolFile;
}

int cmd_engines(const Args& a) {
  std::string out;
  if (!a.list_names.empty() || !a.list_modes.empty()) {
    // What scripts iterate over: the finished engines of a location, or
    // each of them in every durability it offers ("NAME:strict").
    if (!a.list_names.empty()) {
      for (const pmhash::EngineDescriptor* e : pmhash::finished_engines()) {
        if (e->location == location_of(a.list_names)) out += std::string(e->name) + "\n";
      }
    } else {
      for (const std::string& m : pmhash::engine_modes(location_of(a.list_modes))) out += m + "\n";
    }
    write_out(out);
    return finish_output(kExitOk);
  }
  for (const pmhash::EngineDescriptor* e : pmhash::all_engines()) {
    out += std::string(e->name) + (e->in_progress ? " (in progress)" : "") + ": " +
           std::string(e->summary) + "\n";
    out += "  paper: " + std::string(e->paper) + "\n";
    out += std::string("  location: ") +
           (e->location == pmhash::Location::kPoolFile ? "pool file" : "memory nodes") + "\n";
    out += "  capabilities: " + capability_list(e->capabilities) + "\n";
    out += "  options:" + std::string(e->options.empty() ? " none" : "") + "\n";
    for (const pmhash::OptionSpec& o : e->options) {
      out += "    " + std::string(o.name) + " (" + std::string(pmhash::option_type_name(o.type)) +
             ", default " + std::string(o.default_value) + ", " + pmhash::option_range(o) + ", " +
             (o.scope == pmhash::OptionScope::kCreate ? "kept with the index" : "chosen at open") +
             ")\n      " + std::string(o.doc) + "\n";
    }
    out += "  properties:" + std::string(e->properties.empty() ? " none" : "") + "\n";
    for (const pmhash::PropertySpec& p : e->properties) {
      out += "    " + std::string(p.name) + "\n      " + std::string(p.doc) + "\n";
    }
  }
  write_out(out);
  return finish_output(kExitOk);
}

// ---------------------------------------------------------------------------
// info

std::string human_bytes(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[unit]);
  return buf;
}

// Whether the store's engine keeps epochs (Capabilities::epoch): info
// prints the epoch fields only then.
bool has_epochs(const pmhash::Stats& st) {
  const pmhash::EngineDescriptor* e = pmhash::find_engine(st.engine);
  return e != nullptr && e->capabilities.epoch;
}

// The common core, then the engine's properties by name, in its
// descriptor's order.
std::string info_text(const pmhash::Stats& st) {
  auto bytes = [](std::uint64_t n) { return std::to_string(n) + " (" + human_bytes(n) + ")"; };
  char load_factor[32];
  std::snprintf(load_factor, sizeof load_factor, "%.4f", st.load_factor);
  char shutdown[64] = "clean shutdown";
  if (!st.clean_shutdown) {
    std::snprintf(shutdown, sizeof shutdown, "recovered (%.2f ms)",
                  static_cast<double>(st.recovery_ns) / 1e6);
  }
  const std::pair<std::string, std::string> rows[] = {
      {"engine", st.engine},
      {"granularity", st.granularity},
      {"pool size", bytes(st.pool_size)},
      {"heap used", bytes(st.heap_used)},
      {"heap free", bytes(st.heap_free)},
      {"dram", bytes(st.dram_bytes)},
      {"items", std::to_string(st.items)},
      {"slots", std::to_string(st.slots)},
      {"load factor", load_factor},
      {"resizing", st.resizing ? "yes" : "no"},
      {"shutdown", shutdown},
  };
  std::vector<std::pair<std::string, std::string>> all(std::begin(rows), std::end(rows));
  char open[32];
  std::snprintf(open, sizeof open, "%.2f ms", static_cast<double>(st.open_ns) / 1e6);
  all.emplace_back("open", open);
  all.emplace_back("flushes", std::to_string(st.flushes) + " since open");
  all.emplace_back("fences", std::to_string(st.fences) + " since open");
  if (has_epochs(st)) {
    std::string failed;
    for (std::uint64_t e : st.failed_epochs) failed += (failed.empty() ? "" : ", ") + std::to_string(e);
    all.emplace_back("epoch", std::to_string(st.epoch));
    all.emplace_back("durable", "epochs <= " + std::to_string(st.durable_epoch));
    all.emplace_back("failed", failed.empty() ? "none" : failed);
    all.emplace_back("swept", st.swept ? "yes" : "no (sweep after a crash in progress)");
  }
  for (const pmhash::Property& p : st.properties) all.emplace_back(p.name, std::to_string(p.value));
  std::size_t width = 13;
  for (const auto& row : all) width = std::max(width, row.first.size() + 1);
  std::string out;
  for (const auto& [label, value] : all) {
    out += label;
    out += ':';
    out.append(width - label.size(), ' ');
    out += value;
    out += '\n';
  }
  return out;
}

// The common core under its own keys, the engine's properties under
// "properties" ({"nehash.splits": 3, ...}, in its descriptor's order).
std::string info_json(const pmhash::Stats& st) {
  nlohmann::ordered_json j;
  j["engine"] = st.engine;
  j["granularity"] = st.granularity;
  j["pool_size"] = st.pool_size;
  j["heap_used"] = st.heap_used;
  j["heap_free"] = st.heap_free;
  j["dram_bytes"] = st.dram_bytes;
  j["items"] = st.items;
  j["slots"] = st.slots;
  j["load_factor"] = st.load_factor;
  j["resizing"] = st.resizing;
  j["clean_shutdown"] = st.clean_shutdown;
  j["recovery_ns"] = st.recovery_ns;
  j["open_ns"] = st.open_ns;
  j["flushes"] = st.flushes;
  j["fences"] = st.fences;
  if (has_epochs(st)) {
    j["epoch"] = st.epoch;
    j["durable_epoch"] = st.durable_epoch;
    j["failed_epochs"] = st.failed_epochs;
    j["swept"] = st.swept;
  }
  nlohmann::ordered_json properties = nlohmann::ordered_json::object();
  for (const pmhash::Property& p : st.properties) properties[p.name] = p.value;
  j["properties"] = std::move(properties);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

int cmd_info(const Args& a) {
  return open_pool(a, [&](Store& store) {
    pmhash::Stats st = store.stats();
    // An index on memory nodes keeps no count: info counts (one scan).
    if (!a.memnodes.empty()) st.items = store.size();
    write_out(a.json ? info_json(st) : info_text(st));
    return finish_output(kExitOk);
  });
}

// ---------------------------------------------------------------------------
// load: the records (see the top of the file)

// The decimal records of tools/common/records.h, the same as pmhash-readback
// loads.
using pmhash::records::RecordGen;

// ---------------------------------------------------------------------------
// load: the run

using Clock = std::chrono::steady_clock;

// What the loading threads share with the thread that reports progress.
class LoadRun {
 public:
  explicit LoadRun(unsigned threads) : threads_(threads) {}

  // Inserts records [begin, end); stops early after any thread fails.
  void load_range(Store& store, const RecordGen& gen, std::uint64_t begin, std::uint64_t end) {
    constexpr std::uint64_t kProgressBatch = 1024;
    std::string key;
    std::string value;
    std::uint64_t pending = 0;
    for (std::uint64_t i = begin; i < end && !stop_.load(std::memory_order_relaxed); ++i) {
      gen.key(i, &key);
      gen.value(i, 0, &value);
      if (Status s = store.insert(key, value); !s.ok()) {
        fail(i, key, s);
        break;
      }
      if (++pending == kProgressBatch) {
        done_.fetch_add(pending, std::memory_order_relaxed);
        pending = 0;
      }
    }
    done_.fetch_add(pending, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_;
    cv_.notify_all();
  }

  // Makes the threads that have not finished stop at their next record.
  void stop() { stop_.store(true, std::memory_order_relaxed); }

  // Waits up to `timeout` for every thread to finish; true when they have.
  bool wait_all(Clock::duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return finished_ == threads_; });
  }

  std::uint64_t done() const { return done_.load(std::memory_order_relaxed); }

  // The first failure, as "record I (key 'K'): message"; empty when none.
  std::optional<std::string> error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void fail(std::uint64_t i, const std::string& key, const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_relaxed);
    if (error_) return;
    constexpr std::size_t kShownKeyBytes = 40;
    const std::string shown =
        key.size() <= kShownKeyBytes ? key : key.substr(0, kShownKeyBytes) + "...";
    std::string text = "record " + std::to_string(i) + " (key '" + shown + "'): " + s.message();
    if (s.is_already_exists()) {
      text += "; the pool already holds this --seed's keys: load another --seed or a new pool";
    }
    error_ = std::move(text);
  }

  const unsigned threads_;
  std::atomic<std::uint64_t> done_{0};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  unsigned finished_ = 0;             // guarded by mu_
  std::optional<std::string> error_;  // guarded by mu_
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One progress line on stderr, redrawn in place.
void draw_progress(std::uint64_t done, std::uint64_t total, double seconds) {
  constexpr int kWidth = 30;
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  const double mops = seconds > 0 ? static_cast<double>(done) / seconds / 1e6 : 0;
  std::fprintf(stderr, "\r[%s] %3d%%  %llu/%llu records  %.2f Mops/s\033[K", bar.c_str(),
               static_cast<int>(fraction * 100), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total), mops);
  std::fflush(stderr);
}

// Waits for the run to end, drawing a progress bar on a terminal's stderr once
// the run has taken more than a second, at most ten times a second.
void wait_with_progress(LoadRun& run, std::uint64_t total, Clock::time_point t0) {
  using namespace std::chrono_literals;
  const bool tty = isatty(STDERR_FILENO) == 1;
  bool drawn = false;
  Clock::time_point last_draw;
  while (!run.wait_all(100ms)) {
    const Clock::time_point now = Clock::now();
    if (!tty || now - t0 < 1s || (drawn && now - last_draw < 100ms)) continue;
    draw_progress(run.done(), total, seconds_since(t0));
    drawn = true;
    last_draw = now;
  }
  if (drawn) {
    std::fputs("\r\033[K", stderr);  // erase the bar; the results follow on stdout
    std::fflush(stderr);
  }
}

int load_into(const Args& a, Store& store) {
  const RecordGen gen(pmhash::records::Format::kDecimal, a.seed, a.key_size, a.value_size);
  LoadRun run(a.threads);
  const Clock::time_point t0 = Clock::now();
  {
    std::vector<std::jthread> workers;  // joined when the block ends
    try {
      workers.reserve(a.threads);
      for (unsigned t = 0; t < a.threads; ++t) {
        const std::uint64_t begin = a.records * t / a.threads;
        const std::uint64_t end = a.records * (t + 1) / a.threads;
        workers.emplace_back([&run, &store, &gen, begin, end] {
          run.load_range(store, gen, begin, end);
        });
      }
    } catch (const std::system_error& e) {
      run.stop();
      print_error(std::string("cannot start loading threads: ") + e.what());
      return kExitFailed;
    }
    wait_with_progress(run, a.records, t0);
  }
  const double seconds = seconds_since(t0);
  if (std::optional<std::string> error = run.error()) {
    print_error(target(a) + ": " + *error);
    return kExitFailed;
  }
  const pmhash::Stats st = store.stats();
  char out[256];
  std::snprintf(out, sizeof out,
                "records:     %llu\nseconds:     %.3f\nMops/s:      %.3f\nload factor: %.4f\n",
                static_cast<unsigned long long>(a.records), seconds,
                seconds > 0 ? static_cast<double>(a.records) / seconds / 1e6 : 0.0,
                st.load_factor);
  write_out(out);
  return finish_output(kExitOk);
}

int cmd_load(const Args& a) {
  // Arithmetic on records * threads in load_into must not overflow.
  if (a.records > UINT64_MAX / pmhash::kMaxThreads) {
    return usage_error("--records: value " + std::to_string(a.records) + " is too large");
  }
  const std::uint64_t space = RecordGen::decimal_key_space(a.key_size);
  if (a.records > space) {
    return usage_error("--records: " + std::to_string(a.records) + " distinct keys do not fit in " +
                       std::to_string(a.key_size) + "-byte keys (at most " +
                       std::to_string(space) + "); raise --key-size");
  }
  return open_pool(a, [&](Store& store) { return load_into(a, store); });
}

// ---------------------------------------------------------------------------
// Command line

struct Command {
  CLI::App* app;
  int (*run)(const Args&);
};

CLI::App* add_command(CLI::App& app, const char* name, const char* description, Args& a,
                      bool opens_pool) {
  CLI::App* sub = app.add_subcommand(name, description);
  // POOL is required but for --memnodes, where run() supplies an empty one.
  sub->add_option("POOL", a.pool, "pool file (none with --memnodes)")->required();
  sub->add_option("--memnodes", a.memnodes,
                  "memory nodes of an index that lives on them, instead of POOL: shm:PATH or "
                  "tcp:HOST:PORT, comma-separated, in the same order on every client");
  sub->add_option("--secret-file", a.secret_file,
                  "with tcp memory nodes: the secret file they were started with (default: "
                  "$PMHASH_MEMNODE_SECRET_FILE)");
  std::string epoch_engines;
  for (const pmhash::EngineDescriptor* e : pmhash::finished_engines()) {
    if (e->capabilities.epoch) {
      epoch_engines += (epoch_engines.empty() ? "" : ", ") + std::string(e->name);
    }
  }
  sub->add_option("--durability", a.durability,
                  "strict: every write durable when it returns; epoch: durable when its "
                  "epoch is (" + epoch_engines + ")")
      ->check(CLI::IsMember({"strict", "epoch"}))
      ->capture_default_str();
  sub->add_option("--epoch-ms", a.epoch_ms, "epoch length in milliseconds (" + epoch_engines + ")")
      ->check(number_in(1, 60000))
      ->capture_default_str();
  if (opens_pool) {
    sub->add_option("--engine", a.open_engine,
                    "engine the pool must hold (default: whatever it holds)");
  }
  sub->add_option("-o,--option", a.engine_options,
                  "an engine option NAME=VALUE, repeatable ('pmhash engines' lists them)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false)
      ->check(engine_option());
  return sub;
}

std::vector<Command> define_commands(CLI::App& app, Args& a) {
  std::vector<Command> commands;

  CLI::App* create = add_command(app, "create", "create a new, empty pool", a, false);
  std::string engines, remote;
  for (const std::string& e : Store::engines()) engines += (engines.empty() ? "" : ", ") + e;
  for (const std::string& e : Store::remote_engines()) remote += (remote.empty() ? "" : ", ") + e;
  const pmhash::EngineDescriptor* file_default = pmhash::default_engine(pmhash::Location::kPoolFile);
  const pmhash::EngineDescriptor* nodes_default =
      pmhash::default_engine(pmhash::Location::kMemoryNodes);
  create->add_option("--engine", a.create_engine,
                     "index engine of the new pool: " + engines + "; with --memnodes: " + remote)
      ->default_str((file_default != nullptr ? std::string(file_default->name) : std::string()) +
                    " (with --memnodes: " +
                    (nodes_default != nullptr ? std::string(nodes_default->name) : std::string()) +
                    ")");
  create->add_option("--size", a.size, "pool file size: bytes, or a number with K, M, G or T")
      ->transform(byte_size())
      ->type_name("SIZE")
      ->default_str("1G");
  create->add_flag("--force", a.force, "replace an existing file");
  commands.push_back({create, cmd_create});

  CLI::App* put = add_command(app, "put", "insert KEY, or replace its value", a, true);
  put->add_option("KEY", a.key, "key")->required();
  put->add_option("VALUE", a.value, "value (or --value-file)")
      ->each([&a](const std::string&) { a.value_given = true; });
  put->add_option("--value-file", a.value_file,
                  "read the value from FILE, '-' for standard input (values too large for the "
                  "command line)")
      ->type_name("FILE");
  commands.push_back({put, cmd_put});

  CLI::App* get = add_command(app, "get", "print the value of KEY", a, true);
  get->add_option("KEY", a.key, "key")->required();
  commands.push_back({get, cmd_get});

  CLI::App* del = add_command(app, "del", "remove KEY", a, true);
  del->add_option("KEY", a.key, "key")->required();
  commands.push_back({del, cmd_del});

  CLI::App* scan = add_command(app, "scan", "print every key<TAB>value, one per line", a, true);
  scan->add_flag("--skip-damaged", a.skip_damaged,
                 "on a damaged pool, print every readable pair and count the rest on stderr "
                 "(exit 1 when any was skipped) instead of stopping at the first damage");
  commands.push_back({scan, cmd_scan});

  CLI::App* load = add_command(app, "load", "insert N generated records", a, true);
  load->add_option("--records", a.records, "records to insert")
      ->required()
      ->check(number_in(1, UINT64_MAX));
  load->add_option("--threads", a.threads, "inserting threads")
      ->check(number_in(1, pmhash::kMaxThreads))
      ->capture_default_str();
  load->add_option("--key-size", a.key_size, "bytes per key")
      ->check(number_in(1, pmhash::kMaxKeySize))
      ->capture_default_str();
  load->add_option("--value-size", a.value_size, "bytes per value")
      ->check(number_in(0, pmhash::kMaxValueSize))
      ->capture_default_str();
  load->add_option("--seed", a.seed, "seed of the generated keys and values")
      ->check(number_in(0, UINT64_MAX))
      ->capture_default_str();
  commands.push_back({load, cmd_load});

  CLI::App* info = add_command(app, "info", "print the shape and counters of a pool", a, true);
  info->add_flag("--json", a.json, "print JSON");
  commands.push_back({info, cmd_info});

  CLI::App* check = add_command(app, "check", "verify every invariant of a pool", a, true);
  commands.push_back({check, cmd_check});

  CLI::App* engines_cmd = app.add_subcommand(
      "engines", "list every engine: what it is, its capabilities, options and properties");
  engines_cmd
      ->add_option("--names", a.list_names,
                   "print only the finished engines of a location, one per line")
      ->check(CLI::IsMember({"pool", "memnodes"}));
  engines_cmd
      ->add_option("--modes", a.list_modes,
                   "print each finished engine of a location in each durability it offers "
                   "(NAME:strict, NAME:epoch), one per line")
      ->check(CLI::IsMember({"pool", "memnodes"}));
  commands.push_back({engines_cmd, cmd_engines});

  return commands;
}

std::string command_names(const std::vector<Command>& commands) {
  std::string names;
  for (const Command& c : commands) {
    if (!names.empty()) names += ", ";
    names += c.app->get_name();
  }
  return names;
}

// Catches what CLI11 would report less clearly: no command, or a first word
// that is no command. Returns an exit code, or nothing when all is well.
std::optional<int> check_command_word(int argc, char** argv, const std::vector<Command>& commands) {
  const std::string names = command_names(commands);
  if (argc < 2) return usage_error("no command given (commands: " + names + "); see 'pmhash --help'");
  const std::string_view word = argv[1];
  if (word == "-h" || word == "--help" || word == "--help-all") return std::nullopt;
  if (word.starts_with('-')) {
    return usage_error("unknown option '" + std::string(word) +
                       "': the first argument must be a command (commands: " + names + ")");
  }
  for (const Command& c : commands) {
    if (c.app->get_name() == word) return std::nullopt;
  }
  return usage_error("unknown command '" + std::string(word) + "' (commands: " + names + ")");
}

int run(int argc, char** argv) {
  CLI::App app("pmhash - persistent hash indexes in a pool file", "pmhash");
  app.require_subcommand(1);
  app.footer(
      "Run 'pmhash COMMAND --help' for a command's options.\n"
      "Exit status: 0 success, 1 the store refused or a key was not found, 2 usage error.");
  Args args;
  const std::vector<Command> commands = define_commands(app, args);
  if (std::optional<int> rc = check_command_word(argc, argv, commands)) return *rc;
  // With --memnodes there is no POOL: an empty one goes in its place, so
  // that the other positionals keep theirs.
  std::vector<char*> words(argv, argv + argc);
  bool memnodes = false;
  for (int i = 2; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    const std::string_view w = argv[i];
    memnodes = memnodes || w == "--memnodes" || w.starts_with("--memnodes=");
  }
  static char no_pool[] = "";
  if (memnodes) words.insert(words.begin() + 2, no_pool);
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    const std::string help = chosen.empty() ? "pmhash --help"
                                            : "pmhash " + chosen.front()->get_name() + " --help";
    const std::string hint = memnodes ? "; with --memnodes, give no POOL" : "";
    return usage_error(std::string(e.what()) + hint + " (see '" + help + "')");
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run(args);
  }
  return usage_error("no command given; see 'pmhash --help'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailed;
  }
}
