// engine/nehash/directory.h - the DRAM directory of nehash (paper §3): a main
// node, one-time expansion nodes of two entries under main entries that had
// to grow, and two-time expansion nodes of two or four entries under
// one-time entries. nehash.h describes the design; this file states the
// rules each type keeps.
//
// Concurrency: lookups are lock-free (at most three acquire loads of entry
// words, inside an rcu::ReadGuard). Entries change by single atomic stores.
// Whoever changes the directory holds the Index's dir_mutex_ shared (group
// creation, splits) or exclusive (a full main expansion, check()); only the
// entries of the group being split or created are written, so writers of
// different groups never touch the same entry.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/nehash/layout.h"

namespace pmhash::engine::nehash {

// --- time values (§2.6) -------------------------------------------------------
// Now, by steady_clock or the clock a test set (nehash_testing.h).
std::int64_t now_ns();

// --- groups in DRAM -------------------------------------------------------------
// Lock word of one bucket:
//   bits 0..15   the locks (writers only): a home bucket is locked as a
//                whole (all 16 bits at once); the conflict bucket and an
//                overflow block one slot (bit) at a time
//   bits 16..20  conflict count (home buckets only): how many VALID slots of
//                the group's conflict bucket hold a key whose home bucket
//                this is, 0..16. Changed only by a writer holding this
//                bucket's lock, or by a split under SPLITTING; rebuilt at
//                open (nehash.h, "Conflict counts").
//   bits 21..63  a version bumped by every unlock (readers' seqlock)
inline constexpr std::uint64_t kSlotLockMask = 0xFFFF;
inline constexpr unsigned kConflictShift = 16;
inline constexpr std::uint64_t kConflictOne = std::uint64_t{1} << kConflictShift;
inline constexpr std::uint64_t kConflictMask = std::uint64_t{0x1F} << kConflictShift;
inline constexpr unsigned kVersionShift = 21;
inline constexpr std::uint64_t kVersionOne = std::uint64_t{1} << kVersionShift;
constexpr unsigned conflict_count(std::uint64_t lock_word) {
  return static_cast<unsigned>((lock_word & kConflictMask) >> kConflictShift);
}

// GroupRef::state: a split of the group runs; its writers wait.
inline constexpr std::uint32_t kSplitting = 1;

// An overflow block of a group and the lock word of its one bucket.
struct OverflowRef {
  std::uint64_t off = 0;
  OverflowBlock* block = nullptr;
  std::atomic<std::uint64_t> lock{0};
  std::atomic<OverflowRef*> next{nullptr};
};

// One per bucket group; freed only with the directory (close).
struct GroupRef {
  std::uint64_t off = 0;      // pool offset of the block
  GroupHeader* hdr = nullptr;
  std::uint32_t bg_id = 0;
  std::uint64_t prefix = 0;   // = hdr->prefix
  std::atomic<std::uint8_t> depth{0};     // L: mirrors the table entry's D_Length
  std::atomic<std::uint32_t> state{0};    // kSplitting (waiters use atomic::wait)
  std::unique_ptr<std::atomic<std::uint64_t>[]> lock;  // 2^b + 1 bucket lock words
  std::atomic<OverflowRef*> overflow{nullptr};          // mirrors hdr->overflow's chain

  bool covers(std::uint64_t h1) const {
    return in_range(h1, prefix, depth.load(std::memory_order_acquire));
  }
};

// --- entries and nodes ----------------------------------------------------------
// point: 0 (ignoring LOCK) = empty
//   bit 0 LOCK  a group is being created in this empty entry; readers ignore it
//   bit 1 NODE  the rest points to the next level's Node; otherwise to a GroupRef
inline constexpr std::uintptr_t kEntryLock = 1;
inline constexpr std::uintptr_t kEntryNode = 2;
inline constexpr std::uintptr_t kEntryPtrMask = ~std::uintptr_t{3};

// HL_E (main and one-time nodes): time_value is a time stamp (ns) while the
// entry is a leaf, and a duration once it has a node below (§2.6).
struct HLE {
  std::atomic<std::uintptr_t> point{0};
  std::atomic<std::int64_t> time_value{0};
};
// HL (two-time nodes): no time.
struct HL {
  std::atomic<std::uintptr_t> point{0};
};

// A node of 2^bits entries. Entry i has HL_value (hl_base << bits) | i,
// which is the top `depth` bits of every h1 routed through it.
class alignas(16) Node {
 public:
  static constexpr std::uint8_t kMain = 0, kOneTime = 1, kTwoTime = 2;

