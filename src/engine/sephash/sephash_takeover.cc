// engine/sephash/sephash_takeover.cc - sephash lock leases and takeovers
// (sephash.h, "Dead lock holders").
#include "engine/sephash/sephash_index.h"

namespace pmhash::engine::sephash {

Status SepHashIndex::gave_up(RAddr seg) const {
  return Status::Busy("sephash: a merge of the segment at node " +
                      std::to_string(raddr_node(seg)) + " offset " +
                      std::to_string(raddr_off(seg)) + " took more than half its lock lease (" +
                      std::to_string(params_.lease_ms) +
                      " ms); it stopped, and another client will finish or undo it");
}

Status SepHashIndex::hook_break(Session& ss, const Held& held, Batch* b, LockStep step) {
  if (!lock_hook()) return Status::OK();
  if (Status s = exec(ss, *b); !s.ok()) return s;
  b->clear();
  if (stop_at(step)) return stopped();
  if (!in_lease(held)) return gave_up(held.seg);
  return Status::OK();
}

Status SepHashIndex::watch_lock(Session& ss, RAddr seg, const Snap& now, LockWatch* w) {
  if ((now.meta & kMetaLock) == 0) return Status::OK();
  const auto t = Clock::now();
  if (!w->any || w->seg != seg || w->seen.meta != now.meta || w->seen.seq != now.seq) {
    *w = LockWatch{true, seg, now, t};
    return Status::OK();
  }
  if (t - w->since < lease()) return Status::OK();
  w->any = false;
  return take_over(ss, seg, now);
}

Status SepHashIndex::take_over(Session& ss, RAddr seg, const Snap& seen) {
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const Held held{seg, Clock::now()};
  Header hd{};
  Batch b;
  b.cas(node, off + kSeqOff, seen.seq, seen.seq + kSeqTakeover);
  // After the CAS (same node, in order): the meta, seq and intent it took.
  b.read(node, off, &hd, kHeaderBytes);
  if (Status s = exec(ss, b); !s.ok()) return s;
  if (b.result(0) != seen.seq) return Status::OK();  // another taker, or a new lock
  // Unlocked (published) just before the CAS: the raised seq only makes
  // readers and appenders of this state look again (sephash.h).
  if (hd.meta != seen.meta) return Status::OK();
  takeovers_.fetch_add(1, std::memory_order_relaxed);
  return finish(ss, held, seen.meta, hd);
}

Status SepHashIndex::finish(Session& ss, const Held& held, std::uint64_t locked, const Header& hd) {
  const RAddr seg = held.seg;
  const unsigned node = raddr_node(seg);
  const std::uint64_t off = raddr_off(seg);
  const std::uint64_t old_meta = locked & ~kMetaLock;
  Batch b;
  if (hd.intent_old != old_meta || !intent_of_lock(hd.intent_seq, hd.seq)) {
    // No intent of this lock: nothing destructive ran (the slots and the
    // old MainSeg are intact). Back: a new seq (this lock's (meta, seq)
    // must not show again), then the old meta, unlocked.
    if (!in_lease(held)) return Status::OK();
    b.faa(node, off + kSeqOff, 1);
    b.write(node, off + kMetaOff, &old_meta, 8);
    return exec(ss, b);
  }
  // Forward: the intent is this lock's, so the images it names are
  // complete; every write below is one the holder made or would have
  // made, with the same bytes (idempotent).
  const std::uint64_t new_meta = hd.intent_new;
  if (hd.intent_seg != 0) {
    const unsigned depth1 = meta_depth(old_meta) + 1;
    const std::uint64_t pattern1 = hd.pattern | (std::uint64_t{1} << meta_depth(old_meta));
    bool done = false;
    if (Status s = fix_directory(ss, held, hd.intent_seg, pattern1, depth1, &done); !s.ok() || !done) {
      return s;
    }
    if (!in_lease(held)) return Status::OK();
    if (Status s = remote_index::raise_global_depth(ss, kGlobalDepthOff, 0, depth1);
        !s.ok()) {
      return s;
    }
  }
  // The free word of seq now, whose low 22 bits are the intent's: the
  // same words the holder wrote, or would have.
  std::uint64_t cleared[kCurSlots];
  std::fill(std::begin(cleared), std::end(cleared), free_slot(hd.seq));
  const std::uint64_t zero[8] = {};
  if (!in_lease(held)) return Status::OK();
  b.write(node, off + kBitmapOff + (meta_sign(new_meta) ? kBitmapBytes : 0), zero, kBitmapBytes);
  b.write(node, off + kSlotsOff, cleared, kCurSlots * 8);
  b.write(node, off + kMetaOff, &new_meta, 8);
  if (Status s = exec(ss, b); !s.ok()) return s;
  return hd.intent_seg != 0 ? refresh_dir(ss) : Status::OK();
}

Status SepHashIndex::fix_directory(Session& ss, const Held& held, RAddr child,
                                   std::uint64_t pattern1, unsigned depth1, bool* done) {
  *done = false;
  std::vector<RAddr> dir(std::size_t{1} << params_.max_depth);
  Batch b;
  b.read(0, params_.directory, dir.data(), static_cast<std::uint32_t>(dir.size() * 8));
  if (Status s = exec(ss, b); !s.ok()) return s;
  const std::uint64_t step = std::uint64_t{1} << depth1;
  std::unordered_map<RAddr, std::uint64_t> metas;  // segments the entries name
  for (std::uint64_t i = pattern1; i < dir.size(); i += step) {
    if (dir[i] != child) metas.emplace(dir[i], 0);
  }
  b.clear();
  for (auto& [a, m] : metas) b.read(raddr_node(a), raddr_off(a) + kMetaOff, &m, 8);
  if (b.size() != 0) {
    if (Status s = exec(ss, b); !s.ok()) return s;
  }
  b.clear();
  for (std::uint64_t i = pattern1; i < dir.size(); i += step) {
    if (dir[i] != child && meta_depth(metas[dir[i]]) < depth1) {
      b.cas(0, params_.directory + i * 8, dir[i], child);
    }
  }
  if (!in_lease(held)) return Status::OK();
  if (b.size() != 0) {
    if (Status s = exec(ss, b); !s.ok()) return s;
  }
  *done = true;
  return Status::OK();
}

}  // namespace pmhash::engine::sephash
