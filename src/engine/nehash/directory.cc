// engine/nehash/directory.cc - the DRAM directory (design in nehash.h §2).
#include "engine/nehash/directory.h"
#include "engine/nehash/nehash_testing.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <new>

namespace pmhash::engine::nehash {
namespace {

std::atomic<testing::ClockFn> clock_fn{nullptr};
std::atomic<unsigned> max_main_bits_override{0};

constexpr std::align_val_t kNodeAlign{64};

}  // namespace

void testing::set_clock(ClockFn fn) { clock_fn.store(fn); }
void testing::set_max_main_bits(unsigned bits) { max_main_bits_override.store(bits); }

unsigned Directory::max_main_bits() {
  const unsigned bits = max_main_bits_override.load(std::memory_order_relaxed);
  return bits == 0 ? kMaxMainBits : bits;
}

std::int64_t now_ns() {
  if (testing::ClockFn fn = clock_fn.load(std::memory_order_relaxed)) return fn();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------

Node* Node::make(std::uint8_t level, unsigned bits, unsigned depth, std::uint64_t hl_base) {
  const std::size_t n = std::size_t{1} << bits;
  const std::size_t stride = level == kTwoTime ? sizeof(HL) : sizeof(HLE);
  void* mem = ::operator new(sizeof(Node) + n * stride, kNodeAlign, std::nothrow);
  if (mem == nullptr) return nullptr;
  Node* node = new (mem) Node(level, bits, depth, hl_base);
  for (std::size_t i = 0; i < n; ++i) {
    if (level == kTwoTime) {
      new (node->hl() + i) HL();
    } else {
      new (node->hle() + i) HLE();
    }
  }
  return node;
}

void Node::destroy(Node* n) {
  if (n == nullptr) return;
  // Entries and the header are trivially destructible atomics and integers.
  ::operator delete(static_cast<void*>(n), kNodeAlign);
}

std::size_t Node::bytes() const {
  return sizeof(Node) + size() * (level_ == kTwoTime ? sizeof(HL) : sizeof(HLE));
}

// ---------------------------------------------------------------------------
// Directory
// ---------------------------------------------------------------------------

Directory::Directory(unsigned bucket_bits, unsigned main_bits) : b_(bucket_bits) {
  Node* m = Node::make(Node::kMain, main_bits, main_bits, 0);
  if (m == nullptr) throw std::bad_alloc();
  main_.store(m);
}

Directory::~Directory() { destroy_tree(main_.load()); }

template <typename Fn>
void Directory::walk(Node* n, const Fn& fn) {
  fn(n);
  for (std::size_t i = 0; i < n->size(); ++i) {
    const std::uintptr_t p = n->point(i).load(std::memory_order_acquire);
    if (entry_is_node(p)) walk(entry_node(p), fn);
  }
}

void Directory::destroy_tree(Node* n) {
  if (n == nullptr) return;
  std::vector<Node*> all;
  walk(n, [&](Node* x) { all.push_back(x); });
  for (Node* x : all) Node::destroy(x);
}

Leaf Directory::find(std::uint64_t h1) const {
  Leaf leaf;
  Node* n = main_.load(std::memory_order_acquire);
  for (;;) {
    const std::size_t i = n->index_of(h1);
    leaf.path[leaf.levels] = n;
    leaf.index[leaf.levels] = i;
    ++leaf.levels;
    const std::uintptr_t p = n->point(i).load(std::memory_order_acquire) & ~kEntryLock;
    if (entry_is_node(p)) {
      n = entry_node(p);
      continue;
    }
    leaf.group = entry_group(p);
    return leaf;
  }
}

GroupRef* Directory::add_group(std::uint64_t off, GroupHeader* hdr, unsigned depth) {
  auto g = std::make_unique<GroupRef>();
  g->off = off;
  g->hdr = hdr;
  g->bg_id = hdr->bg_id;
  g->prefix = hdr->prefix;
  g->depth.store(static_cast<std::uint8_t>(depth));
  g->lock = std::make_unique<std::atomic<std::uint64_t>[]>(buckets_per_group(b_));
  GroupRef* raw = g.get();
  std::lock_guard lock(groups_mutex_);
  groups_.push_back(std::move(g));
  return raw;
}

OverflowRef* Directory::add_overflow(std::uint64_t off, OverflowBlock* block) {
  auto r = std::make_unique<OverflowRef>();
  r->off = off;
  r->block = block;
  OverflowRef* raw = r.get();
  std::lock_guard lock(groups_mutex_);
  overflow_refs_.push_back(std::move(r));
  return raw;
}

void Directory::for_each_group(const std::function<void(GroupRef&)>& fn) const {
  std::vector<GroupRef*> all;
  {
    std::lock_guard lock(groups_mutex_);
    all.reserve(groups_.size());
    for (const auto& g : groups_) all.push_back(g.get());
  }
  for (GroupRef* g : all) fn(*g);
}

std::size_t Directory::group_count() const {
  std::lock_guard lock(groups_mutex_);
  return groups_.size();
}

// ---------------------------------------------------------------------------
// Group creation
// ---------------------------------------------------------------------------

bool Directory::lock_empty(const Leaf& leaf) {
  std::uintptr_t expected = 0;
  return leaf.node()->point(leaf.entry()).compare_exchange_strong(expected, kEntryLock);
}

void Directory::publish_group(const Leaf& leaf, GroupRef* g) {
  leaf.node()->point(leaf.entry()).store(reinterpret_cast<std::uintptr_t>(g),
                                         std::memory_order_release);
}

void Directory::unlock_empty(const Leaf& leaf) {
  leaf.node()->point(leaf.entry()).store(0, std::memory_order_release);
}

void Directory::stamp_insert(const Leaf& leaf) {
  // Step 1 (a main entry's leaf) or Step 3 (a one-time entry's leaf): the
  // time of the first key stored under the entry. Called under the key's
  // home-slot lock, so no split of the group (which would turn the entry's
  // time into a duration) runs meanwhile.
  if (leaf.levels > 2) return;
  std::atomic<std::int64_t>* t = leaf.node()->time(leaf.entry());
  if (t->load(std::memory_order_relaxed) != 0) return;
  std::int64_t expected = 0;
  t->compare_exchange_strong(expected, now_ns(), std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Splits
// ---------------------------------------------------------------------------

bool Directory::plan_split(const GroupRef& g, std::uint64_t h1, SplitPlan* out) const {
  SplitPlan& plan = *out;
  plan = SplitPlan{};
  plan.leaf = find(h1);
  const unsigned d = g.depth.load();
  Node* n = plan.leaf.node();
  if (d >= max_depth()) {
    plan.kind = SplitCase::kMaxDepth;
  } else if (d < n->depth()) {
    plan.kind = SplitCase::kShared;
  } else if (n->level() == Node::kMain) {
    plan.kind = SplitCase::kMainFull;
  } else if (n->level() == Node::kOneTime) {
    plan.kind = SplitCase::kOneTimeFull;
    // Step 5, equation (1): Spread_rate = 1 when the main entry filled faster
    // than this one-time entry (dt_i < dt_ij). Step 4's dt_ij is stored by
    // apply_split; here it is compared with dt_i, stored at Step 2.
    const std::int64_t dt_i = plan.leaf.path[0]->time(plan.leaf.index[0])->load();
    const std::int64_t t1 = n->time(plan.leaf.entry())->load();
    const std::int64_t dt_ij = t1 == 0 ? 0 : now_ns() - t1;
    const unsigned spread = dt_i < dt_ij ? 1 : 0;
    plan.two_time_bits = std::min(1 + spread, max_depth() - n->depth());
  } else {
    plan.kind = SplitCase::kTwoTimeFull;
  }
  if (plan.kind == SplitCase::kMainFull || plan.kind == SplitCase::kOneTimeFull) {
    const bool one_time = plan.kind == SplitCase::kMainFull;
    const unsigned bits = one_time ? 1 : plan.two_time_bits;
    plan.child = Node::make(one_time ? Node::kOneTime : Node::kTwoTime, bits, n->depth() + bits,
                            n->hl_value(plan.leaf.entry()));
    if (plan.child == nullptr) return false;
  }
  return true;
}

void Directory::discard(SplitPlan* plan) {
  Node::destroy(plan->child);
  plan->child = nullptr;
}

void Directory::apply_split(const SplitPlan& plan, GroupRef* g, GroupRef* g1, bool lower_keys,
                            bool upper_keys) {
  Node* n = plan.leaf.node();
  const std::size_t j = plan.leaf.entry();
  const unsigned d = g1->depth.load() - 1u;  // g's depth before the split
  const std::uintptr_t pg = reinterpret_cast<std::uintptr_t>(g);
  const std::uintptr_t pg1 = reinterpret_cast<std::uintptr_t>(g1);
  const std::int64_t now = now_ns();
  switch (plan.kind) {
    case SplitCase::kShared: {
      // g's run is 2^(depth - d) entries; its upper half now names g1.
      const unsigned shift = n->depth() - d;
      const std::size_t start =
          static_cast<std::size_t>((top_bits(g->prefix, d) << shift) & (n->size() - 1));
      const std::size_t half = std::size_t{1} << (shift - 1);
      for (std::size_t i = start + half; i < start + 2 * half; ++i) {
        n->point(i).store(pg1, std::memory_order_release);
      }
      return;
    }
    case SplitCase::kMainFull:
    case SplitCase::kOneTimeFull: {
      const bool one_time = plan.kind == SplitCase::kMainFull;
      Node* child = plan.child;
      const unsigned bits = child->bits();
      const std::size_t half = child->size() / 2;
      for (std::size_t i = 0; i < child->size(); ++i) {
        child->point(i).store(i < half ? pg : pg1, std::memory_order_relaxed);
      }
      if (one_time) {
        // Step 3 for the halves the split fills: they start now.
        child->time(0)->store(lower_keys ? now : 0, std::memory_order_relaxed);
        child->time(1)->store(upper_keys ? now : 0, std::memory_order_relaxed);
      }
      // Step 2 (dt_i) or Step 4 (dt_ij): the entry's stamp becomes the time
      // it took to fill.
      std::atomic<std::int64_t>* t = n->time(j);
      const std::int64_t t0 = t->load();
      t->store(t0 == 0 ? 0 : std::max<std::int64_t>(0, now - t0));
      // The node is complete before the release store that publishes it.
      n->point(j).store(reinterpret_cast<std::uintptr_t>(child) | kEntryNode,
                        std::memory_order_release);
      if (one_time) {
        counters_.one_time_nodes.fetch_add(1);
      } else {
        counters_.two_time_nodes.fetch_add(1);
        (bits == 2 ? counters_.rule1_nodes : counters_.rule2_nodes).fetch_add(1);
      }
      return;
    }
    case SplitCase::kTwoTimeFull:
    case SplitCase::kMaxDepth:
      return;  // handled by the caller (full expansion, overflow block)
  }
}

// ---------------------------------------------------------------------------
// Full main expansion and rebuild
// ---------------------------------------------------------------------------

bool Directory::can_expand() const {
  unsigned deepest = 0;
  walk(main_.load(std::memory_order_acquire), [&](Node* x) { deepest = std::max(deepest, x->depth()); });
  return deepest <= max_main_bits();
}

bool Directory::expand_main(Node* seen, std::vector<Node*>* retired) {
  Node* old = main_.load();
  if (old != seen) return true;
  unsigned deepest = old->depth();
  walk(old, [&](Node* x) { deepest = std::max(deepest, x->depth()); });
  if (deepest > max_main_bits()) return false;
  Node* fresh = Node::make(Node::kMain, deepest, deepest, 0);
  if (fresh == nullptr) return false;
  // Every leaf of depth D, at any level, fills the 2^(deepest - D) entries of
  // its range; entries start their time over (§2.6).
  const std::int64_t now = now_ns();
  walk(old, [&](Node* x) {
    const unsigned shift = deepest - x->depth();
    for (std::size_t i = 0; i < x->size(); ++i) {
      const std::uintptr_t p = x->point(i).load();
      if (entry_is_node(p)) continue;
      const std::uint64_t first = x->hl_value(i) << shift;
      for (std::uint64_t k = 0; k < (std::uint64_t{1} << shift); ++k) {
        fresh->point(first + k).store(p, std::memory_order_relaxed);
        fresh->time(first + k)->store(p != 0 ? now : 0, std::memory_order_relaxed);
      }
    }
  });
  walk(old, [&](Node* x) { retired->push_back(x); });
  main_.store(fresh, std::memory_order_release);
  counters_.full_expansions.fetch_add(1);
  return true;
}

bool Directory::attach_all() {
  Node* m = main_.load();
  const std::int64_t now = now_ns();
  // Deepest first: the first group to reach a level-1 entry that needs a
  // two-time node below it is the deepest there, and sizes that node.
  std::vector<GroupRef*> order;
  order.reserve(groups_.size());
  for (const auto& g : groups_) order.push_back(g.get());
  std::stable_sort(order.begin(), order.end(), [](const GroupRef* a, const GroupRef* b) {
    return a->depth.load() > b->depth.load();
  });
  for (GroupRef* g : order) {
    const unsigned l = g->depth.load();
    Node* n = m;
    while (l > n->depth()) {
      // The group lies below this node: descend, hanging the node that
      // splits would have hung (one-time: one bit; two-time: one or two).
      const std::size_t i = n->index_of(g->prefix);
      const std::uintptr_t p = n->point(i).load();
      if (entry_is_node(p)) {
        n = entry_node(p);
        continue;
      }
      const unsigned bits = n->level() == Node::kMain ? 1 : l - n->depth();
      if (n->level() == Node::kTwoTime || p != 0 || bits > 2) return false;
      Node* child = Node::make(n->level() + 1, bits, n->depth() + bits, n->hl_value(i));
      if (child == nullptr) return false;
      n->point(i).store(reinterpret_cast<std::uintptr_t>(child) | kEntryNode);
      n->time(i)->store(0);  // a duration once a node hangs below; not known
      (n->level() == Node::kMain ? counters_.one_time_nodes : counters_.two_time_nodes).fetch_add(1);
      n = child;
    }
    // Every entry of the group's range in its node; W3: a non-empty main or
    // one-time entry starts its time at open.
    const unsigned shift = n->depth() - l;
    const std::uint64_t first = (top_bits(g->prefix, l) << shift) & (n->size() - 1);
    for (std::uint64_t k = 0; k < (std::uint64_t{1} << shift); ++k) {
      n->point(first + k).store(reinterpret_cast<std::uintptr_t>(g));
      if (std::atomic<std::int64_t>* t = n->time(first + k)) t->store(now);
    }
  }
  return true;
}

// ---------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------

Probe Directory::probe(std::uint64_t h1) const {
  const Leaf leaf = find(h1);
  Probe p;
  p.levels = leaf.levels;
  for (unsigned k = 0; k < leaf.levels; ++k) {
    Node* n = leaf.path[k];
    p.bits[k] = n->bits();
    p.depth[k] = n->depth();
    const std::atomic<std::int64_t>* t = n->time(leaf.index[k]);
    p.time[k] = t == nullptr ? 0 : t->load();
  }
  if (leaf.group != nullptr) {
    p.has_group = true;
    p.bg_id = leaf.group->bg_id;
    p.group_depth = leaf.group->depth.load();
    Node* n = leaf.node();
    for (std::size_t i = 0; i < n->size(); ++i) {
      p.group_entries += entry_group(n->point(i).load()) == leaf.group ? 1 : 0;
    }
  }
  return p;
}

unsigned Directory::levels_in_use() const {
  unsigned levels = 1;
  walk(main_.load(std::memory_order_acquire),
       [&](Node* x) { levels = std::max(levels, x->level() + 1u); });
  return levels;
}

std::size_t Directory::dram_bytes() const {
  std::size_t bytes = 0;
  walk(main_.load(std::memory_order_acquire), [&](Node* x) { bytes += x->bytes(); });
  std::lock_guard lock(groups_mutex_);
  bytes += groups_.size() * (sizeof(GroupRef) + buckets_per_group(b_) * sizeof(std::uint64_t));
  bytes += overflow_refs_.size() * sizeof(OverflowRef);
  return bytes;
}

std::string Directory::check(unsigned initial_bits) const {
  Node* m = main_.load();
  if (m->level() != Node::kMain || m->bits() != m->depth() || m->hl_base() != 0) {
    return "main node has level " + std::to_string(m->level()) + ", bits " +
           std::to_string(m->bits()) + ", depth " + std::to_string(m->depth());
  }
  if (m->bits() < initial_bits) {
    return "main node of 2^" + std::to_string(m->bits()) + " entries, below the initial 2^" +
           std::to_string(initial_bits);
  }
  struct Seen {
    Node* node = nullptr;
    std::size_t entries = 0;
  };
  std::map<const GroupRef*, Seen> seen;
  std::string err;
  const std::int64_t now = now_ns();
  const GroupRef* last_group = nullptr;
  Seen* last_seen = nullptr;
  auto node_check = [&](auto&& self, Node* n) -> void {
    for (std::size_t i = 0; i < n->size() && err.empty(); ++i) {
      const std::uintptr_t p = n->point(i).load();
      // Built only for a report: a main node may have 2^24 entries.
      auto where = [&] {
        return "level-" + std::to_string(n->level()) + " entry " + std::to_string(n->hl_value(i)) +
               " (depth " + std::to_string(n->depth()) + ")";
      };
      if (p & kEntryLock) {
        err = where() + " is left locked";
        return;
      }
      const std::atomic<std::int64_t>* t = n->time(i);
      const std::int64_t tv = t == nullptr ? 0 : t->load();
      if (entry_is_node(p)) {
        Node* c = entry_node(p);
        const bool bits_ok = c->level() == Node::kOneTime ? c->bits() == 1
                                                          : c->bits() == 1 || c->bits() == 2;
        if (n->level() == Node::kTwoTime || c->level() != n->level() + 1 || !bits_ok ||
            c->depth() != n->depth() + c->bits() || c->hl_base() != n->hl_value(i) ||
            c->depth() > max_depth()) {
          err = where() + " has a malformed node below it (level " + std::to_string(c->level()) +
                ", bits " + std::to_string(c->bits()) + ", depth " + std::to_string(c->depth()) + ")";
          return;
        }
        if (tv < 0) {
          err = where() + " has a negative duration";
          return;
        }
        self(self, c);
        continue;
      }
      if (tv < 0 || tv > now) {
        err = where() + " has a time stamp in the future";
        return;
      }
      const GroupRef* g = entry_group(p);
      if (g == nullptr) continue;
      const unsigned l = g->depth.load();
      const std::uint64_t entry_prefix = n->depth() == 0 ? 0 : n->hl_value(i) << (64 - n->depth());
      if (l > n->depth() || !in_range(entry_prefix, g->prefix, l)) {
        err = where() + " names group " + std::to_string(g->bg_id) + " of depth " +
              std::to_string(l) + ", which does not cover it";
        return;
      }
      // A group's entries are consecutive: one map lookup per run of them.
      if (g != last_group) {
        last_group = g;
        last_seen = &seen[g];
      }
      Seen& s = *last_seen;
      if (s.node != nullptr && s.node != n) {
        err = "group " + std::to_string(g->bg_id) + " is named from two nodes";
        return;
      }
      s.node = n;
      ++s.entries;
    }
  };
  node_check(node_check, m);
  if (!err.empty()) return err;
  std::lock_guard lock(groups_mutex_);
  for (const auto& g : groups_) {
    auto it = seen.find(g.get());
    if (it == seen.end()) return "group " + std::to_string(g->bg_id) + " is named by no entry";
    const std::size_t want = std::size_t{1} << (it->second.node->depth() - g->depth.load());
    if (it->second.entries != want) {
      return "group " + std::to_string(g->bg_id) + " is named by " +
             std::to_string(it->second.entries) + " entries, not " + std::to_string(want);
    }
  }
  if (seen.size() != groups_.size()) return "an entry names a group the directory does not own";
  return "";
}

}  // namespace pmhash::engine::nehash
