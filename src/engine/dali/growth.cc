// engine/dali/growth.cc - the bucket array grows online, one split at a time
// (dali.h, "Growth").
#include <bit>
#include <cstring>

#include <functional>
#include <mutex>

#include "engine/dali/dali_index.h"
#include "engine/dali/dali_testing.h"

namespace pmhash::engine::dali {

namespace {
// Split while present keys exceed this many per bucket.
constexpr std::int64_t kMaxLoad = 2;

std::mutex hook_mutex;
std::function<void(std::uint64_t, unsigned)> split_hook;
std::atomic<bool> has_split_hook{false};

void run_split_hook(std::uint64_t src, unsigned level) {
  if (!has_split_hook.load(std::memory_order_relaxed)) return;
  std::function<void(std::uint64_t, unsigned)> hook;
  {
    std::lock_guard lock(hook_mutex);
    hook = split_hook;
  }
  if (hook) hook(src, level);
}
}  // namespace

void testing::set_split_hook(std::function<void(std::uint64_t src, unsigned level)> hook) {
  std::lock_guard lock(hook_mutex);
  has_split_hook.store(static_cast<bool>(hook));
  split_hook = std::move(hook);
}

void DaliIndex::maybe_grow(heap::ThreadCache* tc, unsigned t) {
  const Shape sh = shape();
  if (sh.level >= kMaxLevel) return;
  if (approx_items_.load(std::memory_order_relaxed) <= kMaxLoad * static_cast<std::int64_t>(sh.buckets())) {
    return;
  }
  // After a NoSpace, try again in a later epoch (something may be freed).
  if (grow_blocked_epoch_.load(std::memory_order_relaxed) == epochs_->current()) return;
  split_one(tc, t);
}

Status DaliIndex::ensure_segment(heap::ThreadCache* tc, unsigned j) {
  if (segments_[j].load(std::memory_order_acquire) != nullptr) return Status::OK();
  const std::uint64_t n = segment_buckets(initial_log2_, j);
  std::uint64_t off = 0;
  // Logged (intent slot 0): a crash before the root names the block frees
  // it at the next open (recover's keep() asks for the root's segments).
  if (Status s = tc->allocate(segment_bytes(n), &off); !s.ok()) return s;
  auto* h = region_.at<SegmentHeader>(off);
  h->magic = kSegmentMagic;
  h->index = j;
  h->buckets = n;
  // The header is durable before the root names the segment (open checks
  // it). Its buckets need nothing: a split writes each bucket whole, in the
  // epoch of the shape that first names it.
  region_.persist(h, sizeof(SegmentHeader));
  root_->segments[j].store(off, std::memory_order_release);
  region_.persist(&root_->segments[j], sizeof(std::uint64_t));
  tc->clear_intent();
  segments_[j].store(segment_buckets_of(h), std::memory_order_release);
  return Status::OK();
}

void DaliIndex::split_one(heap::ThreadCache* tc, unsigned t) {
  std::unique_lock guard(split_mu_, std::try_to_lock);
  if (!guard.owns_lock()) return;  // another thread is splitting
  const Shape sh = shape();
  if (sh.level >= kMaxLevel ||
      approx_items_.load(std::memory_order_relaxed) <= kMaxLoad * static_cast<std::int64_t>(sh.buckets())) {
    return;
  }
  const std::uint64_t src = sh.split;
  const std::uint64_t dst = src + (std::uint64_t{1} << sh.level);
  const unsigned j = static_cast<unsigned>(std::bit_width(dst)) - initial_log2_;
  if (Status s = ensure_segment(tc, j); !s.ok()) {
    grow_blocked_epoch_.store(epochs_->current(), std::memory_order_relaxed);
    return;
  }
  // (Tests: the hook may write keys of src now. The shape stays sh, since
  // only a split changes it and we hold split_mu_.)
  run_split_hook(src, sh.level);
  // src and dst differ in bit L >= L0 >= the stripe bits: one stripe.
  const std::uint32_t stripe = stripe_of(src);
  if (!try_lock(stripe)) return;  // busy (a transaction?): a later insert splits
  // Seqlock writer: readers of the stripe retry from here on (every store
  // below a reader may see is a release store, so it sees this one first).
  locks_[stripe].store(locks_[stripe].load(std::memory_order_relaxed) | kSplitting | kWriting,
                       std::memory_order_relaxed);

  const std::uint64_t e = epochs_->enter(t);
  Bucket* from = bucket(src);
  Bucket* to = bucket(dst);
  thread_local std::vector<std::uint64_t> list;
  thread_local std::vector<char> drop;
  thread_local std::vector<std::uint64_t> copies;
  list.clear();
  for (std::uint64_t r = valid_head(*from); r != 0; r = rec(r)->next.load(std::memory_order_relaxed)) {
    list.push_back(r);
  }
  // The copies leave out what garbage collection would drop (they need not
  // be durable first: the whole split counts only once e is).
  obsolete(list, e, /*for_split=*/true, /*absent_ok=*/true, &drop);
  copies.assign(list.size(), 0);
  bool room = true;
  for (std::size_t i = 0; i < list.size() && room; ++i) {
    if (drop[i]) continue;
    const RecordHeader* r = rec(list[i]);
    room = allocate_record(tc, t, record_size(r->key_len, record_value_len(r)), 0, &copies[i]).ok();
  }
  if (!room) {
    for (std::uint64_t c : copies) {
      if (c != 0) free_record(tc, t, c);
    }
    epochs_->exit(t);
    // Nothing changed: readers' sequences stand.
    locks_[stripe].fetch_and(~(kSplitting | kWriting | kLocked), std::memory_order_release);
    grow_blocked_epoch_.store(e, std::memory_order_relaxed);
    return;
  }
  // Two new lists, each in the old order (versions of a key keep
  // decreasing): built from the oldest record up.
  std::uint64_t head_from = 0;
  std::uint64_t head_to = 0;
  std::uint64_t copied = 0;
  for (std::size_t i = list.size(); i-- > 0;) {
    if (drop[i]) continue;
    const RecordHeader* r = rec(list[i]);
    RecordHeader* c = rec(copies[i]);
    const bool moves = (make_key(record_key(r)).h1 >> sh.level) & 1;
    std::uint64_t& head = moves ? head_to : head_from;
    c->next.store(head, std::memory_order_relaxed);
    c->meta.store(record_meta(e, record_absent(r)), std::memory_order_relaxed);
    c->version = r->version;
    const std::uint32_t value_len = record_value_len(r);
    c->key_len = r->key_len;
    c->value_len.store(value_len, std::memory_order_relaxed);
    std::memcpy(reinterpret_cast<char*>(c + 1), reinterpret_cast<const char*>(r + 1), r->key_len + value_len);
    epochs_->dirty(t, c, record_size(r->key_len, value_len));
    head = copies[i];
    ++copied;
  }
  // src: the new list replaces the old one, an update like any other to the
  // role table (the old list stays reachable through f or c for the crashes
  // that lose e).
  retarget(t, e, from, head_from);
  // dst: written whole in e. Only a shape of e names it, so any crash that
  // loses part of it loses that shape too.
  to->ptr[0].store(head_to, std::memory_order_release);
  to->ptr[1].store(0, std::memory_order_release);
  to->ptr[2].store(0, std::memory_order_release);
  to->status.store(Stat{0, kNoRole, 1, e}.encode(), std::memory_order_release);
  epochs_->dirty(t, to, sizeof(Bucket));
  // The shape, versioned like a bucket: a crash that loses e finds the old
  // one, and with it the old list of src.
  const Shape next = sh.next();
  retarget(t, e, &root_->shape, next.encode());
  shape_.store(next.encode(), std::memory_order_release);
  // The old list is garbage once e is durable and no reader is on it.
  for (std::uint64_t r : list) retire(t, e, r);
  epochs_->exit(t);
  // Seqlock writer end: new generations, not splitting, unlocked.
  const LockWord w = locks_[stripe].load(std::memory_order_relaxed);
  locks_[stripe].store((w + kSplitGeneration + kWriteGeneration) & ~(kSplitting | kWriting | kLocked),
                       std::memory_order_release);
  splits_.fetch_add(1, std::memory_order_relaxed);
  copied_.fetch_add(copied, std::memory_order_relaxed);
}

}  // namespace pmhash::engine::dali
