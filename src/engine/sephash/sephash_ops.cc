// engine/sephash/sephash_ops.cc - sephash searches and appends (sephash.h, "Search", "Append").
#include "engine/sephash/sephash_index.h"

namespace pmhash::engine::sephash {

Status SepHashIndex::wait_unlocked(Session& ss, RAddr seg, Snap* snap) {
  const auto deadline = lock_deadline();
  LockWatch watch;
  for (;;) {
    Batch b;
    b.read(raddr_node(seg), raddr_off(seg) + kSeqOff, &snap->seq, 8);
    b.read(raddr_node(seg), raddr_off(seg) + kMetaOff, &snap->meta, 8);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if ((snap->meta & kMetaLock) == 0) return Status::OK();
    if (Status s = watch_lock(ss, seg, *snap, &watch); !s.ok()) return s;
    if (Clock::now() > deadline) return locked_too_long(seg);
    std::this_thread::yield();
  }
}

Status SepHashIndex::read_items(Session& ss, RAddr seg, const Snap* snap,
                  const std::vector<std::uint64_t>& slots, std::vector<Candidate>* out,
                  bool* retry) {
  const unsigned node = raddr_node(seg);
  *retry = false;
  out->assign(slots.size(), {});
  if (slots.empty()) return Status::OK();
  Snap now;
  Batch b;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const unsigned units = slot_len(slots[i]) == 0 ? kMaxSlotLenUnits : slot_len(slots[i]);
    (*out)[i].slot = slots[i];
    (*out)[i].item.resize(units * 64);
    b.read(node, slot_item(slots[i]), (*out)[i].item.data(), units * 64);
  }
  if (snap != nullptr) add_check(b, seg, &now);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (snap != nullptr && !unchanged(*snap, now)) {
    *retry = true;
    return Status::OK();
  }
  b.clear();
  for (Candidate& c : *out) {
    const ItemHeader& h = c.header();
    const std::uint64_t total = sizeof(ItemHeader) + std::uint64_t{h.key_len} + h.value_len;
    if (total > sizeof(ItemHeader) + kMaxKeySize + kMaxValueSize) {
      return Status::Corruption("sephash: item at node " + std::to_string(node) + " offset " +
                                std::to_string(slot_item(c.slot)) + " has a bad length");
    }
    if (total > c.item.size()) {
      const std::size_t had = c.item.size();
      c.item.resize(total);
      b.read(node, slot_item(c.slot) + had, c.item.data() + had,
             static_cast<std::uint32_t>(total - had));
    }
  }
  if (b.size() == 0) return Status::OK();
  if (snap != nullptr) add_check(b, seg, &now);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (snap != nullptr && !unchanged(*snap, now)) *retry = true;
  return Status::OK();
}

void SepHashIndex::newest(const std::vector<Candidate>& items, std::string_view key, Candidate* best,
                   bool* any) {
  for (const Candidate& c : items) {
    if (c.key() != key) continue;
    if (!*any || c.header().version > best->header().version) {
      *best = c;
      *any = true;
    }
  }
}

Status SepHashIndex::lookup(Session& ss, const Key& key, Candidate* best, bool* any) {
  const std::uint64_t h = key.h1;
  const unsigned fp = hash_fp(h);
  const auto deadline = lock_deadline();
  LockWatch watch;
  for (;;) {
    *any = false;
    const RAddr seg = segment_of(ss, h);
    const unsigned node = raddr_node(seg);
    Session::MainCache& mc = ss.mains[seg];
    Header hd{};
    Snap snap, now;
    const unsigned lo = mc.prefix[fp], hi = mc.prefix[fp + 1];
    std::vector<std::uint64_t> mslots(hi - lo);
    Batch b;
    add_snapshot(b, seg, &snap.seq, &hd);
    if (hi > lo) {
      b.read(node, mc.main_off + kPrefixBytes + lo * 8ull, mslots.data(), (hi - lo) * 8);
    }
    add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    snap.meta = hd.meta;
    ss.bitmaps[seg].take(snap.seq, hd);  // for this session's next append here
    bool go = false;
    if (Status s = check_snapshot(ss, h, seg, hd, snap, now, &mc, deadline, &watch, &go);
        !s.ok()) {
      return s;
    }
    if (!go) continue;
    bool retry = false;
    if (Status s = newest_in_snapshot(ss, key, seg, snap, hd, mslots, nullptr, best, any, &retry);
        !s.ok() || !retry) {
      return s;
    }
    if (Clock::now() > deadline) return locked_too_long(seg);
  }
}

