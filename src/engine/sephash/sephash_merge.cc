// engine/sephash/sephash_merge.cc - sephash merges and splits (sephash.h, "Merge", "Split").
#include "engine/sephash/sephash_index.h"
#include "engine/sephash/sephash_testing.h"

namespace pmhash::engine::sephash {

Status SepHashIndex::merge(Session& ss, RAddr seg, std::uint64_t meta) {
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const Held held{seg, Clock::now()};  // before the CAS: no later than the lock
  Batch b;
  b.cas(node, off + kMetaOff, meta, meta | kMetaLock);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (b.result(0) != meta) return Status::OK();
  // Locked: no append that re-reads the meta from now on keeps its slot.
  bool restorable = true, stale = false;
  Status s;
  if (stop_at(LockStep::kLocked)) {
    restorable = false;
    s = stopped();
  } else {
    s = merge_locked(ss, held, meta, &restorable, &stale);
  }
  if ((!s.ok() || stale) && restorable && in_lease(held)) {
    // Leave the segment as it was (unlocked); the entries are all still
    // in the CurSeg and the old MainSeg. A new seq first, so that this
    // lock's (meta, seq) never shows again: a waiter that saw it before
    // must not take a later lock of the same meta for this one.
    b.clear();
    b.faa(node, off + kSeqOff, 1);
    b.write(node, off + kMetaOff, &meta, 8);
    (void)exec(ss, b);
  }
  return s;
}

Status SepHashIndex::merge_locked(Session& ss, const Held& held, std::uint64_t meta,
                                  bool* restorable, bool* stale) {
  const RAddr seg = held.seg;
  const unsigned node = raddr_node(seg);
  const bool sign = meta_sign(meta);
  const unsigned depth = meta_depth(meta);
  const unsigned main_len = meta_main_len(meta);
  // Every batch that writes to the segment, the directory or the global
  // depth begins within lease/2 of the lock (sephash.h, "Dead lock holders").
  if (!in_lease(held)) return gave_up(seg);
  std::uint64_t seq = 0, pattern = 0, floor = 0;
  std::vector<std::uint64_t> all;
  std::uint64_t slots[kCurSlots];
  if (Status s = read_locked(ss, seg, meta, &seq, &pattern, &floor, &all, slots); !s.ok()) {
    return s;
  }
  if (Status s = fence_loose_slots(ss, held, seq, slots, stale); !s.ok() || *stale) return s;
  if (stop_at(LockStep::kRead)) {
    *restorable = false;
    return stopped();
  }
  std::vector<std::uint64_t> keep;
  std::vector<Dropped> drop;
  if (Status s = newest_entries(ss, seg, std::move(all), main_len, &keep, &drop); !s.ok()) {
    return s;
  }
  merges_.fetch_add(1, std::memory_order_relaxed);
  if (keep.size() > params_.main_max_slots && depth < params_.max_depth) {
    return split_locked(ss, held, meta, seq, pattern, floor, keep, drop, restorable);
  }
  if (keep.size() > kMaxMainSlots - kCurSlots) {
    return Status::NoSpace("sephash: a segment is full at the maximum depth " +
                           std::to_string(params_.max_depth) +
                           " (create the index with a larger sephash.max_depth)");
  }
  std::uint64_t main_off = 0;
  const std::uint64_t units = main_units(static_cast<unsigned>(keep.size()));
  std::vector<std::byte> image;
  if (!keep.empty()) {
    image = main_image(keep);
    if (Status s = alloc_block(ss, node, units, &main_off); !s.ok()) return s;
  }
  if (stop_at(LockStep::kMergePublish)) {
    *restorable = false;
    return stopped();
  }
  if (!in_lease(held)) {
    if (!keep.empty()) unused(ss, node, main_off, units);  // never written: still ours
    return gave_up(seg);
  }
  const std::uint64_t meta_new =
      make_meta(!sign, depth, static_cast<unsigned>(keep.size()), main_off);
  return publish_merge(ss, held, meta, seq, meta_new, image, main_off, drop, restorable);
}

Status SepHashIndex::read_locked(Session& ss, RAddr seg, std::uint64_t meta, std::uint64_t* seq,
                                 std::uint64_t* pattern, std::uint64_t* floor,
                                 std::vector<std::uint64_t>* all, std::uint64_t* slots) {
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const unsigned main_len = meta_main_len(meta);
  std::vector<std::uint64_t> main(main_len);
  Batch b;
  // The seq first, before anything is read: every reader whose snapshot
  // is older than this lock now fails its check (sephash.h, "Reclamation").
  const std::size_t seq_op = b.size();
  b.faa(node, off + kSeqOff, 1);
  b.read(node, off + kSlotsOff, slots, kCurSlots * 8);
  b.read(node, off + kPatternOff, pattern, 8);
  b.read(node, off + kSwapFloorOff, floor, 8);
  if (main_len != 0) {
    b.read(node, meta_main_off(meta) + kPrefixBytes, main.data(), main_len * 8);
  }
  if (Status s = exec(ss, b); !s.ok()) return s;
  *seq = b.result(seq_op) + 1;  // this lock's, and the next state's
  *all = std::move(main);
  all->reserve(all->size() + kCurSlots);
  for (unsigned i = 0; i < kCurSlots; ++i) {
    if (slot_live(slots[i], meta_sign(meta))) all->push_back(slot_entry(slots[i]));
  }
  return Status::OK();
}

Status SepHashIndex::fence_loose_slots(Session& ss, const Held& held, std::uint64_t seq,
                                       const std::uint64_t* slots, bool* landed) {
  const unsigned node = raddr_node(held.seg);
  const std::uint64_t off = raddr_off(held.seg);
  *landed = false;
  Batch b;
  for (unsigned i = 0; i < kCurSlots; ++i) {
    if ((slots[i] & kItemMask) != 0) continue;
    b.cas(node, off + kSlotsOff + i * 8ull, slots[i], free_slot(seq));
  }
  if (b.size() == 0) return Status::OK();  // every slot taken: nothing can land
  if (!in_lease(held)) return gave_up(held.seg);
  if (Status s = exec(ss, b); !s.ok()) return s;
  std::size_t op = 0;
  for (unsigned i = 0; i < kCurSlots; ++i) {
    if ((slots[i] & kItemMask) != 0) continue;
    if (b.result(op++) != slots[i]) *landed = true;
  }
  return Status::OK();
}

Status SepHashIndex::publish_merge(Session& ss, const Held& held, std::uint64_t meta,
                                   std::uint64_t seq, std::uint64_t meta_new,
                                   const std::vector<std::byte>& image, std::uint64_t main_off,
                                   const std::vector<Dropped>& drop, bool* restorable) {
  const RAddr seg = held.seg;
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const bool sign = meta_sign(meta);
  const Intent intent{seq, meta, meta_new, 0};
  Batch b;
  std::uint64_t cleared[kCurSlots];
  std::fill(std::begin(cleared), std::end(cleared), free_slot(seq));
  const std::uint64_t zero[8] = {};
  // (Tests: a planted bug publishes the meta first, ahead of what it names.)
  const bool meta_first = planted::active(testing::kMetaBeforeMainSegDurable);
  if (meta_first) b.write(node, off + kMetaOff, &meta_new, 8);
  if (!image.empty()) b.write(node, main_off, image.data(), static_cast<std::uint32_t>(image.size()));
  // The intent after the image and before anything destructive (same
  // node, in order): who finds it may finish this publish.
  add_intent(b, node, off, intent);
  *restorable = false;  // from here on the slots may be clear: a taker finishes the publish
  // (Tests: with a lock hook the publish runs as three batches, so that
  // a holder can stop between them as one killed mid-batch would.)
  if (Status s = hook_break(ss, held, &b, LockStep::kMergeIntent); !s.ok()) return s;
  b.write(node, off + kBitmapOff + (!sign ? kBitmapBytes : 0), zero, kBitmapBytes);
  // Every slot gets the next state's free word before the meta that
  // starts that state (sephash.h, "Reclamation": merges rewrite the slots,
  // so that no stale append lands in a later state).
  b.write(node, off + kSlotsOff, cleared, kCurSlots * 8);
  if (Status s = hook_break(ss, held, &b, LockStep::kMergeSlots); !s.ok()) return s;
  if (!meta_first) b.write(node, off + kMetaOff, &meta_new, 8);
  if (Status s = exec(ss, b); !s.ok() && !published(ss, seg, meta_new, seq)) {
    leak_dropped(drop, meta);
    return s;
  }
  // Published: what the merge dropped is named by no state a reader can
  // still validate.
  free_dropped(ss, node, drop, meta);
  ss.bitmaps[seg].published(!sign, seq);
  return Status::OK();
}

bool SepHashIndex::published(Session& ss, RAddr seg, std::uint64_t meta_new, std::uint64_t seq) {
  Snap now;
  Batch b;
  add_check(b, seg, &now);
  return exec(ss, b).ok() && now.meta == meta_new && now.seq == seq;
}

void SepHashIndex::leak_dropped(const std::vector<Dropped>& drop, std::uint64_t meta) {
  std::uint64_t bytes = 0;
  for (const Dropped& d : drop) bytes += d.units * 64;
  if (meta_main_len(meta) != 0) bytes += main_units(meta_main_len(meta)) * 64;
  leak(bytes);
}

void SepHashIndex::free_dropped(Session& ss, unsigned node, const std::vector<Dropped>& drop,
                                std::uint64_t meta) {
  for (const Dropped& d : drop) release(ss, node, d.off, d.units);
  if (meta_main_len(meta) != 0) {
    release(ss, node, meta_main_off(meta), main_units(meta_main_len(meta)));
  }
  shed_surplus(ss, node);
}

Status SepHashIndex::newest_entries(Session& ss, RAddr seg, std::vector<std::uint64_t> all,
                                    std::size_t main_count, std::vector<std::uint64_t>* keep,
                                    std::vector<Dropped>* drop) {
  sort_by_filter_bits(&all, main_count);
  std::vector<char> kept(all.size(), 0);
  std::vector<std::uint64_t> colliding;
  std::vector<std::size_t> colliding_at;  // each colliding entry's index in `all`
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i + 1;
    while (j < all.size() && filter_bits(all[j]) == filter_bits(all[i])) ++j;
    if (j - i == 1) {
      if (!slot_tomb(all[i])) {
        keep->push_back(all[i]);
        kept[i] = 1;
      }
    } else {
      for (std::size_t k = i; k < j; ++k) {
        colliding.push_back(all[k]);
        colliding_at.push_back(k);
      }
    }
    i = j;
  }
  std::unordered_map<std::uint64_t, std::uint64_t> units_of;  // block -> units, from items read
  const std::size_t singles = keep->size();
  if (!colliding.empty()) {
    if (Status s = newest_of_colliding(ss, seg, colliding, colliding_at, keep, &kept, &units_of);
        !s.ok()) {
      return s;
    }
  }
  // Both parts are in filter-bit order (the colliding entries' items are
  // in `colliding`'s order).
  std::inplace_merge(keep->begin(), keep->begin() + static_cast<std::ptrdiff_t>(singles),
                     keep->end(), by_filter_bits);
  return dropped_blocks(ss, raddr_node(seg), all, kept, units_of, *keep, drop);
}

