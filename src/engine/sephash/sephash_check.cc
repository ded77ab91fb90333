// engine/sephash/sephash_check.cc - sephash whole-index reads: scan and check
// (sephash.h, "Invariants").
#include "engine/hash.h"
#include "engine/sephash/sephash_index.h"

namespace pmhash::engine::sephash {

Status SepHashIndex::read_segment(Session& ss, RAddr seg, SegmentView* v) {
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const auto deadline = lock_deadline();
  for (;;) {
    Snap snap, now;
    if (Status s = wait_unlocked(ss, seg, &snap); !s.ok()) return s;
    Header hd{};
    std::uint64_t slots[kCurSlots];
    v->main.assign(meta_main_len(snap.meta), 0);
    Batch b;
    b.read(node, off, &hd, kHeaderBytes);
    b.read(node, off + kSlotsOff, slots, sizeof(slots));
    if (!v->main.empty()) {
      b.read(node, meta_main_off(snap.meta) + kPrefixBytes, v->main.data(),
             static_cast<std::uint32_t>(v->main.size() * 8));
    }
    add_check(b, seg, &now);
    if (Status s = exec(ss, b); !s.ok()) return s;
    if (hd.meta != snap.meta || !unchanged(snap, now)) {
      if (Clock::now() > deadline) return locked_too_long(seg);
      continue;
    }
    v->snap = snap;
    v->pattern = hd.pattern;
    v->entries = v->main;
    for (std::uint64_t s : slots) {
      if (slot_live(s, meta_sign(snap.meta))) v->entries.push_back(slot_entry(s));
    }
    return Status::OK();
  }
}

Status SepHashIndex::read_segment_items(Session& ss, RAddr seg, SegmentView* v,
                                        std::vector<Candidate>* items) {
  const auto deadline = lock_deadline();
  for (;;) {
    if (Status s = read_segment(ss, seg, v); !s.ok()) return s;
    bool retry = false;
    if (Status s = read_items(ss, seg, &v->snap, v->entries, items, &retry); !s.ok() || !retry) {
      return s;
    }
    if (Clock::now() > deadline) return locked_too_long(seg);
  }
}

Status SepHashIndex::segments(Session& ss, std::vector<RAddr>* out) {
  if (Status s = refresh_dir(ss); !s.ok()) return s;
  std::unordered_set<RAddr> seen;
  for (RAddr a : ss.dir) {
    if (seen.insert(a).second) out->push_back(a);
  }
  return Status::OK();
}

Status SepHashIndex::scan(Session& ss, const ForEachFn& fn) {
  std::vector<RAddr> segs;
  if (Status s = segments(ss, &segs); !s.ok()) return s;
  std::unordered_set<RAddr> visited;
  std::vector<std::pair<std::uint64_t, unsigned>> covered;  // (pattern, depth) of views read
  auto is_covered = [&](std::uint64_t pattern, unsigned depth) {
    for (const auto& [p, d] : covered) {
      if (d <= depth && (pattern & low_mask(d)) == p) return true;
    }
    return false;
  };
  for (bool fresh = true; fresh;) {
    fresh = false;
    for (RAddr seg : segs) {
      if (!visited.insert(seg).second) continue;
      fresh = true;
      bool stop = false;
      if (Status s = scan_segment(ss, seg, fn, is_covered, &covered, &stop); !s.ok() || stop) {
        return s;
      }
    }
    segs.clear();
    if (Status s = segments(ss, &segs); !s.ok()) return s;
  }
  return Status::OK();
}

Status SepHashIndex::scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
                          std::uint64_t* next) {
  return remote_index::scan_by_parts(
      [&](auto&& body) { return with_session(body); },
      [&](Session& ss, std::uint64_t pos, std::size_t need, std::vector<remote_index::ScanPair>* out,
          std::uint64_t* end) { return scan_part(ss, pos, need, out, end); },
      cursor, count, fn, next);
}