Status SepHashIndex::check_snapshot(Session& ss, std::uint64_t h, RAddr seg, const Header& hd,
                      const Snap& snap, const Snap& now, Session::MainCache* mc,
                      Clock::time_point deadline, LockWatch* watch, bool* go) {
  *go = false;
  if (!unchanged(snap, now)) {
    // Locked: a holder that keeps it for a lease is taken over.
    if (Status s = watch_lock(ss, seg, (now.meta & kMetaLock) != 0 ? now : snap, watch); !s.ok()) {
      return s;
    }
    if (Clock::now() > deadline) return locked_too_long(seg);
    std::this_thread::yield();
    return Status::OK();
  }
  if ((h & low_mask(meta_depth(hd.meta))) != hd.pattern) return refresh_dir(ss);
  if (mc != nullptr && (meta_main_off(snap.meta) != mc->main_off || snap.seq != mc->seq)) {
    return load_prefix(ss, seg, snap, mc);
  }
  *go = true;
  return Status::OK();
}

Status SepHashIndex::newest_in_snapshot(Session& ss, const Key& key, RAddr seg, const Snap& snap,
                          const Header& hd, const std::vector<std::uint64_t>& mslots,
                          std::uint64_t* all_slots, Candidate* best, bool* any, bool* retry) {
  const std::uint64_t h = key.h1;
  const unsigned fp = hash_fp(h), fp2 = hash_fp2(h);
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const unsigned dbits = hash_dbits(h, meta_depth(hd.meta));
  auto matches = [&](std::uint64_t s) {
    return slot_fp(s) == fp && slot_fp2(s) == fp2 && slot_dbits(s) == dbits;
  };
  *any = false;
  *retry = false;
  std::vector<std::uint64_t> cands;
  for (std::uint64_t s : mslots) {
    if (matches(s)) cands.push_back(s);
  }
  const bool sign = meta_sign(hd.meta);
  if (bitmap_has(hd, sign, bitmap_bit(fp, fp2))) {
    // The CurSeg may hold the key: its slots, and the check.
    std::uint64_t own[kCurSlots];
    std::uint64_t* slots = all_slots != nullptr ? all_slots : own;
    Snap now;
    Batch b;
    b.read(node, off + kSlotsOff, slots, kCurSlots * 8);
    add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (!unchanged(snap, now)) {
      *retry = true;
      return Status::OK();
    }
    for (unsigned i = 0; i < kCurSlots; ++i) {
      const std::uint64_t s = slots[i];
      if (slot_live(s, sign) && matches(s)) cands.push_back(s);
    }
  }
  std::vector<Candidate> items;
  if (Status s = read_items(ss, seg, &snap, cands, &items, retry); !s.ok() || *retry) return s;
  newest(items, key.bytes, best, any);
  return Status::OK();
}

Status SepHashIndex::load_prefix(Session& ss, RAddr seg, const Snap& snap, Session::MainCache* mc) {
  const unsigned node = raddr_node(seg);
  mc->seq = ~std::uint64_t{0};
  mc->main_off = meta_main_off(snap.meta);
  if (meta_main_len(snap.meta) == 0) {
    std::fill(mc->prefix.begin(), mc->prefix.end(), 0);
    mc->seq = snap.seq;
    return Status::OK();
  }
  std::vector<std::uint16_t> prefix(257, 0);
  Snap now;
  Batch b;
  b.read(node, mc->main_off, prefix.data(), 257 * 2);
  add_check(b, seg, &now);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (!unchanged(snap, now)) return Status::OK();
  bool sorted = true;
  for (unsigned f = 0; f < 256; ++f) sorted &= prefix[f] <= prefix[f + 1];
  if (!sorted || prefix[256] != meta_main_len(snap.meta)) {
    return Status::Corruption("sephash: MainSeg at node " + std::to_string(node) + " offset " +
                              std::to_string(mc->main_off) + " does not match its segment's meta");
  }
  mc->prefix = std::move(prefix);
  mc->seq = snap.seq;
  return Status::OK();
}