void SepHashIndex::sort_by_filter_bits(std::vector<std::uint64_t>* all, std::size_t main_count) {
  // By filter bits, then by word. A MainSeg is written in filter-bit order
  // (newest_entries), so only the CurSeg's entries need sorting, and one
  // merge orders the whole; a MainSeg a split at a depth 4k re-read has
  // new hash bits and may not be in that order, and is sorted whole.
  const auto mid = all->begin() + static_cast<std::ptrdiff_t>(main_count);
  if (std::is_sorted(all->begin(), mid, by_filter_bits)) {
    std::sort(mid, all->end(), by_filter_bits);
    std::inplace_merge(all->begin(), mid, all->end(), by_filter_bits);
  } else {
    std::sort(all->begin(), all->end(), by_filter_bits);
  }
  for (std::size_t i = 0; i < all->size();) {
    std::size_t j = i + 1;
    while (j < all->size() && filter_bits((*all)[j]) == filter_bits((*all)[i])) ++j;
    if (j - i > 1) std::sort(all->begin() + i, all->begin() + j);
    i = j;
  }
  all->erase(std::unique(all->begin(), all->end()), all->end());  // one entry taken twice
}

Status SepHashIndex::newest_of_colliding(Session& ss, RAddr seg,
                                         const std::vector<std::uint64_t>& colliding,
                                         const std::vector<std::size_t>& colliding_at,
                                         std::vector<std::uint64_t>* keep, std::vector<char>* kept,
                                         std::unordered_map<std::uint64_t, std::uint64_t>* units_of) {
  std::vector<Candidate> items;
  bool retry = false;
  if (Status s = read_items(ss, seg, nullptr, colliding, &items, &retry); !s.ok()) return s;
  std::vector<bool> taken(items.size(), false);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const ItemHeader& h = items[i].header();
    (*units_of)[slot_item(items[i].slot)] = item_units(sizeof(ItemHeader) + h.key_len + h.value_len);
    if (taken[i]) continue;
    std::size_t best = i;
    for (std::size_t j = i; j < items.size(); ++j) {
      if (taken[j] || filter_bits(items[j].slot) != filter_bits(items[i].slot) ||
          items[j].key() != items[i].key()) {
        continue;
      }
      taken[j] = true;
      // Equal versions: the same write twice (an append made again after
      // a merge moved under it), in two blocks; keep the first.
      if (items[j].header().version > items[best].header().version) best = j;
    }
    if (!slot_tomb(items[best].slot)) {
      keep->push_back(items[best].slot);
      (*kept)[colliding_at[best]] = 1;
    }
  }
  return Status::OK();
}

