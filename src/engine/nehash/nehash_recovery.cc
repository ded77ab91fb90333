// engine/nehash/nehash_recovery.cc - create, open (the rebuild of §5), close,
// check and the engine's registration (design in nehash.h).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "engine/item.h"
#include "engine/nehash/nehash.h"
#include "engine/nehash/nehash_index.h"
#include "engine/nehash/nehash_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::nehash {
namespace {

// The descriptor's ranges (checked by the store) keep both within a byte.
Status encode_params(const Options& options, std::uint8_t* out) {
  const Config c = Config::from(options);
  const Params p{kLayoutVersion, static_cast<std::uint8_t>(c.bucket_bits),
                 static_cast<std::uint8_t>(c.initial_dir_bits)};
  std::memcpy(out, &p, sizeof(p));
  return Status::OK();
}

Status create_index(const Env& env, std::unique_ptr<Index>* out) {
  auto index = std::make_unique<NehashIndex>(env);
  if (Status s = index->format(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

Status open_index(const Env& env, std::unique_ptr<Index>* out) {
  auto index = std::make_unique<NehashIndex>(env);
  if (Status s = index->recover(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

std::string bits_string(std::uint64_t prefix, unsigned depth) {
  std::string s = "0b";
  for (unsigned i = 0; i < depth; ++i) s += (prefix >> (63 - i)) & 1 ? '1' : '0';
  return depth == 0 ? "(the whole hash space)" : s;
}

// A live table entry as open and check() read it.
struct Entry {
  std::uint32_t id = 0;
  std::uint64_t off = 0;
  unsigned depth = 0;  // D_Length (planned, after the kSplit rows)
  GroupHeader* hdr = nullptr;
};

// The first pair of entries whose ranges overlap, as a message; "" if none.
std::string find_overlap(const std::vector<Entry>& entries) {
  std::map<std::pair<unsigned, std::uint64_t>, std::size_t> ranges;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    auto [it, fresh] = ranges.emplace(std::make_pair(e.depth, top_bits(e.hdr->prefix, e.depth)), i);
    if (!fresh) {
      const Entry& o = entries[it->second];
      return "groups " + std::to_string(o.id) + " and " + std::to_string(e.id) +
             " both cover prefix " + bits_string(e.hdr->prefix, e.depth) + " (depths " +
             std::to_string(o.depth) + " and " + std::to_string(e.depth) + ")";
    }
  }
  for (const Entry& e : entries) {
    for (unsigned k = 0; k < e.depth; ++k) {
      auto it = ranges.find({k, top_bits(e.hdr->prefix, k)});
      if (it == ranges.end()) continue;
      const Entry& o = entries[it->second];
      return "groups " + std::to_string(o.id) + " and " + std::to_string(e.id) +
             " both cover prefix " + bits_string(e.hdr->prefix, e.depth) + " (depths " +
             std::to_string(o.depth) + " and " + std::to_string(e.depth) + ")";
    }
  }
  return "";
}

}  // namespace

const EngineInfo kEngineInfo = {&kDescriptor, &encode_params, &create_index, &open_index};

Status NehashIndex::fail(const std::string& what) const {
  return Status::Corruption("pool " + env_.pool->path() + ": nehash: " + what);
}

// ---------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------

Status NehashIndex::format() {
  std::memset(static_cast<void*>(root_), 0, sizeof(Root));
  root_->magic = kRootMagic;
  root_->layout_version = kLayoutVersion;
  root_->bucket_bits = static_cast<std::uint8_t>(b_);
  root_->initial_dir_bits = static_cast<std::uint8_t>(g0_);
  // The root is durable before create returns; a crash before it leaves a
  // pool that open rejects ("nehash root is not initialised").
  region_.persist(root_, sizeof(Root));
  dir_ = std::make_unique<Directory>(b_, g0_);
  count_.set_base(0);
  ready_ = true;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Open: phase V reads only (a rejected pool stays unchanged), phase W writes
// ---------------------------------------------------------------------------

Status NehashIndex::recover() {
  Params p{};
  std::memcpy(&p, env_.pool->header().engine_params, sizeof(p));
  // A layout-1 pool (each key in its home slot) says so in its pool header
  // and its root: refused by name, before any slot is read under rules it
  // was not written by.
  if (p.version == kLayoutVersionV1 || root_->magic == kRootMagicV1) {
    return Status::InvalidArgument(
        "pool " + env_.pool->path() + ": nehash layout version " +
        std::to_string(kLayoutVersionV1) + " (each key in its home slot); this build reads only " +
        "layout version " + std::to_string(kLayoutVersion) +
        " (a key in any slot of its home bucket) and does not convert pools: read it out with "
        "'pmhash scan' of a build of layout 1 and load it into a new pool");
  }
  if (p.version != kLayoutVersion || p.bucket_bits < kMinBucketBits || p.bucket_bits > kMaxBucketBits ||
      p.initial_dir_bits > kMaxInitialDirBits) {
    return fail("pool-header parameters {version " + std::to_string(p.version) + ", b " +
                std::to_string(p.bucket_bits) + ", G0 " + std::to_string(p.initial_dir_bits) +
                "} are not valid");
  }
  // V0. The root and the table's segments.
  if (root_->magic != kRootMagic) return fail("root is not initialised");
  if (root_->layout_version != kLayoutVersion) {
    return fail("root layout version " + std::to_string(root_->layout_version) + ", expected " +
                std::to_string(kLayoutVersion));
  }
  if (root_->bucket_bits != b_ || root_->initial_dir_bits != g0_) {
    return fail("root says b = " + std::to_string(root_->bucket_bits) + ", G0 = " +
                std::to_string(root_->initial_dir_bits) + ", the pool header b = " +
                std::to_string(b_) + ", G0 = " + std::to_string(g0_));
  }
  const unsigned max_d = max_depth(b_);
  std::unordered_set<std::uint64_t> segment_offs;
  for (unsigned s = 0; s < kSegments; ++s) {
    const std::uint64_t off = root_->rec_segments[s].load();
    if (off == 0) continue;
    if (!heap_.is_allocated(off) || heap_.block_size(off) < segment_bytes(s) ||
        region_.at<SegmentHeader>(off)->magic != kSegmentMagic ||
        region_.at<SegmentHeader>(off)->index != s) {
      return fail("recovery-table segment " + std::to_string(s) + " at offset " +
                  std::to_string(off) + " is not an allocated segment of the right size and index");
    }
    segment_offs.insert(off);
  }
  // Step 1. Every table word; one header per live entry.
  std::vector<Entry> entries;
  std::unordered_map<std::uint32_t, std::size_t> by_id;
  std::unordered_set<std::uint64_t> group_offs;
  std::uint64_t highest = 0;
  bool any = false;
  std::vector<std::uint32_t> holes;
  for (unsigned s = 0; s < kSegments; ++s) {
    const std::uint64_t soff = root_->rec_segments[s].load();
    if (soff == 0) continue;
    std::atomic<std::uint64_t>* table = segment_table(region_.at<SegmentHeader>(soff));
    for (std::uint64_t i = 0; i < segment_entries(s); ++i) {
      const std::uint64_t id64 = ids_below_segment(s) + i;
      const std::uint64_t w = table[i].load();
      if (w == 0) {
        if (id64 <= UINT32_MAX) holes.push_back(static_cast<std::uint32_t>(id64));
        continue;
      }
      const std::string who = "recovery-table entry " + std::to_string(id64);
      if (id64 > UINT32_MAX || !rec_well_formed(w)) return fail(who + " is malformed");
      const std::uint64_t off = rec_offset(w);
      const unsigned depth = rec_depth(w);
      if (depth > max_d) return fail(who + " has depth " + std::to_string(depth));
      if (!heap_.is_allocated(off) || heap_.block_size(off) < group_bytes(b_)) {
        return fail(who + " names offset " + std::to_string(off) +
                    ", which is not an allocated bucket group");
      }
      auto* hdr = region_.at<GroupHeader>(off);
      const unsigned cd = hdr->create_depth;
      if (hdr->magic != kGroupMagic || hdr->bg_id != id64 || hdr->bucket_bits != b_ ||
          cd > depth || (cd < 64 && (cd == 0 ? hdr->prefix : hdr->prefix << cd) != 0)) {
        return fail("group header at offset " + std::to_string(off) + " does not match " + who +
                    " (magic, id, bucket bits, creation depth or prefix)");
      }
      if (!group_offs.insert(off).second) return fail(who + " names a group block named twice");
      ++open_counters_.groups_read;
      by_id[static_cast<std::uint32_t>(id64)] = entries.size();
      entries.push_back({static_cast<std::uint32_t>(id64), off, depth, hdr});
      highest = id64;
      any = true;
    }
  }
  // Overflow chains (only at max depth).
  std::unordered_set<std::uint64_t> overflow_offs;
  for (const Entry& e : entries) {
    for (std::uint64_t o = e.hdr->overflow.load(); o != 0;
         o = region_.at<OverflowBlock>(o)->next.load()) {
      if (!heap_.is_allocated(o) || heap_.block_size(o) < sizeof(OverflowBlock) ||
          region_.at<OverflowBlock>(o)->magic != kOverflowMagic || group_offs.contains(o) ||
          !overflow_offs.insert(o).second) {
        return fail("overflow chain of group " + std::to_string(e.id) +
                    " names a block that is not an overflow block of its own");
      }
    }
  }
  // Plan the op logs.
  struct SlotFix {
    OpLog* log;
    Slot* slot;
    std::atomic<std::uint16_t>* meta;
  };
  struct SplitFix {
    std::size_t entry;
    unsigned old_depth;
  };
  std::vector<SlotFix> slot_fixes;
  std::vector<SplitFix> split_fixes;
  std::vector<OpLog*> records;
  // Where a slot offset falls: the group or overflow block holding it.
  std::map<std::uint64_t, std::uint64_t> blocks;  // start -> end of the slot area
  for (const Entry& e : entries) {
    const std::uint64_t start = e.off + sizeof(GroupHeader);
    blocks[start] = e.off + group_bytes(b_);
  }
  for (std::uint64_t o : overflow_offs) blocks[o + offsetof(OverflowBlock, meta)] = o + sizeof(OverflowBlock);
  auto meta_of_slot = [&](std::uint64_t slot_off) -> std::uint64_t {
    auto it = blocks.upper_bound(slot_off);
    if (it == blocks.begin()) return 0;
    --it;
    if (slot_off + sizeof(Slot) > it->second) return 0;
    const std::uint64_t start = it->first;
    if (group_offs.contains(start - sizeof(GroupHeader))) {
      const std::uint64_t buckets = start + bucket_dir_bytes(b_);
      if (slot_off < buckets || (slot_off - buckets) % sizeof(Slot) != 0) return 0;
      const std::uint64_t n = (slot_off - buckets) / sizeof(Slot);
      return start + (n / kSlotsPerBucket) * sizeof(BucketMeta) + (n % kSlotsPerBucket) * 2;
    }
    const std::uint64_t bucket = start - offsetof(OverflowBlock, meta) + offsetof(OverflowBlock, bucket);
    if (slot_off < bucket || (slot_off - bucket) % sizeof(Slot) != 0) return 0;
    return start + (slot_off - bucket) / sizeof(Slot) * 2;
  };
  for (unsigned t = 0; t < kOpLogs; ++t) {
    OpLog& log = root_->op_log[t];
    const std::uint64_t op = log.op.load();
    const std::string who = "op log " + std::to_string(t);
    switch (op_kind(op)) {
      case kOpNone:
        if (op != 0) return fail(who + " is malformed");
        continue;
      case kOpSlotUpdate: {
        const std::uint64_t slot_off = op_slot_offset(op);
        const std::uint64_t mw = log.meta.load();
        const std::uint16_t m = log_meta_value(mw);
        const std::uint64_t meta_off = meta_of_slot(slot_off);
        const std::uint64_t w0 = log.w0.load();
        bool ok = op_slot_well_formed(op) && meta_off != 0 && log_meta_offset(mw) == meta_off;
        if (ok && meta_valid(m)) {
          ok = meta_is_inline(m) ? meta_key_len(m) <= kInlineMax && meta_value_len(m) <= kInlineMax
                                 : heap_.is_allocated(pool::pptr_offset(w0));
        }
        if (!ok) return fail(who + " holds a slot update that names no slot of a live group");
        slot_fixes.push_back({&log, region_.at<Slot>(slot_off),
                              region_.at<std::atomic<std::uint16_t>>(meta_off)});
        records.push_back(&log);
        continue;
      }
      case kOpSplit: {
        const unsigned d = op_split_depth(op);
        auto it = by_id.find(op_split_id(op));
        if (!op_split_well_formed(op) || it == by_id.end() || d >= max_d) {
          return fail(who + " holds a split record that names no live group");
        }
        records.push_back(&log);
        if (planted::active(testing::kSplitNotFinished)) continue;
        Entry& g = entries[it->second];
        if (d < g.hdr->create_depth || g.depth < d) {
          return fail(who + " splits group " + std::to_string(g.id) + " at depth " +
                      std::to_string(d) + ", which it never had");
        }
        // E1: the upper half's group is in the table (found by its prefix
        // and creation depth, which later splits of it do not change).
        const std::uint64_t upper = g.hdr->prefix | (std::uint64_t{1} << (63 - d));
        const bool e1 = std::any_of(entries.begin(), entries.end(), [&](const Entry& e) {
          return e.hdr->prefix == upper && e.hdr->create_depth == d + 1;
        });
        const bool bumped = g.depth > d;
        if (!e1 && !bumped) {
          ++open_counters_.splits_not_committed;  // heap recovery frees g1
        } else if (!e1) {
          if (g.depth != d + 1) return fail(who + ": group " + std::to_string(g.id) + " is too deep");
          split_fixes.push_back({it->second, g.depth});
          g.depth = d;  // the bump reached media alone: roll back
          ++open_counters_.splits_rolled_back;
        } else {
          split_fixes.push_back({it->second, g.depth});
          ++(bumped ? open_counters_.splits_committed : open_counters_.splits_bump_lost);
          g.depth = std::max(g.depth, d + 1);  // committed: finish
        }
        continue;
      }
      default:
        return fail(who + " has unknown kind " + std::to_string(op_kind(op)));
    }
  }
  // Overlap check with the planned depths.
  if (std::string err = find_overlap(entries); !err.empty()) return fail(err);
  // Steps 2-3. The main node has 2^max(D_L_Max, G0) entries, but no more
  // than a full expansion may build (the DRAM bound): deeper groups hang
  // below it in one-time and two-time nodes, as their splits left them.
  unsigned g_bits = g0_;
  for (const Entry& e : entries) g_bits = std::max(g_bits, e.depth);
  if (g_bits > Directory::max_open_bits()) {
    return Status::IOError("pool " + env_.pool->path() + ": nehash: the directory would need 2^" +
                           std::to_string(g_bits) + " main entries, more than this build allows (2^" +
                           std::to_string(Directory::max_open_bits()) + ")");
  }
  dir_ = std::make_unique<Directory>(b_, std::max(g0_, std::min(g_bits, Directory::max_main_bits())));
  // Steps 4-6: every group, whatever its depth, is attached to all the
  // entries of its range (Step 6 done in the directory).
  std::vector<GroupRef*> refs;
  for (const Entry& e : entries) {
    GroupRef* g = dir_->add_group(e.off, e.hdr, e.depth);
    refs.push_back(g);
    OverflowRef* last = nullptr;
    for (std::uint64_t o = e.hdr->overflow.load(); o != 0;
         o = region_.at<OverflowBlock>(o)->next.load()) {
      OverflowRef* r = dir_->add_overflow(o, region_.at<OverflowBlock>(o));
      (last == nullptr ? g->overflow : last->next).store(r);
      last = r;
    }
  }
  if (!dir_->attach_all()) {
    return Status::IOError("pool " + env_.pool->path() +
                           ": nehash: no memory for the directory's expansion nodes");
  }
  {
    std::lock_guard lock(table_mutex_);
    next_id_ = any ? static_cast<std::uint32_t>(highest + 1) : 0;
    for (std::uint32_t id : holes) {
      if (any && id < highest) free_ids_.push_back(id);
    }
    // Without a next segment, holes past the last id are the counter's.
  }

  // W1. Replays and the kSplit rows, drained; then the records cleared.
  for (const SlotFix& f : slot_fixes) {
    replay_slot_update(region_, *f.log, f.slot, f.meta);
    ++open_counters_.slot_updates_replayed;
  }
  for (const SplitFix& f : split_fixes) {
    const Entry& e = entries[f.entry];
    if (e.depth != f.old_depth) {
      table_word(e.id)->store(rec_make(e.off, e.depth));
      region_.flush(table_word(e.id), sizeof(std::uint64_t));
    }
    clean_stale(refs[f.entry], /*lock_buckets=*/false);
    open_counters_.slots_read += buckets_per_group(b_) * kSlotsPerBucket;
  }
  // The replayed slots, table words and cleaned slots are durable before a
  // record is cleared (a torn slot, a group at its old depth overlapping its
  // new half, stale slots out of range would otherwise be left for a
  // recovery that no longer knows to repair them).
  clear_op_logs(region_, records);
  // Cleared records are durable before heap recovery decides on the blocks
  // they name, and before we serve.
  region_.drain();
  // The conflict counts (DRAM), from the conflict buckets as replayed and
  // cleaned above.
  for (GroupRef* g : refs) count_conflicts(g);

  // W2. Heap recovery: a block named by a log is kept if the index reaches it.
  heap_.recover([&](std::uint64_t off) {
    if (group_offs.contains(off) || segment_offs.contains(off) || overflow_offs.contains(off)) {
      return true;
    }
    const std::size_t size = heap_.block_size(off);
    const std::optional<Key> hashed = hashed_item_key(region_, off, size);
    if (!hashed) return false;
    const Key& key = *hashed;
    rcu::ReadGuard guard;
    GroupRef* g = dir_->find(key.h1).group;
    if (g == nullptr) return false;
    auto names = [&](const Place& pl) {
      ++open_counters_.slots_read;
      const std::uint16_t m = pl.meta->load();
      return meta_valid(m) && !meta_is_inline(m) &&
             pool::pptr_offset(pl.slot->w0.load()) == off && pl.slot->w1.load() == key.h1;
    };
    const unsigned k = home_bucket(key.h1, b_);
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      if (names(place(g, k, s))) return true;
    }
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      if (names(conflict(g, s))) return true;
    }
    for (OverflowRef* o = g->overflow.load(); o != nullptr; o = o->next.load()) {
      for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
        if (names(overflow_place(o, s))) return true;
      }
    }
    return false;
  });

  // W3. The saved item count is valid only until the next crash.
  count_.take_saved(region_, root_->item_count, root_->count_valid);
  ready_ = true;
  // Step 6 of the paper, in the background: the store serves meanwhile.
  if (Config::from(env_.options).split_shallow_on_open) {
    shallow_thread_ = std::thread([this, bits = dir_->main_bits()] { split_shallow(bits); });
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Close and check
// ---------------------------------------------------------------------------

void NehashIndex::close() {
  if (closed_) return;
  closed_ = true;
  // Stops after the split in progress; the rest waits for the next open.
  stop_shallow_splits();
  // A rejected pool is left as it was found.
  if (!ready_) return;
  // Only a count already known is saved (close never scans the groups).
  count_.save(region_, root_->item_count, root_->count_valid);
}

Status NehashIndex::check() {
  // No split or group creation runs while we hold the mutex exclusively, so
  // no group is SPLITTING.
  std::unique_lock dir_lock(dir_mutex_);
  heap_.drain_all();  // quiescent: retired blocks must not look like leaks
  rcu::ReadGuard guard;
  const unsigned max_d = max_depth(b_);
  // 1. Root.
  if (root_->magic != kRootMagic || root_->layout_version != kLayoutVersion ||
      root_->bucket_bits != b_ || root_->initial_dir_bits != g0_) {
    return fail("root does not match the pool header");
  }
  if (const int t = busy_op_log(root_->op_log); t >= 0) {
    return fail("op log " + std::to_string(t) + " is not empty");
  }
  // 2. Table.
  std::unordered_set<std::uint64_t> known;  // every block the index reaches
  std::vector<Entry> entries;
  for (unsigned s = 0; s < kSegments; ++s) {
    const std::uint64_t soff = root_->rec_segments[s].load();
    if (soff == 0) continue;
    if (!heap_.is_allocated(soff) || heap_.block_size(soff) < segment_bytes(s) ||
        region_.at<SegmentHeader>(soff)->magic != kSegmentMagic ||
        region_.at<SegmentHeader>(soff)->index != s) {
      return fail("recovery-table segment " + std::to_string(s) + " is damaged");
    }
    known.insert(soff);
    std::atomic<std::uint64_t>* table = segment_table(region_.at<SegmentHeader>(soff));
    for (std::uint64_t i = 0; i < segment_entries(s); ++i) {
      const std::uint64_t w = table[i].load();
      if (w == 0) continue;
      const std::uint64_t id = ids_below_segment(s) + i;
      const std::uint64_t off = rec_offset(w);
      const std::string who = "recovery-table entry " + std::to_string(id);
      if (!rec_well_formed(w) || rec_depth(w) > max_d || !heap_.is_allocated(off) ||
          heap_.block_size(off) < group_bytes(b_)) {
        return fail(who + " does not name an allocated bucket group");
      }
      auto* hdr = region_.at<GroupHeader>(off);
      const unsigned cd = hdr->create_depth;
      if (hdr->magic != kGroupMagic || hdr->bg_id != id || hdr->bucket_bits != b_ ||
          cd > rec_depth(w) || (cd == 0 ? hdr->prefix : hdr->prefix << cd) != 0) {
        return fail("group header at offset " + std::to_string(off) + " does not match " + who);
      }
      if (!known.insert(off).second) return fail(who + " names a block named twice");
      entries.push_back({static_cast<std::uint32_t>(id), off, rec_depth(w), hdr});
    }
  }
  // 3. Disjoint groups.
  if (std::string err = find_overlap(entries); !err.empty()) return fail(err);
  // 4-6. The directory's shape, its agreement with the groups, the times.
  if (std::string err = dir_->check(g0_); !err.empty()) return fail(err);
  std::unordered_map<std::uint32_t, const Entry*> by_id;
  for (const Entry& e : entries) by_id[e.id] = &e;
  std::string err;
  std::unordered_set<std::string> keys;
  std::uint64_t items = 0;
  dir_->for_each_group([&](GroupRef& g) {
    if (!err.empty()) return;
    auto it = by_id.find(g.bg_id);
    const unsigned depth = g.depth.load();
    if (it == by_id.end() || it->second->off != g.off || it->second->depth != depth) {
      err = "group " + std::to_string(g.bg_id) + " in DRAM does not match its table entry";
      return;
    }
    by_id.erase(it);
    // 7-8. Slots.
    auto slot = [&](const Place& p, long home_k, const std::string& where) {
      const std::uint16_t m = p.meta->load();
      if (!meta_valid(m) || !err.empty()) return;
      SlotContent c;
      if (std::string e = check_slot(heap_, region_, m, p.slot->w0.load(), p.slot->w1.load(),
                                     SlotTag::kZero, &c);
          !e.empty()) {
        err = where + " " + e;
        return;
      }
      const std::string& key = c.key;
      const std::uint64_t h1 = c.h1;
      if (c.item != 0 && !known.insert(c.item).second) {
        err = where + " names an item that another slot or block names too";
        return;
      }
      if (!in_range(h1, g.prefix, depth)) {
        err = where + " holds a key outside its group's range " + bits_string(g.prefix, depth);
        return;
      }
      if (meta_fp(m) != fingerprint(c.h2)) {
        err = where + " has a wrong fingerprint";
        return;
      }
      if (home_k >= 0 && home_bucket(h1, b_) != static_cast<unsigned>(home_k)) {
        err = where + " holds a key whose home bucket is elsewhere";
        return;
      }
      if (!keys.insert(key).second) {
        err = where + " holds a key stored twice";
        return;
      }
      ++items;
    };
    const std::size_t conflict_k = std::size_t{1} << b_;
    for (std::size_t k = 0; k <= conflict_k; ++k) {
      for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
        slot(place(&g, k, s), k == conflict_k ? -1 : static_cast<long>(k),
             "group " + std::to_string(g.bg_id) + " bucket " + std::to_string(k) + " slot " +
                 std::to_string(s));
      }
    }
    // 9. Overflow blocks: each named once (a group gets them at max depth,
    //    or when the directory could not grow).
    for (OverflowRef* o = g.overflow.load(); o != nullptr && err.empty(); o = o->next.load()) {
      if (!known.insert(o->off).second) {
        err = "overflow block at offset " + std::to_string(o->off) + " is named twice";
        return;
      }
      for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
        slot(overflow_place(o, s), -1, "overflow block of group " + std::to_string(g.bg_id));
      }
    }
  });
  if (!err.empty()) return fail(err);
  if (!by_id.empty()) {
    return fail("table entry " + std::to_string(by_id.begin()->first) + " has no group in DRAM");
  }
  // 10. Count and leaks.
  if (count_.known() && size() != items) {
    return fail("item count " + std::to_string(size()) + " but " + std::to_string(items) +
                " keys in the groups");
  }
  std::string leak;
  heap_.for_each_allocated([&](std::uint64_t off, std::size_t) {
    if (leak.empty() && !known.contains(off)) {
      leak = "heap block at offset " + std::to_string(off) + " is allocated but unreachable";
    }
  });
  if (!leak.empty()) return fail(leak);
  return Status::OK();
}

}  // namespace pmhash::engine::nehash
