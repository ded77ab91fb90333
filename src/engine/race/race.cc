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

std::function<void(SplitStep)>& split_hook() {
  static std::function<void(SplitStep)> hook;
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

// What splits and retries did since open (race.h, "Split").
struct SplitCounters {
  std::atomic<std::uint64_t> splits{0}, bytes{0}, moved{0}, retries{0};
  void fill(Stats* st) const {
    st->expansions = splits.load(std::memory_order_relaxed);
    st->bytes_moved = bytes.load(std::memory_order_relaxed);
    st->items_moved = moved.load(std::memory_order_relaxed);
    st->read_retries = retries.load(std::memory_order_relaxed);
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

  std::uint64_t table_bytes() const { return std::uint64_t{params_.groups} * kGroupBytes; }

  void set_headers(std::vector<std::uint64_t>* image, std::uint64_t header) const {
    for (std::size_t w = 0; w < image->size(); w += kSlotsPerBucket) (*image)[w] = header;
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

  Status stuck(unsigned node, std::uint64_t base, const char* what) const {
    return Status::Busy("race: subtable at node " + std::to_string(node) + " offset " +
                        std::to_string(base) + " " + what + " for " +
                        std::to_string(sessions_.timeout_ms()) +
                        " ms (a split runs, or its client died)");
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
    const auto until = deadline();
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
          if (Status s = refresh_dir(ss); !s.ok()) return s;
          break;
        case Seen::kTorn:
          counters_.retries.fetch_add(1, std::memory_order_relaxed);
          if (Clock::now() > until) return stuck(dir_node(dw), dir_off(dw), "stayed torn");
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
    const auto until = deadline();
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
        // A split has captured the subtable: no CAS could succeed.
        if (Clock::now() > until) return stuck(v.node, v.base, "stayed frozen");
        counters_.retries.fetch_add(1, std::memory_order_relaxed);
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
        if (Status s = split(ss, v); !s.ok()) return s;
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
    const auto until = deadline();
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
        // A split captured it; it keeps its place in this subtable or the new one.
        if (Clock::now() > until) return stuck(v.node, v.base, "stayed frozen");
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

  // ---- split ----
  // Splits the subtable of view `v` (its buckets full for some key) by hash
  // bit `depth`. OK also when another client splits it (the caller looks
  // again once that split has ended).
  Status split(Session& ss, const View& v) {
    const unsigned depth = header_depth(v.header);
    const std::uint64_t suffix = header_suffix(v.header);
    if (depth >= params_.max_depth) {
      return Status::NoSpace("race: a subtable is full at the maximum depth " +
                             std::to_string(params_.max_depth) +
                             " (create the index with a larger race_max_depth)");
    }
    const std::uint64_t dir_at = params_.directory + suffix * 8;
    const std::uint64_t mine = make_dir(v.node, v.base, depth);
    Batch b;
    b.cas(0, dir_at, mine, mine | kDirLock);
    if (Status s = ss.exec(b); !s.ok()) return s;
    if (b.result(0) != mine) return wait_split(ss, dir_at, mine, v);
    bool restorable = true;
    Status s = split_locked(ss, v, depth, suffix, &restorable);
    if (!s.ok() && restorable) {
      b.clear();
      b.write(0, dir_at, &mine, 8);  // unlock: nothing was changed
      (void)ss.exec(b);
    }
    if (s.ok()) s = refresh_dir(ss);
    return s;
  }

  // Another client holds the lock of the subtable (or it split already):
  // waits until its directory word is no longer `mine` locked.
  Status wait_split(Session& ss, std::uint64_t dir_at, std::uint64_t mine, const View& v) {
    const auto until = deadline();
    for (;;) {
      std::uint64_t w = 0;
      Batch b;
      b.read(0, dir_at, &w, 8);
      if (Status s = ss.exec(b); !s.ok()) return s;
      if (w != (mine | kDirLock)) return refresh_dir(ss);
      if (Clock::now() > until) return stuck(v.node, v.base, "stayed locked");
      std::this_thread::yield();
    }
  }

  // *restorable: false once the split has changed the subtable (its lock
  // then stays, and writes to it return Busy after the timeout).
  Status split_locked(Session& ss, const View& v, unsigned depth, std::uint64_t suffix,
                      bool* restorable) {
    Session& c = ss;
    const std::uint64_t words = table_bytes() / 8;
    const std::uint64_t suffix1 = suffix | (std::uint64_t{1} << depth);
    const unsigned node1 = static_cast<unsigned>(suffix1 % specs_.size());
    std::uint64_t base1 = 0;
    if (Status s = remote_index::alloc_direct(c, node1, table_bytes(), &base1); !s.ok()) return s;
    // (1) Freeze every entry slot, free ones too, with a CAS from the word
    // read: from then on no writer's CAS can match, and the table's
    // entries are what the split saw.
    std::vector<std::uint64_t> old(words);
    Batch b;
    b.read(v.node, v.base, old.data(), static_cast<std::uint32_t>(table_bytes()));
    if (Status s = c.exec(b); !s.ok()) return s;
    *restorable = false;
    std::vector<std::uint64_t> todo;
    for (std::uint64_t w = 0; w < words; ++w) {
      if (w % kSlotsPerBucket != 0) todo.push_back(w);
    }
    while (!todo.empty()) {
      b.clear();
      for (std::uint64_t w : todo) b.cas(v.node, v.base + w * 8, old[w], old[w] | kFrozen);
      if (Status s = c.exec(b); !s.ok()) return s;
      std::vector<std::uint64_t> again;
      for (std::size_t i = 0; i < todo.size(); ++i) {
        if (b.result(i) != old[todo[i]]) {
          old[todo[i]] = b.result(i);
          again.push_back(todo[i]);
        }
      }
      todo = std::move(again);
    }
    if (split_hook()) split_hook()(SplitStep::kFrozen);
    // (2) The hash of every entry's key, from its KV block header.
    std::vector<std::uint64_t> used;
    for (std::uint64_t w = 0; w < words; ++w) {
      if (w % kSlotsPerBucket != 0 && entry_thawed(old[w]) != 0) used.push_back(w);
    }
    std::vector<KvHeader> heads(used.size());
    b.clear();
    for (std::size_t i = 0; i < used.size(); ++i) {
      const std::uint64_t e = entry_thawed(old[used[i]]);
      b.read(entry_node(e), entry_off(e), &heads[i], sizeof(KvHeader));
    }
    if (Status s = c.exec(b); !s.ok()) return s;
    // (3) The new subtable, complete: the entries whose hash bit `depth` is
    // set, each at the slot it had (so duplicates keep their order).
    std::vector<std::uint64_t> img0(words, 0), img1(words, 0);
    set_headers(&img0, make_header(depth + 1, suffix));
    set_headers(&img1, make_header(depth + 1, suffix1));
    std::uint64_t moved = 0;
    for (std::size_t i = 0; i < used.size(); ++i) {
      const bool high = ((heads[i].hash >> depth) & 1) != 0;
      (high ? img1 : img0)[used[i]] = entry_thawed(old[used[i]]);
      moved += high ? 1 : 0;
    }
    b.clear();
    b.write(node1, base1, img1.data(), static_cast<std::uint32_t>(table_bytes()));
    if (Status s = c.exec(b); !s.ok()) return s;
    if (split_hook()) split_hook()(SplitStep::kNewTableWritten);
    // (4) The directory words of the new half name it; the global depth
    // follows. Readers that come by the directory find every moved entry.
    const std::uint64_t entries = std::uint64_t{1} << params_.max_depth;
    const std::uint64_t step = std::uint64_t{1} << (depth + 1);
    const std::uint64_t dw1 = make_dir(node1, base1, depth + 1);
    std::uint64_t global = 0;
    std::uint64_t dir_words = 0;
    b.clear();
    for (std::uint64_t i = suffix1; i < entries; i += step, ++dir_words) {
      b.write(0, params_.directory + i * 8, &dw1, 8);
    }
    b.read(0, kGlobalDepthOff, &global, 8);
    if (Status s = c.exec(b); !s.ok()) return s;
    if (Status s = remote_index::raise_global_depth(c, kGlobalDepthOff, global, depth + 1);
        !s.ok()) {
      return s;
    }
    if (split_hook()) split_hook()(SplitStep::kDirectoryUpdated);
    // (5) This subtable's headers: readers of a moved key that come with an
    // old directory now see the suffix change and look it up again.
    b.clear();
    for (std::uint64_t w = 0; w < words; w += kSlotsPerBucket) {
      b.write(v.node, v.base + w * 8, &img0[w], 8);
    }
    if (Status s = c.exec(b); !s.ok()) return s;
    if (split_hook()) split_hook()(SplitStep::kHeadersUpdated);
    // (6) Its slots: the moved entries gone, the others thawed, slot by
    // slot (one CAS each from the frozen word; nobody else writes a frozen
    // slot, so every CAS succeeds).
    b.clear();
    for (std::uint64_t w = 0; w < words; ++w) {
      if (w % kSlotsPerBucket != 0) b.cas(v.node, v.base + w * 8, old[w] | kFrozen, img0[w]);
    }
    if (Status s = c.exec(b); !s.ok()) return s;
    // (7) The directory words of this half: the new depth, and the lock
    // released last (the subtable's own word, after the others).
    const std::uint64_t dw0 = make_dir(v.node, v.base, depth + 1);
    b.clear();
    for (std::uint64_t i = suffix + step; i < entries; i += step, ++dir_words) {
      b.write(0, params_.directory + i * 8, &dw0, 8);
    }
    b.write(0, params_.directory + suffix * 8, &dw0, 8);
    ++dir_words;
    if (Status s = c.exec(b); !s.ok()) return s;
    counters_.splits.fetch_add(1, std::memory_order_relaxed);
    counters_.moved.fetch_add(moved, std::memory_order_relaxed);
    // Bytes the split wrote: the new subtable, the old one's headers and
    // slots, the directory words.
    counters_.bytes.fetch_add(table_bytes() + params_.groups * 3 * 8 +
                               (words - params_.groups * 3) * 8 + dir_words * 8,
                           std::memory_order_relaxed);
    return Status::OK();
  }

  // ---- whole-index reads ----
  // Every subtable once (quiescent index: check(); for_each is not a
  // snapshot while splits run). With `verify`, checks the invariants
  // race.h lists.
  Status scan(Session& ss, const ForEachFn& fn, bool verify) {
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
      const std::uint64_t dw = full[i] & ~kDirLock;
      if (verify) {
        if ((full[i] & kDirLock) != 0) return fail(dw, "locked (a split runs or died)");
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
        if (depth != dir_depth(dw)) return fail(dw, "its depth differs from its directory word's");
        if ((i & low_mask(depth)) != header_suffix(hd)) return fail(dw, "named by a wrong directory word");
      }
      std::vector<Slot> slots;
      for (std::uint64_t w = 0; w < words; ++w) {
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

void set_split_hook_for_testing(std::function<void(SplitStep)> hook) {
  split_hook() = std::move(hook);
}

const EngineInfo kEngineInfo = {"race",        &no_params,    nullptr,      nullptr,
                                /*in_progress=*/false, &create_remote, &open_remote, kMagic};

}  // namespace pmhash::engine::race
