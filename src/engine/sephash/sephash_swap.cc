// engine/sephash/sephash_swap.cc - sephash compare_and_swap (sephash.h,
// "Compare and swap").
#include "engine/sephash/sephash_index.h"

namespace pmhash::engine::sephash {

bool SepHashIndex::as_expected(const Swap& w, const Candidate& newest, bool any) {
  const bool present = any && !slot_tomb(newest.slot);
  if (!present) return !w.expected.has_value();
  return w.expected.has_value() && newest.value() == *w.expected;
}

Status SepHashIndex::compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                                      std::optional<std::string_view> desired) {
  const Swap w{expected, desired};
  return with_session([&](Session& ss) -> Status {
    for (;;) {
      // (1) The comparison without the lock, as a search: a key not as
      // expected is a Conflict as of that search's validated snapshot.
      Candidate found;
      bool any = false;
      if (Status s = lookup(ss, key, &found, &any); !s.ok()) return s;
      if (!as_expected(w, found, any)) return Status::Conflict("");
      if (!w.desired && (!any || slot_tomb(found.slot))) return Status::OK();  // absent stays so
      // (2) to (6): again, under the lock of the key's segment, and the
      // write. Starting over means another client locked the segment
      // first, or the directory or the slots sent this swap elsewhere.
      bool again = false;
      if (Status s = swap_locked(ss, key, w, &again); !s.ok() || !again) return s;
    }
  });
}

Status SepHashIndex::swap_locked(Session& ss, const Key& key, const Swap& w, bool* again) {
  *again = true;
  const RAddr seg = segment_of(ss, key.h1);
  Snap snap;
  if (Status s = wait_unlocked(ss, seg, &snap); !s.ok()) return s;
  const Held held{seg, Clock::now()};  // before the CAS: no later than the lock
  Batch b;
  b.cas(raddr_node(seg), raddr_off(seg) + kMetaOff, snap.meta, snap.meta | kMetaLock);
  if (Status s = exec(ss, b); !s.ok()) return s;  // the lock may stand: a taker undoes it
  if (b.result(0) != snap.meta) return Status::OK();
  bool locked = true;
  Status s;
  if (stop_at(LockStep::kSwapLocked)) {
    locked = false;
    s = stopped();
  } else {
    s = swap_held(ss, held, key, w, snap.meta, again, &locked);
  }
  if (locked && in_lease(held)) {
    // Nothing the swap wrote needs undoing (section "Compare and swap"):
    // a new seq, then the old meta, unlocked, as a merge that gives up.
    if (Status u = unlock_swap(ss, held, snap.meta); !u.ok() && s.ok()) s = u;
  }
  return s;
}

Status SepHashIndex::unlock_swap(Session& ss, const Held& held, std::uint64_t meta) {
  const unsigned node = raddr_node(held.seg);
  const std::uint64_t off = raddr_off(held.seg);
  Batch b;
  b.faa(node, off + kSeqOff, 1);
  b.write(node, off + kMetaOff, &meta, 8);
  return exec(ss, b);
}

