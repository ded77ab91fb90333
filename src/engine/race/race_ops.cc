// engine/race/race_ops.cc - race searches and writes (race.h, "Search", "Insert").
#include "engine/race/race_index.h"
#include "engine/race/race_testing.h"

namespace pmhash::engine::race {

void RaceIndex::add_reads(Batch& b, std::uint64_t dw, const Place& p, Raw* raw) {
  for (int i = 0; i < 2; ++i) {
    b.read(dir_node(dw), dir_off(dw) + combined_off(p.bucket[i]), raw->w[i], kCombinedBytes);
  }
  for (int i = 0; i < 2; ++i) {
    b.read(dir_node(dw), dir_off(dw) + combined_off(p.bucket[i]), &raw->trail[i], 8);
  }
}

RaceIndex::Seen RaceIndex::judge(std::uint64_t dw, const Place& p, const Raw& raw, View* v) {
  const std::uint64_t hd = raw.w[0][0];
  for (int i = 0; i < 2; ++i) {
    if (raw.w[i][0] != hd || raw.w[i][8] != hd || raw.trail[i] != hd) return Seen::kTorn;
  }
  if ((p.h & low_mask(header_depth(hd))) != header_suffix(hd)) return Seen::kElsewhere;
  v->node = dir_node(dw);
  v->base = dir_off(dw);
  v->header = hd;
  v->frozen = false;
  v->slots.clear();
  for (int i = 0; i < 2; ++i) {
    const std::uint64_t at = v->base + combined_off(p.bucket[i]);
    for (unsigned w = 0; w < kCombinedWords; ++w) {
      if (w % kSlotsPerBucket == 0) continue;
      const std::uint64_t off = at + w * 8;
      const bool dup = std::any_of(v->slots.begin(), v->slots.end(),
                                   [&](const Slot& s) { return s.off == off; });
      if (!dup) v->slots.push_back(Slot{v->node, off, raw.w[i][w]});
      v->frozen |= entry_frozen(raw.w[i][w]);
    }
  }
  std::sort(v->slots.begin(), v->slots.end(),
            [](const Slot& a, const Slot& b) { return a.off < b.off; });
  return Seen::kGood;
}

Status RaceIndex::read_view(Session& ss, const Place& p, View* v, Batch* also) {
  LockWatch watch = new_watch();
  Batch b;
  if (also != nullptr) b = *also;
  for (;;) {
    const std::uint64_t dw = ss.dir[p.h & low_mask(ss.global_depth)];
    Raw raw;
    add_reads(b, dw, p, &raw);
    if (Status s = ss.exec(b); !s.ok()) return s;
    also = nullptr;  // its verbs ran once
    b.clear();
    switch (judge(dw, p, raw, v)) {
      case Seen::kGood:
        return Status::OK();
      case Seen::kElsewhere:
        // The directory read next names the key's subtable (a split
        // writes the directory before it changes the headers).
        if (Clock::now() > watch.until) {
          return stuck(dir_node(dw), dir_off(dw), "kept a suffix that the directory contradicts",
                       watch);
        }
        if (Status s = refresh_dir(ss); !s.ok()) return s;
        break;
      case Seen::kTorn:
        // Headers that stay torn belong to a split cut short while it
        // rewrote them (step 5): its lock is taken over after a lease.
        counters_.retries.fetch_add(1, std::memory_order_relaxed);
        if (Status s = watch_lock(ss, dir_node(dw), dir_off(dw), &watch, "stayed torn"); !s.ok()) {
          return s;
        }
        std::this_thread::yield();
        break;
    }
  }
}

Status RaceIndex::read_kvs(Session& ss, const std::vector<Slot>& slots, std::vector<Kv>* out) {
  out->assign(slots.size(), {});
  if (slots.empty()) return Status::OK();
  const auto until = deadline();
  std::vector<std::size_t> todo(slots.size());
  for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  while (!todo.empty()) {
    Batch b;
    for (std::size_t i : todo) {
      const std::uint64_t e = entry_thawed(slots[i].word);
      const unsigned units = entry_len(e) == 0 ? 1 : entry_len(e);
      (*out)[i].slot = slots[i];
      (*out)[i].bytes.assign(units * 64ull, std::byte{0});
      b.read(entry_node(e), entry_off(e), (*out)[i].bytes.data(), units * 64);
    }
    if (Status s = ss.exec(b); !s.ok()) return s;
    b.clear();
    for (std::size_t i : todo) {
      Kv& kv = (*out)[i];
      const std::uint64_t total = kv_bytes(kv.header().key_len, kv.header().value_len);
      if (total > kv_bytes(kMaxKeySize, kMaxValueSize)) continue;  // checked below
      if (total > kv.bytes.size()) {
        const std::size_t had = kv.bytes.size();
        kv.bytes.resize(total);
        const std::uint64_t e = entry_thawed(kv.slot.word);
        b.read(entry_node(e), entry_off(e) + had, kv.bytes.data() + had,
               static_cast<std::uint32_t>(total - had));
      }
    }
    if (b.size() != 0) {
      if (Status s = ss.exec(b); !s.ok()) return s;
    }
    std::vector<std::size_t> bad;
    for (std::size_t i : todo) {
      const Kv& kv = (*out)[i];
      const std::uint64_t total = kv_bytes(kv.header().key_len, kv.header().value_len);
      if (total > kv.bytes.size() ||
          kv_checksum(kv.bytes.data(), total - 8) != kv.header().checksum) {
        bad.push_back(i);
      }
    }
    if (!bad.empty()) {
      counters_.retries.fetch_add(bad.size(), std::memory_order_relaxed);
      if (Clock::now() > until) {
        const std::uint64_t e = entry_thawed(slots[bad.front()].word);
        return Status::Corruption("race: KV block at node " + std::to_string(entry_node(e)) +
                                  " offset " + std::to_string(entry_off(e)) +
                                  " fails its checksum");
      }
    }
    todo = std::move(bad);
  }
  return Status::OK();
}

Status RaceIndex::find_key(Session& ss, const Place& p, const Key& key, const View& v, Kv* found,
                           bool* any) {
  *any = false;
  std::vector<Slot> cands;
  for (const Slot& s : v.slots) {
    const std::uint64_t e = entry_thawed(s.word);
    if (e != 0 && entry_fp(e) == p.fp) cands.push_back(s);
  }
  std::vector<Kv> kvs;
  if (Status s = read_kvs(ss, cands, &kvs); !s.ok()) return s;
  for (Kv& kv : kvs) {  // by address (v.slots is sorted)
    if (kv.key() != key.bytes) continue;
    *found = std::move(kv);
    *any = true;
    break;
  }
  return Status::OK();
}

Status RaceIndex::write(Session& ss, const Key& key, std::string_view value, Op op,
                        const Swap* swap) {
  const Place p = place(key);
  std::optional<std::string_view> content(value);
  if (op == Op::kRemove) content.reset();
  if (op == Op::kSwap) content = swap->desired;
  KvBlock kv(key, content);
  LockWatch watch = new_watch();  // a split of the key's subtable this call waits on
  for (;;) {
    // Round trip 1: the KV block (once) and the key's buckets.
    Batch first;
    // (A swap places its block only once it is to write: race.h,
    // "Compare and swap".)
    if (op != Op::kRemove && op != Op::kSwap && kv.entry == 0) {
      if (Status s = place_kv(ss, p, &kv, &first); !s.ok()) return s;
    }
    View v;
    if (Status s = read_view(ss, p, &v, &first); !s.ok()) return s;
    if (v.frozen) {
      // A split has captured the subtable: no CAS could succeed. Its
      // lock is taken over if it stays for a lease (race.h, "Dead splitters").
      counters_.retries.fetch_add(1, std::memory_order_relaxed);
      if (Status s = watch_lock(ss, v.node, v.base, &watch, "stayed frozen"); !s.ok()) return s;
      std::this_thread::yield();
      continue;
    }
    // Round trip 2 (only on a fingerprint match): the candidates' blocks.
    Kv found;
    bool any = false;
    if (Status s = find_key(ss, p, key, v, &found, &any); !s.ok()) return s;
    if (op == Op::kSwap) {
      // The comparison, against this view: the slot CAS below succeeds
      // only from the entry compared (or, absent, from a free slot, then
      // settled as an insert), so a write between them makes it look again.
      const bool as_expected =
          any ? swap->expected.has_value() && found.value() == *swap->expected
              : !swap->expected.has_value();
      if (!as_expected) return Status::Conflict("");
      if (!any && !swap->desired) return Status::OK();  // absent, and to stay so
      if (swap->desired && kv.entry == 0) {
        Batch b;
        if (Status s = place_kv(ss, p, &kv, &b); !s.ok()) return s;
        // The block is durable before any CAS that names it (next round trip).
        if (b.size() != 0) {
          if (Status s = ss.exec(b); !s.ok()) return s;
        }
      }
    }
    if (any) {
      if (op == Op::kInsert) return Status::AlreadyExists("");
      bool done = false;
      if (Status s = replace_entry(ss, found, op == Op::kRemove ? 0 : kv.entry, &kv, &done);
          !s.ok() || done) {
        return s;
      }
      continue;  // the slot changed meanwhile: look again
    }
    if (op == Op::kUpdate || op == Op::kRemove) return Status::NotFound("");
    if (op == Op::kSwap) {
      // From absence: the insert's steps under the subtable's split lock,
      // so that swaps from absence of one subtable run one at a time
      // (race.h, "Compare and swap").
      bool again = false;
      if (Status s = swap_from_absence(ss, p, key, v, &kv, &watch, &again); !s.ok() || !again) {
        return s;
      }
      continue;
    }
    // Insert (or upsert of an absent key): a free slot of the less loaded
    // combined bucket, main bucket first.
    const Slot* slot = free_slot(p, v);
    if (slot == nullptr) {
      if (Status s = split(ss, v, &watch); !s.ok()) return s;
      continue;
    }
    bool placed = false;
    if (Status s = claim_slot(ss, p, v, *slot, &kv, &placed); !s.ok()) return s;
    if (!placed) continue;
    // Round trip 3: the buckets again, for a concurrent insert of the key.
    bool won = false;
    if (Status s = settle(ss, p, key, kv.entry, &won); !s.ok()) return s;
    if (won) return Status::OK();
    if (op == Op::kInsert) return Status::AlreadyExists("");
    // Upsert: the other entry stands; update it (our block is still good).
  }
}

Status RaceIndex::swap_from_absence(Session& ss, const Place& p, const Key& key, const View& v,
                                    KvBlock* kv, LockWatch* watch, bool* again) {
  *again = true;
  const std::uint64_t lock_at = v.base + bucket_bytes();
  std::uint64_t word = 0;
  Batch b;
  b.read(v.node, lock_at, &word, 8);
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (lock_held(word)) {
    // A split, or another swap from absence: waited for, taken over after
    // a lease (a swap's lock has no intent: the taker releases it).
    if (Status s = observe(ss, v.node, v.base, word, watch, "stayed locked"); !s.ok()) return s;
    std::this_thread::yield();
    return Status::OK();
  }
  const Held held{v.node, v.base, make_lock(true, lock_seq(word) + 1), Clock::now(), false};
  b.clear();
  b.cas(v.node, lock_at, word, held.lock);
  // A failure here may leave the lock taken: a taker releases it after a lease.
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (b.result(0) != word) return Status::OK();  // locked by another client first
  bool full = false;
  Status s = swap_from_absence_held(ss, held, p, key, v.header, kv, again, &full);
  b.clear();
  add_release(b, held);
  if (Status r = exec_held(ss, held, b); !r.ok() && s.ok()) s = r;
  if (s.ok() && full) s = split(ss, v, watch);
  return s;
}

Status RaceIndex::swap_from_absence_held(Session& ss, const Held& held, const Place& p,
                                         const Key& key, std::uint64_t header, KvBlock* kv,
                                         bool* again, bool* full) {
  // The view again, under the lock: the same subtable with the same
  // headers (a split needs the lock), and the key still absent (a plain
  // insert does not take the lock).
  View v;
  if (Status s = read_view(ss, p, &v); !s.ok()) return s;
  if (v.node != held.node || v.base != held.base || v.header != header || v.frozen) {
    return Status::OK();  // not the key's subtable any more: look again
  }
  Kv found;
  bool any = false;
  if (Status s = find_key(ss, p, key, v, &found, &any); !s.ok()) return s;
  if (any) {
    *again = false;
    return Status::Conflict("");
  }
  const Slot* slot = free_slot(p, v);
  if (slot == nullptr) {
    *full = true;  // split once the lock is released, then again
    return Status::OK();
  }
  if (!in_lease(held)) return past_half_lease(held);
  bool placed = false;
  if (Status s = claim_slot(ss, p, v, *slot, kv, &placed); !s.ok() || !placed) return s;
  // A plain insert of the key may have landed meanwhile: settled as
  // inserts settle.
  bool won = false;
  if (Status s = settle(ss, p, key, kv->entry, &won); !s.ok()) return s;
  *again = false;
  return won ? Status::OK() : Status::Conflict("");
}

RaceIndex::KvBlock::KvBlock(const Key& key, std::optional<std::string_view> value)
    : bytes(kv_bytes(key.bytes.size(), value ? value->size() : 0)),
      units((bytes + 63) / 64),
      late(planted::active(testing::kSlotBeforeKvDurable)) {
  if (!value) return;
  block.assign(units * 64, std::byte{0});
  KvHeader kh{0, static_cast<std::uint32_t>(key.bytes.size()),
              static_cast<std::uint32_t>(value->size()), key.h1};
  std::memcpy(block.data(), &kh, sizeof(kh));
  std::memcpy(block.data() + sizeof(kh), key.bytes.data(), key.bytes.size());
  if (!value->empty()) {
    std::memcpy(block.data() + sizeof(kh) + key.bytes.size(), value->data(), value->size());
  }
  kh.checksum = kv_checksum(block.data(), bytes - 8);
  std::memcpy(block.data(), &kh.checksum, 8);
}

void RaceIndex::KvBlock::add_late_write(Batch& b) {
  if (!late || entry == 0) return;
  b.write(entry_node(entry), entry_off(entry), block.data(), static_cast<std::uint32_t>(units * 64));
  late = false;
}

Status RaceIndex::place_kv(Session& ss, const Place& p, KvBlock* kv, Batch* b) {
  const unsigned node = dir_node(ss.dir[p.h & low_mask(ss.global_depth)]);
  std::uint64_t off = 0;
  if (Status s = ss.chunks.alloc(ss, node, kv->units * 64, &off); !s.ok()) return s;
  if (!kv->late) b->write(node, off, kv->block.data(), static_cast<std::uint32_t>(kv->units * 64));
  kv->entry = make_entry(p.fp, kv->units, node, off);
  return Status::OK();
}

Status RaceIndex::replace_entry(Session& ss, const Kv& found, std::uint64_t desired, KvBlock* kv,
                                bool* done) {
  Batch b;
  b.cas(found.slot.node, found.slot.off, found.slot.word, desired);
  if (desired != 0) kv->add_late_write(b);
  if (Status s = ss.exec(b); !s.ok()) return s;
  *done = b.result(0) == found.slot.word;
  return Status::OK();
}

Status RaceIndex::claim_slot(Session& ss, const Place& p, const View& v, const Slot& slot,
                             KvBlock* kv, bool* placed) {
  // The CAS, then the slot's bucket header: a split that ran between our
  // READ and the CAS may have frozen and thawed this free slot, so that
  // the CAS succeeds in a subtable the key no longer belongs to (the
  // header changed before the thaw; race.h, "Writers").
  std::uint64_t header = 0;
  Batch b;
  b.cas(slot.node, slot.off, 0, kv->entry);
  kv->add_late_write(b);
  b.read(slot.node, slot.off & ~(kBucketBytes - 1), &header, 8);
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (b.result(0) != 0) return Status::OK();  // taken meanwhile
  if (header != v.header && (p.h & low_mask(header_depth(header))) != header_suffix(header)) {
    // Either a stray entry (the CAS came after the thaw; invisible:
    // readers of the key go elsewhere since the header changed), which
    // we take back and insert again; or the CAS came before the split
    // froze the slot, and the split carries the entry to the key's new
    // subtable (the slot no longer holds it): then it stands.
    b.clear();
    b.cas(slot.node, slot.off, kv->entry, 0);
    if (Status s = ss.exec(b); !s.ok()) return s;
    if (b.result(0) == kv->entry) {
      counters_.retries.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  *placed = true;
  return Status::OK();
}

const Slot* RaceIndex::free_slot(const Place& p, const View& v) const {
  const Slot* best = nullptr;
  unsigned best_free = 0;
  for (int i = 0; i < 2; ++i) {
    const std::uint64_t at = v.base + combined_off(p.bucket[i]);
    const std::uint64_t main_at = at + (p.bucket[i] % 2 == 0 ? 0 : kBucketBytes);
    const Slot* first_main = nullptr;
    const Slot* first_over = nullptr;
    unsigned free = 0;
    for (const Slot& s : v.slots) {
      if (s.off < at || s.off >= at + kCombinedBytes || s.word != 0) continue;
      ++free;
      const bool in_main = s.off >= main_at && s.off < main_at + kBucketBytes;
      if (in_main && first_main == nullptr) first_main = &s;
      if (!in_main && first_over == nullptr) first_over = &s;
    }
    if (free > best_free) {
      best_free = free;
      best = first_main != nullptr ? first_main : first_over;
    }
  }
  return best;
}

Status RaceIndex::settle(Session& ss, const Place& p, const Key& key, std::uint64_t entry,
                         bool* won) {
  LockWatch watch = new_watch();
  for (;;) {
    View v;
    if (Status s = read_view(ss, p, &v); !s.ok()) return s;
    const Slot* mine = v.find(entry);
    if (mine == nullptr) {
      // Updated or removed by another client: it was there, so it won.
      *won = true;
      return Status::OK();
    }
    std::vector<Slot> lower;  // fingerprint matches below ours
    for (const Slot& s : v.slots) {
      const std::uint64_t e = entry_thawed(s.word);
      if (s.off < mine->off && e != 0 && entry_fp(e) == p.fp) lower.push_back(s);
    }
    std::vector<Kv> kvs;
    if (Status s = read_kvs(ss, lower, &kvs); !s.ok()) return s;
    if (std::none_of(kvs.begin(), kvs.end(), [&](const Kv& kv) { return kv.key() == key.bytes; })) {
      *won = true;
      return Status::OK();
    }
    if (entry_frozen(mine->word)) {
      // A split captured it; it keeps its place in this subtable or the
      // new one (the split finished, by its holder or a taker).
      if (Status s = watch_lock(ss, v.node, v.base, &watch, "stayed frozen"); !s.ok()) return s;
      std::this_thread::yield();
      continue;
    }
    Batch b;
    b.cas(mine->node, mine->off, entry, 0);
    if (Status s = ss.exec(b); !s.ok()) return s;
    if (b.result(0) == entry) {
      *won = false;
      return Status::OK();
    }
  }
}

}  // namespace pmhash::engine::race
