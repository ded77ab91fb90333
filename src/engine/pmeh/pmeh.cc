// engine/pmeh/pmeh.cc - reading and writing keys (design in pmeh.h §4).
#include "engine/pmeh/pmeh.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/item.h"
#include "engine/pmeh/pmeh_index.h"
#include "engine/pmeh/pmeh_testing.h"
#include "sync/rcu.h"

namespace pmhash::engine::pmeh {
namespace {

// A read that fails validation this many times in a row goes to the owner
// (§3, "Reads"): bounded retries under heavy writing.
constexpr unsigned kReadAttempts = 16;
// A for_each scan of one segment is retried this often before the owner
// copies the segment for it (§4.6).
constexpr unsigned kScanAttempts = 4;

std::mutex copy_hook_mutex;
std::function<void(std::uint64_t)> copy_hook;
std::atomic<bool> has_copy_hook{false};

void run_copy_hook(std::uint64_t x) {
  if (!has_copy_hook.load(std::memory_order_relaxed)) return;
  std::function<void(std::uint64_t)> hook;
  {
    std::lock_guard lock(copy_hook_mutex);
    hook = copy_hook;
  }
  if (hook) hook(x);
}

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void testing::set_segment_copy_hook(std::function<void(std::uint64_t x)> hook) {
  std::lock_guard lock(copy_hook_mutex);
  has_copy_hook.store(static_cast<bool>(hook));
  copy_hook = std::move(hook);
}

PmehIndex::PmehIndex(const Env& env)
    : env_(env),
      region_(env.pool->region()),
      heap_(*env.heap),
      view_(env.pool->region(), env.pool->heap_offset(), env.pool->heap_size(), env.heap),
      root_(reinterpret_cast<Root*>(env.pool->root())),
      mailboxes_(new Mailbox[kMaxThreads]) {
  Params p{};
  std::memcpy(&p, env.pool->header().engine_params, sizeof(p));
  z_ = p.zone_bits;
  s_ = p.segment_log2;
  nb_ = s_ >= kMinSegmentLog2 && s_ <= kMaxSegmentLog2 ? buckets_per_segment(s_) : 0;
  const Config c = Config::from(env.options);
  delegate_reads_ = c.delegate_reads;
  split_bits_ = c.split_bits;
  opportunistic_ = c.opportunistic;
  write_mode_ = c.write_mode;
  split_step_ = c.split_step;
  idle_steps_ = c.idle_steps;
}

PmehIndex::~PmehIndex() {
  close();
  if (zones_) {
    for (unsigned z = 0; z < (1u << z_); ++z) delete zones_[z].split.load();
  }
  if (seg_state_ != nullptr) ::munmap(seg_state_, seg_state_bytes_);
}

std::uint64_t PmehIndex::segment_of(std::uint64_t h1) const {
  const Dir* d = zones_[zone_of(h1)].dir.load(std::memory_order_acquire);
  return d->entry[top_bits(h1, d->depth)].load(std::memory_order_acquire);
}

// ---------------------------------------------------------------------------
// Slots
// ---------------------------------------------------------------------------

Status PmehIndex::damaged_segment(std::uint64_t h1, std::uint64_t off) const {
  return fail("the directory entry of hash " + std::to_string(h1) + " in zone " +
              std::to_string(zone_of(h1)) + " names offset " + std::to_string(off) +
              ", which is no segment of the heap (damaged pool; 'pmhash scan --skip-damaged' "
              "salvages the rest)");
}

bool PmehIndex::matches(const SlotView& v, const Key& key) const {
  if (!meta_valid(v.meta) || meta_fp(v.meta) != fingerprint(key.h2)) return false;
  if (meta_is_inline(v.meta)) {
    return key.bytes.size() <= kInlineMax && meta_key_len(v.meta) == key.bytes.size() &&
           v.w0 == pack_word(key.bytes);
  }
  if (v.w1 != key.h1 || pool::pptr_tag(v.w0) != pointer_tag(key.h2)) return false;
  const auto* item = checked_item(view_, pool::pptr_offset(v.w0));
  return item != nullptr && item_key(item) == key.bytes;
}

PmehIndex::Pos PmehIndex::find(SegmentHeader* h, const Key& key) const {
  Bucket* buckets = segment_buckets(h);
  const unsigned home = home_bucket(key.h1, nb_);
  for (unsigned j : {home, (home + 1) % nb_}) {
    Bucket& b = buckets[j];
    for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
      const SlotView v{b.meta[p].load(std::memory_order_relaxed),
                       b.slot[p].w0.load(std::memory_order_relaxed),
                       b.slot[p].w1.load(std::memory_order_relaxed)};
      if (matches(v, key)) return {&b, p};
    }
  }
  return {};
}

PmehIndex::Pos PmehIndex::free_in_window(SegmentHeader* h, std::uint64_t h1) const {
  Bucket* buckets = segment_buckets(h);
  const unsigned home = home_bucket(h1, nb_);
  for (unsigned j : {home, (home + 1) % nb_}) {
    for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
      if (!meta_valid(buckets[j].meta[p].load(std::memory_order_relaxed))) return {&buckets[j], p};
    }
  }
  return {};
}