  static Node* make(std::uint8_t level, unsigned bits, unsigned depth, std::uint64_t hl_base);
  static void destroy(Node* n);

  std::uint8_t level() const { return level_; }
  unsigned bits() const { return bits_; }
  unsigned depth() const { return depth_; }
  std::uint64_t hl_base() const { return hl_base_; }
  std::size_t size() const { return std::size_t{1} << bits_; }
  std::uint64_t hl_value(std::size_t i) const { return (hl_base_ << bits_) | i; }
  // The entry of h1 (whose top depth() - bits() bits are hl_base).
  std::size_t index_of(std::uint64_t h1) const {
    return bits_ == 0 ? 0 : static_cast<std::size_t>((h1 << (depth_ - bits_)) >> (64 - bits_));
  }

  std::atomic<std::uintptr_t>& point(std::size_t i) {
    return level_ == kTwoTime ? hl()[i].point : hle()[i].point;
  }
  // nullptr at level 2.
  std::atomic<std::int64_t>* time(std::size_t i) {
    return level_ == kTwoTime ? nullptr : &hle()[i].time_value;
  }
  std::size_t bytes() const;

 private:
  Node(std::uint8_t level, unsigned bits, unsigned depth, std::uint64_t hl_base)
      : level_(level), bits_(static_cast<std::uint8_t>(bits)),
        depth_(static_cast<std::uint8_t>(depth)), hl_base_(hl_base) {}
  HLE* hle() { return reinterpret_cast<HLE*>(this + 1); }
  HL* hl() { return reinterpret_cast<HL*>(this + 1); }

  std::uint8_t level_;
  std::uint8_t bits_;
  std::uint8_t depth_;
  std::uint64_t hl_base_;
};
static_assert(sizeof(Node) % 16 == 0);

inline bool entry_is_node(std::uintptr_t p) { return (p & kEntryNode) != 0; }
inline Node* entry_node(std::uintptr_t p) { return reinterpret_cast<Node*>(p & kEntryPtrMask); }
inline GroupRef* entry_group(std::uintptr_t p) { return reinterpret_cast<GroupRef*>(p & kEntryPtrMask); }

// Where a lookup ended: the nodes it went through and the entry it read
// last (the leaf). group == nullptr: the leaf is empty.
struct Leaf {
  Node* path[3] = {};
  std::size_t index[3] = {};
  unsigned levels = 0;
  GroupRef* group = nullptr;

  Node* node() const { return path[levels - 1]; }
  std::size_t entry() const { return index[levels - 1]; }
  unsigned depth() const { return node()->depth(); }
};

// What a split does to the directory (§2.5).
enum class SplitCase {
  kShared,       // A: the group has more entries than one; re-point the upper half
  kMainFull,     // B: hang a one-time node under the main entry
  kOneTimeFull,  // C: hang a two-time node under the one-time entry
  kTwoTimeFull,  // D: the main node must expand first
  kMaxDepth,     // no directory bit left: an overflow block instead
};

struct SplitPlan {
  SplitCase kind = SplitCase::kShared;
  Leaf leaf;                  // an entry of the group (the key's)
  unsigned two_time_bits = 0; // case C: 1 + Spread_rate, clamped to max depth
  Node* child = nullptr;      // cases B and C: the node to hang, made before the split commits
};

// What a test sees of the directory along one hash (Directory::probe).
struct Probe {
  unsigned levels = 0;                     // nodes on the path (1..3)
  unsigned bits[3] = {}, depth[3] = {};    // of each node on the path
  std::int64_t time[3] = {};               // time_value of the entry taken (0 at level 2)
  bool has_group = false;
  std::uint32_t bg_id = 0;
  unsigned group_depth = 0;
  std::size_t group_entries = 0;           // entries of the leaf's node naming the group
};

class Directory {
 public:
  Directory(unsigned bucket_bits, unsigned main_bits);
  ~Directory();
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  unsigned bucket_bits() const { return b_; }
  unsigned max_depth() const { return nehash::max_depth(b_); }
  // The deepest main node a full expansion may build: 2^24 entries, 256 MiB
  // (the DRAM bound; keys crafted to share long hash prefixes would grow it
  // without end). A group whose split would need more gets overflow blocks.
  static constexpr unsigned kMaxMainBits = 24;
  static unsigned max_main_bits();
  // The deepest group open accepts: three levels below the deepest main node
  // (a two-time node of two bits under a one-time one).
  static unsigned max_open_bits() { return max_main_bits() + 3; }

