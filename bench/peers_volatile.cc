// bench/peers_volatile.cc - the peers that keep their items in DRAM only
// (durability "none (volatile DRAM)"): libcuckoo's cuckoohash_map, oneTBB's
// concurrent_hash_map, and std::unordered_map under one std::shared_mutex.
// bench/peers.cc says what each is and why the comparison is fair.
//
// All three map std::string to std::string and look keys up by string_view
// through a transparent hash and equality, so a lookup builds no temporary
// std::string. libcuckoo starts with TableConfig::initial_slots (the
// driver gives it the slots of a new store of the default pool engine),
// oneTBB and std empty; none is reserved from capacity_hint, so the
// measured inserts include the maps' resizing, as pmhash's include their
// own.
//
// Bytes. The driver counts a volatile peer's bytes as what glibc's malloc
// has handed out while the table existed (mallinfo2). oneTBB's map does not
// allocate through malloc: its default allocator, tbb::tbb_allocator, takes
// its nodes and bucket segments from libtbbmalloc (scalable_malloc, its own
// mmap-ed pools), which mallinfo2 never sees, so with keys and values short
// enough to live inside std::string (8 bytes) the map appeared to use 0
// bytes. TbbPeer therefore hands the map a tbb_allocator that counts the
// bytes it holds (CountingAllocator) and reports them plus the malloc bytes
// of longer strings (which std::string takes from malloc) as its own.
#include <malloc.h>

#include <atomic>
#include <functional>
#include <libcuckoo/cuckoohash_map.hh>
#include <mutex>
#include <oneapi/tbb/concurrent_hash_map.h>
#include <shared_mutex>
#include <unordered_map>

#include "peers_detail.h"
#include "table.h"

namespace pmhash::bench {
namespace {

constexpr const char* kVolatile = "none (volatile DRAM)";

// Hash and equality over string_view for the maps keyed by std::string, so
// that a lookup by string_view needs no temporary std::string (a key of 16
// bytes or more would allocate one).
struct ViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

// oneTBB's form of the same: one object with hash() and equal().
struct ViewHashCompare {
  using is_transparent = void;
  std::size_t hash(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  bool equal(std::string_view a, std::string_view b) const { return a == b; }
};

// --- libcuckoo ---------------------------------------------------------------

class CuckooPeer final : public Table {
 public:
  // initial_slots: TableConfig::initial_slots; 0 takes libcuckoo's default.
  explicit CuckooPeer(std::uint64_t initial_slots)
      : map_(initial_slots != 0 ? static_cast<std::size_t>(initial_slots)
                                : libcuckoo::DEFAULT_SIZE) {}

  std::string name() const override { return "libcuckoo"; }
  std::string kind() const override { return "peer"; }
  std::string durability() const override { return kVolatile; }

  Status insert(std::string_view key, std::string_view value) override {
    return map_.insert(key, value) ? Status::OK() : Status::AlreadyExists("key exists");
  }
  Status get(std::string_view key, std::string* value) override {
    return map_.find(key, *value) ? Status::OK() : Status::NotFound();
  }
  Status update(std::string_view key, std::string_view value) override {
    return map_.update(key, value) ? Status::OK() : Status::NotFound();
  }
  Status remove(std::string_view key) override {
    return map_.erase(key) ? Status::OK() : Status::NotFound();
  }

  TableStats stats() const override {
    TableStats stats;
    stats.items = map_.size();
    stats.load_factor = map_.load_factor();
    return stats;
  }

 private:
  libcuckoo::cuckoohash_map<std::string, std::string, ViewHash, std::equal_to<>> map_;
};

// --- oneTBB ------------------------------------------------------------------

// Bytes allocated and not yet freed through a CountingAllocator, in 64
// stripes picked by thread so that two threads rarely share a counter's
// line; a stripe may go negative (one thread frees what another took), the
// sum may not.
struct alignas(64) ByteStripe {
  std::atomic<std::int64_t> bytes{0};
};
struct ByteCount {
  ByteStripe stripes[64];

  void add(std::int64_t n) {
    static std::atomic<unsigned> next{0};
    thread_local const unsigned mine = next.fetch_add(1, std::memory_order_relaxed) % 64;
    stripes[mine].bytes.fetch_add(n, std::memory_order_relaxed);
  }
  std::uint64_t total() const {
    std::int64_t sum = 0;
    for (const ByteStripe& s : stripes) sum += s.bytes.load(std::memory_order_relaxed);
    return sum > 0 ? static_cast<std::uint64_t>(sum) : 0;
  }
};

// tbb::tbb_allocator (the map's default, libtbbmalloc) that counts the bytes
// it holds in a ByteCount shared by every copy and rebinding.
template <typename T>
class CountingAllocator {
 public:
  using value_type = T;
  explicit CountingAllocator(ByteCount* count) noexcept : count_(count) {}
  template <typename U>
  CountingAllocator(const CountingAllocator<U>& other) noexcept : count_(other.count()) {}