PmehIndex::SlotView PmehIndex::new_view(const Key& key, std::string_view value,
                                        std::uint64_t item) const {
  const std::uint16_t fp = fingerprint(key.h2);
  if (item == 0) {
    return {meta_inline(key.bytes.size(), value.size(), fp), pack_word(key.bytes), pack_word(value)};
  }
  return {meta_pointer(fp), pool::pptr_make(item, pointer_tag(key.h2)), key.h1};
}

void PmehIndex::store_new(const Pos& at, const SlotView& v) {
  Slot& slot = at.bucket->slot[at.p];
  slot.w0.store(v.w0, std::memory_order_release);
  slot.w1.store(v.w1, std::memory_order_release);
  region_.flush(&slot, sizeof(Slot));
  // Drain #1: the slot words (and the caller's item, drained by the caller)
  // are durable before the meta that makes them visible. The meta on media
  // is not VALID: the last write of this segment drained before its version
  // became even again.
  if (!planted::active(testing::kMetaBeforeSlotDurable)) region_.drain();
  at.bucket->meta[at.p].store(v.meta, std::memory_order_release);
  region_.flush(&at.bucket->meta[at.p], sizeof(std::uint16_t));
  // Drain #2: the insert is durable before it is acknowledged.
  region_.drain();
}

void PmehIndex::update_slot(heap::ThreadCache* tc, const Pos& at, const SlotView& old,
                            const SlotView& fresh) {
  Slot& slot = at.bucket->slot[at.p];
  std::atomic<std::uint16_t>& meta = at.bucket->meta[at.p];
  const bool old_inline = meta_is_inline(old.meta);
  const bool new_inline = meta_is_inline(fresh.meta);
  if (old_inline && new_inline && meta_value_len(old.meta) == meta_value_len(fresh.meta)) {
    // (a) Only the value word changes: one atomic store.
    slot.w1.store(fresh.w1, std::memory_order_release);
    // The new value is durable before the update is acknowledged.
    region_.persist(&slot.w1, sizeof(std::uint64_t));
    return;
  }
  if (!old_inline) tc->retire(pool::pptr_offset(old.w0));
  if (!old_inline && !new_inline) {
    // (b) Pointer to pointer: w1 (= h1) and the meta stay.
    // Drain #1: the old item's retire entry is durable before the slot stops
    // naming it (the new item was drained by the caller).
    region_.drain();
    slot.w0.store(fresh.w0, std::memory_order_release);
    // Persist #2: the update is durable before it is acknowledged.
    region_.persist(&slot.w0, sizeof(std::uint64_t));
    return;
  }
  // (c) The meta and the words change, in two lines: through the op log of
  // the owner's heap slot (common/op_log.h; its drain #1 also covers the
  // retire entry).
  write_slot_update(region_, root_->op_log[tc->slot()], slot, meta, fresh.meta, fresh.w0, fresh.w1);
}

// ---------------------------------------------------------------------------
// Reads (§4.1): lock-free and optimistic, on the caller's thread
// ---------------------------------------------------------------------------

PmehIndex::Probe PmehIndex::probe(SegmentHeader* h, std::atomic<std::uint64_t>& st,
                                  std::uint64_t v1, const Key& key, std::string* out) const {
  Bucket* buckets = segment_buckets(h);
  // A splitting segment is read through its moved bitmap (§5.2): the
  // SplitState loaded after v1 is S's as long as the version holds.
  const SplitState* sp = zones_[zone_of(key.h1)].split.load(std::memory_order_acquire);
  if (sp != nullptr && sp->s != h) sp = nullptr;
  const unsigned home = home_bucket(key.h1, nb_);
  const std::uint16_t fp = fingerprint(key.h2);
  bool found = false;
  bool damaged = false;  // a slot of the key's hash names an item outside the heap
  for (unsigned j : {home, (home + 1) % nb_}) {
    Bucket& b = sp != nullptr ? *sp->bucket(key.h1, j) : buckets[j];
    for (unsigned p = 0; p < kSlotsPerBucket && !found; ++p) {
      // Acquire loads: a word written inside a write section orders the
      // version re-read below after that section's odd bump.
      const std::uint16_t m = b.meta[p].load(std::memory_order_acquire);
      if (!meta_valid(m) || meta_fp(m) != fp) continue;
      const std::uint64_t w0 = b.slot[p].w0.load(std::memory_order_acquire);
      const std::uint64_t w1 = b.slot[p].w1.load(std::memory_order_acquire);
      if (meta_is_inline(m)) {
        if (key.bytes.size() > kInlineMax || meta_key_len(m) != key.bytes.size() ||
            w0 != pack_word(key.bytes) || meta_value_len(m) > kInlineMax) {
          continue;
        }
        if (out != nullptr) out->assign(unpack_word(w1, meta_value_len(m)));
        found = true;
      } else {
        if (w1 != key.h1 || pool::pptr_tag(w0) != pointer_tag(key.h2)) continue;
        // The item may be read only if the slot named it in a consistent
        // state: then it is retired after this version and freed after our
        // read section.
        if (st.load(std::memory_order_acquire) != v1 &&
            !planted::active(testing::kReadUnpersisted)) {
          return Probe::kRetry;
        }
        const auto* item = checked_item(view_, pool::pptr_offset(w0));
        if (item == nullptr) {
          damaged = true;
          continue;
        }
        if (item_key(item) != key.bytes) continue;
        if (out != nullptr) out->assign(item_value(item));  // null: "does it exist"
        found = true;
      }
    }
    if (found) break;
  }
  // The version is even again only once the writer's stores are durable
  // (write_slot; pmeh.h, "Durable linearizability" R1): an unchanged even
  // version means that what we read was durable.
  if (st.load(std::memory_order_acquire) != v1 &&
      !(found && planted::active(testing::kReadUnpersisted))) {
    return Probe::kRetry;
  }
  if (!found && damaged) return Probe::kDamaged;
  return found ? Probe::kFound : Probe::kNotFound;
}

