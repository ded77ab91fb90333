// engine/race/race_check.cc - race whole-index reads: scan and check.
#include "engine/race/race_index.h"

namespace pmhash::engine::race {

Status RaceIndex::scan(Session& ss, const ForEachFn& fn, bool verify) {
  if (verify) {
    if (Status s = wait_all_unlocked(ss); !s.ok()) return s;
  }
  if (Status s = refresh_dir(ss); !s.ok()) return s;
  std::vector<std::uint64_t> full(std::size_t{1} << params_.max_depth);
  Batch b;
  b.read(0, params_.directory, full.data(), static_cast<std::uint32_t>(full.size() * 8));
  if (Status s = ss.exec(b); !s.ok()) return s;
  auto fail = [&](std::uint64_t dw, const std::string& what) {
    return Status::Corruption("race: subtable at node " + std::to_string(dir_node(dw)) +
                              " offset " + std::to_string(dir_off(dw)) + ": " + what);
  };
  std::unordered_set<std::uint64_t> seen;
  const std::uint64_t words = table_bytes() / 8;
  for (std::size_t i = 0; i < full.size(); ++i) {
    const std::uint64_t dw = full[i];
    if (verify) {
      if ((dw & kDirReserved) != 0) {
        return Status::Corruption("race: directory word " + std::to_string(i) +
                                  " has its unused bit 63 set");
      }
      if (i >= ss.dir.size() && full[i] != full[i & (ss.dir.size() - 1)]) {
        return Status::Corruption("race: directory word " + std::to_string(i) +
                                  " differs from the one it repeats");
      }
    }
    if (!seen.insert(dir_off(dw) | (std::uint64_t{dir_node(dw)} << 48)).second) continue;
    std::vector<std::uint64_t> t(words);
    b.clear();
    b.read(dir_node(dw), dir_off(dw), t.data(), static_cast<std::uint32_t>(table_bytes()));
    if (Status s = ss.exec(b); !s.ok()) return s;
    const std::uint64_t hd = t[0];
    const unsigned depth = header_depth(hd);
    if (verify) {
      if (lock_held(t[bucket_words()])) {
        return fail(dw, "locked (a split runs, or its client died and no taker finished it)");
      }
      if (depth != dir_depth(dw)) return fail(dw, "its depth differs from its directory word's");
      if ((i & low_mask(depth)) != header_suffix(hd)) return fail(dw, "named by a wrong directory word");
    }
    std::vector<Slot> slots;
    for (std::uint64_t w = 0; w < bucket_words(); ++w) {
      if (w % kSlotsPerBucket == 0) {
        if (verify && t[w] != hd) return fail(dw, "bucket headers differ");
        continue;
      }
      if (verify && entry_frozen(t[w])) return fail(dw, "a frozen slot (a split runs or died)");
      if (entry_thawed(t[w]) != 0) slots.push_back(Slot{dir_node(dw), dir_off(dw) + w * 8, t[w]});
    }
    std::vector<Kv> kvs;
    if (Status s = read_kvs(ss, slots, &kvs); !s.ok()) return s;
    std::map<std::string_view, const Kv*> keys;  // the lowest entry of each key
    for (const Kv& kv : kvs) {
      const Key k = make_key(kv.key());
      const Place p = place(k);
      if ((k.h1 & low_mask(depth)) != header_suffix(hd)) {
        if (verify) return fail(dw, "holds a key of another subtable");
        continue;
      }
      if (verify) {
        if (k.h1 != kv.header().hash || entry_fp(kv.slot.word) != p.fp) {
          return fail(dw, "an entry's fingerprint or hash does not match its key");
        }
        const std::uint64_t rel = kv.slot.off - dir_off(dw);
        bool placed = false;
        for (unsigned bk : p.bucket) {
          placed |= rel >= combined_off(bk) && rel < combined_off(bk) + kCombinedBytes;
        }
        if (!placed) return fail(dw, "an entry outside its key's combined buckets");
      }
      const bool fresh = keys.emplace(kv.key(), &kv).second;
      if (!fresh && verify) return fail(dw, "a key with two entries");
    }
    for (const auto& [k, kv] : keys) {
      if (!fn(k, kv->value())) return Status::OK();
    }
  }
  return Status::OK();
}

}  // namespace pmhash::engine::race
