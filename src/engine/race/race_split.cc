// engine/race/race_split.cc - race subtable splits (race.h, "Split").
#include "engine/race/race_index.h"
#include "engine/race/race_testing.h"

namespace pmhash::engine::race {

RaceIndex::LockWatch RaceIndex::new_watch() const {
  LockWatch w;
  w.start = Clock::now();
  w.until = w.start + lock_patience();
  w.limit = w.start + std::max<Clock::duration>(kWaitLeases * lease(), kWaitFloor) +
            std::chrono::milliseconds(sessions_.timeout_ms());
  return w;
}

Status RaceIndex::plan_targets(Session& ss, Split* sp) {
  std::vector<KvHeader> heads(sp->frozen.size());
  Batch b;
  for (std::size_t k = 0; k < sp->frozen.size(); ++k) {
    const std::uint64_t e = entry_thawed(sp->frozen[k]);
    if (e != 0) b.read(entry_node(e), entry_off(e), &heads[k], sizeof(KvHeader));
  }
  if (b.size() != 0) {
    if (Status s = ss.exec(b); !s.ok()) return s;
  }
  sp->target.assign(sp->frozen.size(), 0);
  for (std::size_t k = 0; k < sp->frozen.size(); ++k) {
    const std::uint64_t e = entry_thawed(sp->frozen[k]);
    if (e != 0 && ((heads[k].hash >> sp->depth) & 1) == 0) sp->target[k] = e;
  }
  return Status::OK();
}

Status RaceIndex::split(Session& ss, const View& v, LockWatch* watch) {
  const unsigned depth = header_depth(v.header);
  if (depth >= params_.max_depth) {
    return Status::NoSpace("race: a subtable is full at the maximum depth " +
                           std::to_string(params_.max_depth) +
                           " (create the index with a larger race.max_depth)");
  }
  const std::uint64_t lock_at = v.base + bucket_bytes();
  std::uint64_t word = 0;
  Batch b;
  b.read(v.node, lock_at, &word, 8);
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (lock_held(word)) {
    if (Status s = observe(ss, v.node, v.base, word, watch, "stayed locked"); !s.ok()) return s;
    std::this_thread::yield();
    return Status::OK();
  }
  // (0) The lock: a CAS from the word read, and the whole subtable READ
  // after it (one sub-batch, in order: the READ sees the locked state).
  const Held held{v.node, v.base, make_lock(true, lock_seq(word) + 1), Clock::now(), false};
  std::vector<std::uint64_t> old(table_bytes() / 8);
  b.clear();
  b.cas(v.node, lock_at, word, held.lock);
  b.read(v.node, v.base, old.data(), static_cast<std::uint32_t>(table_bytes()));
  // A failure here may leave the lock taken: a taker releases it after a lease.
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (b.result(0) != word) return Status::OK();  // locked or split by another client first
  Status s = split_locked(ss, held, v.header, old);
  if (s.ok()) s = refresh_dir(ss);
  return s;
}

Status RaceIndex::freeze(Session& ss, const Held& held, std::vector<std::uint64_t>& old,
                         Split* sp) {
  std::vector<std::uint64_t> todo;
  for (std::uint64_t w = 0; w < bucket_words(); ++w) {
    if (is_slot(w)) todo.push_back(w);
  }
  Batch b;
  while (!todo.empty()) {
    b.clear();
    for (std::uint64_t w : todo) b.cas(held.node, held.base + w * 8, old[w], old[w] | kFrozen);
    if (Status s = exec_held(ss, held, b); !s.ok()) return s;
    std::vector<std::uint64_t> again;
    for (std::size_t i = 0; i < todo.size(); ++i) {
      if (b.result(i) != old[todo[i]]) {
        old[todo[i]] = b.result(i);
        again.push_back(todo[i]);
      }
    }
    todo = std::move(again);
  }
  for (std::uint64_t w = 0; w < bucket_words(); ++w) {
    if (!is_slot(w)) continue;
    sp->at.push_back(w);
    sp->frozen.push_back(old[w] | kFrozen);
  }
  return Status::OK();
}

std::vector<std::uint64_t> RaceIndex::new_table_image(const Split& sp, std::uint64_t suffix1,
                                                      std::uint64_t* moved) const {
  std::vector<std::uint64_t> img1(table_bytes() / 8, 0);
  set_headers(&img1, make_header(sp.depth + 1, suffix1));
  for (std::size_t k = 0; k < sp.at.size(); ++k) {
    const std::uint64_t e = entry_thawed(sp.frozen[k]);
    if (e != 0 && sp.target[k] == 0) {
      img1[sp.at[k]] = e;
      ++*moved;
    }
  }
  return img1;
}

Status RaceIndex::split_locked(Session& ss, const Held& held, std::uint64_t header,
                               std::vector<std::uint64_t>& old) {
  const unsigned depth = header_depth(header);
  const std::uint64_t suffix = header_suffix(header);
  Batch b;
  // Nothing frozen yet: the lock is given back (the CAS changes nothing
  // if the holder was slow and taken over).
  auto give_back = [&](Status why) {
    b.clear();
    add_release(b, held);
    (void)exec_held(ss, held, b);
    return why;
  };
  for (std::uint64_t w = 0; w < bucket_words(); w += kSlotsPerBucket) {
    if (old[w] != header) return give_back(Status::OK());  // split since the view: look again
  }
  if (stop_at(held, SplitStep::kLocked)) return stopped();
  const std::uint64_t suffix1 = suffix | (std::uint64_t{1} << depth);
  const unsigned node1 = static_cast<unsigned>(suffix1 % specs_.size());
  std::uint64_t base1 = 0;
  if (Status s = remote_index::alloc_direct(ss, node1, table_bytes(), &base1); !s.ok()) {
    return give_back(s);
  }
  // (1) Freeze every entry slot, free ones too, with a CAS from the word
  // read: from then on no writer's CAS can match, and the table's
  // entries are what the split saw.
  Split sp;
  sp.depth = depth;
  sp.suffix = suffix;
  sp.new_dw = make_dir(node1, base1, depth + 1);
  if (Status s = freeze(ss, held, old, &sp); !s.ok()) return s;
  if (stop_at(held, SplitStep::kFrozen)) return stopped();
  // (2) The hash of every entry's key, from its KV block header: which
  // entries move.
  if (Status s = plan_targets(ss, &sp); !s.ok()) return s;
  // (3) The new subtable, complete: the entries that move, each at the
  // slot it had (so duplicates keep their order), and a zero trailer.
  std::uint64_t moved = 0;
  const std::vector<std::uint64_t> img1 = new_table_image(sp, suffix1, &moved);
  const std::uint64_t intent[2] = {sp.new_dw, header};
  const std::uint64_t seq = lock_seq(held.lock);
  auto add_intent = [&] {
    b.write(held.node, held.base + bucket_bytes() + kIntentOff, intent, sizeof(intent));
    b.write(held.node, held.base + bucket_bytes() + kIntentSeqOff, &seq, 8);
  };
  b.clear();
  // (Tests: a planted bug writes the intent first, in a round trip before
  // the new subtable's.)
  if (planted::active(testing::kIntentBeforeNewTable)) {
    add_intent();
    if (Status s = exec_held(ss, held, b); !s.ok()) return s;
    b.clear();
  }
  b.write(node1, base1, img1.data(), static_cast<std::uint32_t>(table_bytes()));
  // (I) The intent, in this subtable's trailer, its seq last as a WRITE of
  // its own: in the same sub-batch as (3) when both subtables are on one
  // node (it runs in order), else in the round trip after (3) completed.
  // Either way the new subtable is whole wherever the seq stands.
  // (Tests: with a hook, always apart, so that a holder can stop between.)
  if (node1 != held.node || split_hook() || planted::active(testing::kIntentBeforeNewTable)) {
    if (Status s = exec_held(ss, held, b); !s.ok()) return s;
    if (stop_at(held, SplitStep::kNewTableWritten)) return stopped();
    b.clear();
  }
  if (!planted::active(testing::kIntentBeforeNewTable)) {
    add_intent();
    if (Status s = exec_held(ss, held, b); !s.ok()) return s;
  }
  if (stop_at(held, SplitStep::kIntentWritten)) return stopped();
  std::uint64_t dir_words = 0;
  if (Status s = complete_split(ss, held, sp, &dir_words); !s.ok()) return s;
  counters_.splits.fetch_add(1, std::memory_order_relaxed);
  counters_.moved.fetch_add(moved, std::memory_order_relaxed);
  // Bytes the split wrote: the new subtable, the intent, the old one's
  // headers and slots, the directory words.
  counters_.bytes.fetch_add(table_bytes() + 24 + params_.groups * 3 * 8 +
                                (bucket_words() - params_.groups * 3) * 8 + dir_words * 8,
                            std::memory_order_relaxed);
  return Status::OK();
}

Status RaceIndex::complete_split(Session& ss, const Held& held, const Split& sp,
                                 std::uint64_t* dir_words) {
  const unsigned depth1 = sp.depth + 1;
  const std::uint64_t was = make_dir(held.node, held.base, sp.depth);
  // (4) The directory words of the new half name it; the global depth
  // follows. Readers that come by the directory find every moved entry.
  std::uint64_t global = 0;
  if (Status s = fix_half(ss, held, sp.suffix | (std::uint64_t{1} << sp.depth), depth1, was,
                          sp.new_dw, &global, dir_words);
      !s.ok()) {
    return s;
  }
  if (!in_lease(held)) return past_half_lease(held);
  if (Status s = remote_index::raise_global_depth(ss, kGlobalDepthOff, global, depth1); !s.ok()) {
    return s;
  }
  if (stop_at(held, SplitStep::kDirectoryUpdated)) return stopped();
  // (5) This subtable's headers: readers of a moved key that come with an
  // old directory now see the suffix change and look it up again.
  // (Tests: with a hook, in two batches, so that a holder can stop with
  // half of them rewritten, as a holder killed mid-batch would.)
  const std::uint64_t header1 = make_header(depth1, sp.suffix);
  const std::uint64_t buckets = bucket_words() / kSlotsPerBucket;
  Batch b;
  for (std::uint64_t k = 0; k < buckets; ++k) {
    if (k == buckets / 2 && split_hook()) {
      if (Status s = exec_held(ss, held, b); !s.ok()) return s;
      b.clear();
      if (stop_at(held, SplitStep::kHeadersHalfUpdated)) return stopped();
    }
    b.write(held.node, held.base + k * kBucketBytes, &header1, 8);
  }
  if (Status s = exec_held(ss, held, b); !s.ok()) return s;
  if (stop_at(held, SplitStep::kHeadersUpdated)) return stopped();
  // (6) Its slots: the moved entries gone, the others thawed, slot by
  // slot (one CAS each from the frozen word; only a lock holder writes a
  // frozen slot, so each succeeds unless a holder before made it already).
  b.clear();
  for (std::size_t k = 0; k < sp.at.size(); ++k) {
    if (k == sp.at.size() / 2 && split_hook()) {
      if (Status s = exec_held(ss, held, b); !s.ok()) return s;
      b.clear();
      if (stop_at(held, SplitStep::kSlotsHalfRewritten)) return stopped();
    }
    b.cas(held.node, held.base + sp.at[k] * 8, sp.frozen[k], sp.target[k]);
  }
  if (b.size() != 0) {
    if (Status s = exec_held(ss, held, b); !s.ok()) return s;
  }
  if (stop_at(held, SplitStep::kSlotsRewritten)) return stopped();
  // (7) The directory words of this half: the new depth.
  if (Status s = fix_half(ss, held, sp.suffix, depth1, was,
                          make_dir(held.node, held.base, depth1), nullptr, dir_words);
      !s.ok()) {
    return s;
  }
  if (stop_at(held, SplitStep::kDirectoryFinished)) return stopped();
  // (8) The release, once every word of the split is in place.
  b.clear();
  add_release(b, held);
  return exec_held(ss, held, b);
}

Status RaceIndex::fix_half(Session& ss, const Held& held, std::uint64_t start, unsigned depth1,
                           std::uint64_t guess, std::uint64_t target, std::uint64_t* global,
                           std::uint64_t* dir_words) {
  const std::uint64_t entries = std::uint64_t{1} << params_.max_depth;
  std::vector<std::uint64_t> at, expect;
  for (std::uint64_t i = start; i < entries; i += std::uint64_t{1} << depth1) {
    at.push_back(i);
    expect.push_back(guess);
  }
  while (!at.empty()) {
    Batch b;
    for (std::size_t k = 0; k < at.size(); ++k) {
      b.cas(0, params_.directory + at[k] * 8, expect[k], target);
    }
    if (global != nullptr) b.read(0, kGlobalDepthOff, global, 8);
    if (Status s = exec_held(ss, held, b); !s.ok()) return s;
    std::vector<std::uint64_t> at2, expect2;
    for (std::size_t k = 0; k < at.size(); ++k) {
      const std::uint64_t r = b.result(k);
      if (r == expect[k]) {
        ++*dir_words;
      } else if (r != target && dir_depth(r) < depth1) {
        at2.push_back(at[k]);
        expect2.push_back(r);
      }
    }
    at = std::move(at2);
    expect = std::move(expect2);
  }
  return Status::OK();
}

}  // namespace pmhash::engine::race