Status PmehIndex::get(const Key& key, std::string* value) {
  if (!delegate_reads_) {
    for (unsigned attempt = 0; attempt < kReadAttempts; ++attempt) {
      Probe r = Probe::kRetry;
      {
        rcu::ReadGuard guard;
        const std::uint64_t off = segment_of(key.h1);
        if (!seg_in_heap(off)) return damaged_segment(key.h1, off);
        std::atomic<std::uint64_t>& st = seg_state(off);
        const std::uint64_t v1 = st.load(std::memory_order_acquire);
        // Odd: a writer is inside. DEAD: split away, the directory names
        // its children now.
        if ((v1 & kSegDead) == 0 &&
            ((v1 & 1) == 0 || planted::active(testing::kReadUnpersisted))) {
          r = probe(seg(off), st, v1, key, value);
        }
      }
      if (r == Probe::kFound) return Status::OK();
      if (r == Probe::kNotFound) return Status::NotFound();
      if (r == Probe::kDamaged) {
        return fail("a slot of the key names an item that lies outside the heap (damaged pool)");
      }
      read_retries_.fetch_add(1, std::memory_order_relaxed);
      cpu_pause();
    }
  }
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  Request req;
  req.op = Request::kGet;
  req.key = &key;
  req.out = value;
  return delegate(tc, zone_of(key.h1), req, nullptr);
}

Status PmehIndex::owner_get(const Key& key, std::string* out) const {
  // OWNED: the owner is the zone's only writer, the version cannot move.
  // SHARED: direct writers may move it; retry like any reader (no split
  // can kill the segment meanwhile: only this thread splits the zone).
  for (;;) {
    const std::uint64_t off = segment_of(key.h1);
    if (!seg_in_heap(off)) return damaged_segment(key.h1, off);
    std::atomic<std::uint64_t>& st = seg_state(off);
    const std::uint64_t v1 = st.load(std::memory_order_acquire);
    if ((v1 & 1) != 0) {
      cpu_pause();
      continue;
    }
    const Probe r = probe(seg(off), st, v1, key, out);
    if (r == Probe::kFound) return Status::OK();
    if (r == Probe::kNotFound) return Status::NotFound();
    if (r == Probe::kDamaged) {
      return fail("a slot of the key names an item that lies outside the heap (damaged pool)");
    }
  }
}

// ---------------------------------------------------------------------------
// Writes (§4.2 - §4.4): prepared by the caller, run by the zone's owner
// ---------------------------------------------------------------------------

