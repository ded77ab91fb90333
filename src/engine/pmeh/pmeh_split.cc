// engine/pmeh/pmeh_split.cc - gradual multi-split of a full segment into
// 2^k fresh children (design in pmeh.h §5): start, move batches, steps,
// completion. Owner only.
#include <bit>
#include <cstring>
#include <shared_mutex>

#include "engine/pmeh/pmeh_index.h"
#include "engine/pmeh/pmeh_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::pmeh {
namespace {


void add_bit(std::uint64_t (&m)[4], unsigned j) { m[j / 64] |= std::uint64_t{1} << (j % 64); }
bool has_bit(const std::uint64_t (&m)[4], unsigned j) { return ((m[j / 64] >> (j % 64)) & 1) != 0; }

}  // namespace

void PmehIndex::fresh_segment_state(std::uint64_t off) {
  std::atomic<std::uint64_t>& st = seg_state(off);
  const std::uint64_t v = st.load(std::memory_order_relaxed) & ~kSegDead;
  // Even, live, and never a value the block's previous segment had.
  st.store((v | 1) + 1, std::memory_order_release);
}

void PmehIndex::move_batch(SplitState* sp, const std::uint64_t (&m)[4]) {
  // Each pair to the same position of its child (§5.2): the children
  // partition S's keys, so no two want one position.
  const unsigned n = 1u << sp->k;
  Bucket* from = segment_buckets(sp->s);
  std::uint64_t moved = 0;
  unsigned buckets = 0;
  for (unsigned j = 0; j < nb_; ++j) {
    if (!has_bit(m, j)) continue;
    ++buckets;
    std::uint16_t metas[8][kSlotsPerBucket] = {};
    Bucket* to[8];
    for (unsigned i = 0; i < n; ++i) to[i] = &segment_buckets(sp->child[i])[j];
    for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
      const std::uint16_t meta = from[j].meta[p].load(std::memory_order_relaxed);
      if (!meta_valid(meta)) continue;
      const std::uint64_t w0 = from[j].slot[p].w0.load(std::memory_order_relaxed);
      const std::uint64_t w1 = from[j].slot[p].w1.load(std::memory_order_relaxed);
      const std::uint64_t h1 =
          meta_is_inline(meta) ? make_key(unpack_word(w0, meta_key_len(meta))).h1 : w1;
      Bucket* b = to[sp->child_of(h1)];
      // Release: a reader that sees the bit (acquire) sees the copy.
      b->slot[p].w0.store(w0, std::memory_order_release);
      b->slot[p].w1.store(w1, std::memory_order_release);
      metas[sp->child_of(h1)][p] = meta;
      ++moved;
    }
    // Whole meta arrays: positions that went to another child are 0.
    for (unsigned i = 0; i < n; ++i) {
      for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
        to[i]->meta[p].store(metas[i][p], std::memory_order_release);
      }
      region_.flush(to[i], sizeof(Bucket));
    }
  }
  // Drain #1: the children's buckets are durable before they are marked
  // moved (else a crash could leave a bucket moved whose copy was lost).
  if (!planted::active(testing::kMovedBeforeCopyDurable)) region_.drain();
  for (unsigned w = 0; w < 4; ++w) {
    if (m[w] == 0) continue;
    sp->s->moved[w].fetch_or(m[w], std::memory_order_relaxed);
    sp->moved[w].fetch_or(m[w], std::memory_order_release);
  }
  // Persist #2: the bits are durable before S's version is released, so no
  // write into a moved child bucket can be undone by a crash.
  region_.persist(&sp->s->moved[0], sizeof(std::uint64_t) * 4);
  sp->left -= buckets;
  items_moved_.fetch_add(moved, std::memory_order_relaxed);
}