Status SepHashIndex::swap_held(Session& ss, const Held& held, const Key& key, const Swap& w,
                               std::uint64_t meta, bool* again, bool* locked) {
  const RAddr seg = held.seg;
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const bool sign = meta_sign(meta);
  const unsigned main_len = meta_main_len(meta);
  AppendItem it(key, w.desired.value_or(std::string_view()));
  // The item's block ends named, this client's again, or given up, as an
  // append's (sephash.h, "Lost replies").
  const AtScopeEnd settle_item([&] {
    if (it.node == ~0u || it.named) return;
    if (it.lost) {
      leak(it.units * 64);
    } else {
      unused(ss, it.node, it.off, it.units);
    }
  });
  if (!in_lease(held)) return gave_up(seg);
  // (2) The version on node 0; on the segment's node seq + 1 before
  // anything is read (every snapshot older than the lock now fails its
  // check), then the header, the slots and the MainSeg's prefix table.
  Header hd{};
  std::uint64_t slots[kCurSlots];
  std::vector<std::uint16_t> prefix(257, 0);
  Batch b;
  b.faa(0, kVersionOff, 1);
  const std::size_t seq_op = b.size();
  b.faa(node, off + kSeqOff, 1);
  b.read(node, off, &hd, kHeaderBytes);
  b.read(node, off + kSlotsOff, slots, sizeof(slots));
  if (main_len != 0) b.read(node, meta_main_off(meta), prefix.data(), 257 * 2);
  if (Status s = exec(ss, b); !s.ok()) return s;
  it.header.version = b.result(0);
  const std::uint64_t seq = b.result(seq_op);  // the state's seq, before this lock's
  if (main_len != 0) {
    bool sorted = true;
    for (unsigned f = 0; f < 256; ++f) sorted &= prefix[f] <= prefix[f + 1];
    if (!sorted || prefix[256] != main_len) {
      return Status::Corruption("sephash: MainSeg at node " + std::to_string(node) + " offset " +
                                std::to_string(meta_main_off(meta)) +
                                " does not match its segment's meta");
    }
  }
  // (3) The fence: every slot free in this state is CASed to the free
  // word of the state the unlock begins (seq + 2), so that no append of
  // this state lands after the comparison; a CAS that fails finds the
  // entry that landed first, which the comparison sees. With them, the
  // MainSeg slots of the key's fingerprint.
  const std::uint64_t free_now = free_slot(seq), free_next = free_slot(seq + 2);
  std::vector<unsigned> fenced;
  std::vector<std::size_t> fence_ops;
  b.clear();
  for (unsigned i = 0; i < kCurSlots; ++i) {
    if (slots[i] != free_now) continue;
    fenced.push_back(i);
    fence_ops.push_back(b.size());
    b.cas(node, off + kSlotsOff + i * 8ull, free_now, free_next);
  }
  const unsigned lo = main_len != 0 ? prefix[it.fp] : 0, hi = main_len != 0 ? prefix[it.fp + 1] : 0;
  std::vector<std::uint64_t> mslots(hi - lo);
  if (hi > lo) {
    b.read(node, meta_main_off(meta) + kPrefixBytes + lo * 8ull, mslots.data(), (hi - lo) * 8);
  }
  if (b.size() != 0) {
    if (!in_lease(held)) return gave_up(seg);
    if (Status s = exec(ss, b); !s.ok()) return s;
  }
  std::vector<unsigned> free_slots;
  for (std::size_t k = 0; k < fenced.size(); ++k) {
    const std::uint64_t old = b.result(fence_ops[k]);
    slots[fenced[k]] = old == free_now ? free_next : old;
    if (old == free_now) free_slots.push_back(fenced[k]);
  }
  if (stop_at(LockStep::kSwapFenced)) {
    *locked = false;
    return stopped();
  }
  if ((it.h & low_mask(meta_depth(meta))) != hd.pattern) {
    // A stale directory: the key's segment is another (the fenced slots
    // are free in the next state all the same).
    *locked = false;
    if (Status s = unlock_swap(ss, held, meta); !s.ok()) return s;
    return refresh_dir(ss);
  }
  // (4) The comparison, on every entry of the key: the MainSeg is
  // immutable and no slot changes while the lock is held, so this is the
  // key's state; no block is freed while it is held (frees need it).
  const unsigned dbits = hash_dbits(it.h, meta_depth(meta));
  auto matches = [&](std::uint64_t s) {
    return slot_fp(s) == it.fp && slot_fp2(s) == it.fp2 && slot_dbits(s) == dbits;
  };
  std::vector<std::uint64_t> cands;
  for (std::uint64_t s : mslots) {
    if (matches(s)) cands.push_back(s);
  }
  for (std::uint64_t s : slots) {
    if (slot_live(s, sign) && matches(s)) cands.push_back(s);
  }
  std::vector<Candidate> items;
  bool retry = false;
  if (Status s = read_items(ss, seg, nullptr, cands, &items, &retry); !s.ok()) return s;
  Candidate best;
  bool any = false;
  newest(items, key.bytes, &best, &any);
  if (!as_expected(w, best, any)) {
    *locked = false;
    if (!in_lease(held)) return gave_up(seg);
    if (Status s = unlock_swap(ss, held, meta); !s.ok()) return s;
    *again = false;
    return Status::Conflict("");
  }
  if (!w.desired && (!any || slot_tomb(best.slot))) {
    *locked = false;
    if (!in_lease(held)) return gave_up(seg);
    if (Status s = unlock_swap(ss, held, meta); !s.ok()) return s;
    *again = false;
    return Status::OK();
  }
  if (free_slots.empty()) {
    // Every slot taken: unlocked (all still taken in the next state), the
    // segment is merged, and the swap starts over.
    *locked = false;
    if (!in_lease(held)) return gave_up(seg);
    if (Status s = unlock_swap(ss, held, meta); !s.ok()) return s;
    return merge(ss, seg, meta);
  }
  if (any && best.header().version >= it.header.version) {
    // An entry that landed before the fence took its version after this
    // swap's: this swap orders after everything it compared with.
    b.clear();
    b.faa(0, kVersionOff, 1);
    if (Status s = exec(ss, b); !s.ok()) return s;
    it.header.version = b.result(0);
  }
  // (5) The item and the swap floor, then the key's bitmap bit; (6) the
  // slot, seq + 1 and the meta, unlocked. One node, in order: the item
  // and the floor are durable before the slot, the bit before the slot,
  // the slot before the unlock.
  if (Status s = place_item(ss, node, &it); !s.ok()) return s;
  std::memcpy(it.bytes.data(), &it.header, sizeof(it.header));
  AppendPass p(seg);
  p.hd.meta = meta;
  p.sign = sign;
  const std::uint64_t entry = make_entry(it, /*tomb=*/!w.desired, p);
  std::uint64_t word = hd.bitmap[sign ? 1 : 0][it.bit / 64];
  b.clear();
  add_item_write(b, node, it);
  b.write(node, off + kSwapFloorOff, &it.header.version, 8);
  while ((word & it.mask) == 0) {
    // A bitmap word changes under the lock only by appenders' speculative
    // CASes, which only add bits: CAS until the bit is in.
    const std::size_t bit_op = b.size();
    b.cas(node, off + bitmap_word_off(sign, it.bit), word, word | it.mask);
    if (!in_lease(held)) return gave_up(seg);
    if (Status s = exec(ss, b); !s.ok()) {
      if (!it.written) it.lost = true;
      return s;
    }
    it.written = true;
    const std::uint64_t old = b.result(bit_op);
    word = old == word ? (old | it.mask) : old;
    b.clear();
  }
  if (stop_at(LockStep::kSwapItem)) {
    *locked = false;
    return stopped();
  }
  b.write(node, off + kSlotsOff + free_slots.front() * 8ull, &entry, 8);
  b.faa(node, off + kSeqOff, 1);
  b.write(node, off + kMetaOff, &meta, 8);
  if (!in_lease(held)) return gave_up(seg);  // the block, named by no slot, is ours again
  *locked = false;  // the unlock is in this batch: never sent twice
  if (Status s = exec(ss, b); !s.ok()) {
    it.lost = true;  // the slot may name it
    return s;
  }
  it.named = true;
  *again = false;
  return Status::OK();
}

}  // namespace pmhash::engine::sephash