  // --- lookups (inside an rcu::ReadGuard) ---
  Leaf find(std::uint64_t h1) const;
  unsigned main_bits() const { return main_.load(std::memory_order_acquire)->bits(); }

  // --- groups ---
  // A GroupRef for a group block; owned by the directory from now on.
  GroupRef* add_group(std::uint64_t off, GroupHeader* hdr, unsigned depth);
  void for_each_group(const std::function<void(GroupRef&)>& fn) const;
  std::size_t group_count() const;

  // --- group creation in an empty main entry (caller holds dir_mutex_ shared) ---
  // Takes the entry's LOCK if it is still empty; false if another thread
  // got there first (or it is no longer empty).
  bool lock_empty(const Leaf& leaf);
  // Publishes the group in the locked entry (clears LOCK).
  void publish_group(const Leaf& leaf, GroupRef* g);
  // Gives the entry back empty.
  void unlock_empty(const Leaf& leaf);

  // --- splits (caller holds dir_mutex_ shared and the group's kSplitting) ---
  // Chooses the action; false when the new node cannot be allocated.
  bool plan_split(const GroupRef& g, std::uint64_t h1, SplitPlan* plan) const;
  // Frees the node of a plan that is not applied.
  static void discard(SplitPlan* plan);
  // Step 9 of the split: the directory action for g (now at d+1) and g1.
  // *_keys: whether that half holds a key (time stamps, §2.6 Step 3).
  void apply_split(const SplitPlan& plan, GroupRef* g, GroupRef* g1, bool lower_keys,
                   bool upper_keys);

  // --- full main expansion (case D; caller holds dir_mutex_ exclusive) ---
  // Whether a full expansion would stay within max_main_bits().
  bool can_expand() const;
  // Publishes the new main node and returns the replaced nodes, to be
  // destroyed by the caller after rcu::synchronize() (outside the mutex).
  // Does nothing when the main node is no longer `seen` (another thread
  // expanded it). False when the main node would pass kMaxMainBits or
  // cannot be allocated.
  bool expand_main(Node* seen, std::vector<Node*>* retired);

  // --- open (Steps 3-6; single-threaded) ---
  // Attaches every group to all entries of its range. A group deeper than
  // the main node hangs below it in the one-time and two-time nodes that
  // splits build (main node of max_main_bits(), a group up to three levels
  // deeper). False: a node could not be allocated, or the groups' depths
  // need a node shape the directory has not (recovery checks the bound).
  bool attach_all();

  // Time stamps after a successful insert (Steps 1 and 3).
  void stamp_insert(const Leaf& leaf);

  // Tests and check().
  Probe probe(std::uint64_t h1) const;
  // The shape invariants of nehash.h §6 (4, 5, 6); "" when they hold.
  std::string check(unsigned initial_bits) const;

  struct Counters {
    std::atomic<std::uint64_t> one_time_nodes{0};
    std::atomic<std::uint64_t> two_time_nodes{0};
    std::atomic<std::uint64_t> rule1_nodes{0};
    std::atomic<std::uint64_t> rule2_nodes{0};
    std::atomic<std::uint64_t> full_expansions{0};
  };
  const Counters& counters() const { return counters_; }
  // Deepest level in use (1..3) and DRAM bytes of nodes, GroupRefs and locks.
  unsigned levels_in_use() const;
  std::size_t dram_bytes() const;

 private:
  template <typename Fn>
  static void walk(Node* n, const Fn& fn);
  static void destroy_tree(Node* n);

  const unsigned b_;
  std::atomic<Node*> main_;
  mutable std::mutex groups_mutex_;
  std::vector<std::unique_ptr<GroupRef>> groups_;
  std::vector<std::unique_ptr<OverflowRef>> overflow_refs_;
  Counters counters_;

  friend class NehashIndex;
  // Owned overflow refs (freed with the directory).
  OverflowRef* add_overflow(std::uint64_t off, OverflowBlock* block);
};

}  // namespace pmhash::engine::nehash