Status SepHashIndex::write(const Key& key, std::string_view value, bool tomb, Want want) {
  return with_session([&](Session& ss) -> Status {
    return append(ss, key, value, tomb, want);
  });
}

Status SepHashIndex::append(Session& ss, const Key& key, std::string_view value, bool tomb, Want want) {
  const std::uint64_t h = key.h1;
  const unsigned fp = hash_fp(h), fp2 = hash_fp2(h);
  const std::uint64_t bytes = sizeof(ItemHeader) + key.bytes.size() + value.size();
  const std::uint64_t units = item_units(bytes);
  std::vector<std::byte> item(units * 64);
  ItemHeader ih{0, static_cast<std::uint32_t>(key.bytes.size()),
                static_cast<std::uint32_t>(value.size()), h};
  std::memcpy(item.data() + sizeof(ItemHeader), key.bytes.data(), key.bytes.size());
  if (!value.empty()) {
    std::memcpy(item.data() + sizeof(ItemHeader) + key.bytes.size(), value.data(), value.size());
  }
  unsigned item_node = ~0u;  // where the item's block is, once it has one
  std::uint64_t item_off = 0;
  bool item_written = false;
  bool item_named = false;  // a slot may name the block: it is no longer this client's
  bool item_lost = false;   // a batch that writes it or names it failed: it may land yet
  // However the call ends, the item's block is named (no longer this
  // client's), this client's again (nothing unknown happened to it), or
  // given up (sephash.h, "Reclamation": lost replies).
  const AtScopeEnd settle_item([&] {
    if (item_node == ~0u || item_named) return;
    if (item_lost) {
      leak(units * 64);
    } else {
      unused(ss, item_node, item_off, units);
    }
  });
  const unsigned bit = bitmap_bit(fp, fp2);
  const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
  const auto deadline = lock_deadline();
  LockWatch watch;
  for (;;) {
    const RAddr seg = segment_of(ss, h);
    const unsigned node = raddr_node(seg);
    const std::uint64_t off = raddr_off(seg);
    Header hd{};
    Snap snap, now;
    std::uint64_t slots[kCurSlots];
    const unsigned w = ss.window;
    Session::MainCache& mc = ss.mains[seg];
    const unsigned lo = mc.prefix[fp], hi = mc.prefix[fp + 1];
    std::vector<std::uint64_t> mslots;
    Batch b;
    if (ih.version == 0) b.faa(0, kVersionOff, 1);
    add_snapshot(b, seg, &snap.seq, &hd);
    // The key's bitmap bit, speculatively, from the word this session
    // last saw (sephash.h, "Append"): after the snapshot's READ (same
    // node, in order), so that the snapshot never shows this bit, and
    // before the check, which validates it with the rest. Not while the
    // key's presence is still to be decided with a MainSeg prefix table
    // cached at another seq than the word: if the word is current, the
    // table is not, this pass ends after loading it, and the next
    // pass's snapshot would show the bit (a READ of the slots for
    // nothing, where the bit's own round trip would have cost as much).
    Session::BitmapCache& bc = ss.bitmaps[seg];
    std::size_t spec_op = kNoOp;
    const std::uint64_t spec_word = bc.words[bit / 64];
    const bool spec_sign = bc.sign;
    if (bc.known && (spec_word & mask) == 0 && (want == Want::kAny || mc.seq == bc.seq)) {
      spec_op = b.size();
      b.cas(node, off + bitmap_word_off(spec_sign, bit), spec_word, spec_word | mask);
    }
    if (want != Want::kAny && hi > lo) {
      mslots.resize(hi - lo);
      b.read(node, mc.main_off + kPrefixBytes + lo * 8ull, mslots.data(), (hi - lo) * 8);
    }
    b.read(node, off + kSlotsOff + w * 8ull, slots + w, kWindowSlots * 8);
    add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (ih.version == 0) ih.version = b.result(0);
    snap.meta = hd.meta;
    const bool sign = meta_sign(hd.meta);
    // The key's bitmap word in the snapshot's state, as late as this
    // session knows it: the speculative CAS ran after the snapshot, and
    // when it was made on the snapshot's sign its old word is newer (and
    // with the CAS matched, the bit is set, durable once this round trip
    // completed). A CAS on the other sign's bitmap is not looked at: its
    // bit, if set, belongs to no state this append can land in.
    std::uint64_t bitmap_word = hd.bitmap[sign ? 1 : 0][bit / 64];
    if (spec_op != kNoOp && spec_sign == sign) {
      const std::uint64_t old = b.result(spec_op);
      bitmap_word = old == spec_word ? (old | mask) : old;
    }
    bc.take(snap.seq, hd);
    bc.words[bit / 64] = bitmap_word;
    bool go = false;
    if (Status s = check_snapshot(ss, h, seg, hd, snap, now,
                                  want != Want::kAny ? &mc : nullptr, deadline, &watch, &go);
        !s.ok()) {
      return s;
    }
    if (!go) continue;
    const unsigned depth = meta_depth(hd.meta);
    bool all_slots = false;  // slots[] holds every slot, not only the window
    if (want != Want::kAny) {
      Candidate found;
      bool any = false, retry = false;
      // The snapshot's bitmap, read before this pass's speculative CAS:
      // a bit it shows was there before, set for another key of the same
      // bit or by an earlier pass of this append (a false positive: a
      // READ of the slots more, never a wrong answer).
      if (bitmap_has(hd, sign, bit)) all_slots = true;
      if (Status s = newest_in_snapshot(ss, key, seg, snap, hd, mslots,
                                        all_slots ? slots : nullptr, &found, &any, &retry);
          !s.ok()) {
        return s;
      }
      if (retry) {
        if (Clock::now() > deadline) return locked_too_long(seg);
        continue;
      }
      const bool present = any && !slot_tomb(found.slot);
      if (want == Want::kAbsent && present) return Status::AlreadyExists("");
      if (want == Want::kPresent && !present) return Status::NotFound("");
      // The version was taken before the check; a write the check saw
      // may have taken a later one (it ran meanwhile). This append must
      // order after everything it saw, so it takes a new version then.
      if (any && found.header().version >= ih.version) {
        b.clear();
        b.faa(0, kVersionOff, 1);
        if (Status s = exec(ss, b); !s.ok()) return s;
        ih.version = b.result(0);
      }
      // Decided once: a later pass may see this append's own entry.
      want = Want::kAny;
    }
    // A slot is free when it holds this snapshot's free word: the merge
    // that began the snapshot's state wrote it to every slot. An append
    // can thus claim a slot only in the state its snapshot saw.
    const std::uint64_t free_word = free_slot(snap.seq);
    auto is_free = [&](std::uint64_t s) { return s == free_word; };
    std::vector<unsigned> free_slots;
    for (unsigned i = w; i < w + kWindowSlots; ++i) {
      if (is_free(slots[i])) free_slots.push_back(i);
    }
    if (free_slots.empty() && !all_slots) {
      // The window is full: look at every slot before deciding to merge.
      b.clear();
      b.read(node, off + kSlotsOff, slots, sizeof(slots));
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) return s;
      if (!unchanged(snap, now)) continue;
      all_slots = true;
    }
    if (free_slots.empty()) {  // slots[] holds every slot
      for (unsigned i = 0; i < kCurSlots; ++i) {
        if (is_free(slots[i])) free_slots.push_back(i);
      }
      if (free_slots.empty()) {
        if (Status s = merge(ss, seg, hd.meta); !s.ok()) return s;
        continue;
      }
      ss.window = (free_slots.front() / kWindowSlots) * kWindowSlots;
    }
    if (item_node != node || item_named) {
      // A block no slot names is still this client's to reuse; one a
      // slot may name is never written again (a merge may have freed it).
      if (item_node != ~0u && !item_named) unused(ss, item_node, item_off, units);
      if (Status s = alloc_block(ss, node, units, &item_off); !s.ok()) return s;
      item_node = node;
      item_written = false;
      item_named = false;
    }
    std::memcpy(item.data(), &ih, sizeof(ih));
    const std::uint64_t entry =
        (std::uint64_t{fp} << kFpShift) | (std::uint64_t{fp2} << kFp2Shift) |
        (tomb ? kTombBit : 0) |
        (std::uint64_t{units <= kMaxSlotLenUnits ? units : 0} << kLenShift) |
        (sign ? kSignBit : 0) | (std::uint64_t{hash_dbits(h, depth)} << kDbitsShift) |
        (item_off >> 6);
    if (append_hook()) append_hook()();
    // The bitmap bit before the slot's CAS, so that a slot's entry is
    // never durable without its bit (readers skip a CurSeg whose bitmap
    // lacks the key). When the first round trip's speculative CAS did
    // not set it, it gets a round trip of its own: in one batch with the
    // slot's CAS, a bitmap CAS that failed (another bit of the word set
    // meanwhile) would not stop the slot's CAS, and a node that lost
    // power before the bit followed would keep an entry that scans list
    // and gets miss (until a merge made it visible again).
    bool moved = false;
    while ((bitmap_word & mask) == 0 && !moved) {
      b.clear();
      if (!item_written) b.write(node, item_off, item.data(), static_cast<std::uint32_t>(units * 64));
      const std::size_t bitmap_op = b.size();
      b.cas(node, off + bitmap_word_off(sign, bit), bitmap_word, bitmap_word | mask);
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) {
        // A write of the item that may still land: the block is given up.
        if (!item_written) item_lost = true;
        return s;
      }
      item_written = true;
      const std::uint64_t old = b.result(bitmap_op);
      bitmap_word = old == bitmap_word ? (old | mask) : old;
      bc.words[bit / 64] = bitmap_word;
      moved = !unchanged(snap, now);
    }
    if (moved) {
      // The segment moved on before any slot named the item: its block
      // is still this client's, and holds the item.
      stale_appends_.fetch_add(1, std::memory_order_relaxed);
      ss.window = (ss.window + kWindowSlots) % kCurSlots;
      continue;
    }
    bool won = false;
    for (unsigned i : free_slots) {
      b.clear();
      // The item is complete before the CAS that names it (same node, in order).
      if (!item_written) b.write(node, item_off, item.data(), static_cast<std::uint32_t>(units * 64));
      const std::size_t slot_op = b.size();
      b.cas(node, off + kSlotsOff + i * 8ull, slots[i], entry);
      add_check(b, seg, &now);
      if (Status s = exec(ss, b); !s.ok()) {
        item_lost = true;
        return s;
      }
      item_written = true;
      won = b.result(slot_op) == slots[i];
      moved = !unchanged(snap, now);
      if (won || moved) break;  // placed, or the segment moved on: start over
    }
    if (moved) stale_appends_.fetch_add(1, std::memory_order_relaxed);
    if (won && moved) {
      // A lock was taken between the snapshot and the check: a merge may
      // have read the slots already (the entry is lost with the sign
      // flip), kept the entry, or dropped it and freed its block, which
      // its client may have written again. Append again, from a fresh
      // copy in a new block; should both entries stand, they carry the
      // same version and the same bytes, and merges keep one.
      item_named = true;
    }
    if (!won || moved) {
      ss.window = (ss.window + kWindowSlots) % kCurSlots;
      continue;
    }
    // The entry stands (its bitmap bit was set before the slot CAS).
    item_named = true;
    return Status::OK();
  }
}

}  // namespace pmhash::engine::sephash
