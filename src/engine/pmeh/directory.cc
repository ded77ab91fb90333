// engine/pmeh/directory.cc - directory growth, the lazy per-zone fill and
// the retirement of directories every zone has left (design in pmeh.h §6).
// Owner only.
#include <cstring>

#include "engine/pmeh/pmeh_index.h"
#include "engine/pmeh/pmeh_testing.h"

namespace pmhash::engine::pmeh {

Status PmehIndex::ensure_depth(heap::ThreadCache* tc, unsigned z, unsigned depth) {
  if (zones_[z].dir.load(std::memory_order_relaxed)->depth >= depth) return Status::OK();
  Dir* target = nullptr;
  {
    std::lock_guard lock(install_mutex_);
    Dir* newest = newest_.load(std::memory_order_acquire);
    if (newest->depth < depth) {
      if (Status s = install_dir(tc, std::max(depth, newest->depth + 1)); !s.ok()) return s;
    }
    target = newest_.load(std::memory_order_acquire);
  }
  fill_zone(tc, z, target);
  return Status::OK();
}

Status PmehIndex::install_dir(heap::ThreadCache* tc, unsigned depth) {
  const Dir* newest = newest_.load(std::memory_order_relaxed);
  const unsigned id = newest->id + 1;
  if (id >= kMaxDirs || depth > kMaxDepth) {
    return Status::NoSpace("pmeh: the directory cannot grow to depth " + std::to_string(depth) +
                           " (at most " + std::to_string(kMaxDirs) + " directories of depth " +
                           std::to_string(kMaxDepth) + ")");
  }
  std::uint64_t off = 0;
  // Intent 1 is the slides' per-thread directory pointer (§1.6).
  if (Status s = tc->allocate(dir_bytes(depth), &off, false, kBlockIntent); !s.ok()) {
    return Status::NoSpace("pmeh: no room in the pool for a directory of depth " +
                           std::to_string(depth) + " (" + std::to_string(dir_bytes(depth)) +
                           " bytes)");
  }
  auto* h = region_.at<DirHeader>(off);
  std::memset(static_cast<void*>(h), 0, sizeof(DirHeader));
  h->magic = kDirMagic;
  h->id = id;
  h->depth = static_cast<std::uint8_t>(depth);
  h->zone_bits = static_cast<std::uint8_t>(z_);
  region_.flush(h, sizeof(DirHeader));
  // The header is durable before dir_array names the block. Its entries
  // are not zeroed: a zone's entries are read only once its bit is set.
  region_.drain();
  root_->dir_array[id].store(off, std::memory_order_relaxed);
  // The directory is live on media before any zone fills into it (else a
  // crash could free a directory a zone already depends on).
  if (!planted::active(testing::kDirSlotNotPersistedBeforeFill)) region_.persist(&root_->dir_array[id], sizeof(std::uint64_t));
  tc->clear_intent(kBlockIntent);
  auto d = std::make_unique<Dir>(Dir{off, h, dir_entries(h), depth, id});
  Dir* raw = d.get();
  dir_store_.push_back(std::move(d));
  dirs_[id].store(raw, std::memory_order_release);
  newest_.store(raw, std::memory_order_release);
  expansions_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void PmehIndex::fill_zone(heap::ThreadCache* tc, unsigned z, Dir* to) {
  Dir* from = zones_[z].dir.load(std::memory_order_relaxed);
  if (from == to) return;
  InSplit in_split;
  const unsigned shift = to->depth - from->depth;
  const std::uint64_t per_zone = std::uint64_t{1} << (to->depth - z_);
  const std::uint64_t base = std::uint64_t{z} * per_zone;
  for (std::uint64_t e = base; e < base + per_zone; ++e) {
    to->entry[e].store(from->entry[e >> shift].load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
  }
  region_.flush(&to->entry[base], sizeof(std::uint64_t) * per_zone);
  // The zone's entries are durable before its bit says they are complete.
  if (!planted::active(testing::kZoneFilledBeforeEntriesDurable)) region_.drain();
  to->hdr->zone_filled[z / 64].fetch_or(std::uint64_t{1} << (z % 64), std::memory_order_relaxed);
  // The zone lives in the new directory on media before its first write
  // there (a crash must not fall back to a directory that lacks a split).
  region_.persist(&to->hdr->zone_filled[z / 64], sizeof(std::uint64_t));
  // Release: readers that load the new directory see its entries.
  zones_[z].dir.store(to, std::memory_order_release);
  retire_old_dirs(tc);
}

void PmehIndex::retire_old_dirs(heap::ThreadCache* tc) {
  // Under the install mutex: one owner retires each directory. Zones only
  // move to newer directories, and each owner looks after its own move, so
  // the last zone to leave a directory sees it unused.
  std::lock_guard lock(install_mutex_);
  unsigned oldest = kMaxDirs;
  for (unsigned z = 0; z < (1u << z_); ++z) {
    oldest = std::min(oldest, zones_[z].dir.load(std::memory_order_acquire)->id);
  }
  if (oldest <= oldest_dir_) return;
  // Outside any read section (callers fill before their read section).
  tc->reserve_retire(oldest - oldest_dir_);
  for (unsigned j = oldest_dir_; j < oldest; ++j) {
    if (const Dir* d = dirs_[j].load(std::memory_order_relaxed)) tc->retire(d->off);
  }
  // The retire entries are durable before any word stops naming its
  // directory (else a crash would leak the block).
  region_.drain();
  for (unsigned j = oldest_dir_; j < oldest; ++j) {
    if (dirs_[j].load(std::memory_order_relaxed) == nullptr) continue;
    root_->dir_array[j].store(0, std::memory_order_relaxed);
    // One word at a time, lowest id first: a crash leaves dir_array a
    // contiguous run (open requires it). The block is freed after a grace
    // period (readers that loaded the zone's old directory are gone), when
    // the owner's retire log is next emptied, after its word is cleared.
    region_.persist(&root_->dir_array[j], sizeof(std::uint64_t));
    // The Dir stays allocated (dir_store_) until close: a reader may still
    // hold it; only its block goes.
    dirs_[j].store(nullptr, std::memory_order_release);
  }
  oldest_dir_ = oldest;
}

}  // namespace pmhash::engine::pmeh