Status PmehIndex::write(Request::Op op, const Key& key, std::string_view value,
                        std::optional<std::string_view> expected, bool swap_remove) {
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  Request req;
  req.op = op;
  req.key = &key;
  req.value = value;
  req.expected = expected;
  req.swap_remove = swap_remove;
  std::uint64_t item = 0;
  if (!req.removes() && !fits_inline(key.bytes.size(), value.size())) {
    const std::size_t n = item_size(key.bytes.size(), value.size());
    if (s = tc->allocate(n, &item, false, kItemIntent); s.is_no_space()) {
      // The values that updates replace and the items removes unlink are
      // retired by the owner that ran them, into its own log, not ours:
      // Store's retry after NoSpace empties only this thread's log, so a
      // pool full of such garbage stays full unless the owners empty theirs.
      drain_owners_retired(tc);
      s = tc->allocate(n, &item, false, kItemIntent);
    }
    if (!s.ok()) return s;
    auto* h = region_.at<ItemHeader>(item);
    item_write(h, key.h1, key.bytes, value);
    region_.flush(h, n);
    // The item, its allocation bit and intent are durable before the owner
    // publishes it: the owner's drain orders only the owner's own flushes.
    region_.drain();
  }
  req.item = item;
  Request result = req;
  const unsigned z = zone_of(key.h1);
  Zone& zone = zones_[z];
  Mailbox& m = mailboxes_[tc->slot()];
  if (!m.counted) note_caller(m);
  bool direct = false;
  if (zone.mode.load(std::memory_order_relaxed) == kShared) {
    // A direct op (§7.3): announce, then read the mode (Dekker with the
    // owner's switch back to OWNED, which stores TO_OWNED, then reads
    // every announcement).
    m.announce.store(z, std::memory_order_seq_cst);
    if (zone.mode.load(std::memory_order_seq_cst) == kShared) {
      const bool probe_on = check_regimes_.load(std::memory_order_relaxed);
      if (probe_on) {
        zone.direct_inside.fetch_add(1, std::memory_order_seq_cst);
        if (zone.owner_inside.load(std::memory_order_seq_cst) != 0) overlaps_.fetch_add(1);
      }
      direct = direct_write(tc, result, &s);
      if (probe_on) {
        if (zone.owner_inside.load(std::memory_order_seq_cst) != 0) overlaps_.fetch_add(1);
        zone.direct_inside.fetch_sub(1, std::memory_order_seq_cst);
      }
    }
    // Release: our writes happen before the owner's next lock-free write.
    m.announce.store(kNoZone, std::memory_order_release);
  }
  if (direct) {
    count_.extra(tc->slot()).direct.fetch_add(1, std::memory_order_relaxed);
    // The monitor's counts; with every zone direct for good it is off, and
    // a shared counter per zone would only move lines between the cores.
    if (!all_direct_.load(std::memory_order_relaxed)) {
      zone.ops.fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    // Not SHARED, or the op needs the owner (a split or a directory fill).
    result = req;
    s = delegate(tc, z, req, &result);
  }
  if (item != 0) {
    if (!result.published) tc->free_unpublished(item);  // no other thread ever saw it
    tc->clear_intent(kItemIntent);
  }
  // A split that found no room: free the owners' garbage before Store
  // retries the write once.
  if (s.is_no_space()) drain_owners_retired(tc);
  return s;
}

void PmehIndex::drain_owners_retired(heap::ThreadCache* tc) {
  Request req;
  req.op = Request::kDrainRetired;
  // Owner o runs zone o (zones are dealt round-robin); owners beyond the
  // zones run none and retire nothing.
  const unsigned n = std::min(workers(), 1u << z_);
  for (unsigned o = 0; o < n; ++o) delegate(tc, o, req, nullptr);
}

Status PmehIndex::insert(const Key& key, std::string_view value) {
  return write(Request::kInsert, key, value);
}
Status PmehIndex::update(const Key& key, std::string_view value) {
  return write(Request::kUpdate, key, value);
}
Status PmehIndex::upsert(const Key& key, std::string_view value) {
  return write(Request::kUpsert, key, value);
}
Status PmehIndex::remove(const Key& key) { return write(Request::kRemove, key, {}); }
Status PmehIndex::compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                                   std::optional<std::string_view> desired) {
  return write(Request::kSwap, key, desired.value_or(std::string_view()), expected,
               !desired.has_value());
}

bool PmehIndex::refused(const Request& r, const Pos& at, Status* why) const {
  switch (r.op) {
    case Request::kInsert:
      if (at) *why = Status::AlreadyExists("key exists");
      return static_cast<bool>(at);
    case Request::kUpdate:
    case Request::kRemove:
      if (!at) *why = Status::NotFound();
      return !at;
    case Request::kSwap: {
      // Decided on durable slots (R2): the zone's writer is the only one
      // inside the window, and every write before it was durable when it
      // left.
      if (!at) {
        // Absent: a conflict when a value was expected; else absent as
        // expected, and to stay absent when the swap removes (nothing to
        // write), or inserted.
        if (r.expected) {
          *why = Status::Conflict("the key is absent");
        } else {
          *why = Status::OK();
        }
        return r.expected.has_value() || r.swap_remove;
      }
      const Bucket& b = *at.bucket;
      if (r.expected && slot_value_is(view_, b.meta[at.p].load(std::memory_order_relaxed),
                                      b.slot[at.p].w0.load(std::memory_order_relaxed),
                                      b.slot[at.p].w1.load(std::memory_order_relaxed),
                                      *r.expected)) {
        return false;
      }
      *why = Status::Conflict("the key's value is not the expected one");
      return true;
    }
    default:
      return false;
  }
}

Status PmehIndex::execute(heap::ThreadCache* tc, Request& r) {
  switch (r.op) {
    case Request::kGet: {
      rcu::ReadGuard guard;
      return owner_get(*r.key, r.out);
    }
    case Request::kScan:
      if (zones_[zone_of(r.scan_x)].mode.load(std::memory_order_relaxed) == kShared) {
        // Direct writers may move the version: copy optimistically until
        // a copy validates (no split can happen meanwhile: we split).
        for (;;) {
          r.batch->clear();
          ScanDamage damage;
          if (copy_segment(r.scan_x, /*optimistic=*/true, r.batch, &r.scan_next, &r.scan_last,
                           &damage)) {
            *r.scan_damage = std::move(damage);
            break;
          }
          std::this_thread::yield();
        }
        return Status::OK();
      }
      copy_segment(r.scan_x, /*optimistic=*/false, r.batch, &r.scan_next, &r.scan_last,
                   r.scan_damage);
      return Status::OK();
    case Request::kDrainRetired:
      // Between two operations: no read-side section is open here.
      tc->drain_retired();
      return Status::OK();
    default:
      return owner_write(tc, r);
  }
}