Status SepHashIndex::dropped_blocks(Session& ss, unsigned node,
                                    const std::vector<std::uint64_t>& all,
                                    const std::vector<char>& kept,
                                    const std::unordered_map<std::uint64_t, std::uint64_t>& units_of,
                                    const std::vector<std::uint64_t>& keep,
                                    std::vector<Dropped>* drop) {
  // They are few (about a CurSeg's worth) against a MainSeg's thousands of
  // kept entries, so they are sorted and each kept entry is looked up
  // among them.
  std::vector<Dropped> gone;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (kept[i]) continue;
    const std::uint64_t blk = slot_item(all[i]);
    std::uint64_t units = slot_len(all[i]);
    if (units == 0) {
      auto it = units_of.find(blk);
      if (it != units_of.end()) units = it->second;
    }
    gone.push_back({blk, units});
  }
  std::sort(gone.begin(), gone.end(), [](const Dropped& a, const Dropped& b) {
    return a.off != b.off ? a.off < b.off : a.units > b.units;  // a known length first
  });
  gone.erase(std::unique(gone.begin(), gone.end(),
                         [](const Dropped& a, const Dropped& b) { return a.off == b.off; }),
             gone.end());
  std::vector<char> named(gone.size(), 0);
  if (!gone.empty()) {
    // A filter of the dropped blocks first: most kept entries miss it.
    std::bitset<4096> maybe;
    auto bit = [](std::uint64_t off) { return ((off >> 6) * 0x9E3779B97F4A7C15ull) >> 52; };
    for (const Dropped& d : gone) maybe.set(bit(d.off));
    for (std::uint64_t k : keep) {
      if (!maybe.test(bit(slot_item(k)))) continue;
      auto it = std::lower_bound(gone.begin(), gone.end(), slot_item(k),
                                 [](const Dropped& d, std::uint64_t off) { return d.off < off; });
      if (it != gone.end() && it->off == slot_item(k)) named[it - gone.begin()] = 1;
    }
  }
  std::vector<std::size_t> unknown;  // dropped blocks whose length the slot does not give
  for (std::size_t i = 0; i < gone.size(); ++i) {
    if (named[i]) continue;
    if (gone[i].units == 0) unknown.push_back(drop->size());
    drop->push_back(gone[i]);
  }
  if (!unknown.empty()) {
    std::vector<ItemHeader> hs(unknown.size());
    Batch b;
    for (std::size_t i = 0; i < unknown.size(); ++i) {
      b.read(node, (*drop)[unknown[i]].off, &hs[i], sizeof(ItemHeader));
    }
    if (Status s = exec(ss, b); !s.ok()) return s;
    for (std::size_t i = 0; i < unknown.size(); ++i) {
      (*drop)[unknown[i]].units =
          item_units(sizeof(ItemHeader) + std::uint64_t{hs[i].key_len} + hs[i].value_len);
    }
  }
  return Status::OK();
}

