// engine/race/race.cc - the race engine (race.h has the design).
#include "engine/race/race.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/planted.h"
#include "engine/race/layout.h"
#include "engine/remote_index.h"
#include "remote/client.h"

namespace pmhash::engine::race {
namespace {

using remote::Batch;
using remote::Client;
using Clock = std::chrono::steady_clock;

std::function<bool(SplitStep, bool)>& split_hook() {
  static std::function<bool(SplitStep, bool)> hook;
  return hook;
}

inline std::uint64_t low_mask(unsigned bits) {
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

std::uint64_t kv_checksum(const std::byte* block, std::uint64_t body_bytes) {
  return XXH3_64bits(block + 8, body_bytes);
}

// A client thread's connections and their fence (remote_index::Link), its
// copy of the directory and its allocation chunks.
struct Session : remote_index::Link {
  unsigned global_depth = 0;
  std::vector<std::uint64_t> dir;  // the first 2^global_depth directory words
  remote_index::Chunks chunks;
};

struct Params {
  unsigned nodes = 0;
  unsigned initial_depth = 0;
  unsigned max_depth = 0;
  unsigned groups = 0;
  std::uint64_t directory = 0;
  std::uint32_t lease_ms = 0;  // kept in the membership stamp (race.h, "Lease")
};

// Where a key lives in any subtable: its two main buckets and fingerprint.
struct Place {
  std::uint64_t h = 0;
  unsigned fp = 0;
  unsigned bucket[2] = {0, 0};
};

// A slot read back: its address and word.
struct Slot {
  unsigned node = 0;
  std::uint64_t off = 0;  // byte offset of the slot word on `node`
  std::uint64_t word = 0;
};

// The key's two combined buckets in one subtable, read consistently.
struct View {
  unsigned node = 0;
  std::uint64_t base = 0;  // the subtable's offset on `node`
  std::uint64_t header = 0;
  std::vector<Slot> slots;  // entry slots of both combined buckets, each once, by address
  bool frozen = false;      // some slot is frozen: a split runs
  // The slot holding a word (frozen or not) equal to `e`, or nullptr.
  const Slot* find(std::uint64_t e) const {
    for (const Slot& s : slots) {
      if (entry_thawed(s.word) == e) return &s;
    }
    return nullptr;
  }
};

// A KV block read back.
struct Kv {
  Slot slot;
  std::vector<std::byte> bytes;
  const KvHeader& header() const { return *reinterpret_cast<const KvHeader*>(bytes.data()); }
  std::string_view key() const {
    return {reinterpret_cast<const char*>(bytes.data()) + sizeof(KvHeader), header().key_len};
  }
  std::string_view value() const {
    return {reinterpret_cast<const char*>(bytes.data()) + sizeof(KvHeader) + header().key_len,
            header().value_len};
  }
};

// What splits, takeovers and retries did since open (race.h, "Split").
struct SplitCounters {
  std::atomic<std::uint64_t> splits{0}, bytes{0}, moved{0}, retries{0}, takeovers{0};
  void fill(Stats* st) const {
    st->expansions = splits.load(std::memory_order_relaxed);
    st->bytes_moved = bytes.load(std::memory_order_relaxed);
    st->items_moved = moved.load(std::memory_order_relaxed);
    st->read_retries = retries.load(std::memory_order_relaxed);
    st->lock_takeovers = takeovers.load(std::memory_order_relaxed);
  }
};

class RaceIndex final : public Index {
 public:
  RaceIndex(const Options& options, std::vector<std::string> specs, Params params)
      : options_(options), specs_(std::move(specs)), params_(params), sessions_(specs_, options) {}

  template <class F>
  Status with_session(F&& f) {
    return sessions_.with([&](Session& ss) { return refresh_dir(ss); }, std::forward<F>(f));
  }

  // ---- the Index interface ----
  Status get(const Key& key, std::string* value) override {
    return with_session([&](Session& ss) {
      const Place p = place(key);
      View v;
      Kv found;
      bool any = false;
      if (Status s = read_view(ss, p, &v); !s.ok()) return s;
      if (Status s = find_key(ss, p, key, v, &found, &any); !s.ok()) return s;
      if (!any) return Status::NotFound("");
      value->assign(found.value());
      return Status::OK();
    });
  }

  Status insert(const Key& key, std::string_view value) override {
    return with_session([&](Session& ss) { return write(ss, key, value, Op::kInsert); });
  }
  Status update(const Key& key, std::string_view value) override {
    return with_session([&](Session& ss) { return write(ss, key, value, Op::kUpdate); });
  }
  Status upsert(const Key& key, std::string_view value) override {
    return with_session([&](Session& ss) { return write(ss, key, value, Op::kUpsert); });
  }
  Status remove(const Key& key) override {
    return with_session([&](Session& ss) { return write(ss, key, {}, Op::kRemove); });
  }

  Status for_each(const ForEachFn& fn) override {
    return with_session([&](Session& ss) { return scan(ss, fn, /*verify=*/false); });
  }

  std::uint64_t size() const override {
    return remote_index::count_keys(*const_cast<RaceIndex*>(this));
  }

  Status sync() override { return Status::OK(); }  // every write is durable when it returns

  Status check() override {
    return with_session([&](Session& ss) {
      return scan(ss, [](std::string_view, std::string_view) { return true; }, /*verify=*/true);
    });
  }

  void close() override { sessions_.clear(); }

  void fill_stats(Stats* st) const override {
    sessions_.fill_stats(st);
    counters_.fill(st);
  }

  // ---- create and open ----
  // Create (remote_index.h, "Create"): claim the nodes for a new
  // generation, wait out the old one, forget what they held, then the
  // subtables, the directory and the root, the magic last, then commit.
  Status format(bool force) {
    unsigned timeout = 0;
    if (Status s = remote_index::effective_timeout(options_, params_.lease_ms, "race", &timeout);
        !s.ok()) {
      return s;
    }
    sessions_.set_timeout(timeout);
    std::unique_ptr<Session> ss;
    if (Status s = sessions_.make(&ss); !s.ok()) return s;
    Session& c = *ss;
    remote_index::Identity made;
    if (Status s = remote_index::begin_create(c, force, params_.lease_ms, sizeof(IndexRoot), &made);
        !s.ok()) {
      return s;
    }

    const unsigned depth = params_.initial_depth;
    const std::uint64_t entries = std::uint64_t{1} << params_.max_depth;
    if (Status s = remote_index::alloc_direct(c, 0, entries * 8, &params_.directory); !s.ok()) {
      return s;
    }
    std::vector<std::uint64_t> tables(std::size_t{1} << depth);
    std::vector<std::vector<std::uint64_t>> images;
    images.reserve(tables.size());
    Batch b;
    for (std::uint64_t p = 0; p < tables.size(); ++p) {
      const unsigned node = static_cast<unsigned>(p % specs_.size());
      std::uint64_t off = 0;
      if (Status s = remote_index::alloc_direct(c, node, table_bytes(), &off); !s.ok()) return s;
      tables[p] = make_dir(node, off, depth);
      images.push_back(std::vector<std::uint64_t>(table_bytes() / 8, 0));
      set_headers(&images.back(), make_header(depth, p));
      b.write(node, off, images.back().data(), static_cast<std::uint32_t>(table_bytes()));
    }
    std::vector<std::uint64_t> dir(entries);
    for (std::uint64_t i = 0; i < entries; ++i) dir[i] = tables[i & low_mask(depth)];
    b.write(0, params_.directory, dir.data(), static_cast<std::uint32_t>(entries * 8));
    IndexRoot root{};
    root.head.layout_version = kLayoutVersion;
    root.head.nodes = static_cast<std::uint32_t>(specs_.size());
    root.initial_depth = depth;
    root.max_depth = params_.max_depth;
    root.groups = params_.groups;
    root.directory = params_.directory;
    root.global_depth = depth;
    b.write(0, remote::kIndexRootOffset, &root, sizeof(root));
    if (Status s = c.exec(b); !s.ok()) return s;
    // Complete and durable: the engine's index exists, for an attach once
    // the membership commits.
    b.clear();
    b.write(0, remote::kIndexRootOffset, kMagic, sizeof(kMagic));
    if (Status s = c.exec(b); !s.ok()) return s;
    if (Status s = remote_index::commit_create(c, made); !s.ok()) return s;
    return sessions_.arm(made, "race");
  }

  // Open: the nodes verified against node 0's membership record before
  // anything else of the index is read; the timeout checked against the
  // lease the create stored.
  Status attach() {
    std::unique_ptr<Session> ss;
    if (Status s = sessions_.make(&ss); !s.ok()) return s;
    remote_index::Identity id;
    if (Status s = remote_index::verify_members(*ss, "race", &id); !s.ok()) return s;
    if (Status s = sessions_.arm(id, "race"); !s.ok()) return s;
    IndexRoot root{};
    Batch b;
    b.read(0, remote::kIndexRootOffset, &root, sizeof(root));
    if (Status s = ss->exec(b); !s.ok()) return s;
    if (Status s = remote_index::check_root(*ss->client, "race", root.head.magic, kMagic,
                                            root.head.layout_version, kLayoutVersion,
                                            root.head.nodes);
        !s.ok()) {
      return s;
    }
    if (root.max_depth > kMaxDepth || root.initial_depth > root.max_depth ||
        root.groups < kMinGroups || root.groups > kMaxGroups || root.global_depth > root.max_depth) {
      return Status::Corruption("memory node " + specs_[0] + ": race root is damaged");
    }
    params_ = Params{root.head.nodes, root.initial_depth, root.max_depth, root.groups,
                     root.directory,  id.lease_ms()};
    return Status::OK();
  }

 private:
  enum class Op { kInsert, kUpdate, kUpsert, kRemove };

  // A subtable: its groups, then its trailer (layout.h).
  std::uint64_t bucket_bytes() const { return std::uint64_t{params_.groups} * kGroupBytes; }
  std::uint64_t bucket_words() const { return bucket_bytes() / 8; }
  std::uint64_t table_bytes() const { return bucket_bytes() + kTrailerBytes; }
  // Whether word w of a subtable is an entry slot (not a header, not the trailer).
  bool is_slot(std::uint64_t w) const { return w < bucket_words() && w % kSlotsPerBucket != 0; }

  void set_headers(std::vector<std::uint64_t>* image, std::uint64_t header) const {
    for (std::uint64_t w = 0; w < bucket_words(); w += kSlotsPerBucket) (*image)[w] = header;
  }

  Place place(const Key& key) const {
    Place p;
    p.h = key.h1;
    p.fp = key_fp(key.h2);
    const unsigned buckets = 2 * params_.groups;
    p.bucket[0] = static_cast<unsigned>((key.h1 >> 32) % buckets);
    p.bucket[1] = static_cast<unsigned>(key.h2 % buckets);
    if (p.bucket[1] == p.bucket[0]) p.bucket[1] = (p.bucket[0] + 1) % buckets;
    return p;
  }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::milliseconds(sessions_.timeout_ms());
  }
  // The index's lease, from its membership stamp (race.h, "Lease").
  std::chrono::milliseconds lease() const { return std::chrono::milliseconds(params_.lease_ms); }
  // A wait on a subtable's split gives up only after a lease (when it
  // takes the split over) and the remote timeout (for the takeover's work).
  Clock::duration lock_patience() const {
    return lease() + std::chrono::milliseconds(sessions_.timeout_ms());
  }


  // ---- directory ----
  Status refresh_dir(Session& ss) {
    return remote_index::read_directory(ss, "race", kGlobalDepthOff, params_.directory,
                                        params_.max_depth, &ss.dir, &ss.global_depth);
  }

  // ---- reading a key's buckets ----
  // Adds to `b` the READs of the key's two combined buckets in the subtable
  // of directory word `dw`, then a second READ of each one's first header
  // (a READ copies words in ascending order, and the batch runs in order).
  struct Raw {
    std::uint64_t w[2][kCombinedWords];
    std::uint64_t trail[2];
  };
  static void add_reads(Batch& b, std::uint64_t dw, const Place& p, Raw* raw) {
    for (int i = 0; i < 2; ++i) {
      b.read(dir_node(dw), dir_off(dw) + combined_off(p.bucket[i]), raw->w[i], kCombinedBytes);
    }
    for (int i = 0; i < 2; ++i) {
      b.read(dir_node(dw), dir_off(dw) + combined_off(p.bucket[i]), &raw->trail[i], 8);
    }
  }

  // What a Raw read shows: kGood (*v filled), kTorn (a split rewrote the
  // buckets meanwhile: read again), kElsewhere (the key belongs to another
  // subtable: refresh the directory).
  enum class Seen { kGood, kTorn, kElsewhere };
  static Seen judge(std::uint64_t dw, const Place& p, const Raw& raw, View* v) {
    const std::uint64_t hd = raw.w[0][0];
    for (int i = 0; i < 2; ++i) {
      if (raw.w[i][0] != hd || raw.w[i][8] != hd || raw.trail[i] != hd) return Seen::kTorn;
    }
    if ((p.h & low_mask(header_depth(hd))) != header_suffix(hd)) return Seen::kElsewhere;
    v->node = dir_node(dw);
    v->base = dir_off(dw);
    v->header = hd;
    v->frozen = false;
    v->slots.clear();
    for (int i = 0; i < 2; ++i) {
      const std::uint64_t at = v->base + combined_off(p.bucket[i]);
      for (unsigned w = 0; w < kCombinedWords; ++w) {
        if (w % kSlotsPerBucket == 0) continue;
        const std::uint64_t off = at + w * 8;
        const bool dup = std::any_of(v->slots.begin(), v->slots.end(),
                                     [&](const Slot& s) { return s.off == off; });
        if (!dup) v->slots.push_back(Slot{v->node, off, raw.w[i][w]});
        v->frozen |= entry_frozen(raw.w[i][w]);
      }
    }
    std::sort(v->slots.begin(), v->slots.end(),
              [](const Slot& a, const Slot& b) { return a.off < b.off; });
    return Seen::kGood;
  }

  // Reads the key's view from its subtable (one round trip, more while
  // the directory is stale or a split rewrites the buckets). If `also` is
  // given, its verbs go in the same round trip (before the reads).
  Status read_view(Session& ss, const Place& p, View* v, Batch* also = nullptr) {
    LockWatch watch = new_watch();
    Batch b;
    if (also != nullptr) b = *also;
    for (;;) {
      const std::uint64_t dw = ss.dir[p.h & low_mask(ss.global_depth)];
      Raw raw;
      add_reads(b, dw, p, &raw);
      if (Status s = ss.exec(b); !s.ok()) return s;
      also = nullptr;  // its verbs ran once
      b.clear();
      switch (judge(dw, p, raw, v)) {
        case Seen::kGood:
          return Status::OK();
        case Seen::kElsewhere:
          // The directory read next names the key's subtable (a split
          // writes the directory before it changes the headers).
          if (Clock::now() > watch.until) {
            return stuck(dir_node(dw), dir_off(dw), "kept a suffix that the directory contradicts",
                         watch);
          }
          if (Status s = refresh_dir(ss); !s.ok()) return s;
          break;
        case Seen::kTorn:
          // Headers that stay torn belong to a split cut short while it
          // rewrote them (step 5): its lock is taken over after a lease.
          counters_.retries.fetch_add(1, std::memory_order_relaxed);
          if (Status s = watch_lock(ss, dir_node(dw), dir_off(dw), &watch, "stayed torn"); !s.ok()) {
            return s;
          }
          std::this_thread::yield();
          break;
      }
    }
  }

  // ---- KV blocks ----
  // Reads the KV blocks the slots name (one round trip, a second for blocks
  // longer than their slot says) and checks their checksums; a block that
  // fails is read again until the deadline (then Corruption).
  Status read_kvs(Session& ss, const std::vector<Slot>& slots, std::vector<Kv>* out) {
    out->assign(slots.size(), {});
    if (slots.empty()) return Status::OK();
    const auto until = deadline();
    std::vector<std::size_t> todo(slots.size());
    for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
    while (!todo.empty()) {
      Batch b;
      for (std::size_t i : todo) {
        const std::uint64_t e = entry_thawed(slots[i].word);
        const unsigned units = entry_len(e) == 0 ? 1 : entry_len(e);
        (*out)[i].slot = slots[i];
        (*out)[i].bytes.assign(units * 64ull, std::byte{0});
        b.read(entry_node(e), entry_off(e), (*out)[i].bytes.data(), units * 64);
      }
      if (Status s = ss.exec(b); !s.ok()) return s;
      b.clear();
      for (std::size_t i : todo) {
        Kv& kv = (*out)[i];
        const std::uint64_t total = kv_bytes(kv.header().key_len, kv.header().value_len);
        if (total > kv_bytes(kMaxKeySize, kMaxValueSize)) continue;  // checked below
        if (total > kv.bytes.size()) {
          const std::size_t had = kv.bytes.size();
          kv.bytes.resize(total);
          const std::uint64_t e = entry_thawed(kv.slot.word);
          b.read(entry_node(e), entry_off(e) + had, kv.bytes.data() + had,
                 static_cast<std::uint32_t>(total - had));
        }
      }
      if (b.size() != 0) {
        if (Status s = ss.exec(b); !s.ok()) return s;
      }
      std::vector<std::size_t> bad;
      for (std::size_t i : todo) {
        const Kv& kv = (*out)[i];
        const std::uint64_t total = kv_bytes(kv.header().key_len, kv.header().value_len);
        if (total > kv.bytes.size() ||
            kv_checksum(kv.bytes.data(), total - 8) != kv.header().checksum) {
          bad.push_back(i);
        }
      }
      if (!bad.empty()) {
        counters_.retries.fetch_add(bad.size(), std::memory_order_relaxed);
        if (Clock::now() > until) {
          const std::uint64_t e = entry_thawed(slots[bad.front()].word);
          return Status::Corruption("race: KV block at node " + std::to_string(entry_node(e)) +
                                    " offset " + std::to_string(entry_off(e)) +
                                    " fails its checksum");
        }
      }
      todo = std::move(bad);
    }
    return Status::OK();
  }

  static std::uint64_t kv_bytes(std::uint64_t key_len, std::uint64_t value_len) {
    return sizeof(KvHeader) + key_len + value_len;
  }

  // The key's entry in `v` (*any false if none): of several (concurrent
  // inserts of one key, race.h), the one at the lowest address.
  Status find_key(Session& ss, const Place& p, const Key& key, const View& v, Kv* found,
                  bool* any) {
    *any = false;
    std::vector<Slot> cands;
    for (const Slot& s : v.slots) {
      const std::uint64_t e = entry_thawed(s.word);
      if (e != 0 && entry_fp(e) == p.fp) cands.push_back(s);
    }
    std::vector<Kv> kvs;
    if (Status s = read_kvs(ss, cands, &kvs); !s.ok()) return s;
    for (Kv& kv : kvs) {  // by address (v.slots is sorted)
      if (kv.key() != key.bytes) continue;
      *found = std::move(kv);
      *any = true;
      break;
    }
    return Status::OK();
  }

  // ---- writes ----
  Status write(Session& ss, const Key& key, std::string_view value, Op op) {
    const Place p = place(key);
    const std::uint64_t bytes = kv_bytes(key.bytes.size(), value.size());
    const std::uint64_t units = (bytes + 63) / 64;
    std::vector<std::byte> block;
    if (op != Op::kRemove) {
      block.assign(units * 64, std::byte{0});
      KvHeader kh{0, static_cast<std::uint32_t>(key.bytes.size()),
                  static_cast<std::uint32_t>(value.size()), key.h1};
      std::memcpy(block.data(), &kh, sizeof(kh));
      std::memcpy(block.data() + sizeof(kh), key.bytes.data(), key.bytes.size());
      if (!value.empty()) std::memcpy(block.data() + sizeof(kh) + key.bytes.size(), value.data(), value.size());
      kh.checksum = kv_checksum(block.data(), bytes - 8);
      std::memcpy(block.data(), &kh.checksum, 8);
    }
    std::uint64_t entry = 0;  // names the KV block once it is written
    // (Tests: a planted bug writes the block only in the batch of the CAS
    // that names it, after the CAS.)
    bool block_late = planted::active(planted::kRaceSlotBeforeKvDurable);
    auto write_late = [&](Batch& b) {
      if (!block_late || entry == 0) return;
      b.write(entry_node(entry), entry_off(entry), block.data(), static_cast<std::uint32_t>(units * 64));
      block_late = false;
    };
    LockWatch watch = new_watch();  // a split of the key's subtable this call waits on
    for (;;) {
      // Round trip 1: the KV block (once) and the key's buckets.
      Batch kv;
      if (op != Op::kRemove && entry == 0) {
        const unsigned node = dir_node(ss.dir[p.h & low_mask(ss.global_depth)]);
        std::uint64_t off = 0;
        if (Status s = ss.chunks.alloc(ss, node, units * 64, &off); !s.ok()) return s;
        if (!block_late) kv.write(node, off, block.data(), static_cast<std::uint32_t>(units * 64));
        entry = make_entry(p.fp, units, node, off);
      }
      View v;
      if (Status s = read_view(ss, p, &v, &kv); !s.ok()) return s;
      if (v.frozen) {
        // A split has captured the subtable: no CAS could succeed. Its
        // lock is taken over if it stays for a lease (race.h, "Dead splitters").
        counters_.retries.fetch_add(1, std::memory_order_relaxed);
        if (Status s = watch_lock(ss, v.node, v.base, &watch, "stayed frozen"); !s.ok()) return s;
        std::this_thread::yield();
        continue;
      }
      // Round trip 2 (only on a fingerprint match): the candidates' blocks.
      Kv found;
      bool any = false;
      if (Status s = find_key(ss, p, key, v, &found, &any); !s.ok()) return s;
      if (any) {
        if (op == Op::kInsert) return Status::AlreadyExists("");
        // Update, upsert, remove: CAS the entry from its KV block to ours.
        const std::uint64_t desired = op == Op::kRemove ? 0 : entry;
        Batch b;
        b.cas(found.slot.node, found.slot.off, found.slot.word, desired);
        if (desired != 0) write_late(b);
        if (Status s = ss.exec(b); !s.ok()) return s;
        if (b.result(0) == found.slot.word) return Status::OK();
        continue;  // the slot changed meanwhile: look again
      }
      if (op == Op::kUpdate || op == Op::kRemove) return Status::NotFound("");
      // Insert (or upsert of an absent key): a free slot of the less loaded
      // combined bucket, main bucket first.
      const Slot* slot = free_slot(p, v);
      if (slot == nullptr) {
        if (Status s = split(ss, v, &watch); !s.ok()) return s;
        continue;
      }
      // The CAS, then the slot's bucket header: a split that ran between
      // our READ and the CAS may have frozen and thawed this free slot,
      // so that the CAS succeeds in a subtable the key no longer belongs
      // to (the header changed before the thaw; race.h, "Writers").
      std::uint64_t header = 0;
      Batch b;
      b.cas(slot->node, slot->off, 0, entry);
      write_late(b);
      b.read(slot->node, slot->off & ~(kBucketBytes - 1), &header, 8);
      if (Status s = ss.exec(b); !s.ok()) return s;
      if (b.result(0) != 0) continue;  // taken meanwhile
      if (header != v.header && (p.h & low_mask(header_depth(header))) != header_suffix(header)) {
        // Either a stray entry (the CAS came after the thaw; invisible:
        // readers of the key go elsewhere since the header changed), which
        // we take back and insert again; or the CAS came before the split
        // froze the slot, and the split carries the entry to the key's new
        // subtable (the slot no longer holds it): then it stands.
        b.clear();
        b.cas(slot->node, slot->off, entry, 0);
        if (Status s = ss.exec(b); !s.ok()) return s;
        if (b.result(0) == entry) {
          counters_.retries.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
      }
      // Round trip 3: the buckets again, for a concurrent insert of the key.
      bool won = false;
      if (Status s = settle(ss, p, key, entry, &won); !s.ok()) return s;
      if (won) return Status::OK();
      if (op == Op::kInsert) return Status::AlreadyExists("");
      // Upsert: the other entry stands; update it (our block is still good).
    }
  }

  // The free slot an insert takes: in the combined bucket with more free
  // slots (the first on a tie), the first free slot in address order of
  // its main bucket, else of its overflow bucket. Deterministic, so that
  // two inserters that saw the same buckets race for the same slot.
  const Slot* free_slot(const Place& p, const View& v) const {
    const Slot* best = nullptr;
    unsigned best_free = 0;
    for (int i = 0; i < 2; ++i) {
      const std::uint64_t at = v.base + combined_off(p.bucket[i]);
      const std::uint64_t main_at = at + (p.bucket[i] % 2 == 0 ? 0 : kBucketBytes);
      const Slot* first_main = nullptr;
      const Slot* first_over = nullptr;
      unsigned free = 0;
      for (const Slot& s : v.slots) {
        if (s.off < at || s.off >= at + kCombinedBytes || s.word != 0) continue;
        ++free;
        const bool in_main = s.off >= main_at && s.off < main_at + kBucketBytes;
        if (in_main && first_main == nullptr) first_main = &s;
        if (!in_main && first_over == nullptr) first_over = &s;
      }
      if (free > best_free) {
        best_free = free;
        best = first_main != nullptr ? first_main : first_over;
      }
    }
    return best;
  }

  // After an insert's CAS: reads the key's buckets again, and the blocks of
  // other entries whose fingerprint matches. If another entry of the key
  // is at a lower address, ours loses: it is removed and *won is false.
  // race.h argues why exactly one of concurrent inserts wins.
  Status settle(Session& ss, const Place& p, const Key& key, std::uint64_t entry, bool* won) {
    LockWatch watch = new_watch();
    for (;;) {
      View v;
      if (Status s = read_view(ss, p, &v); !s.ok()) return s;
      const Slot* mine = v.find(entry);
      if (mine == nullptr) {
        // Updated or removed by another client: it was there, so it won.
        *won = true;
        return Status::OK();
      }
      std::vector<Slot> lower;  // fingerprint matches below ours
      for (const Slot& s : v.slots) {
        const std::uint64_t e = entry_thawed(s.word);
        if (s.off < mine->off && e != 0 && entry_fp(e) == p.fp) lower.push_back(s);
      }
      std::vector<Kv> kvs;
      if (Status s = read_kvs(ss, lower, &kvs); !s.ok()) return s;
      if (std::none_of(kvs.begin(), kvs.end(), [&](const Kv& kv) { return kv.key() == key.bytes; })) {
        *won = true;
        return Status::OK();
      }
      if (entry_frozen(mine->word)) {
        // A split captured it; it keeps its place in this subtable or the
        // new one (the split finished, by its holder or a taker).
        if (Status s = watch_lock(ss, v.node, v.base, &watch, "stayed frozen"); !s.ok()) return s;
        std::this_thread::yield();
        continue;
      }
      Batch b;
      b.cas(mine->node, mine->off, entry, 0);
      if (Status s = ss.exec(b); !s.ok()) return s;
      if (b.result(0) == entry) {
        *won = false;
        return Status::OK();
      }
    }
  }

  // ---- split (race.h, "Split", "Dead splitters") ----
  // A wait gives up after this many leases, and no sooner than
  // kWaitFloor, even while takeovers go on (takers that cannot finish
  // within half a lease, over and over: a lease too short for the
  // machine's load or the network's latency).
  static constexpr unsigned kWaitLeases = 16;
  static constexpr std::chrono::milliseconds kWaitFloor{2000};

  // What a waiter remembers of the split lock it waits on.
  struct LockWatch {
    bool any = false;         // a lock word was seen
    unsigned node = 0;        // the subtable whose word it is
    std::uint64_t base = 0;
    std::uint64_t seen = 0;   // the word
    Clock::time_point since;  // when `seen` was first seen
    Clock::time_point start;  // when the wait began
    Clock::time_point until;  // Busy after this: lock_patience() after the last change seen
    Clock::time_point limit;  // and never later than this
  };
  LockWatch new_watch() const {
    LockWatch w;
    w.start = Clock::now();
    w.until = w.start + lock_patience();
    w.limit = w.start + std::max<Clock::duration>(kWaitLeases * lease(), kWaitFloor) +
              std::chrono::milliseconds(sessions_.timeout_ms());
    return w;
  }
  Status stuck(unsigned node, std::uint64_t base, const char* what, const LockWatch& w) const {
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

  // Reads the lock word of the subtable at (node, base) and observes it.
  Status watch_lock(Session& ss, unsigned node, std::uint64_t base, LockWatch* w,
                    const char* what) {
    std::uint64_t word = 0;
    Batch b;
    b.read(node, base + bucket_bytes(), &word, 8);
    if (Status s = ss.exec(b); !s.ok()) return s;
    return observe(ss, node, base, word, w, what);
  }

  // A waiter saw lock word `word` of the subtable at (node, base). A word
  // it had not seen gives it another lock_patience() (a split made
  // progress); a locked word seen for a whole lease is taken over (no lock
  // word recurs, layout.h, so that lease was one holder's). Busy, saying
  // the subtable `what`, once it has waited past w->until. Both decisions
  // are made on one clock reading: a waiter that looks late (descheduled)
  // takes over rather than give up.
  Status observe(Session& ss, unsigned node, std::uint64_t base, std::uint64_t word,
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

  // A split lock's holder, the splitter or a taker: the subtable, the lock
  // word it holds, and when it locked (its clock read before it sent the
  // lock or takeover CAS, so no later than the lock).
  struct Held {
    unsigned node = 0;
    std::uint64_t base = 0;
    std::uint64_t lock = 0;
    Clock::time_point since;
    bool taker = false;
  };

  // Whether the holder may begin a batch that writes to the subtable, the
  // new subtable, the directory or the global depth: within lease/2 of its
  // lock (a waiter takes over only after it has seen the lock for a lease).
  bool in_lease(const Held& h) const { return Clock::now() - h.since < lease() / 2; }
  Status past_half_lease(const Held& h) const {
    return Status::Busy("race: a split of the subtable at node " + std::to_string(h.node) +
                        " offset " + std::to_string(h.base) +
                        " took more than half its lease (" + std::to_string(params_.lease_ms) +
                        " ms); it stopped, and another client will finish or undo it");
  }
  // Every batch a holder writes with (race.h, "Fencing").
  Status exec_held(Session& ss, const Held& h, Batch& b) {
    if (!in_lease(h)) return past_half_lease(h);
    return ss.exec(b);
  }
  // The release: the held lock word to unlocked with seq + 1, by CAS (a
  // holder that was taken over changes nothing).
  void add_release(Batch& b, const Held& h) const {
    b.cas(h.node, h.base + bucket_bytes(), h.lock, make_lock(false, lock_seq(h.lock) + 1));
  }

  // Tests: true when the holder is to stop at `step`, as if it died there.
  static bool stop_at(const Held& h, SplitStep step) {
    return split_hook() && split_hook()(step, h.taker);
  }
  static Status stopped() { return Status::IOError("race: a test hook stopped a split"); }

  // What is left of a split once its intent stands (steps 4 to 8): the
  // split subtable's depth and suffix before it, the new subtable, and the
  // slots still frozen with the word each gets.
  struct Split {
    unsigned depth = 0;
    std::uint64_t suffix = 0;
    std::uint64_t new_dw = 0;           // the new subtable's directory word (depth d + 1)
    std::vector<std::uint64_t> at;      // word index in the subtable of each frozen slot
    std::vector<std::uint64_t> frozen;  // its frozen word
    std::vector<std::uint64_t> target;  // its word after the split: 0 (moved or free), or the entry
  };

  // The target of every frozen slot of `sp`: 0 for a free slot or an entry
  // whose key has hash bit `depth` set (it moves), the entry thawed
  // otherwise. Reads every entry's KV header (one round trip): blocks never
  // change once named, so the holder and any taker get the same answer.
  Status plan_targets(Session& ss, Split* sp) {
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

  // Splits the subtable of view `v` (its buckets full for some key) by hash
  // bit `depth`. OK also when another client holds its lock (observed in
  // `watch`, the caller's wait) or split it since the view: the caller
  // looks again.
  Status split(Session& ss, const View& v, LockWatch* watch) {
    const unsigned depth = header_depth(v.header);
    if (depth >= params_.max_depth) {
      return Status::NoSpace("race: a subtable is full at the maximum depth " +
                             std::to_string(params_.max_depth) +
                             " (create the index with a larger race_max_depth)");
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

  // The split under its lock, from `old`, the subtable read right after the
  // lock CAS. A failure once a slot may be frozen leaves the lock held: a
  // taker finishes or undoes the split after a lease ("Dead splitters").
  Status split_locked(Session& ss, const Held& held, std::uint64_t header,
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
    std::vector<std::uint64_t> todo;
    for (std::uint64_t w = 0; w < bucket_words(); ++w) {
      if (is_slot(w)) todo.push_back(w);
    }
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
      sp.at.push_back(w);
      sp.frozen.push_back(old[w] | kFrozen);
    }
    if (stop_at(held, SplitStep::kFrozen)) return stopped();
    // (2) The hash of every entry's key, from its KV block header: which
    // entries move.
    if (Status s = plan_targets(ss, &sp); !s.ok()) return s;
    // (3) The new subtable, complete: the entries that move, each at the
    // slot it had (so duplicates keep their order), and a zero trailer.
    std::vector<std::uint64_t> img1(table_bytes() / 8, 0);
    set_headers(&img1, make_header(depth + 1, suffix1));
    std::uint64_t moved = 0;
    for (std::size_t k = 0; k < sp.at.size(); ++k) {
      const std::uint64_t e = entry_thawed(sp.frozen[k]);
      if (e != 0 && sp.target[k] == 0) {
        img1[sp.at[k]] = e;
        ++moved;
      }
    }
    const std::uint64_t intent[2] = {sp.new_dw, header};
    const std::uint64_t seq = lock_seq(held.lock);
    auto add_intent = [&] {
      b.write(held.node, held.base + bucket_bytes() + kIntentOff, intent, sizeof(intent));
      b.write(held.node, held.base + bucket_bytes() + kIntentSeqOff, &seq, 8);
    };
    b.clear();
    // (Tests: a planted bug writes the intent first, in a round trip before
    // the new subtable's.)
    if (planted::active(planted::kRaceIntentBeforeNewTable)) {
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
    if (node1 != held.node || split_hook() || planted::active(planted::kRaceIntentBeforeNewTable)) {
      if (Status s = exec_held(ss, held, b); !s.ok()) return s;
      if (stop_at(held, SplitStep::kNewTableWritten)) return stopped();
      b.clear();
    }
    if (!planted::active(planted::kRaceIntentBeforeNewTable)) {
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

  // Steps (4) to (8) of a split whose intent stands, for its holder or a
  // taker; every write is one the holder made or would make, with the same
  // bytes, or a CAS that only a state before it matches (race.h, "Dead
  // splitters"). *dir_words: the directory words it rewrote.
  Status complete_split(Session& ss, const Held& held, const Split& sp, std::uint64_t* dir_words) {
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

  // Steps (4) and (7): every directory word of the half of suffix `start`
  // (start, start + 2^depth1, ...) that names a subtable shallower than
  // depth1 is CASed to `target`; a word of depth1 or deeper stays (this
  // split, or a taker of it, or the new subtable's own splits rewrote it
  // already). Each CAS is first tried from `guess` (the split subtable's
  // word before the split); one that finds another shallow word (an
  // ancestor whose split is not finished yet) is tried again from that.
  // With `global`, each batch also READs the global depth word into it.
  Status fix_half(Session& ss, const Held& held, std::uint64_t start, unsigned depth1,
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

  // Takes the split lock of the subtable at (node, base), seen as `seen`
  // (locked) for a lease, from its holder: a CAS to seen + kSeqTakeover
  // (one taker wins), then the split finished or undone. OK also when
  // another client won or the lock changed (the caller looks again), and
  // when this taker ran past half its own lease (it stopped in time; the
  // lock stays for the next taker).
  Status take_over(Session& ss, unsigned node, std::uint64_t base, std::uint64_t seen) {
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

  // As the lock's holder after a takeover (`held`), finishes or undoes the
  // split of whoever locked the subtable, from `t`, the subtable (trailer
  // included) read right after the takeover CAS.
  Status finish(Session& ss, const Held& held, const std::vector<std::uint64_t>& t) {
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

  // Waits until the subtable at (node, base) holds no split lock, taking a
  // dead holder's over after a lease.
  Status wait_unlocked(Session& ss, unsigned node, std::uint64_t base) {
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

  // check(), before it reads anything: every subtable's split lock
  // released, waited for or taken over; a split finished so changes the
  // directory, and the subtables it made are looked at too.
  Status wait_all_unlocked(Session& ss) {
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

  // ---- whole-index reads ----
  // Every subtable once (quiescent index: check(); for_each is not a
  // snapshot while splits run). With `verify`, checks the invariants
  // race.h lists, once every split lock is released (dead splitters'
  // taken over).
  Status scan(Session& ss, const ForEachFn& fn, bool verify) {
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

  Options options_;
  std::vector<std::string> specs_;
  Params params_;
  remote_index::SessionPool<Session> sessions_;
  SplitCounters counters_;
};

Status check_create_options(const Options& o) {
  if (o.race_initial_depth < 1 || o.race_initial_depth > 12) {
    return Status::InvalidArgument("race initial depth must be 1 .. 12, got " +
                                   std::to_string(o.race_initial_depth));
  }
  if (o.race_max_depth < o.race_initial_depth || o.race_max_depth > kMaxDepth) {
    return Status::InvalidArgument("race maximum depth must be initial depth .. " +
                                   std::to_string(kMaxDepth) + ", got " +
                                   std::to_string(o.race_max_depth));
  }
  if (o.race_groups < kMinGroups || o.race_groups > kMaxGroups) {
    return Status::InvalidArgument("race bucket groups per subtable must be " +
                                   std::to_string(kMinGroups) + " .. " +
                                   std::to_string(kMaxGroups) + ", got " +
                                   std::to_string(o.race_groups));
  }
  return Status::OK();
}

// Create or open (remote_index::start).
Status start(const Options& options, bool create, std::unique_ptr<Index>* out) {
  // The lease (race.h, "Lease"): twice the create's remote timeout, or
  // twice the default one for 0.
  auto params = [&](unsigned nodes, Params* p) {
    const unsigned timeout =
        options.remote_timeout_ms != 0 ? options.remote_timeout_ms : kDefaultTimeoutMs;
    *p = Params{nodes, options.race_initial_depth, options.race_max_depth, options.race_groups, 0,
                2 * timeout};
    return check_create_options(options);
  };
  return remote_index::start<RaceIndex, Params>(options, "race", create, params, out);
}
Status create_remote(const Options& o, std::unique_ptr<Index>* out) { return start(o, true, out); }
Status open_remote(const Options& o, std::unique_ptr<Index>* out) { return start(o, false, out); }

Status no_params(const Options&, std::uint8_t*) { return Status::OK(); }

}  // namespace

void set_split_hook_for_testing(std::function<bool(SplitStep, bool)> hook) {
  split_hook() = std::move(hook);
}

const EngineInfo kEngineInfo = {"race",        &no_params,    nullptr,      nullptr,
                                /*in_progress=*/false, &create_remote, &open_remote, kMagic};

}  // namespace pmhash::engine::race