Status SepHashIndex::scan_part(Session& ss, std::uint64_t pos, std::size_t need,
                               std::vector<remote_index::ScanPair>* out, std::uint64_t* end) {
  const std::uint64_t h = reverse_bits(pos);  // the hash of a key at position pos
  const auto deadline = lock_deadline();
  SegmentView v;
  std::vector<Candidate> items;
  for (;;) {
    const RAddr seg = segment_of(ss, h);
    // Both levels and the items they name, under one snapshot: every
    // round trip ends with the check, so no merge or split ran between
    // the snapshot and the last check (sephash.h, "Scan").
    if (Status s = read_segment_items(ss, seg, &v, &items); !s.ok()) return s;
    const unsigned depth = meta_depth(v.snap.meta);
    if (depth > params_.max_depth || v.pattern > low_mask(depth)) {
      return Status::Corruption("sephash: segment at node " + std::to_string(raddr_node(seg)) +
                                " offset " + std::to_string(raddr_off(seg)) + ": depth " +
                                std::to_string(depth) + " and pattern " +
                                std::to_string(v.pattern) + " (the index's maximum depth is " +
                                std::to_string(params_.max_depth) + ")");
    }
    if ((h & low_mask(depth)) == v.pattern) break;
    // Another segment covers pos now (a split since the directory was
    // cached; its directory entries were written before the split
    // segment's new meta).
    if (Clock::now() > deadline) return locked_too_long(seg);
    if (Status s = refresh_dir(ss); !s.ok()) return s;
  }
  const unsigned depth = meta_depth(v.snap.meta);
  // The newest entry of each key of the segment at or after `pos`.
  std::unordered_map<std::string_view, const Candidate*> best;
  for (const Candidate& c : items) {
    const std::uint64_t kh = make_key(c.key()).h1;
    if ((kh & low_mask(depth)) != v.pattern || reverse_bits(kh) < pos) continue;
    auto [it, fresh] = best.try_emplace(c.key(), &c);
    if (!fresh && c.header().version > it->second->header().version) it->second = &c;
  }
  std::vector<remote_index::ScanPair> found;
  for (const auto& [k, c] : best) {
    if (!slot_tomb(c->slot)) {
      found.push_back({reverse_bits(make_key(k).h1), std::string(k), std::string(c->value())});
    }
  }
  // The range of (depth, pattern): the positions whose top `depth` bits
  // are the reversed pattern; past the last one, the sum wraps to 0.
  const std::uint64_t range_end =
      depth == 0 ? 0 : reverse_bits(v.pattern) + (std::uint64_t{1} << (64 - depth));
  remote_index::take_in_order(found, need, range_end, out, end);
  return Status::OK();
}

Status SepHashIndex::verify(Session& ss) {
  std::vector<RAddr> segs;
  if (Status s = segments(ss, &segs); !s.ok()) return s;
  // First every lock released, or taken over from a dead holder (a
  // split finished then changes the directory read below); the new
  // segments such a split made too.
  std::unordered_set<RAddr> waited;
  for (bool fresh = true; fresh;) {
    fresh = false;
    for (RAddr seg : segs) {
      if (!waited.insert(seg).second) continue;
      fresh = true;
      Snap snap;
      if (Status s = wait_unlocked(ss, seg, &snap); !s.ok()) return s;
    }
    segs.clear();
    if (Status s = segments(ss, &segs); !s.ok()) return s;
  }
  auto fail = [&](RAddr seg, const std::string& what) {
    return Status::Corruption("sephash: segment at node " + std::to_string(raddr_node(seg)) +
                              " offset " + std::to_string(raddr_off(seg)) + ": " + what);
  };
  // The full directory: every entry names a segment whose pattern it has.
  std::vector<RAddr> dir(std::size_t{1} << params_.max_depth);
  Batch b;
  b.read(0, params_.directory, dir.data(), static_cast<std::uint32_t>(dir.size() * 8));
  if (Status s = exec(ss, b); !s.ok()) return s;
  std::unordered_map<RAddr, SegmentView> views;
  for (RAddr seg : segs) {
    SegmentView v;
    if (Status s = read_segment(ss, seg, &v); !s.ok()) return s;
    if (meta_depth(v.snap.meta) > ss.global_depth) return fail(seg, "deeper than the global depth");
    views.emplace(seg, std::move(v));
  }
  for (std::size_t i = 0; i < dir.size(); ++i) {
    auto it = views.find(dir[i]);
    if (it == views.end()) {
      // Entries beyond 2^global_depth repeat the ones below it.
      if (i < ss.dir.size() || dir[i] != dir[i & (ss.dir.size() - 1)]) {
        return Status::Corruption("sephash: directory entry " + std::to_string(i) +
                                  " names no segment of the directory's first " +
                                  std::to_string(ss.dir.size()) + " entries");
      }
      continue;
    }
    if ((i & low_mask(meta_depth(it->second.snap.meta))) != it->second.pattern) {
      return fail(dir[i], "directory entry " + std::to_string(i) + " does not match its pattern");
    }
  }
  for (auto& [seg, v] : views) {
    std::vector<Candidate> items;
    // Read again with its items: the segment may have merged since.
    if (Status s = read_segment_items(ss, seg, &v, &items); !s.ok()) return s;
    const unsigned depth = meta_depth(v.snap.meta);
    for (std::size_t i = 1; i < v.main.size(); ++i) {
      if (slot_fp(v.main[i - 1]) > slot_fp(v.main[i])) return fail(seg, "MainSeg not sorted");
    }
    for (const Candidate& c : items) {
      const ItemHeader& h = c.header();
      const Key k = make_key(c.key());
      if (k.h1 != h.hash || slot_fp(c.slot) != hash_fp(h.hash) ||
          slot_fp2(c.slot) != hash_fp2(h.hash) || slot_dbits(c.slot) != hash_dbits(h.hash, depth)) {
        return fail(seg, "an entry's filter bits do not match its item's key");
      }
      if ((h.hash & low_mask(depth)) != v.pattern) {
        return fail(seg, "holds a key of another segment");
      }
      if (slot_tomb(c.slot) && h.value_len != 0) {
        return fail(seg, "a tombstone with a value");
      }
    }
  }
  return Status::OK();
}

}  // namespace pmhash::engine::sephash
