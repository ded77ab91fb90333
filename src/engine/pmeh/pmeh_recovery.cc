// engine/pmeh/pmeh_recovery.cc - create, open (§9), close, check (§10) and
// the engine's registration (design in pmeh.h).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "engine/item.h"
#include "engine/pmeh/pmeh.h"
#include "engine/pmeh/pmeh_index.h"
#include "engine/pmeh/pmeh_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::pmeh {
namespace {

// The descriptor's ranges (checked by the store) bound both: zone bits
// 0..kMaxZoneBits, a segment of 4, 8, 16, 32 or 64 KiB.
Status encode_params(const Options& options, std::uint8_t* out) {
  const Config c = Config::from(options);
  const Params p{1, static_cast<std::uint8_t>(c.zone_bits),
                 static_cast<std::uint8_t>(std::countr_zero(c.segment_kib) + 10)};
  std::memcpy(out, &p, sizeof(p));
  return Status::OK();
}

Status create_index(const Env& env, std::unique_ptr<Index>* out) {
  auto index = std::make_unique<PmehIndex>(env);
  if (Status s = index->format(); !s.ok()) return s;
  if (Status s = index->start_owners(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

Status open_index(const Env& env, std::unique_ptr<Index>* out) {
  auto index = std::make_unique<PmehIndex>(env);
  if (Status s = index->recover(); !s.ok()) return s;
  if (Status s = index->start_owners(); !s.ok()) return s;
  *out = std::move(index);
  return Status::OK();
}

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

const EngineInfo kEngineInfo = {&kDescriptor, &encode_params, &create_index, &open_index};

Status PmehIndex::fail(const std::string& what) const {
  return Status::Corruption("pool " + env_.pool->path() + ": pmeh: " + what);
}

Status PmehIndex::map_seg_state() {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t words = (region_.size() >> s_) + 1;
  seg_state_bytes_ = (words * sizeof(std::uint64_t) + page - 1) / page * page;
  // Zero pages until touched: 8 bytes of DRAM per 2^s bytes of pool at most.
  void* p = ::mmap(nullptr, seg_state_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    seg_state_bytes_ = 0;
    return Status::IOError("pmeh: cannot map " + std::to_string(seg_state_bytes_) +
                           " bytes for segment versions");
  }
  seg_state_ = static_cast<std::atomic<std::uint64_t>*>(p);
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------

Status PmehIndex::format() {
  if (Status s = map_seg_state(); !s.ok()) return s;
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  const unsigned zn = 1u << z_;
  std::memset(static_cast<void*>(root_), 0, sizeof(Root));
  root_->layout_version = kLayoutVersion;
  root_->zone_bits = static_cast<std::uint8_t>(z_);
  root_->segment_log2 = static_cast<std::uint8_t>(s_);
  // The first directory (G = Z, every zone's bit set) and one empty
  // segment of depth Z per zone. A crash before the root's magic is durable
  // leaves a pool that open rejects ("root is not initialised").
  std::uint64_t dir_off = 0;
  if (s = tc->allocate(dir_bytes(z_), &dir_off, false, kBlockIntent); !s.ok()) return s;
  auto* dh = region_.at<DirHeader>(dir_off);
  std::memset(static_cast<void*>(dh), 0, sizeof(DirHeader));
  dh->magic = kDirMagic;
  dh->id = 0;
  dh->depth = static_cast<std::uint8_t>(z_);
  dh->zone_bits = static_cast<std::uint8_t>(z_);
  for (unsigned z = 0; z < zn; ++z) {
    dh->zone_filled[z / 64].fetch_or(std::uint64_t{1} << (z % 64), std::memory_order_relaxed);
  }
  for (unsigned z = 0; z < zn; ++z) {
    std::uint64_t off = 0;
    if (s = tc->allocate(std::size_t{1} << s_, &off, /*zero=*/true, kBlockIntent); !s.ok()) {
      return Status::NoSpace("pmeh: the pool has no room for the " + std::to_string(zn) +
                             " first segments of " + std::to_string((1u << s_) / 1024) +
                             " KiB (a larger pool, or fewer zone bits)");
    }
    auto* h = region_.at<SegmentHeader>(off);
    h->magic = kSegmentMagic;
    h->prefix = z_ == 0 ? 0 : std::uint64_t{z} << (64 - z_);
    h->depth = static_cast<std::uint8_t>(z_);
    h->nb = static_cast<std::uint8_t>(nb_);
    region_.flush(h, sizeof(SegmentHeader));
    dir_entries(dh)[z].store(off, std::memory_order_relaxed);
  }
  region_.flush(dh, dir_bytes(z_));
  // The directory and its segments are durable before the root names them.
  region_.drain();
  root_->dir_array[0].store(dir_off, std::memory_order_relaxed);
  region_.persist(root_, sizeof(Root));
  root_->magic = kRootMagic;
  // The index exists once the magic is durable.
  region_.persist(&root_->magic, sizeof(std::uint64_t));
  tc->clear_intent(kBlockIntent);

  dir_store_.push_back(std::make_unique<Dir>(Dir{dir_off, dh, dir_entries(dh), z_, 0}));
  dirs_[0].store(dir_store_.back().get());
  newest_.store(dir_store_.back().get());
  zones_.reset(new Zone[zn]);
  for (unsigned z = 0; z < zn; ++z) zones_[z].dir.store(dir_store_.back().get());
  count_.set_base(0);
  ready_ = true;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Open: phase V reads only (a rejected pool stays unchanged), phase W writes
// ---------------------------------------------------------------------------

Status PmehIndex::recover() {
  Params p{};
  std::memcpy(&p, env_.pool->header().engine_params, sizeof(p));
  if (p.version != 1 || p.zone_bits > kMaxZoneBits || p.segment_log2 < kMinSegmentLog2 ||
      p.segment_log2 > kMaxSegmentLog2) {
    return fail("pool-header parameters {version " + std::to_string(p.version) + ", Z " +
                std::to_string(p.zone_bits) + ", s " + std::to_string(p.segment_log2) +
                "} are not valid");
  }
  // V0. The root.
  if (root_->magic != kRootMagic) return fail("root is not initialised");
  if (root_->layout_version != kLayoutVersion) {
    return fail("root layout version " + std::to_string(root_->layout_version) + ", expected " +
                std::to_string(kLayoutVersion));
  }
  if (root_->zone_bits != z_ || root_->segment_log2 != s_) {
    return fail("root says Z = " + std::to_string(root_->zone_bits) + ", s = " +
                std::to_string(root_->segment_log2) + ", the pool header Z = " +
                std::to_string(z_) + ", s = " + std::to_string(s_));
  }
  const unsigned zn = 1u << z_;
  // V2 (first half). Split records: S must be a segment of its zone; with
  // MOVING, every child a segment of the right depth and prefix.
  struct SplitFix {
    unsigned z;
    std::uint64_t s_off;
    SegmentHeader* s;
    unsigned k;  // 0: not MOVING
    bool completing;
    std::uint64_t child[8];
  };
  std::vector<SplitFix> split_fixes;
  for (unsigned z = 0; z < kSplitRecords; ++z) {
    const std::uint64_t rec = root_->split[z].load();
    if (rec == 0 || planted::active(testing::kSplitRecordIgnored)) continue;
    const std::string who = "zone " + std::to_string(z) + " split record";
    const std::uint64_t off = rec & kSplitOffsetMask;
    if (z >= zn || (rec & ~(kSplitOffsetMask | kSplitCompleting)) != 0) {
      return fail(who + " is malformed (" + hex(rec) + ")");
    }
    auto* h = region_.at<SegmentHeader>(off);
    ++open_counters_.segments_read;
    if (!heap_.is_allocated(off) || heap_.block_size(off) != (std::size_t{1} << s_) ||
        h->magic != kSegmentMagic || h->depth < z_ || h->depth >= kMaxDepth ||
        top_bits(h->prefix, z_) != z) {
      return fail(who + " names a segment whose header is not a segment of the zone (offset " +
                  hex(off) + ")");
    }
    SplitFix f{z, off, h, 0, (rec & kSplitCompleting) != 0, {}};
    const std::uint64_t sw = h->split.load();
    if (sw != 0) {
      f.k = seg_split_k(sw);
      if ((sw & kSegMoving) == 0 || sw != seg_split_word(f.k) || f.k < 1 ||
          f.k > std::min(kMaxSplitBits, kMaxDepth - h->depth)) {
        return fail(who + ": segment " + hex(off) + " has a malformed split word " + hex(sw));
      }
      for (unsigned i = 0; i < (1u << f.k); ++i) {
        const std::uint64_t c = h->children[i].load();
        const auto* ch = region_.at<SegmentHeader>(c);
        ++open_counters_.segments_read;
        if (c == 0 || !heap_.is_allocated(c) || heap_.block_size(c) != (std::size_t{1} << s_) ||
            ch->magic != kSegmentMagic || ch->depth != h->depth + f.k ||
            ch->prefix != (h->prefix | (std::uint64_t{i} << (64 - h->depth - f.k)))) {
          return fail(who + ": child " + std::to_string(i) + " of segment " + hex(off) +
                      " is not a segment with the child's depth and prefix");
        }
        f.child[i] = c;
      }
    } else if (f.completing) {
      return fail(who + " is COMPLETING, but segment " + hex(off) + " is not splitting");
    }
    split_fixes.push_back(f);
  }
  // Op logs: only slot updates. A record names a slot and its meta; their
  // distance fixes the slot's position p in a bucket (slot = bucket + 32 +
  // 16 p, meta = bucket + 2 p) and the bucket's 64-byte alignment.
  std::vector<OpLog*> replays;
  for (unsigned t = 0; t < kOpLogs; ++t) {
    OpLog& log = root_->op_log[t];
    const std::uint64_t op = log.op.load();
    if (op == 0) continue;
    const std::string who = "op log " + std::to_string(t);
    if (op_kind(op) != kOpSlotUpdate || !op_slot_well_formed(op)) return fail(who + " is malformed");
    const std::uint64_t slot_off = op_slot_offset(op);
    const std::uint64_t meta_off = log_meta_offset(log.meta.load());
    const std::uint64_t d = slot_off - meta_off;
    const std::uint64_t pos = (d - 32) / 14;
    const std::uint16_t m = log_meta_value(log.meta.load());
    bool ok = slot_off > meta_off && d >= 32 && (d - 32) % 14 == 0 && pos < kSlotsPerBucket &&
              (meta_off - 2 * pos) % 64 == 0 && slot_off + sizeof(Slot) <= region_.size();
    if (ok && meta_valid(m) && !meta_is_inline(m)) {
      ok = heap_.is_allocated(pool::pptr_offset(log.w0.load()));
    }
    if (!ok) return fail(who + " holds a slot update that names no slot of a bucket");
    replays.push_back(&log);
  }
  // Directories: a contiguous run of ids, G increasing with the id. A word
  // may name a block no longer allocated only below a live directory: a
  // crash between freeing a directory no zone used and clearing its word.
  std::vector<unsigned> ids;    // live directories
  std::vector<unsigned> stale;  // words naming freed directories
  int last_named = -1;
  for (unsigned id = 0; id < kMaxDirs; ++id) {
    const std::uint64_t off = root_->dir_array[id].load();
    if (off == 0) continue;
    if (last_named >= 0 && static_cast<unsigned>(last_named) != id - 1) {
      return fail("directory ids are not contiguous (" + std::to_string(last_named) + " then " +
                  std::to_string(id) + ")");
    }
    last_named = static_cast<int>(id);
    if (!heap_.is_allocated(off)) {
      stale.push_back(id);
      continue;
    }
    const auto* h = region_.at<DirHeader>(off);
    if (heap_.block_size(off) < sizeof(DirHeader) || h->magic != kDirMagic || h->id != id ||
        h->zone_bits != z_ || h->depth < z_ || h->depth > kMaxDepth ||
        heap_.block_size(off) < dir_bytes(h->depth)) {
      return fail("directory " + std::to_string(id) + " at offset " + hex(off) +
                  " is not an allocated directory with its id, Z and size");
    }
    if (!ids.empty() &&
        h->depth <= region_.at<DirHeader>(root_->dir_array[ids.back()].load())->depth) {
      return fail("directory " + std::to_string(id) + " is not deeper than directory " +
                  std::to_string(ids.back()));
    }
    ids.push_back(id);
  }
  if (!stale.empty() && (ids.empty() || stale.back() > ids.back())) {
    return fail("directory " + std::to_string(stale.back()) + " at offset " +
                hex(root_->dir_array[stale.back()].load()) + " is not allocated");
  }
  if (ids.empty()) return fail("no directory");
  // V1. Each zone's directory: the newest with its bit.
  std::vector<unsigned> zone_dir(zn, kMaxDirs);
  unsigned oldest = kMaxDirs;
  for (unsigned z = 0; z < zn; ++z) {
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      const auto* h = region_.at<DirHeader>(root_->dir_array[*it].load());
      if ((h->zone_filled[z / 64].load() >> (z % 64)) & 1) {
        zone_dir[z] = *it;
        break;
      }
    }
    if (zone_dir[z] == kMaxDirs) return fail("zone " + std::to_string(z) + " is in no directory");
    oldest = std::min(oldest, zone_dir[z]);
  }

  // V2 (second half): a split's range lies in its zone's directory, which
  // is deep enough for the children; a split not COMPLETING is still named
  // there (its first entry names S).
  for (const SplitFix& f : split_fixes) {
    auto* dh = region_.at<DirHeader>(root_->dir_array[zone_dir[f.z]].load());
    const std::string who = "zone " + std::to_string(f.z) + " split record: directory " +
                            std::to_string(zone_dir[f.z]);
    if (f.k != 0 && dh->depth < f.s->depth + f.k) {
      return fail(who + " is too shallow for the split's children");
    }
    if (!f.completing && dh->depth >= f.s->depth &&
        dir_entries(dh)[top_bits(f.s->prefix, dh->depth)].load() != f.s_off) {
      return fail(who + " does not name the splitting segment " + hex(f.s_off));
    }
  }

  // Phase W.
  if (Status s = map_seg_state(); !s.ok()) return s;
  // W1. Committed slot updates replayed (idempotent); records cleared; the
  // directories no zone uses any more dropped (they are freed by heap
  // recovery: keep() says no).
  for (OpLog* log : replays) {
    replay_slot_update(region_, *log, region_.at<Slot>(op_slot_offset(log->op.load())),
                       region_.at<std::atomic<std::uint16_t>>(log_meta_offset(log->meta.load())));
    ++open_counters_.slot_updates_replayed;
  }
  // The replayed slots are durable before their records are cleared.
  clear_op_logs(region_, replays);
  // COMPLETING splits (§8.2, "Split completion"): every bucket was moved
  // (the moved bits were durable before the record said COMPLETING), so the
  // whole range is re-pointed to the children. S is in its owner's retire
  // log; heap recovery frees it once no entry names it.
  for (const SplitFix& f : split_fixes) {
    if (!f.completing) continue;
    auto* dh = region_.at<DirHeader>(root_->dir_array[zone_dir[f.z]].load());
    std::atomic<std::uint64_t>* entry = dir_entries(dh);
    const unsigned g = dh->depth, l = f.s->depth;
    const std::uint64_t base = top_bits(f.s->prefix, l) << (g - l);
    const std::uint64_t count = std::uint64_t{1} << (g - l);
    for (std::uint64_t e = 0; e < count; ++e) {
      entry[base + e].store(f.child[e >> (g - l - f.k)]);
    }
    region_.flush(&entry[base], sizeof(std::uint64_t) * count);
    ++open_counters_.splits_completed;
  }
  // The re-pointed entries are durable before their records are cleared
  // (else the next open could find S named by part of its range only), and
  // the records before heap recovery frees S (a record must never name a
  // freed block).
  region_.drain();
  for (const SplitFix& f : split_fixes) {
    if (!f.completing) continue;
    root_->split[f.z].store(0);
    region_.flush(&root_->split[f.z], sizeof(std::uint64_t));
  }
  std::unordered_set<std::uint64_t> dir_offs;
  std::vector<unsigned> unused;  // live directories no zone uses: freed below
  for (unsigned id : ids) {
    if (id < oldest) {
      unused.push_back(id);
    } else {
      dir_offs.insert(root_->dir_array[id].load());
    }
  }
  for (unsigned id : stale) {
    root_->dir_array[id].store(0);
    region_.flush(&root_->dir_array[id], sizeof(std::uint64_t));
  }
  // Cleared records and words are durable before heap recovery frees what
  // they named, and before we serve.
  region_.drain();
  // The DRAM mirror.
  for (unsigned id : ids) {
    if (id < oldest) continue;
    const std::uint64_t off = root_->dir_array[id].load();
    auto* h = region_.at<DirHeader>(off);
    dir_store_.push_back(std::make_unique<Dir>(Dir{off, h, dir_entries(h), h->depth, id}));
    dirs_[id].store(dir_store_.back().get());
  }
  newest_.store(dirs_[ids.back()].load());
  zones_.reset(new Zone[zn]);
  for (unsigned z = 0; z < zn; ++z) zones_[z].dir.store(dirs_[zone_dir[z]].load());
  oldest_dir_ = oldest;
  // MOVING splits resume (§8.2, "Split start", third row): writes may have
  // landed in moved child buckets, so the moved bitmap on media says where
  // each bucket lives. The owner moves the rest and completes the split.
  for (const SplitFix& f : split_fixes) {
    if (f.completing || f.k == 0) continue;
    auto sp = std::make_unique<SplitState>();
    sp->s_off = f.s_off;
    sp->s = f.s;
    sp->depth = f.s->depth;
    sp->k = f.k;
    for (unsigned i = 0; i < (1u << f.k); ++i) {
      sp->child_off[i] = f.child[i];
      sp->child[i] = region_.at<SegmentHeader>(f.child[i]);
    }
    // Bits beyond nb are not buckets: a damaged word cannot make one moved.
    unsigned moved = 0;
    for (unsigned w = 0; w < 4; ++w) {
      const unsigned lo = w * 64;
      const std::uint64_t valid = nb_ <= lo ? 0
                                  : nb_ - lo >= 64 ? ~std::uint64_t{0}
                                                   : (std::uint64_t{1} << (nb_ - lo)) - 1;
      sp->moved[w].store(f.s->moved[w].load() & valid);
      moved += static_cast<unsigned>(std::popcount(sp->moved[w].load()));
    }
    sp->left = nb_ - moved;
    for (unsigned i = 0; i < (1u << f.k); ++i) fresh_segment_state(f.child[i]);
    zones_[f.z].split.store(sp.release());
    ++open_counters_.splits_resumed;
  }

  // W2. Heap recovery: a block named by a log is kept if the index reaches it.
  heap_.recover([&](std::uint64_t off) {
    if (dir_offs.contains(off)) return true;
    const std::size_t size = heap_.block_size(off);
    if (size == (std::size_t{1} << s_)) {
      const auto* h = region_.at<SegmentHeader>(off);
      if (h->magic == kSegmentMagic && h->depth >= z_ && h->depth <= kMaxDepth) {
        rcu::ReadGuard guard;
        if (segment_of(h->prefix) == off) return true;
        // A child of a split in flight (not in the directory yet).
        if (const SplitState* sp = zones_[zone_of(h->prefix)].split.load()) {
          for (unsigned i = 0; i < (1u << sp->k); ++i) {
            if (sp->child_off[i] == off) return true;
          }
        }
      }
    }
    const std::optional<Key> hashed = hashed_item_key(region_, off, size);
    if (!hashed) return false;
    const Key& key = *hashed;
    rcu::ReadGuard guard;
    // Open does not read directory entries (instant recovery); check()
    // validates them. One that is damaged must not be followed: a block
    // it names is read only if it is an allocated segment-sized block.
    const std::uint64_t s_off = segment_of(key.h1);
    if (!heap_.is_allocated(s_off) || heap_.block_size(s_off) != (std::size_t{1} << s_)) {
      return false;
    }
    Bucket* buckets = segment_buckets(seg(s_off));
    // The authoritative bucket: a splitting segment's moved ones are the
    // children's.
    const SplitState* sp = zones_[zone_of(key.h1)].split.load();
    if (sp != nullptr && sp->s_off != s_off) sp = nullptr;
    const unsigned home = home_bucket(key.h1, nb_);
    for (unsigned j : {home, (home + 1) % nb_}) {
      Bucket& b = sp != nullptr ? *sp->bucket(key.h1, j) : buckets[j];
      for (unsigned q = 0; q < kSlotsPerBucket; ++q) {
        const std::uint16_t m = b.meta[q].load();
        if (meta_valid(m) && !meta_is_inline(m) &&
            pool::pptr_offset(b.slot[q].w0.load()) == off && b.slot[q].w1.load() == key.h1) {
          return true;
        }
      }
    }
    return false;
  });

  // Splits not started (§8.2, "Split start", second row: R = S, S not
  // MOVING). Children are freed (those still allocated with the child's
  // header; a child named only by an intent was freed by heap recovery),
  // then unnamed; then the split word and the record are cleared. A crash
  // in between leaves a record the next open finishes the same way.
  bool not_started = false;
  for (const SplitFix& f : split_fixes) not_started |= !f.completing && f.k == 0;
  if (not_started) {
    Status s;
    heap::ThreadCache* tc = heap_.thread(&s);
    if (tc == nullptr) return s;
    for (const SplitFix& f : split_fixes) {
      if (f.completing || f.k != 0) continue;
      SegmentHeader* h = f.s;
      for (unsigned i = 0; i < 8; ++i) {
        const std::uint64_t c = h->children[i].load();
        if (c == 0 || !heap_.is_allocated(c) || heap_.block_size(c) != (std::size_t{1} << s_)) {
          continue;
        }
        const auto* ch = region_.at<SegmentHeader>(c);
        if (ch->magic == kSegmentMagic && ch->depth > h->depth &&
            in_range(ch->prefix, h->prefix, h->depth)) {
          tc->free_unpublished(c);  // durable when it returns
        }
      }
      for (unsigned i = 0; i < 8; ++i) h->children[i].store(0);
      h->split.store(0);
      for (unsigned w = 0; w < 4; ++w) h->moved[w].store(0);
      region_.flush(&h->children[0], sizeof(std::uint64_t) * 8);
      region_.flush(&h->split, sizeof(std::uint64_t) * 5);
      ++open_counters_.splits_not_started;
    }
    // S names no child and is not splitting before its record goes.
    region_.drain();
    for (const SplitFix& f : split_fixes) {
      if (f.completing || f.k != 0) continue;
      root_->split[f.z].store(0);
      region_.flush(&root_->split[f.z], sizeof(std::uint64_t));
    }
    // The records are cleared before we serve.
    region_.drain();
  }

  // Directories no zone uses (every zone filled into newer ones): freed,
  // then unnamed. Nothing else allocates before we serve, so a crash in
  // between leaves a word naming a free block, which the next open clears.
  if (!unused.empty()) {
    Status s;
    heap::ThreadCache* tc = heap_.thread(&s);
    if (tc == nullptr) return s;
    for (unsigned id : unused) {
      const std::uint64_t off = root_->dir_array[id].load();
      if (heap_.is_allocated(off)) tc->free_unpublished(off);  // durable when it returns
      ++open_counters_.directories_freed;
      root_->dir_array[id].store(0);
      region_.flush(&root_->dir_array[id], sizeof(std::uint64_t));
    }
    // The words are cleared before we serve.
    region_.drain();
  }

  // W3. The saved item count is valid only until the next crash.
  count_.take_saved(region_, root_->item_count, root_->count_valid);
  ready_ = true;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Close and check
// ---------------------------------------------------------------------------

void PmehIndex::close() {
  if (closed_) return;
  closed_ = true;
  stop_owners();
  // A rejected pool is left as it was found.
  if (!ready_) return;
  // Only a count already known is saved (close never scans the segments).
  count_.save(region_, root_->item_count, root_->count_valid);
}

Status PmehIndex::check() {
  // Quiescent: no operation in flight; owners' idle work (split steps) is
  // paused until we are done.
  std::unique_lock pause(pause_);
  heap_.drain_all();  // retired blocks must not look like leaks
  rcu::ReadGuard guard;
  const unsigned zn = 1u << z_;
  // 1. Root.
  if (root_->magic != kRootMagic || root_->layout_version != kLayoutVersion ||
      root_->zone_bits != z_ || root_->segment_log2 != s_) {
    return fail("root does not match the pool header");
  }
  if (const int t = busy_op_log(root_->op_log); t >= 0) {
    return fail("op log " + std::to_string(t) + " is not empty");
  }
  for (unsigned z = 0; z < kSplitRecords; ++z) {
    const SplitState* sp = z < zn ? zones_[z].split.load() : nullptr;
    const std::uint64_t rec = root_->split[z].load();
    if (rec != (sp == nullptr ? 0 : sp->s_off)) {
      return fail("zone " + std::to_string(z) + " has split record " + hex(rec) + ", but " +
                  (sp == nullptr ? std::string("no split in flight")
                                 : "its split in flight is of segment " + hex(sp->s_off)));
    }
  }
  // 2. Directories.
  std::unordered_set<std::uint64_t> known;  // every block the index reaches
  int prev_depth = -1;
  unsigned live = 0, lowest = kMaxDirs, oldest_used = kMaxDirs;
  for (unsigned id = 0; id < kMaxDirs; ++id) {
    const std::uint64_t off = root_->dir_array[id].load();
    const Dir* d = dirs_[id].load();
    if (off == 0 && d == nullptr) continue;
    if (d == nullptr || d->off != off) {
      return fail("directory " + std::to_string(id) + " in DRAM does not match dir_array");
    }
    const DirHeader* h = d->hdr;
    if (!heap_.is_allocated(off) || heap_.block_size(off) < dir_bytes(d->depth) ||
        h->magic != kDirMagic || h->id != id || h->depth != d->depth || h->zone_bits != z_ ||
        static_cast<int>(h->depth) <= prev_depth) {
      return fail("directory " + std::to_string(id) + " has a damaged header");
    }
    prev_depth = h->depth;
    known.insert(off);
    lowest = std::min(lowest, id);
    ++live;
  }
  if (live == 0) return fail("no directory");
  for (unsigned z = 0; z < zn; ++z) oldest_used = std::min(oldest_used, zones_[z].dir.load()->id);
  if (lowest < oldest_used) {
    return fail("directory " + std::to_string(lowest) + " is live, but no zone uses it (the " +
                "oldest in use is " + std::to_string(oldest_used) + ")");
  }
  // 3. Entries, 4. splits, 5. slots, 6. no duplicates.
  std::unordered_set<std::string> keys;
  std::uint64_t items = 0;
  // The VALID slots of an authoritative bucket j of a segment (or child)
  // covering [prefix, depth).
  auto check_bucket = [&](std::uint64_t off, Bucket* b, unsigned j, std::uint64_t prefix,
                          unsigned l) -> Status {
    for (unsigned q = 0; q < kSlotsPerBucket; ++q) {
      const std::uint16_t m = b->meta[q].load();
      if (!meta_valid(m)) continue;
      const std::uint64_t w0 = b->slot[q].w0.load();
      const std::uint64_t w1 = b->slot[q].w1.load();
      const std::string where = "segment " + hex(off) + " bucket " + std::to_string(j) +
                                " slot " + std::to_string(q);
      SlotContent c;
      if (std::string e = check_slot(heap_, region_, m, w0, w1, SlotTag::kFromH2, &c); !e.empty()) {
        return fail(where + " " + e);
      }
      const std::string& key = c.key;
      const std::uint64_t h1 = c.h1;
      if (c.item != 0 && !known.insert(c.item).second) return fail(where + " names an item named elsewhere too");
      if (!in_range(h1, prefix, l)) return fail(where + " holds a key outside its segment's range");
      if (meta_fp(m) != fingerprint(c.h2)) return fail(where + " has a wrong fingerprint");
      const unsigned home = home_bucket(h1, nb_);
      if (j != home && j != (home + 1) % nb_) return fail(where + " holds a key outside its window");
      if (!keys.insert(key).second) return fail(where + " holds a key stored twice");
      ++items;
    }
    return Status::OK();
  };
  for (unsigned z = 0; z < zn; ++z) {
    const Dir* d = zones_[z].dir.load();
    const SplitState* sp = zones_[z].split.load();
    bool split_seen = false;
    if (((d->hdr->zone_filled[z / 64].load() >> (z % 64)) & 1) == 0) {
      return fail("zone " + std::to_string(z) + " uses directory " + std::to_string(d->id) +
                  ", which does not have its bit");
    }
    // The newest directory with the zone's bit (the one open would choose).
    for (unsigned id = d->id + 1; id < kMaxDirs; ++id) {
      const Dir* newer = dirs_[id].load();
      if (newer != nullptr && ((newer->hdr->zone_filled[z / 64].load() >> (z % 64)) & 1) != 0) {
        return fail("zone " + std::to_string(z) + " uses directory " + std::to_string(d->id) +
                    ", but the newer directory " + std::to_string(id) + " has its bit");
      }
    }
    const unsigned g = d->depth;
    const std::uint64_t per_zone = std::uint64_t{1} << (g - z_);
    for (std::uint64_t e = z * per_zone; e < (z + 1) * per_zone;) {
      const std::uint64_t off = d->entry[e].load();
      const std::string who = "zone " + std::to_string(z) + " entry " + std::to_string(e) +
                              " of directory " + std::to_string(d->id);
      if (!heap_.is_allocated(off) || heap_.block_size(off) != (std::size_t{1} << s_)) {
        return fail(who + " names offset " + hex(off) + ", which is not an allocated segment");
      }
      auto* h = seg(off);
      const unsigned l = h->depth;
      if (h->magic != kSegmentMagic || l < z_ || l > g || h->nb != nb_ ||
          top_bits(h->prefix, l) != (e >> (g - l)) ||
          (l < 64 && (l == 0 ? h->prefix : h->prefix << l) != 0)) {
        return fail(who + " names a segment whose header does not match the entry");
      }
      const bool splitting = sp != nullptr && sp->s_off == off;
      if (!splitting) {
        if (h->split.load() != 0) return fail(who + " names a segment with a split word");
        for (unsigned i = 0; i < 8; ++i) {
          if (h->children[i].load() != 0) return fail(who + " names a segment with a child set");
        }
      }
      const std::uint64_t run = std::uint64_t{1} << (g - l);
      if (e % run != 0) return fail(who + " starts an unaligned run");
      for (std::uint64_t f = e; f < e + run; ++f) {
        if (d->entry[f].load() != off) {
          return fail(who + ": the segment is not named by all its " + std::to_string(run) + " entries");
        }
      }
      if (!known.insert(off).second) return fail(who + " names a block named elsewhere too");
      if ((seg_state(off).load() & (1 | kSegDead)) != 0) {
        return fail(who + ": its segment's version is odd or DEAD");
      }
      Bucket* buckets = segment_buckets(h);
      if (!splitting) {
        for (unsigned j = 0; j < nb_; ++j) {
          if (Status s = check_bucket(off, &buckets[j], j, h->prefix, l); !s.ok()) return s;
        }
        e += run;
        continue;
      }
      // 4. The split in flight: S MOVING with k, 2^k children of depth
      // L + k with the children's prefixes, no child beyond 2^k, the DRAM
      // bitmap equal to S's.
      split_seen = true;
      const unsigned k = sp->k, n = 1u << k;
      const std::string ws = "zone " + std::to_string(z) + " split of segment " + hex(off);
      if (h->split.load() != seg_split_word(k) || k < 1 || k > kMaxSplitBits || sp->s != h ||
          sp->depth != l || l + k > g) {
        return fail(ws + ": the segment's split word or depth does not match the split in flight");
      }
      for (unsigned i = 0; i < 8; ++i) {
        const std::uint64_t c = h->children[i].load();
        if (i >= n) {
          if (c != 0) return fail(ws + ": child slot " + std::to_string(i) + " is set beyond 2^k");
          continue;
        }
        const auto* ch = seg(c);
        if (c != sp->child_off[i] || c == 0 || !heap_.is_allocated(c) ||
            heap_.block_size(c) != (std::size_t{1} << s_) || ch->magic != kSegmentMagic ||
            ch->depth != l + k || ch->nb != nb_ ||
            ch->prefix != (h->prefix | (std::uint64_t{i} << (64 - l - k)))) {
          return fail(ws + ": child " + std::to_string(i) + " (" + hex(c) +
                      ") is not an allocated segment with the child's depth and prefix");
        }
        if (ch->split.load() != 0) return fail(ws + ": child " + std::to_string(i) + " is splitting");
        for (unsigned w = 0; w < 8; ++w) {
          if (ch->children[w].load() != 0) {
            return fail(ws + ": child " + std::to_string(i) + " has a child set");
          }
        }
        if (!known.insert(c).second) {
          return fail(ws + ": child " + std::to_string(i) + " is a block named elsewhere too");
        }
      }
      for (unsigned w = 0; w < 4; ++w) {
        const unsigned lo = w * 64;
        const std::uint64_t valid = nb_ <= lo ? 0
                                    : nb_ - lo >= 64 ? ~std::uint64_t{0}
                                                     : (std::uint64_t{1} << (nb_ - lo)) - 1;
        const std::uint64_t media = h->moved[w].load();
        if (media != sp->moved[w].load() || (media & ~valid) != 0) {
          return fail(ws + ": moved word " + std::to_string(w) + " is " + hex(media) +
                      " on media, " + hex(sp->moved[w].load()) + " in DRAM");
        }
      }
      // 5. Slots of the authoritative buckets: S's unmoved ones, every
      // child's moved ones.
      for (unsigned j = 0; j < nb_; ++j) {
        if (!sp->is_moved(j)) {
          if (Status s = check_bucket(off, &buckets[j], j, h->prefix, l); !s.ok()) return s;
          continue;
        }
        for (unsigned i = 0; i < n; ++i) {
          const auto* ch = sp->child[i];
          if (Status s = check_bucket(sp->child_off[i], &segment_buckets(sp->child[i])[j], j,
                                      ch->prefix, l + k);
              !s.ok()) {
            return s;
          }
        }
      }
      e += run;
    }
    if (sp != nullptr && !split_seen) {
      return fail("zone " + std::to_string(z) + " has a split in flight of segment " +
                  hex(sp->s_off) + ", which its directory does not name");
    }
  }
  // 8. Count and leaks.
  if (count_.known() && size() != items) {
    return fail("item count " + std::to_string(size()) + " but " + std::to_string(items) +
                " keys in the segments");
  }
  std::string leak;
  heap_.for_each_allocated([&](std::uint64_t off, std::size_t) {
    if (leak.empty() && !known.contains(off)) {
      leak = "heap block at offset " + hex(off) + " is allocated but unreachable";
    }
  });
  if (!leak.empty()) return fail(leak);
  return Status::OK();
}

}  // namespace pmhash::engine::pmeh
