// engine/dali/scan.cc - the resumable scan (dali.h, "Scan"): buckets in the
// order of their reversed hash bits, each read as get() reads one.
#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/dali/dali_index.h"
#include "engine/dali/dali_testing.h"

namespace pmhash::engine::dali {

namespace {

std::mutex hook_mutex;
std::function<void(std::uint64_t, unsigned)> scan_hook;
std::atomic<bool> has_scan_hook{false};

void run_scan_hook(std::uint64_t bucket, unsigned depth) {
  if (!has_scan_hook.load(std::memory_order_relaxed)) return;
  std::function<void(std::uint64_t, unsigned)> hook;
  {
    std::lock_guard lock(hook_mutex);
    hook = scan_hook;
  }
  if (hook) hook(bucket, depth);
}

// The keys met on one list, newest record first: only the first record of
// a key counts (dali.h, "record"). Lists are short (about two keys per
// bucket), so a linear search, until a long one (growth paused by a full
// pool) makes a hash set worth it.
class SeenKeys {
 public:
  void clear() {
    few_.clear();
    if (!many_.empty()) many_.clear();
  }
  // True when `key` was not met before on this list.
  bool insert(std::string_view key) {
    if (!many_.empty()) return many_.insert(key).second;
    for (std::string_view k : few_) {
      if (k == key) return false;
    }
    few_.push_back(key);
    if (few_.size() > kFew) many_.insert(few_.begin(), few_.end());
    return true;
  }

 private:
  static constexpr std::size_t kFew = 32;
  std::vector<std::string_view> few_;
  std::unordered_set<std::string_view> many_;
};

}  // namespace

void testing::set_scan_hook(std::function<void(std::uint64_t bucket, unsigned depth)> hook) {
  std::lock_guard lock(hook_mutex);
  has_scan_hook.store(static_cast<bool>(hook));
  scan_hook = std::move(hook);
}

unsigned DaliIndex::depth_of(Shape sh, std::uint64_t index) {
  // Buckets below the split pointer, and the new ones at 2^L and above,
  // are chosen by L+1 bits of the hash; the others by L.
  return index < sh.split || index >= (std::uint64_t{1} << sh.level) ? sh.level + 1 : sh.level;
}

Status DaliIndex::scan_bucket(unsigned t, std::uint64_t pos, ScanBatch* batch,
                              std::uint64_t* end) {
  // The hash whose position is `pos`: it names the bucket, and its stripe
  // is the bucket's (the low stripe bits of a bucket index are the hash's).
  const std::uint64_t h = reverse_bits(pos);
  std::atomic<LockWord>& l = locks_[stripe_of(h)];
  thread_local SeenKeys seen;
  for (;;) {
    // Seqlock reader, as get(): wait out a change under way, read, and read
    // again if the stripe changed meanwhile (a write, a split, a commit, a
    // garbage collection). The shape is read after w1: a split of this
    // stripe that ended before w1 is in it (its release store of the lock
    // word comes after its store of the shape), and one that begins later
    // moves the generation. Splits of other stripes do not change which
    // bucket holds h (dali.h, "Scan").
    const LockWord w1 = l.load(std::memory_order_acquire);
    if (w1 & (kWriting | kSplitting)) {
      std::this_thread::yield();
      continue;
    }
    const Shape sh = shape();
    const std::uint64_t index = sh.bucket_of(h);
    const unsigned depth = depth_of(sh, index);
    // Tests: the hook may split this very bucket now; w1 then no longer
    // holds and the bucket is chosen again.
    run_scan_hook(index, depth);
    // The bucket covers the positions [first, first + span): those whose
    // top `depth` bits are the index's low `depth` bits reversed. span is
    // 2^(64-depth), 0 (that is 2^64) for depth 0.
    const std::uint64_t first = reverse_bits(index);
    const std::uint64_t span = (~std::uint64_t{0} >> depth) + 1;
    // Only the first bucket of a call may start before the cursor.
    const bool filter = pos != first;
    batch->keys.clear();
    std::uint64_t depends_on = 0;
    bool damaged = false;
    seen.clear();
    // Inside an epoch: nothing we reach is freed before we leave.
    epochs_->enter(t);
    std::uint64_t steps = 0;
    for (std::uint64_t r = valid_head(*bucket(index)); r != 0;
         r = rec(r)->next.load(std::memory_order_acquire)) {
      if (!record_in_heap(r) || ++steps > list_limit_) {
        damaged = true;
        break;
      }
      const RecordHeader* rh = rec(r);
      const std::string_view key = record_key(rh);
      if (!seen.insert(key)) continue;  // an older version of a key met above
      if (filter && reverse_bits(make_key(key).h1) < pos) continue;
      // The answer for this key, a value or its absence, rests on this
      // record: strict mode waits for its epoch (below).
      depends_on = std::max(depends_on, rh->version);
      if (record_absent(rh)) continue;
      // One read of the length: a rewrite in place may change it, within
      // the record's block (checked here), and moves the generation.
      const std::uint32_t n = record_value_len(rh);
      if (!view_.contains(r, record_size(rh->key_len, n))) {
        damaged = true;
        break;
      }
      std::string value(n, '\0');
      load_racy(value.data(), key.data() + key.size(), n);
      batch->keys.emplace_back(std::string(key), std::move(value));
    }
    epochs_->exit(t);
    // Every load above was an acquire load: this one cannot come first.
    if (((l.load(std::memory_order_relaxed) ^ w1) & ~kLocked) != 0) continue;
    if (damaged) return damaged_list("bucket " + std::to_string(index));
    batch->depends_on = depends_on;
    *end = first + span;  // 0: the bucket was the last one
    return Status::OK();
  }
}

Status DaliIndex::scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
                       std::uint64_t* next) {
  *next = 0;
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  const unsigned t = tc->slot();
  ScanBatch batch;
  std::uint64_t pos = cursor;
  std::size_t passed = 0;
  // Each bucket read ends at a position above the one it started from, or
  // at the end of the hash space (0): the loop ends.
  do {
    std::uint64_t end = 0;
    if (Status r = scan_bucket(t, pos, &batch, &end); !r.ok()) return r;
    // Strict: never pass a key, nor leave one out, on the word of an epoch
    // a crash could still fail (as get(), D2). Outside the epoch and
    // before fn, which runs outside any lock as well.
    if (strict_ && batch.depends_on != 0 && !planted::active(testing::kAnswerBeforeDurable)) {
      epochs_->wait_durable(batch.depends_on);
    }
    for (const auto& [k, v] : batch.keys) fn(k, v);
    passed += batch.keys.size();
    pos = end;
  } while (pos != 0 && passed < count);
  *next = pos;
  return Status::OK();
}

}  // namespace pmhash::engine::dali
