// pool/pool.h - the pool file: header, root object, heap area.
//
// On-media layout (all offsets from the start of the file):
//
//   0      +--------------------------------------------+
//          | PoolHeader (immutable after create,        |  checksummed
//          |   checksum over its first 248 bytes)       |
//   256    +--------------------------------------------+
//          | ShutdownState: clean flag, open generation |  rewritten on
//          |   (one cache line, 8-byte atomic stores)   |  open and close
//   4096   +--------------------------------------------+
//          | root object of the engine (kRootSize)      |
//   16384  +--------------------------------------------+
//          | heap (heap/heap.h): logs, chunk table,     |
//          |   chunks                                   |
//   size   +--------------------------------------------+
//
// Create writes the whole pool (zeroed root, the heap area formatted by its
// owner) and persists it, then writes and persists the header last: a crash
// during create leaves a file without a valid magic/checksum, which open
// rejects as "not a pool". The pool does not know what lives in the heap
// area: the store formats a heap there (heap/heap.h) through
// CreateParams::format_heap and opens it after Pool::open; a memory node
// (remote/memnode.h) leaves it zeroed.
//
// Open validates with pread() before mapping anything: size >= header,
// magic, layout version, header checksum, file size >= recorded size, engine
// name. Any failure returns an error naming the file and the problem and the
// file is not modified. Only then is the file mapped and the clean flag and
// the generation read; open still writes nothing, because the heap and the
// engine may yet reject the pool (a rejected pool stays byte-for-byte as it
// was). Once they have accepted it, begin_session() clears the clean flag
// and persists the incremented generation, before the store serves its
// first operation, so every session that can write items has a generation
// different from all earlier ones.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "media/region.h"
#include "pmhash/status.h"

namespace pmhash::pool {

inline constexpr char kMagic[8] = {'P', 'M', 'H', 'A', 'S', 'H', 'P', 'L'};
inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr std::uint64_t kHeaderSize = 4096;
inline constexpr std::uint64_t kRootOffset = 4096;
inline constexpr std::uint64_t kRootSize = 12288;
inline constexpr std::uint64_t kHeapOffset = kRootOffset + kRootSize;
inline constexpr std::size_t kEngineNameSize = 16;
inline constexpr std::size_t kEngineParamsSize = 128;
// The smallest pool that create accepts.
inline constexpr std::uint64_t kMinPoolSize = 4u << 20;

struct PoolHeader {
  char magic[8];                    // kMagic
  std::uint32_t layout_version;     // kLayoutVersion
  std::uint32_t header_size;        // sizeof(PoolHeader)
  std::uint64_t pool_size;          // bytes; the file may not be shorter
  std::uint8_t uuid[16];            // random, set at create
  char engine[kEngineNameSize];     // NUL-padded engine name
  std::uint8_t engine_params[kEngineParamsSize];  // engine-defined
  std::uint64_t root_offset;        // kRootOffset
  std::uint64_t root_size;          // kRootSize
  std::uint64_t heap_offset;        // kHeapOffset
  std::uint64_t heap_size;          // pool_size - heap_offset
  std::uint64_t create_time_ns;     // CLOCK_REALTIME at create
  std::uint8_t reserved[24];
  std::uint64_t checksum;           // XXH3-64 of all bytes above
};
static_assert(sizeof(PoolHeader) == 256);

struct ShutdownState {
  std::uint64_t clean;       // 1 after close(), 0 while open
  std::uint64_t generation;  // incremented (and persisted) by every open
  std::uint64_t reserved[6];
};
static_assert(sizeof(ShutdownState) == 64);

struct CreateParams {
  std::string engine;
  std::uint64_t size = 0;
  bool force = false;
  std::array<std::uint8_t, kEngineParamsSize> engine_params{};
  // Formats the heap area [offset, offset + size) of the new pool and makes
  // it durable; create calls it before it writes the header, and fails with
  // its error. Empty: the area stays zeroed.
  std::function<Status(media::Region& region, std::uint64_t offset, std::uint64_t size)>
      format_heap;
};

class Pool {
 public:
  // Creates and formats a pool file (params.format_heap formats the heap
  // area; the header is written last, see above).
  // Errors: AlreadyExists (file exists, !force), Busy (force over a pool that
  // is open: nothing is changed), IOError (cannot create or
  // size the file; names path and errno text), InvalidArgument (size below
  // kMinPoolSize, engine name empty or too long).
  static Status create(const std::string& path, const CreateParams& params,
                       std::unique_ptr<Pool>* out);

  // A volatile pool in anonymous memory (granularity none), for benchmarks
  // and tests. Same layout as a file pool.
  static Status create_volatile(const CreateParams& params, std::unique_ptr<Pool>* out);

  // Opens and validates an existing pool. `engine` empty accepts any engine.
  // A Pool holds an exclusive flock(2) on its file until it is destroyed:
  // another open, or a create with force, of the same file (from this or any
  // other process) fails with Busy and touches nothing.
  // Errors (file untouched): Busy (in use), IOError (cannot open/stat/read), Corruption
  // (too short, bad magic, bad checksum, other layout version, truncated),
  // InvalidArgument (engine mismatch: "pool P holds 'x', asked for 'y'").
  static Status open(const std::string& path, const std::string& engine,
                     std::unique_ptr<Pool>* out);

  // Opens like open(), but with a shared lock: any number of processes may
  // hold a pool this way at once (the memory nodes of the shm transport,
  // remote/memnode.h, are pool files that every client maps). An exclusive
  // holder and shared holders exclude each other (Busy). The caller must
  // not use begin_session() or mark_clean_shutdown(): a shared pool has no
  // single session.
  static Status open_shared(const std::string& path, const std::string& engine,
                            std::unique_ptr<Pool>* out);

  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  media::Region& region() const { return *region_; }
  const PoolHeader& header() const { return header_; }  // validated copy
  std::string engine() const;
  const std::string& path() const { return region_->path(); }

  std::byte* root() const { return region_->base() + kRootOffset; }
  std::uint64_t heap_offset() const { return header_.heap_offset; }
  std::uint64_t heap_size() const { return header_.heap_size; }

  // Whether the previous session closed the pool cleanly (read at open
  // before it was cleared); true right after create.
  bool was_clean() const { return was_clean_; }
  // This open's generation: differs from that of every earlier open.
  std::uint64_t generation() const { return generation_; }

  // Persists clean = 0 and this open's generation (see the file comment).
  // Call once the heap and the engine have accepted the pool, before any
  // operation runs. Create leaves the pool in this state already.
  void begin_session();

  // Persists clean = 1. Call last, after everything else is durable.
  void mark_clean_shutdown();

  // Validates the header bytes of an open pool again (for check()).
  Status verify_header() const;

 private:
  Pool() = default;
  static Status open_locked(const std::string& path, const std::string& engine, bool shared,
                            std::unique_ptr<Pool>* out);

  std::unique_ptr<media::Region> region_;
  int lock_fd_ = -1;  // holds the flock on the file; -1 for a volatile pool
  PoolHeader header_{};
  bool was_clean_ = true;
  std::uint64_t generation_ = 0;
};

}  // namespace pmhash::pool