Status PmehIndex::split(heap::ThreadCache* tc, unsigned z, std::uint64_t off, std::uint64_t h1) {
  SegmentHeader* h = seg(off);
  const unsigned depth = h->depth;
  const unsigned k = std::min(split_bits_, kMaxDepth - depth);
  if (k == 0) {
    return Status::NoSpace("pmeh: segment at depth " + std::to_string(kMaxDepth) +
                           " is full: keys share a " + std::to_string(kMaxDepth) +
                           "-bit hash prefix");
  }
  InSplit in_split;
  // 0. One split in flight per zone: a second one completes the first.
  if (zones_[z].split.load(std::memory_order_relaxed) != nullptr) {
    eager_.fetch_add(1, std::memory_order_relaxed);
    finish_split(tc, z);
  }
  if (Status s = ensure_depth(tc, z, depth + k); !s.ok()) return s;
  // Room to retire S at completion, outside any read section.
  tc->reserve_retire(1);
  const unsigned n = 1u << k;
  std::atomic<std::uint64_t>& st = seg_state(off);
  // Odd from the record to the end of the start: readers of S retry.
  enter_segment(z, st);  // SHARED: waits out direct writers (§7)

  // 1. The record exists: recovery will look at S's children from here.
  root_->split[z].store(off, std::memory_order_relaxed);
  region_.persist(&root_->split[z], sizeof(std::uint64_t));

  // 2. The children, each durable and named by S before the intent moves on.
  auto sp = std::make_unique<SplitState>();
  sp->s_off = off;
  sp->s = h;
  sp->depth = depth;
  sp->k = k;
  sp->left = nb_;
  for (unsigned i = 0; i < n; ++i) {
    if (Status s = tc->allocate(std::size_t{1} << s_, &sp->child_off[i], false, kBlockIntent);
        !s.ok()) {
      // Undo: free the children first (recovery frees a named child only if
      // it is still allocated with the child's header), then unname them,
      // then drop the record. S was never written.
      for (unsigned j = 0; j < i; ++j) tc->free_unpublished(sp->child_off[j]);
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
    auto* c = seg(sp->child_off[i]);
    sp->child[i] = c;
    std::memset(static_cast<void*>(c), 0, sizeof(SegmentHeader));
    c->magic = kSegmentMagic;
    c->prefix = h->prefix | (std::uint64_t{i} << (64 - depth - k));
    c->depth = static_cast<std::uint8_t>(depth + k);
    c->nb = static_cast<std::uint8_t>(nb_);
    region_.flush(c, sizeof(SegmentHeader));
    h->children[i].store(sp->child_off[i], std::memory_order_relaxed);
    region_.flush(&h->children[i], sizeof(std::uint64_t));
    // Child i is whole and named by S before the intent slot names the next.
    region_.drain();
  }

  // 3. The start is committed: from here recovery resumes the split.
  h->split.store(seg_split_word(k), std::memory_order_relaxed);
  region_.persist(&h->split, sizeof(std::uint64_t));
  tc->clear_intent(kBlockIntent);

  // 4. Published, then the caller's window moved (all of S with B = 0).
  SplitState* raw = sp.release();
  zones_[z].split.store(raw, std::memory_order_release);
  std::uint64_t m[4] = {};
  const unsigned home = home_bucket(h1, nb_);
  if (split_step_ == 0) {
    for (unsigned j = 0; j < nb_; ++j) add_bit(m, j);
  } else {
    add_bit(m, home);
    add_bit(m, (home + 1) % nb_);
  }
  move_batch(raw, m);
  st.fetch_add(1, std::memory_order_release);
  if (raw->left == 0) {
    finish_split(tc, z);
  } else if (zones_[z].mode.load(std::memory_order_relaxed) == kShared) {
    // The rest moves as soon as this round's callers are answered.
    owners_[zones_[z].owner]->finish_pending = true;
  }
  return Status::OK();
}

void PmehIndex::split_step(heap::ThreadCache* tc, unsigned z, bool on_s, std::uint64_t h1) {
  SplitState* sp = zones_[z].split.load(std::memory_order_relaxed);
  if (sp == nullptr) return;
  // B = 0, or a SHARED zone (a split found by open, or started before the
  // zone went SHARED): the rest at once.
  if (splits_at_once(z)) return finish_split(tc, z);
  InSplit in_split;
  std::uint64_t m[4] = {};
  unsigned count = 0;
  if (on_s) {
    const unsigned home = home_bucket(h1, nb_);
    for (unsigned j : {home, (home + 1) % nb_}) {
      if (!sp->is_moved(j) && !has_bit(m, j)) {
        add_bit(m, j);
        ++count;
      }
    }
  }
  for (unsigned b = 0; b < split_step_ && sp->cursor < nb_; ++sp->cursor) {
    const unsigned j = sp->cursor;
    if (sp->is_moved(j) || has_bit(m, j)) continue;
    add_bit(m, j);
    ++count;
    ++b;
  }
  if (count != 0) {
    std::atomic<std::uint64_t>& st = seg_state(sp->s_off);
    enter_segment(z, st);  // SHARED: by CAS, like every writer there (§7)
    move_batch(sp, m);
    st.fetch_add(1, std::memory_order_release);
  }
  if (sp->left == 0) finish_split(tc, z);
}

void PmehIndex::finish_split(heap::ThreadCache* tc, unsigned z) {
  SplitState* sp = zones_[z].split.load(std::memory_order_relaxed);
  if (sp == nullptr) return;
  InSplit in_split;
  tc->reserve_retire(1);
  const std::uint64_t off = sp->s_off;
  SegmentHeader* h = sp->s;
  const unsigned depth = sp->depth, k = sp->k, n = 1u << k;
  std::atomic<std::uint64_t>& st = seg_state(off);
  // Odd until S is DEAD: readers of S retry, then restart from the directory.
  enter_segment(z, st);  // SHARED: by CAS, like every writer there (§7)
  if (sp->left != 0) {
    std::uint64_t m[4] = {};
    for (unsigned j = 0; j < nb_; ++j) {
      if (!sp->is_moved(j)) add_bit(m, j);
    }
    move_batch(sp, m);
  }
  // Completion (§5.5). 1. Every bit of S.moved is durable (each batch
  // persisted its own). 2. S is in the owner's retire log before any entry
  // stops naming it (else a crash would leak it).
  tc->retire(off);
  region_.drain();
  // 3. The record says "re-pointing" before the first entry changes.
  root_->split[z].store(off | kSplitCompleting, std::memory_order_relaxed);
  region_.persist(&root_->split[z], sizeof(std::uint64_t));
  for (unsigned i = 0; i < n; ++i) fresh_segment_state(sp->child_off[i]);
  // 4. The range names the children.
  Dir* d = zones_[z].dir.load(std::memory_order_relaxed);
  const unsigned g = d->depth;
  const std::uint64_t base = top_bits(h->prefix, depth) << (g - depth);
  const std::uint64_t count = std::uint64_t{1} << (g - depth);
  for (std::uint64_t e = 0; e < count; ++e) {
    // Release: a reader that finds a child finds its header and buckets.
    d->entry[base + e].store(sp->child_off[e >> (g - depth - k)], std::memory_order_release);
  }
  region_.flush(&d->entry[base], sizeof(std::uint64_t) * count);
  // The children are the range's segments on media before the record goes.
  region_.drain();
  // 5. S is even and DEAD: readers still holding it restart from the
  // directory. The SplitState goes after a grace period.
  st.store((st.load(std::memory_order_relaxed) + 1) | kSegDead, std::memory_order_release);
  // Counted before the split stops being in flight (release): whoever sees
  // no split in flight also sees it counted.
  splits_.fetch_add(1, std::memory_order_relaxed);
  zones_[z].split.store(nullptr, std::memory_order_release);
  retired_splits_[zones_[z].owner].emplace_back(sp);
  // 6. Cleared for good before S's block can be reused (S is freed after a
  // grace period, when the retire log is next emptied): recovery must never
  // read a record naming a freed block.
  root_->split[z].store(0, std::memory_order_relaxed);
  region_.persist(&root_->split[z], sizeof(std::uint64_t));
}

void PmehIndex::finish_shared_splits(heap::ThreadCache* tc, unsigned i) {
  owners_[i]->finish_pending = false;
  // Like an idle step: no caller waits for it, so check() pauses it.
  std::shared_lock lock(pause_);
  for (unsigned z = i; z < (1u << z_); z += workers()) {
    if (zones_[z].split.load(std::memory_order_relaxed) == nullptr ||
        zones_[z].mode.load(std::memory_order_relaxed) != kShared) {
      continue;
    }
    finish_split(tc, z);
  }
}

bool PmehIndex::idle_work(heap::ThreadCache* tc, unsigned i) {
  std::shared_lock lock(pause_);
  if (idle_steps_) {
    for (unsigned z = 0; z < (1u << z_); ++z) {
      if (zones_[z].owner != i || zones_[z].split.load(std::memory_order_relaxed) == nullptr) {
        continue;
      }
      tc->reserve_retire(1);
      split_step(tc, z, false, 0);
      return true;
    }
  }
  if (retired_splits_[i].empty()) return false;
  // Readers that loaded a retired SplitState are gone after a grace period.
  rcu::synchronize();
  retired_splits_[i].clear();
  return true;
}

}  // namespace pmhash::engine::pmeh
