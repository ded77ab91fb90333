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
                                const std::vector<std::uint64_t>& slots,
                                std::vector<Candidate>* out, bool* retry) {
  const unsigned node = raddr_node(seg);
  *retry = false;
  out->assign(slots.size(), {});
  if (slots.empty()) return Status::OK();
  Snap now;
  Batch b;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const unsigned units = slot_len(slots[i]) == 0 ? kMaxSlotLenUnits : slot_len(slots[i]);
    (*out)[i].slot = slots[i];
    (*out)[i].bytes.resize(units * 64);
    b.read(node, slot_item(slots[i]), (*out)[i].bytes.data(), units * 64);
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
    if (total > c.bytes.size()) {
      const std::size_t had = c.bytes.size();
      c.bytes.resize(total);
      b.read(node, slot_item(c.slot) + had, c.bytes.data() + had,
             static_cast<std::uint32_t>(total - had));
    }
  }
  if (b.size() == 0) return Status::OK();
  if (snap != nullptr) add_check(b, seg, &now);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (snap != nullptr && !unchanged(*snap, now)) *retry = true;
  return Status::OK();
}

void SepHashIndex::newest(const std::vector<Candidate>& items, std::string_view key,
                          Candidate* best, bool* any) {
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
                                        std::uint64_t* all_slots, Candidate* best, bool* any,
                                        bool* retry) {
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

Status SepHashIndex::append(Session& ss, const Key& key, std::string_view value, bool tomb,
                            Want want) {
  AppendItem it(key, value);
  // However the call ends, the item's block is named (no longer this
  // client's), this client's again (nothing unknown happened to it), or
  // given up (sephash.h, "Lost replies").
  const AtScopeEnd settle_item([&] {
    if (it.node == ~0u || it.named) return;
    if (it.lost) {
      leak(it.units * 64);
    } else {
      unused(ss, it.node, it.off, it.units);
    }
  });
  const auto deadline = lock_deadline();
  LockWatch watch;
  for (;;) {
    AppendPass p(segment_of(ss, it.h));
    Session::MainCache& mc = ss.mains[p.seg];
    if (Status s = read_for_append(ss, want, &mc, &it, &p); !s.ok()) return s;
    bool go = false;
    if (Status s = check_snapshot(ss, it.h, p.seg, p.hd, p.snap, p.now,
                                  want != Want::kAny ? &mc : nullptr, deadline, &watch, &go);
        !s.ok()) {
      return s;
    }
    if (!go) continue;
    if (want != Want::kAny) {
      bool again = false;
      if (Status s = decide_presence(ss, key, want, &it, &p, &again); !s.ok()) return s;
      if (again) {
        if (Clock::now() > deadline) return locked_too_long(p.seg);
        continue;
      }
      // Decided once: a later pass may see this append's own entry.
      want = Want::kAny;
    }
    if (!it.named && it.header.version <= p.hd.swap_floor) {
      // A compare_and_swap decided under this segment's lock, after this
      // version was taken and without this item, which had not landed:
      // this append orders after it (sephash.h, "Compare and swap").
      Batch b;
      b.faa(0, kVersionOff, 1);
      if (Status s = exec(ss, b); !s.ok()) return s;
      it.header.version = b.result(0);
      it.written = false;  // the block holds the old version (named by no slot)
    }
    bool again = false;
    if (Status s = find_free_slots(ss, &p, &again); !s.ok() || again) {
      if (!s.ok()) return s;
      continue;
    }
    if (Status s = place_item(ss, p.node, &it); !s.ok()) return s;
    // The item's header with this pass's version.
    std::memcpy(it.bytes.data(), &it.header, sizeof(it.header));
    const std::uint64_t entry = make_entry(it, tomb, p);
    if (append_hook()) append_hook()();
    bool moved = false;
    if (Status s = set_bitmap_bit(ss, &it, &p, &moved); !s.ok()) return s;
    if (moved) {
      // The segment moved on before any slot named the item: its block
      // is still this client's, and holds the item.
      stale_appends_.fetch_add(1, std::memory_order_relaxed);
      ss.window = (ss.window + kWindowSlots) % kCurSlots;
      continue;
    }
    bool won = false;
    if (Status s = claim_slot(ss, entry, &it, &p, &won, &moved); !s.ok()) return s;
    if (moved) stale_appends_.fetch_add(1, std::memory_order_relaxed);
    if (won && moved) {
      // A lock was taken between the snapshot and the check: a merge may
      // have read the slots already (the entry is lost with the sign
      // flip), kept the entry, or dropped it and freed its block, which
      // its client may have written again. Append again, from a fresh
      // copy in a new block; should both entries stand, they carry the
      // same version and the same bytes, and merges keep one.
      it.named = true;
    }
    if (!won || moved) {
      ss.window = (ss.window + kWindowSlots) % kCurSlots;
      continue;
    }
    // The entry stands (its bitmap bit was set before the slot CAS).
    it.named = true;
    return Status::OK();
  }
}

SepHashIndex::AppendItem::AppendItem(const Key& key, std::string_view value)
    : h(key.h1),
      fp(hash_fp(h)),
      fp2(hash_fp2(h)),
      bit(bitmap_bit(fp, fp2)),
      mask(std::uint64_t{1} << (bit % 64)),
      units(item_units(sizeof(ItemHeader) + key.bytes.size() + value.size())),
      header{0, static_cast<std::uint32_t>(key.bytes.size()),
             static_cast<std::uint32_t>(value.size()), h},
      bytes(units * 64) {
  std::memcpy(bytes.data() + sizeof(ItemHeader), key.bytes.data(), key.bytes.size());
  if (!value.empty()) {
    std::memcpy(bytes.data() + sizeof(ItemHeader) + key.bytes.size(), value.data(), value.size());
  }
}

Status SepHashIndex::read_for_append(Session& ss, Want want, Session::MainCache* mc, AppendItem* it,
                                     AppendPass* p) {
  const unsigned lo = mc->prefix[it->fp], hi = mc->prefix[it->fp + 1];
  const unsigned w = ss.window;
  p->window = w;
  Batch b;
  if (it->header.version == 0) b.faa(0, kVersionOff, 1);
  add_snapshot(b, p->seg, &p->snap.seq, &p->hd);
  // The key's bitmap bit, speculatively, from the word this session
  // last saw (sephash.h, "Append"): after the snapshot's READ (same
  // node, in order), so that the snapshot never shows this bit, and
  // before the check, which validates it with the rest. Not while the
  // key's presence is still to be decided with a MainSeg prefix table
  // cached at another seq than the word: if the word is current, the
  // table is not, this pass ends after loading it, and the next
  // pass's snapshot would show the bit (a READ of the slots for
  // nothing, where the bit's own round trip would have cost as much).
  Session::BitmapCache& bc = ss.bitmaps[p->seg];
  std::size_t spec_op = kNoOp;
  const std::uint64_t spec_word = bc.words[it->bit / 64];
  const bool spec_sign = bc.sign;
  if (bc.known && (spec_word & it->mask) == 0 && (want == Want::kAny || mc->seq == bc.seq)) {
    spec_op = b.size();
    b.cas(p->node, p->off + bitmap_word_off(spec_sign, it->bit), spec_word, spec_word | it->mask);
  }
  if (want != Want::kAny && hi > lo) {
    p->mslots.resize(hi - lo);
    b.read(p->node, mc->main_off + kPrefixBytes + lo * 8ull, p->mslots.data(), (hi - lo) * 8);
  }
  b.read(p->node, p->off + kSlotsOff + w * 8ull, p->slots + w, kWindowSlots * 8);
  add_check(b, p->seg, &p->now);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (it->header.version == 0) it->header.version = b.result(0);
  p->snap.meta = p->hd.meta;
  p->sign = meta_sign(p->hd.meta);
  // The key's bitmap word in the snapshot's state, as late as this
  // session knows it: the speculative CAS ran after the snapshot, and
  // when it was made on the snapshot's sign its old word is newer (and
  // with the CAS matched, the bit is set, durable once this round trip
  // completed). A CAS on the other sign's bitmap is not looked at: its
  // bit, if set, belongs to no state this append can land in.
  p->bitmap_word = p->hd.bitmap[p->sign ? 1 : 0][it->bit / 64];
  if (spec_op != kNoOp && spec_sign == p->sign) {
    const std::uint64_t old = b.result(spec_op);
    p->bitmap_word = old == spec_word ? (old | it->mask) : old;
  }
  bc.take(p->snap.seq, p->hd);
  bc.words[it->bit / 64] = p->bitmap_word;
  return Status::OK();
}

Status SepHashIndex::decide_presence(Session& ss, const Key& key, Want want, AppendItem* it,
                                     AppendPass* p, bool* again) {
  Candidate found;
  bool any = false;
  // The snapshot's bitmap, read before this pass's speculative CAS: a bit
  // it shows was there before, set for another key of the same bit or by
  // an earlier pass of this append (a false positive: a READ of the slots
  // more, never a wrong answer).
  if (bitmap_has(p->hd, p->sign, it->bit)) p->all_slots = true;
  if (Status s = newest_in_snapshot(ss, key, p->seg, p->snap, p->hd, p->mslots,
                                    p->all_slots ? p->slots : nullptr, &found, &any, again);
      !s.ok() || *again) {
    return s;
  }
  const bool present = any && !slot_tomb(found.slot);
  if (want == Want::kAbsent && present) return Status::AlreadyExists("");
  if (want == Want::kPresent && !present) return Status::NotFound("");
  // The version was taken before the check; a write the check saw may
  // have taken a later one (it ran meanwhile). This append must order
  // after everything it saw, so it takes a new version then.
  if (any && found.header().version >= it->header.version) {
    Batch b;
    b.faa(0, kVersionOff, 1);
    if (Status s = exec(ss, b); !s.ok()) return s;
    it->header.version = b.result(0);
  }
  return Status::OK();
}

Status SepHashIndex::find_free_slots(Session& ss, AppendPass* p, bool* again) {
  // A slot is free when it holds this snapshot's free word: the merge that
  // began the snapshot's state wrote it to every slot. An append can thus
  // claim a slot only in the state its snapshot saw.
  const std::uint64_t free_word = free_slot(p->snap.seq);
  for (unsigned i = p->window; i < p->window + kWindowSlots; ++i) {
    if (p->slots[i] == free_word) p->free_slots.push_back(i);
  }
  if (!p->free_slots.empty()) return Status::OK();
  if (!p->all_slots) {
    // The window is full: look at every slot before deciding to merge.
    Batch b;
    b.read(p->node, p->off + kSlotsOff, p->slots, sizeof(p->slots));
    add_check(b, p->seg, &p->now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (!unchanged(p->snap, p->now)) {
      *again = true;
      return Status::OK();
    }
    p->all_slots = true;
  }
  for (unsigned i = 0; i < kCurSlots; ++i) {
    if (p->slots[i] == free_word) p->free_slots.push_back(i);
  }
  if (p->free_slots.empty()) {
    *again = true;
    return merge(ss, p->seg, p->hd.meta);
  }
  ss.window = (p->free_slots.front() / kWindowSlots) * kWindowSlots;
  return Status::OK();
}

Status SepHashIndex::place_item(Session& ss, unsigned node, AppendItem* it) {
  if (it->node == node && !it->named) return Status::OK();
  // A block no slot names is still this client's to reuse; one a slot may
  // name is never written again (a merge may have freed it).
  if (it->node != ~0u && !it->named) unused(ss, it->node, it->off, it->units);
  if (Status s = alloc_block(ss, node, it->units, &it->off); !s.ok()) return s;
  it->node = node;
  it->written = false;
  it->named = false;
  return Status::OK();
}

std::uint64_t SepHashIndex::make_entry(const AppendItem& it, bool tomb, const AppendPass& p) {
  return (std::uint64_t{it.fp} << kFpShift) | (std::uint64_t{it.fp2} << kFp2Shift) |
         (tomb ? kTombBit : 0) |
         (std::uint64_t{it.units <= kMaxSlotLenUnits ? it.units : 0} << kLenShift) |
         (p.sign ? kSignBit : 0) |
         (std::uint64_t{hash_dbits(it.h, meta_depth(p.hd.meta))} << kDbitsShift) | (it.off >> 6);
}

Status SepHashIndex::set_bitmap_bit(Session& ss, AppendItem* it, AppendPass* p, bool* moved) {
  Session::BitmapCache& bc = ss.bitmaps[p->seg];
  Batch b;
  while ((p->bitmap_word & it->mask) == 0 && !*moved) {
    b.clear();
    if (!it->written) add_item_write(b, p->node, *it);
    const std::size_t bitmap_op = b.size();
    b.cas(p->node, p->off + bitmap_word_off(p->sign, it->bit), p->bitmap_word,
          p->bitmap_word | it->mask);
    add_check(b, p->seg, &p->now);
    if (Status s = exec(ss, b); !s.ok()) {
      // A write of the item that may still land: the block is given up.
      if (!it->written) it->lost = true;
      return s;
    }
    it->written = true;
    const std::uint64_t old = b.result(bitmap_op);
    p->bitmap_word = old == p->bitmap_word ? (old | it->mask) : old;
    bc.words[it->bit / 64] = p->bitmap_word;
    *moved = !unchanged(p->snap, p->now);
  }
  return Status::OK();
}

Status SepHashIndex::claim_slot(Session& ss, std::uint64_t entry, AppendItem* it, AppendPass* p,
                                bool* won, bool* moved) {
  Batch b;
  for (unsigned i : p->free_slots) {
    b.clear();
    // The item is complete before the CAS that names it (same node, in order).
    if (!it->written) add_item_write(b, p->node, *it);
    const std::size_t slot_op = b.size();
    b.cas(p->node, p->off + kSlotsOff + i * 8ull, p->slots[i], entry);
    add_check(b, p->seg, &p->now);
    if (Status s = exec(ss, b); !s.ok()) {
      it->lost = true;
      return s;
    }
    it->written = true;
    *won = b.result(slot_op) == p->slots[i];
    *moved = !unchanged(p->snap, p->now);
    if (*won || *moved) break;  // placed, or the segment moved on: start over
  }
  return Status::OK();
}

}  // namespace pmhash::engine::sephash
