// engine/pmeh/pmeh_split.cc - multi-split of a full segment into 2^k fresh
// children (design in pmeh.h §5). Owner only.
#include <cstring>

#include "engine/pmeh/pmeh_index.h"

namespace pmhash::engine::pmeh {

void PmehIndex::fresh_segment_state(std::uint64_t off) {
  std::atomic<std::uint64_t>& st = seg_state(off);
  const std::uint64_t v = st.load(std::memory_order_relaxed) & ~kSegDead;
  // Even, live, and never a value the block's previous segment had.
  st.store((v | 1) + 1, std::memory_order_release);
}

Status PmehIndex::split(heap::ThreadCache* tc, unsigned z, std::uint64_t off) {
  SegmentHeader* h = seg(off);
  const unsigned depth = h->depth;
  const unsigned k = std::min(split_bits_, kMaxDepth - depth);
  if (k == 0) {
    return Status::NoSpace("pmeh: segment at depth " + std::to_string(kMaxDepth) +
                           " is full: keys share a " + std::to_string(kMaxDepth) +
                           "-bit hash prefix");
  }
  struct InSplit {
    InSplit() { testing_in_split.store(true, std::memory_order_relaxed); }
    ~InSplit() { testing_in_split.store(false, std::memory_order_relaxed); }
  } in_split;
  if (Status s = ensure_depth(tc, z, depth + k); !s.ok()) return s;
  // Room to retire S at completion, outside any read section.
  tc->reserve_retire(1);
  const unsigned n = 1u << k;
  std::atomic<std::uint64_t>& st = seg_state(off);
  // Odd from the record to S's death: readers of S retry, then restart
  // from the directory.
  enter_segment(z, st);  // SHARED: waits out direct writers (§7)

  // 1. The record exists: recovery will look at S's children from here.
  root_->split[z].store(off, std::memory_order_relaxed);
  region_.persist(&root_->split[z], sizeof(std::uint64_t));

  // 2. The children, each durable and named by S before the intent moves on.
  std::uint64_t child[8] = {};
  for (unsigned i = 0; i < n; ++i) {
    if (Status s = tc->allocate(std::size_t{1} << s_, &child[i], false, kBlockIntent); !s.ok()) {
      // Undo: free the children first (recovery frees a named child only if
      // it is still allocated with the child's header), then unname them,
      // then drop the record. S was never written.
      for (unsigned j = 0; j < i; ++j) tc->free_unpublished(child[j]);
      for (unsigned j = 0; j < i; ++j) h->children[j].store(0, std::memory_order_relaxed);
      region_.flush(&h->children[0], sizeof(std::uint64_t) * 8);
      // S names no child before the record goes.
      region_.drain();
      root_->split[z].store(0, std::memory_order_relaxed);
      region_.persist(&root_->split[z], sizeof(std::uint64_t));
      tc->clear_intent(kBlockIntent);
      st.fetch_add(1, std::memory_order_release);
      return Status::NoSpace("pmeh: no room in the pool for the " + std::to_string(n) +
                             " children of a full segment (depth " + std::to_string(depth) + ")");
    }
    auto* c = seg(child[i]);
    std::memset(static_cast<void*>(c), 0, sizeof(SegmentHeader));
    c->magic = kSegmentMagic;
    c->prefix = h->prefix | (std::uint64_t{i} << (64 - depth - k));
    c->depth = static_cast<std::uint8_t>(depth + k);
    c->nb = static_cast<std::uint8_t>(nb_);
    region_.flush(c, sizeof(SegmentHeader));
    h->children[i].store(child[i], std::memory_order_relaxed);
    region_.flush(&h->children[i], sizeof(std::uint64_t));
    // Child i is whole and named by S before the intent slot names the next.
    region_.drain();
  }

  // 3. The start is committed.
  h->split.store(seg_split_word(k), std::memory_order_relaxed);
  region_.persist(&h->split, sizeof(std::uint64_t));
  tc->clear_intent(kBlockIntent);

  // Move every bucket, each pair to the same position of its child (§5.2):
  // the children partition S's keys, so no two want one position.
  std::uint64_t moved = 0;
  Bucket* from = segment_buckets(h);
  for (unsigned j = 0; j < nb_; ++j) {
    std::uint16_t metas[8][kSlotsPerBucket] = {};
    Bucket* to[8];
    for (unsigned i = 0; i < n; ++i) to[i] = &segment_buckets(seg(child[i]))[j];
    for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
      const std::uint16_t m = from[j].meta[p].load(std::memory_order_relaxed);
      if (!meta_valid(m)) continue;
      const std::uint64_t w0 = from[j].slot[p].w0.load(std::memory_order_relaxed);
      const std::uint64_t w1 = from[j].slot[p].w1.load(std::memory_order_relaxed);
      const std::uint64_t h1 =
          meta_is_inline(m) ? make_key(unpack_word(w0, meta_key_len(m))).h1 : w1;
      const unsigned c = static_cast<unsigned>((h1 << depth) >> (64 - k));
      to[c]->slot[p].w0.store(w0, std::memory_order_relaxed);
      to[c]->slot[p].w1.store(w1, std::memory_order_relaxed);
      metas[c][p] = m;
      ++moved;
    }
    for (unsigned i = 0; i < n; ++i) {
      for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
        to[i]->meta[p].store(metas[i][p], std::memory_order_relaxed);
      }
      region_.flush(to[i], sizeof(Bucket));
    }
  }
  // Drain #1: the children's buckets are durable before they are marked moved.
  region_.drain();
  for (unsigned w = 0; w < 4; ++w) {
    const unsigned lo = w * 64;
    const std::uint64_t bits = nb_ <= lo ? 0
                               : nb_ - lo >= 64 ? ~std::uint64_t{0}
                                                : (std::uint64_t{1} << (nb_ - lo)) - 1;
    h->moved[w].store(bits, std::memory_order_relaxed);
  }
  // Persist #2: every bucket is moved.
  region_.persist(&h->moved[0], sizeof(std::uint64_t) * 4);

  // Completion (§5.5). S is in the owner's retire log before any entry
  // stops naming it (else a crash would leak it).
  tc->retire(off);
  region_.drain();
  root_->split[z].store(off | kSplitCompleting, std::memory_order_relaxed);
  // The record says "re-pointing" before the first entry changes.
  region_.persist(&root_->split[z], sizeof(std::uint64_t));
  for (unsigned i = 0; i < n; ++i) fresh_segment_state(child[i]);
  Dir* d = zones_[z].dir.load(std::memory_order_relaxed);
  const unsigned g = d->depth;
  const std::uint64_t base = top_bits(h->prefix, depth) << (g - depth);
  const std::uint64_t count = std::uint64_t{1} << (g - depth);
  for (std::uint64_t e = 0; e < count; ++e) {
    // Release: a reader that finds a child finds its header and buckets.
    d->entry[base + e].store(child[e >> (g - depth - k)], std::memory_order_release);
  }
  region_.flush(&d->entry[base], sizeof(std::uint64_t) * count);
  // The children are the range's segments on media before the record goes.
  region_.drain();
  // S is even and DEAD: readers still holding it restart from the directory.
  st.store((st.load(std::memory_order_relaxed) + 1) | kSegDead, std::memory_order_release);
  root_->split[z].store(0, std::memory_order_relaxed);
  // Cleared for good before S's block can be reused (S is freed after a
  // grace period, when the retire log is next emptied): recovery must never
  // read a record naming a freed block.
  region_.persist(&root_->split[z], sizeof(std::uint64_t));
  splits_.fetch_add(1, std::memory_order_relaxed);
  items_moved_.fetch_add(moved, std::memory_order_relaxed);
  return Status::OK();
}

}  // namespace pmhash::engine::pmeh