Status PmehIndex::owner_write(heap::ThreadCache* tc, Request& r) {
  const Key& key = *r.key;
  const unsigned z = zone_of(key.h1);
  // SHARED (§7): direct writers may be inside the zone's segments, so the
  // owner takes each segment's version by CAS like them. Only this thread
  // changes the mode, so it cannot change during the op.
  const bool shared = zones_[z].mode.load(std::memory_order_relaxed) == kShared;
  // Test probe (check_regimes): a lock-free owner write never meets a
  // direct writer in the zone.
  struct OwnerProbe {
    PmehIndex* self = nullptr;
    Zone* zone = nullptr;
    void check() const {
      if (zone->direct_inside.load(std::memory_order_seq_cst) != 0) self->overlaps_.fetch_add(1);
    }
    ~OwnerProbe() {
      if (zone == nullptr) return;
      check();
      zone->owner_inside.fetch_sub(1, std::memory_order_seq_cst);
    }
  } probe_guard;
  if (!shared && check_regimes_.load(std::memory_order_relaxed)) {
    probe_guard.self = this;
    probe_guard.zone = &zones_[z];
    zones_[z].owner_inside.fetch_add(1, std::memory_order_seq_cst);
    probe_guard.check();
  }
  // An update or remove may retire an item, a split retires its segment:
  // room before the read section.
  tc->reserve_retire(1);
  // Lazy fill (§6): the zone moves into the newest directory at its first
  // write after the directory appeared.
  if (Dir* newest = newest_.load(std::memory_order_acquire);
      zones_[z].dir.load(std::memory_order_relaxed) != newest) {
    fill_zone(tc, z, newest);
  }
  // A split in flight in the zone takes a step (§5.3), outside the read
  // section (it may complete the split). A write on S moves its window
  // first, so that it works in the child only.
  if (const SplitState* sp = zones_[z].split.load(std::memory_order_relaxed)) {
    split_step(tc, z, segment_of(key.h1) == sp->s_off, key.h1);
  }
  for (;;) {
    // Room again: a step or split above may have used the reservation.
    tc->reserve_retire(1);
    std::uint64_t full = 0;
    bool child_full = false;
    {
      rcu::ReadGuard guard;
      const std::uint64_t off = segment_of(key.h1);
      SegmentHeader* h = seg(off);
      // Versions are S's, also for writes into its children.
      std::atomic<std::uint64_t>& st = seg_state(off);
      // SHARED: the window is read under the version taken, released
      // (bumped) on every way out that writes nothing.
      if (shared) enter_segment(z, st);
      if (const SplitState* sp = zones_[z].split.load(std::memory_order_relaxed);
          sp != nullptr && sp->s_off == off) {
        h = sp->child[sp->child_of(key.h1)];
        child_full = true;
      }
      const Pos at = find(h, key);
      if (Status why; refused(r, at, &why)) {
        if (shared) st.fetch_add(1, std::memory_order_release);
        return why;
      }
      const Pos target = at ? at : free_in_window(h, key.h1);
      if (target) {
        write_slot(tc, r, st, target, at, shared);
        return Status::OK();
      }
      if (shared) st.fetch_add(1, std::memory_order_release);
      full = off;
    }
    // The window is full: split its segment (outside the read section: the
    // split may wait for a grace period to make room in the retire log),
    // then try again in the child. A full window in a child of the split in
    // flight completes that split first (§5.3, eager).
    if (child_full) {
      eager_.fetch_add(1, std::memory_order_relaxed);
      finish_split(tc, z);
    } else if (Status s = split(tc, z, full, key.h1); !s.ok()) {
      return s;
    }
  }
}