  T* allocate(std::size_t n) {
    T* p = tbb::tbb_allocator<T>().allocate(n);
    count_->add(static_cast<std::int64_t>(n * sizeof(T)));
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    tbb::tbb_allocator<T>().deallocate(p, n);
    count_->add(-static_cast<std::int64_t>(n * sizeof(T)));
  }
  ByteCount* count() const noexcept { return count_; }

  template <typename U>
  bool operator==(const CountingAllocator<U>& other) const noexcept {
    return count_ == other.count();
  }

 private:
  ByteCount* count_;
};

std::uint64_t malloc_in_use() {
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

class TbbPeer final : public Table {
 public:
  TbbPeer() : malloc_before_(malloc_in_use()), map_(Map::allocator_type(&count_)) {}

  std::string name() const override { return "tbb"; }
  std::string kind() const override { return "peer"; }
  std::string durability() const override { return kVolatile; }

  // The accessor holds the new item's write lock until the value is in, so
  // no reader sees the item without its value.
  Status insert(std::string_view key, std::string_view value) override {
    Map::accessor item;
    if (!map_.insert(item, key)) return Status::AlreadyExists("key exists");
    item->second.assign(value);
    return Status::OK();
  }
  Status get(std::string_view key, std::string* value) override {
    Map::const_accessor item;
    if (!map_.find(item, key)) return Status::NotFound();
    value->assign(item->second);
    return Status::OK();
  }
  Status update(std::string_view key, std::string_view value) override {
    Map::accessor item;
    if (!map_.find(item, key)) return Status::NotFound();
    item->second.assign(value);
    return Status::OK();
  }
  Status remove(std::string_view key) override {
    return map_.erase(key) ? Status::OK() : Status::NotFound();
  }

  TableStats stats() const override {
    TableStats stats;
    stats.items = map_.size();
    // Chained buckets: items per bucket, which may exceed 1.
    stats.load_factor = static_cast<double>(map_.size()) / static_cast<double>(map_.bucket_count());
    // The map's nodes and buckets (libtbbmalloc), plus what the strings
    // took from malloc (and whatever else the process allocated meanwhile,
    // as for the other volatile peers).
    const std::uint64_t in_use = malloc_in_use();
    stats.bytes = count_.total() + (in_use > malloc_before_ ? in_use - malloc_before_ : 0);
    stats.bytes_kind = "dram";
    return stats;
  }

 private:
  using Map = tbb::concurrent_hash_map<std::string, std::string, ViewHashCompare,
                                       CountingAllocator<std::pair<const std::string, std::string>>>;
  ByteCount count_;
  std::uint64_t malloc_before_;
  Map map_;
};

// --- std::unordered_map + std::shared_mutex ------------------------------------

class StdPeer final : public Table {
 public:
  std::string name() const override { return "std"; }
  std::string kind() const override { return "peer"; }
  std::string durability() const override { return kVolatile; }

  Status insert(std::string_view key, std::string_view value) override {
    std::unique_lock lock(mutex_);
    const bool inserted = map_.try_emplace(std::string(key), value).second;
    return inserted ? Status::OK() : Status::AlreadyExists("key exists");
  }
  Status get(std::string_view key, std::string* value) override {
    std::shared_lock lock(mutex_);
    const auto it = map_.find(key);
    if (it == map_.end()) return Status::NotFound();
    value->assign(it->second);
    return Status::OK();
  }
  Status update(std::string_view key, std::string_view value) override {
    std::unique_lock lock(mutex_);
    const auto it = map_.find(key);
    if (it == map_.end()) return Status::NotFound();
    it->second.assign(value);
    return Status::OK();
  }
  Status remove(std::string_view key) override {
    std::unique_lock lock(mutex_);
    const auto it = map_.find(key);
    if (it == map_.end()) return Status::NotFound();
    map_.erase(it);
    return Status::OK();
  }

  TableStats stats() const override {
    std::shared_lock lock(mutex_);
    TableStats stats;
    stats.items = map_.size();
    stats.load_factor = map_.load_factor();
    return stats;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::string, ViewHash, std::equal_to<>> map_;
};

}  // namespace

namespace peers_detail {

std::unique_ptr<Table> make_volatile_peer(const std::string& name, const TableConfig& config) {
  if (name == "libcuckoo") return std::make_unique<CuckooPeer>(config.initial_slots);
  if (name == "tbb") return std::make_unique<TbbPeer>();
  if (name == "std") return std::make_unique<StdPeer>();
  return nullptr;
}

}  // namespace peers_detail
}  // namespace pmhash::bench
