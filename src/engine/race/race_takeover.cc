// engine/race/race_takeover.cc - race split-lock waits, leases and takeovers
// (race.h, "Dead splitters").
#include "engine/race/race_index.h"

namespace pmhash::engine::race {

Status RaceIndex::stuck(unsigned node, std::uint64_t base, const char* what,
                        const LockWatch& w) const {
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - w.start).count();
  return Status::Busy("race: subtable at node " + std::to_string(node) + " offset " +
                      std::to_string(base) + " " + what + " for " + std::to_string(waited) +
                      " ms: no split of it made progress for the lease + remote timeout (" +
                      std::to_string(params_.lease_ms + sessions_.timeout_ms()) +
                      " ms), or taking it over failed for " + std::to_string(kWaitLeases) +
                      " leases (at least " + std::to_string(kWaitFloor.count()) +
                      " ms); retry later (a later call takes a dead split over)");
}

Status RaceIndex::watch_lock(Session& ss, unsigned node, std::uint64_t base, LockWatch* w,
                             const char* what) {
  std::uint64_t word = 0;
  Batch b;
  b.read(node, base + bucket_bytes(), &word, 8);
  if (Status s = ss.exec(b); !s.ok()) return s;
  return observe(ss, node, base, word, w, what);
}

Status RaceIndex::observe(Session& ss, unsigned node, std::uint64_t base, std::uint64_t word,
                          LockWatch* w, const char* what) {
  const auto now = Clock::now();
  if (!w->any || w->node != node || w->base != base || w->seen != word) {
    w->any = true;
    w->node = node;
    w->base = base;
    w->seen = word;
    w->since = now;
    w->until = std::min(std::max(w->until, now + lock_patience()), w->limit);
    return Status::OK();
  }
  if (lock_held(word) && now - w->since >= lease() && now <= w->limit) {
    w->any = false;  // the takeover changes the word, whoever wins it
    const Status s = take_over(ss, node, base, word);
    w->until = std::min(std::max(w->until, Clock::now() + lock_patience()), w->limit);
    return s;
  }
  if (now > w->until) return stuck(node, base, what, *w);
  return Status::OK();
}

Status RaceIndex::past_half_lease(const Held& h) const {
  return Status::Busy("race: a split of the subtable at node " + std::to_string(h.node) +
                      " offset " + std::to_string(h.base) +
                      " took more than half its lease (" + std::to_string(params_.lease_ms) +
                      " ms); it stopped, and another client will finish or undo it");
}

Status RaceIndex::take_over(Session& ss, unsigned node, std::uint64_t base, std::uint64_t seen) {
  const Held held{node, base, seen + kSeqTakeover, Clock::now(), true};
  std::vector<std::uint64_t> t(table_bytes() / 8);
  Batch b;
  b.cas(node, base + bucket_bytes(), seen, held.lock);
  // After the CAS (same node, in order): the subtable as the holder left it.
  b.read(node, base, t.data(), static_cast<std::uint32_t>(table_bytes()));
  if (Status s = ss.exec(b); !s.ok()) return s;
  if (b.result(0) != seen) return Status::OK();
  counters_.takeovers.fetch_add(1, std::memory_order_relaxed);
  Status s = finish(ss, held, t);
  if (s.is_busy() && !in_lease(held)) return Status::OK();
  if (s.ok()) s = refresh_dir(ss);
  return s;
}

Status RaceIndex::finish(Session& ss, const Held& held, const std::vector<std::uint64_t>& t) {
  Trailer tr{};
  std::memcpy(&tr, t.data() + bucket_words(), sizeof(tr));
  Split sp;
  for (std::uint64_t w = 0; w < bucket_words(); ++w) {
    if (!is_slot(w) || !entry_frozen(t[w])) continue;
    sp.at.push_back(w);
    sp.frozen.push_back(t[w]);
  }
  if (!intent_of_lock(tr.intent_seq, lock_seq(held.lock))) {
    // Back: no intent of this lock stands, so nothing destructive ran
    // (the directory, the headers and every entry are as before the
    // lock): every frozen slot thawed, then the lock released.
    Batch b;
    for (std::size_t k = 0; k < sp.at.size(); ++k) {
      b.cas(held.node, held.base + sp.at[k] * 8, sp.frozen[k], entry_thawed(sp.frozen[k]));
    }
    add_release(b, held);
    return exec_held(ss, held, b);
  }
  // Forward: the intent is this lock's, so the new subtable it names is
  // whole. Its fields are checked before anything is written by them.
  sp.depth = header_depth(tr.intent_header);
  sp.suffix = header_suffix(tr.intent_header);
  sp.new_dw = tr.intent_new;
  bool sound = sp.depth < params_.max_depth && sp.suffix <= low_mask(sp.depth) &&
               dir_depth(sp.new_dw) == sp.depth + 1 && dir_node(sp.new_dw) < specs_.size() &&
               (sp.new_dw & kDirReserved) == 0 && dir_off(sp.new_dw) % 64 == 0;
  for (std::uint64_t w = 0; w < bucket_words() && sound; w += kSlotsPerBucket) {
    sound = t[w] == tr.intent_header || t[w] == make_header(sp.depth + 1, sp.suffix);
  }
  if (!sound) {
    return Status::Corruption("race: subtable at node " + std::to_string(held.node) +
                              " offset " + std::to_string(held.base) +
                              ": the intent of its unfinished split does not fit it (depth " +
                              std::to_string(sp.depth) + ", new subtable word " +
                              std::to_string(sp.new_dw) + ")");
  }
  if (Status s = plan_targets(ss, &sp); !s.ok()) return s;
  std::uint64_t dir_words = 0;
  return complete_split(ss, held, sp, &dir_words);
}

Status RaceIndex::wait_unlocked(Session& ss, unsigned node, std::uint64_t base) {
  LockWatch w = new_watch();
  for (;;) {
    std::uint64_t word = 0;
    Batch b;
    b.read(node, base + bucket_bytes(), &word, 8);
    if (Status s = ss.exec(b); !s.ok()) return s;
    if (!lock_held(word)) return Status::OK();
    if (Status s = observe(ss, node, base, word, &w, "stayed locked"); !s.ok()) return s;
    std::this_thread::yield();
  }
}

Status RaceIndex::wait_all_unlocked(Session& ss) {
  std::unordered_set<std::uint64_t> done;
  for (bool fresh = true; fresh;) {
    fresh = false;
    if (Status s = refresh_dir(ss); !s.ok()) return s;
    std::vector<std::uint64_t> tables;
    for (std::uint64_t dw : ss.dir) {
      if (done.insert(dir_off(dw) | (std::uint64_t{dir_node(dw)} << 48)).second) {
        tables.push_back(dw);
      }
    }
    std::vector<std::uint64_t> words(tables.size());
    Batch b;
    for (std::size_t i = 0; i < tables.size(); ++i) {
      b.read(dir_node(tables[i]), dir_off(tables[i]) + bucket_bytes(), &words[i], 8);
    }
    if (b.size() != 0) {
      if (Status s = ss.exec(b); !s.ok()) return s;
    }
    for (std::size_t i = 0; i < tables.size(); ++i) {
      fresh = true;
      if (!lock_held(words[i])) continue;
      if (Status s = wait_unlocked(ss, dir_node(tables[i]), dir_off(tables[i])); !s.ok()) return s;
    }
  }
  return Status::OK();
}

}  // namespace pmhash::engine::race