std::vector<std::byte> SepHashIndex::main_image(const std::vector<std::uint64_t>& sorted) {
  std::vector<std::byte> img(main_bytes(static_cast<unsigned>(sorted.size())));
  std::uint16_t prefix[257] = {};
  for (std::uint64_t s : sorted) ++prefix[slot_fp(s) + 1];
  for (unsigned f = 1; f <= 256; ++f) prefix[f] = static_cast<std::uint16_t>(prefix[f] + prefix[f - 1]);
  std::memcpy(img.data(), prefix, sizeof(prefix));
  std::memcpy(img.data() + kPrefixBytes, sorted.data(), sorted.size() * 8);
  return img;
}

Status SepHashIndex::split_halves(Session& ss, unsigned node, unsigned depth,
                                  const std::vector<std::uint64_t>& keep,
                                  std::vector<std::uint64_t> (*halves)[2]) {
  const unsigned depth1 = depth + 1;
  if (dbits_base(depth1) == dbits_base(depth)) {
    for (std::uint64_t s : keep) {
      (*halves)[(slot_dbits(s) >> (depth - dbits_base(depth))) & 1].push_back(s);
    }
  } else {
    // The slots' four hash bits are used up: re-read every item's hash.
    std::vector<ItemHeader> hs(keep.size());
    Batch b;
    for (std::size_t i = 0; i < keep.size(); ++i) {
      b.read(node, slot_item(keep[i]), &hs[i], sizeof(ItemHeader));
    }
    if (Status s = exec(ss, b); !s.ok()) return s;
    for (std::size_t i = 0; i < keep.size(); ++i) {
      const std::uint64_t e = (keep[i] & ~(std::uint64_t{15} << kDbitsShift)) |
                              (std::uint64_t{hash_dbits(hs[i].hash, depth1)} << kDbitsShift);
      (*halves)[(hs[i].hash >> depth) & 1].push_back(e);
    }
    for (auto& hv : *halves) {
      std::sort(hv.begin(), hv.end(), [](std::uint64_t a, std::uint64_t b) {
        return (a >> kDbitsShift) < (b >> kDbitsShift);
      });
    }
  }
  return Status::OK();
}