void PmehIndex::write_slot(heap::ThreadCache* tc, Request& r, std::atomic<std::uint64_t>& st,
                           const Pos& target, const Pos& at, bool locked) {
  const Key& key = *r.key;
  // Odd: optimistic readers of this segment retry until the write is done
  // (locked: the writer took it odd by CAS already, §7).
  if (!locked) st.fetch_add(1, std::memory_order_acq_rel);
  Bucket& b = *target.bucket;
  const SlotView old{b.meta[target.p].load(std::memory_order_relaxed),
                     b.slot[target.p].w0.load(std::memory_order_relaxed),
                     b.slot[target.p].w1.load(std::memory_order_relaxed)};
  if (r.removes()) {
    if (!meta_is_inline(old.meta)) {
      tc->retire(pool::pptr_offset(old.w0));
      // Drain #1: the retire entry is durable before the slot stops naming
      // the item (else a crash would leak it).
      region_.drain();
    }
    b.meta[target.p].store(static_cast<std::uint16_t>(old.meta & ~kMetaValid),
                           std::memory_order_release);
    // The removal is durable before it is acknowledged (inline: the only fence).
    region_.persist(&b.meta[target.p], sizeof(std::uint16_t));
    add_count(tc, -1);
  } else if (at) {
    update_slot(tc, at, old, new_view(key, r.value, r.item));
    r.published = r.item != 0;
  } else {
    store_new(target, new_view(key, r.value, r.item));
    r.published = r.item != 0;
    add_count(tc, 1);
  }
  // Even: every store above is durable (quiescent unlock), so the next
  // writer of these slots need not fence first.
  st.fetch_add(1, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Direct writes in SHARED zones (§7.3)
// ---------------------------------------------------------------------------

bool PmehIndex::try_lock_segment(std::atomic<std::uint64_t>& st) {
  std::uint64_t v = st.load(std::memory_order_relaxed);
  if ((v & (1 | kSegDead)) != 0) return false;
  // Acquire: the previous writer's stores (released with the version) are
  // visible; the slots are ours until we release.
  return st.compare_exchange_strong(v, v + 1, std::memory_order_acq_rel,
                                    std::memory_order_relaxed);
}

void PmehIndex::enter_segment(unsigned z, std::atomic<std::uint64_t>& st) {
  if (zones_[z].mode.load(std::memory_order_relaxed) != kShared) {
    // OWNED: no other writer, no CAS.
    st.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  // Direct writers hold a segment for one slot write, without waiting for
  // anything, so this wait is short (and never DEAD: only we split).
  while (!try_lock_segment(st)) std::this_thread::yield();
}

bool PmehIndex::direct_write(heap::ThreadCache* tc, Request& r, Status* result) {
  const Key& key = *r.key;
  const unsigned z = zone_of(key.h1);
  // Structural work stays with the owner: a zone not yet filled into the
  // newest directory is filled by its owner's next write.
  if (zones_[z].dir.load(std::memory_order_acquire) != newest_.load(std::memory_order_acquire)) {
    return false;
  }
  // Room for an update's or a remove's retired item, outside the read
  // section (it may wait for a grace period).
  tc->reserve_retire(1);
  for (;;) {
    {
      rcu::ReadGuard guard;
      const std::uint64_t off = segment_of(key.h1);
      std::atomic<std::uint64_t>& st = seg_state(off);
      // Odd (a writer inside) or DEAD (split away): leave the read section
      // before waiting (the owner may wait for a grace period while it
      // holds a segment), then locate again.
      if (try_lock_segment(st)) {
        SegmentHeader* h = seg(off);
        // A segment with a split in flight (pmeh.h, "Writes during a
        // split"): its moves and completion run on the owner's path only.
        // A key whose whole window is moved lives in its child, and the
        // write goes there, under S's version, as the owner's would; an
        // unmoved window is the owner's to move. Acquire on the version: a
        // split started before we took it is seen, and so are the moved
        // bits of every batch released before.
        if (const SplitState* sp = zones_[z].split.load(std::memory_order_acquire);
            sp != nullptr && sp->s_off == off) {
          const unsigned home = home_bucket(key.h1, nb_);
          if (!sp->is_moved(home) || !sp->is_moved((home + 1) % nb_)) {
            st.fetch_add(1, std::memory_order_release);
            return false;
          }
          h = sp->child[sp->child_of(key.h1)];
          count_.extra(tc->slot()).split_direct.fetch_add(1, std::memory_order_relaxed);
        }
        const Pos at = find(h, key);
        if (refused(r, at, result)) {
          st.fetch_add(1, std::memory_order_release);
          return true;
        }
        const Pos target = at ? at : free_in_window(h, key.h1);
        if (!target) {
          // The window is full: the owner splits (or, in a child of the
          // split in flight, completes that split first).
          st.fetch_add(1, std::memory_order_release);
          return false;
        }
        write_slot(tc, r, st, target, at, /*locked=*/true);
        *result = Status::OK();
        return true;
      }
    }
    std::this_thread::yield();
  }
}

// ---------------------------------------------------------------------------
// Iteration and counting (§4.6)
// ---------------------------------------------------------------------------

bool PmehIndex::copy_segment(std::uint64_t x, bool optimistic,
                             std::vector<std::pair<std::string, std::string>>* batch,
                             std::uint64_t* next, bool* last, ScanDamage* damage) const {
  rcu::ReadGuard guard;
  const std::uint64_t off = segment_of(x);
  // The segment is checked against its heap block, and its header against
  // the entry that names it: a damaged depth or prefix would send the walk
  // backwards (no end) or off its zone. Such a segment is passed over to
  // the next directory entry; its slots are not counted.
  {
    const SegmentHeader* h = seg_in_heap(off) ? seg(off) : nullptr;
    const unsigned g = zones_[zone_of(x)].dir.load(std::memory_order_acquire)->depth;
    if (h == nullptr || heap_.block_size(off) != (std::size_t{1} << s_) ||
        h->magic != kSegmentMagic || h->depth < z_ || h->depth > g || h->nb != nb_ ||
        !in_range(x, h->prefix, h->depth)) {
      damage->note("the directory entry of hash " + std::to_string(x) + " names offset " +
                   std::to_string(off) + ", which is not a segment covering it");
      const std::uint64_t top = top_bits(x, g);
      *last = g == 0 || top == (std::uint64_t{1} << g) - 1;
      *next = *last ? 0 : (top + 1) << (64 - g);
      return true;
    }
  }
  SegmentHeader* h = seg(off);
  if (optimistic) run_copy_hook(x);
  std::atomic<std::uint64_t>& st = seg_state(off);
  const std::uint64_t v1 = st.load(std::memory_order_acquire);
  // Odd: a writer, a move batch or a completion is inside. DEAD: S was
  // split away after we read its entry; its buckets miss what was written
  // into its children: the caller starts over from the directory.
  if (optimistic && (v1 & (1 | kSegDead)) != 0) return false;
  std::vector<SlotView> raw;
  // A splitting segment: S's unmoved buckets and every child's moved ones.
  const SplitState* sp = zones_[zone_of(x)].split.load(std::memory_order_acquire);
  if (sp != nullptr && sp->s != h) sp = nullptr;
  auto copy_bucket = [&](Bucket& b) {
    for (unsigned p = 0; p < kSlotsPerBucket; ++p) {
      const std::uint16_t m = b.meta[p].load(std::memory_order_acquire);
      if (!meta_valid(m)) continue;
      raw.push_back({m, b.slot[p].w0.load(std::memory_order_acquire),
                     b.slot[p].w1.load(std::memory_order_acquire)});
    }
  };
  Bucket* buckets = segment_buckets(h);
  for (unsigned j = 0; j < nb_; ++j) {
    if (sp != nullptr && sp->is_moved(j)) {
      for (unsigned i = 0; i < (1u << sp->k); ++i) copy_bucket(segment_buckets(sp->child[i])[j]);
    } else {
      copy_bucket(buckets[j]);
    }
  }
  if (optimistic && st.load(std::memory_order_acquire) != v1) return false;
  // A consistent copy: every item it names is freed only after our read
  // section. x inside the segment's range (a scan's cursor that no call
  // returned): only the keys from x on (pmeh.h, "Scan").
  const bool from_x = x != h->prefix;
  for (const SlotView& v : raw) {
    if (meta_is_inline(v.meta)) {
      if (meta_key_len(v.meta) > kInlineMax || meta_value_len(v.meta) > kInlineMax) {
        damage->note("segment " + std::to_string(off) + " holds an inline slot with lengths over 8");
        continue;
      }
      if (from_x && make_key(unpack_word(v.w0, meta_key_len(v.meta))).h1 < x) continue;
      batch->emplace_back(unpack_word(v.w0, meta_key_len(v.meta)),
                          unpack_word(v.w1, meta_value_len(v.meta)));
    } else {
      if (from_x && v.w1 < x) continue;  // w1 = the key's h1
      // Checked against the item's whole block: scans salvage damaged pools.
      const auto* item = checked_item(view_, pool::pptr_offset(v.w0), /*in_block=*/true);
      if (item == nullptr) {
        damage->note("segment " + std::to_string(off) + " names an item at offset " +
                     std::to_string(pool::pptr_offset(v.w0)) + " outside the heap or its block");
        continue;
      }
      batch->emplace_back(item_key(item), item_value(item));
    }
  }
  const unsigned depth = h->depth;
  const std::uint64_t top = top_bits(h->prefix, depth);
  *last = depth == 0 || top == (std::uint64_t{1} << depth) - 1;
  *next = *last ? 0 : (top + 1) << (64 - depth);
  return true;
}

Status PmehIndex::for_each(const ForEachFn& fn) { return salvage(fn, nullptr); }

Status PmehIndex::copy_part(std::uint64_t x, Batch* batch, ScanDamage* damage,
                            std::uint64_t* next, bool* last) {
  for (unsigned attempt = 0; attempt < kScanAttempts; ++attempt) {
    batch->clear();
    *damage = {};
    if (copy_segment(x, /*optimistic=*/true, batch, next, last, damage)) return Status::OK();
  }
  // Writers kept moving the version: the zone's owner copies the segment
  // between two of its requests (§4.6).
  batch->clear();
  *damage = {};
  Status s;
  heap::ThreadCache* tc = heap_.thread(&s);
  if (tc == nullptr) return s;
  Request req;
  req.op = Request::kScan;
  req.scan_x = x;
  req.batch = batch;
  req.scan_damage = damage;
  Request result;
  if (s = delegate(tc, zone_of(x), req, &result); !s.ok()) return s;
  *next = result.scan_next;
  *last = result.scan_last;
  return Status::OK();
}

Status PmehIndex::salvage(const ForEachFn& fn, std::uint64_t* skipped) {
  // Walks the hash space in prefix order, zone after zone. x always starts
  // a segment's range (ranges only subdivide), so every point of the hash
  // space is visited once (§4.6).
  Batch batch;
  for (std::uint64_t x = 0;;) {
    std::uint64_t next = 0;
    bool last = false;
    ScanDamage damage;
    if (Status s = copy_part(x, &batch, &damage, &next, &last); !s.ok()) return s;
    if (damage.count != 0) {
      if (skipped == nullptr) {
        return fail(damage.first + " (damaged pool; 'pmhash scan --skip-damaged' salvages the rest)");
      }
      *skipped += damage.count;
    }
    for (auto& [k, v] : batch) {
      if (!fn(k, v)) return Status::OK();
    }
    if (last) return Status::OK();
    x = next;
  }
}

Status PmehIndex::scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
                       std::uint64_t* next) {
  // Position = h1 (pmeh.h, "Scan"): whole segment ranges from the one that
  // holds the cursor, the first one's keys from the cursor on.
  *next = 0;
  Batch batch;
  std::size_t passed = 0;
  for (std::uint64_t x = cursor;;) {
    std::uint64_t end = 0;
    bool last = false;
    ScanDamage damage;
    if (Status s = copy_part(x, &batch, &damage, &end, &last); !s.ok()) return s;
    if (damage.count != 0) {
      return fail(damage.first + " (damaged pool; 'pmhash scan --skip-damaged' salvages the rest)");
    }
    for (auto& [k, v] : batch) fn(k, v);  // outside the read section
    passed += batch.size();
    if (last) return Status::OK();
    x = end;
    if (passed >= count) {
      *next = x;
      return Status::OK();
    }
  }
}

std::uint64_t PmehIndex::direct_split_writes() const {
  std::uint64_t n = 0;
  count_.for_each_extra([&](const DirectOps& d) { n += d.split_direct.load(std::memory_order_relaxed); });
  return n;
}

std::uint64_t PmehIndex::direct_ops() const {
  std::uint64_t n = 0;
  count_.for_each_extra([&](const DirectOps& d) { n += d.direct.load(std::memory_order_relaxed); });
  return n;
}

void PmehIndex::add_count(heap::ThreadCache* tc, std::int64_t delta) {
  count_.add(tc->slot(), delta);
}

std::int64_t PmehIndex::count_items() const {
  // After a crash the saved count is gone: count every segment's VALID
  // slots. Writes running meanwhile may or may not be counted (size() is
  // exact only when quiescent).
  std::int64_t n = 0;
  std::vector<std::pair<std::string, std::string>> batch;
  for (unsigned z = 0; z < (1u << z_); ++z) {
    std::uint64_t x = z_ == 0 ? 0 : std::uint64_t{z} << (64 - z_);
    for (;;) {
      std::uint64_t next = 0;
      bool last = false;
      batch.clear();
      // Damaged slots (check() names them) are not counted.
      ScanDamage damage;
      while (!copy_segment(x, /*optimistic=*/true, &batch, &next, &last, &damage)) {
        batch.clear();
        damage = {};
      }
      n += static_cast<std::int64_t>(batch.size());
      if (last || zone_of(next) != z) break;
      x = next;
    }
  }
  return n;
}

std::uint64_t PmehIndex::size() const {
  return count_.total_or_count([this] { return count_items(); });
}

Status PmehIndex::sync() {
  // Every acknowledged write is already durable (strict durability).
  return Status::OK();
}

void PmehIndex::fill_stats(Stats* st) const {
  st->items = size();
  std::uint64_t segments = 0;
  unsigned levels = 0;
  for (unsigned i = 0; i < kMaxDirs; ++i) {
    if (dirs_[i].load(std::memory_order_acquire) != nullptr) ++levels;
  }
  // Distinct segments: each zone's directory names a segment of depth L
  // by 2^(G-L) consecutive entries.
  {
    rcu::ReadGuard guard;
    for (unsigned z = 0; z < (1u << z_); ++z) {
      const Dir* d = zones_[z].dir.load(std::memory_order_acquire);
      const std::uint64_t per_zone = std::uint64_t{1} << (d->depth - z_);
      for (std::uint64_t e = std::uint64_t{z} * per_zone; e < (z + 1) * per_zone;) {
        const std::uint64_t off = d->entry[e].load(std::memory_order_acquire);
        // A damaged entry counts as a segment of its own.
        const unsigned l = seg_in_heap(off) ? seg(off)->depth : d->depth;
        ++segments;
        e += std::uint64_t{1} << (d->depth - std::min<unsigned>(l, d->depth));
      }
    }
  }
  std::uint64_t shared_zones = 0;
  for (unsigned z = 0; z < (1u << z_); ++z) {
    if (zones_[z].mode.load(std::memory_order_relaxed) != kOwned) ++shared_zones;
  }
  // Children of the splits in flight hold slots too.
  std::uint64_t children = 0;
  {
    rcu::ReadGuard guard;
    for (unsigned z = 0; z < (1u << z_); ++z) {
      if (const SplitState* sp = zones_[z].split.load(std::memory_order_acquire)) {
        children += std::uint64_t{1} << sp->k;
        // A gradual split in flight: an idle owner may step it at any
        // moment, so the pool is changing even with no call in flight.
        st->resizing = true;
      }
    }
  }
  st->slots = (segments + children) * nb_ * kSlotsPerBucket;
  st->load_factor = st->slots == 0 ? 0 : static_cast<double>(st->items) / st->slots;
  const std::uint64_t moved = items_moved_.load(std::memory_order_relaxed);
  // In the descriptor's order (descriptor.cc).
  st->add_property("pmeh.directories", levels);
  st->add_property("pmeh.directory_installs", expansions_.load(std::memory_order_relaxed));
  st->add_property("pmeh.segments", segments);
  st->add_property("pmeh.splits", splits_.load(std::memory_order_relaxed));
  st->add_property("pmeh.items_moved", moved);
  // 16-byte slot and 2-byte meta per moved pair (items are not copied).
  st->add_property("pmeh.bytes_moved", moved * (sizeof(Slot) + sizeof(std::uint16_t)));
  st->add_property("pmeh.delegated_ops", delegated_.load(std::memory_order_relaxed));
  st->add_property("pmeh.read_retries", read_retries_.load(std::memory_order_relaxed));
  st->add_property("pmeh.eager_split_completions", eager_.load(std::memory_order_relaxed));
  st->add_property("pmeh.zone_switches", zone_switches_.load(std::memory_order_relaxed));
  st->add_property("pmeh.shared_zones", shared_zones);
  st->add_property("pmeh.direct_ops", direct_ops());
  st->dram_bytes = sizeof(Zone) * (std::size_t{1} << z_) + sizeof(Mailbox) * kMaxThreads +
                   sizeof(Owner) * owners_.size() + sizeof(Dir) * levels;
}

}  // namespace pmhash::engine::pmeh