Status SepHashIndex::split_locked(Session& ss, const Held& held, std::uint64_t meta,
                                  std::uint64_t seq, std::uint64_t pattern, std::uint64_t floor,
                                  const std::vector<std::uint64_t>& keep,
                                  const std::vector<Dropped>& drop, bool* restorable) {
  const RAddr seg = held.seg;
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const bool sign = meta_sign(meta);
  const unsigned depth = meta_depth(meta);
  const unsigned depth1 = depth + 1;
  std::vector<std::uint64_t> half[2];
  if (Status s = split_halves(ss, node, depth, keep, &half); !s.ok()) return s;
  const std::uint64_t pattern1 = pattern | (std::uint64_t{1} << depth);
  const unsigned node1 = node;  // where the items the new half names are
  std::uint64_t main0 = 0, main1 = 0, cur1 = 0;
  std::vector<std::byte> img0, img1;
  // Blocks taken and not written yet are still this client's.
  auto unwritten = [&] {
    for (unsigned i = 0; i < 2; ++i) {
      if (half[i].empty() || (i ? main1 : main0) == 0) continue;
      unused(ss, node, i ? main1 : main0, main_units(static_cast<unsigned>(half[i].size())));
    }
    if (cur1 != 0) unused(ss, node1, cur1, kCurSegBytes / 64);
  };
  if (!half[0].empty()) {
    img0 = main_image(half[0]);
    if (Status s = alloc_block(ss, node, main_units(static_cast<unsigned>(half[0].size())), &main0);
        !s.ok()) {
      return s;
    }
  }
  if (!half[1].empty()) {
    img1 = main_image(half[1]);
    if (Status s = alloc_block(ss, node1, main_units(static_cast<unsigned>(half[1].size())), &main1);
        !s.ok()) {
      unwritten();
      return s;
    }
  }
  if (Status s = alloc_block(ss, node1, kCurSegBytes / 64, &cur1); !s.ok()) {
    unwritten();
    return s;
  }
  // (1) The new segment, complete, and both MainSegs, then the intent;
  // (2) the directory entries of the new half; (3) the global depth;
  // (4) this segment's bitmap, slots and meta, which unlocks it. Each
  // begins within lease/2 of the lock (sephash.h, "Dead lock holders").
  // The new CurSeg starts with this segment's swap floor: the keys it
  // takes over keep their floor (sephash.h, "Compare and swap").
  const std::vector<std::byte> cur_img = curseg_image(
      make_meta(true, depth1, static_cast<unsigned>(half[1].size()), main1), pattern1, floor);
  const RAddr seg1 = make_raddr(node1, cur1);
  const std::uint64_t meta0 =
      make_meta(!sign, depth1, static_cast<unsigned>(half[0].size()), main0);
  const Intent intent{seq, meta, meta0, seg1};
  if (stop_at(LockStep::kSplitFirst)) {
    *restorable = false;
    return stopped();
  }
  if (!in_lease(held)) {
    unwritten();  // nothing written
    return gave_up(seg);
  }
  Batch b;
  if (!img0.empty()) b.write(node, main0, img0.data(), static_cast<std::uint32_t>(img0.size()));
  if (!img1.empty()) b.write(node1, main1, img1.data(), static_cast<std::uint32_t>(img1.size()));
  b.write(node1, cur1, cur_img.data(), kCurSegBytes);
  // The intent after the images (node1 is this node: in order).
  add_intent(b, node, off, intent);
  *restorable = false;  // the intent may stand: a taker finishes the split
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (stop_at(LockStep::kSplitIntent)) return stopped();
  if (!in_lease(held)) return gave_up(seg);
  b.clear();
  std::uint64_t global = 0;
  const std::uint64_t step = std::uint64_t{1} << depth1;
  for (std::uint64_t i = pattern1; i < (std::uint64_t{1} << params_.max_depth); i += step) {
    b.write(0, params_.directory + i * 8, &seg1, 8);
  }
  b.read(0, kGlobalDepthOff, &global, 8);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (stop_at(LockStep::kSplitDirectory)) return stopped();
  if (!in_lease(held)) return gave_up(seg);
  if (Status s = remote_index::raise_global_depth(ss, kGlobalDepthOff, global, depth1);
      !s.ok()) {
    return s;
  }
  if (stop_at(LockStep::kSplitDepth)) return stopped();
  if (!in_lease(held)) return gave_up(seg);
  std::uint64_t cleared[kCurSlots];
  std::fill(std::begin(cleared), std::end(cleared), free_slot(seq));
  const std::uint64_t zero[8] = {};
  b.clear();
  b.write(node, off + kBitmapOff + (!sign ? kBitmapBytes : 0), zero, kBitmapBytes);
  b.write(node, off + kSlotsOff, cleared, kCurSlots * 8);
  if (Status s = hook_break(ss, held, &b, LockStep::kSplitSlots); !s.ok()) return s;
  b.write(node, off + kMetaOff, &meta0, 8);
  if (Status s = exec(ss, b); !s.ok() && !published(ss, seg, meta0, seq)) {
    leak_dropped(drop, meta);
    return s;
  }
  free_dropped(ss, node, drop, meta);
  ss.bitmaps[seg].published(!sign, seq);
  ss.bitmaps[seg1].published(true, 0);  // a new CurSeg's seq is 0
  splits_.fetch_add(1, std::memory_order_relaxed);
  split_bytes_.fetch_add(img0.size() + img1.size() + kCurSegBytes, std::memory_order_relaxed);
  return refresh_dir(ss);
}

}  // namespace pmhash::engine::sephash
