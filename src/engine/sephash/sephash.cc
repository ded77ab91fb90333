// engine/sephash/sephash.cc - the sephash engine: the Index interface, create
// and open, registration.
#include "engine/sephash/sephash_index.h"
#include "engine/sephash/sephash_testing.h"

namespace pmhash::engine::sephash {

void SepHashIndex::prepare(Session& ss) {
  ss.window = static_cast<unsigned>(ss.rng() % (kCurSlots / kWindowSlots)) * kWindowSlots;
  ss.free.resize(specs_.size());
  ss.on_end = [this](Session& me) { (void)hand_back(me); };
}

Status SepHashIndex::get(const Key& key, std::string* value) {
  return with_session([&](Session& ss) {
    Candidate found;
    bool any = false;
    if (Status s = lookup(ss, key, &found, &any); !s.ok()) return s;
    if (!any || slot_tomb(found.slot)) return Status::NotFound("");
    value->assign(found.value());
    return Status::OK();
  });
}

void SepHashIndex::fill_stats(Stats* st) const {
  // In the descriptor's order (descriptor.cc): the remote counters first.
  sessions_.fill_stats(st, "sephash");
  st->add_property("sephash.merges", merges_.load(std::memory_order_relaxed));
  st->add_property("sephash.splits", splits_.load(std::memory_order_relaxed));
  st->add_property("sephash.split_bytes", split_bytes_.load(std::memory_order_relaxed));
  st->add_property("sephash.append_retries", stale_appends_.load(std::memory_order_relaxed));
  st->add_property("sephash.blocks_freed", blocks_freed_.load(std::memory_order_relaxed));
  st->add_property("sephash.bytes_freed", bytes_freed_.load(std::memory_order_relaxed));
  st->add_property("sephash.blocks_reused", blocks_reused_.load(std::memory_order_relaxed));
  st->add_property("sephash.bytes_reused", bytes_reused_.load(std::memory_order_relaxed));
  st->add_property("sephash.bytes_bumped", bytes_bumped_.load(std::memory_order_relaxed));
  st->add_property("sephash.bytes_leaked", bytes_leaked_.load(std::memory_order_relaxed));
  st->add_property("sephash.lock_takeovers", takeovers_.load(std::memory_order_relaxed));
}

Status SepHashIndex::format(bool force) {
  std::unique_ptr<Session> ss;
  // An index of any engine on the nodes stays unless `force`.
  remote_index::Identity made;
  if (Status s = remote_index::start_create(sessions_, options_, params_.lease_ms, "sephash", force,
                                            sizeof(IndexRoot), &ss, &made);
      !s.ok()) {
    return s;
  }
  IndexRoot root{};
  Batch b;

  const unsigned depth = params_.initial_depth;
  const std::uint64_t entries = std::uint64_t{1} << params_.max_depth;
  // Every node's first block is its free table, so it has the same
  // offset on all of them; an empty stack.
  b.clear();
  const std::uint64_t zero_table[kFreeTableBytes / 8] = {};
  for (unsigned n = 0; n < specs_.size(); ++n) {
    std::uint64_t table = 0;
    if (Status s = alloc_direct(*ss, n, kFreeTableBytes, &table); !s.ok()) return s;
    if (n != 0 && table != params_.free_table) {
      return Status::Corruption("memory node " + specs_[n] + ": its first block is at " +
                                std::to_string(table) + ", node 0's at " +
                                std::to_string(params_.free_table));
    }
    params_.free_table = table;
    b.write(n, table, zero_table, kFreeTableBytes);
  }
  if (Status s = alloc_direct(*ss, 0, entries * 8, &params_.directory); !s.ok()) return s;
  std::vector<RAddr> segs(std::size_t{1} << depth);
  std::vector<std::vector<std::byte>> images;
  images.reserve(segs.size());
  for (std::uint64_t p = 0; p < segs.size(); ++p) {
    const unsigned node = static_cast<unsigned>(p % specs_.size());
    std::uint64_t off = 0;
    if (Status s = alloc_direct(*ss, node, kCurSegBytes, &off); !s.ok()) return s;
    segs[p] = make_raddr(node, off);
    images.push_back(curseg_image(make_meta(true, depth, 0, 0), p));
    b.write(node, off, images.back().data(), kCurSegBytes);
  }
  std::vector<RAddr> dir(entries);
  for (std::uint64_t i = 0; i < entries; ++i) dir[i] = segs[i & low_mask(depth)];
  b.write(0, params_.directory, dir.data(), static_cast<std::uint32_t>(entries * 8));
  root = IndexRoot{};
  root.layout_version = kLayoutVersion;
  root.nodes = static_cast<std::uint32_t>(specs_.size());
  root.initial_depth = depth;
  root.max_depth = params_.max_depth;
  root.main_max_slots = params_.main_max_slots;
  root.directory = params_.directory;
  root.free_table = params_.free_table;
  root.global_depth = depth;
  root.version = 1;
  b.write(0, kRootOff, &root, sizeof(root));
  return remote_index::finish_create(sessions_, *ss, b, kMagic, made, "sephash");
}

Status SepHashIndex::attach() {
  std::unique_ptr<Session> ss;
  remote_index::Identity id;
  IndexRoot root{};
  if (Status s = remote_index::open_root(sessions_, "sephash", &root, sizeof(root), &ss, &id);
      !s.ok()) {
    return s;
  }
  if (Status s = remote_index::check_root(*ss->client, "sephash", root.magic, kMagic,
                                          root.layout_version, kLayoutVersion, root.nodes);
      !s.ok()) {
    return s;
  }
  if (root.max_depth > 20 || root.initial_depth > root.max_depth ||
      root.main_max_slots + kCurSlots > kMaxMainSlots || root.global_depth > root.max_depth ||
      root.free_table % 64 != 0 || root.free_table < remote::kFirstAllocatable) {
    return Status::Corruption("memory node " + specs_[0] + ": sephash root is damaged");
  }
  params_ = Params{root.nodes,     root.initial_depth, root.max_depth, root.main_max_slots,
                   root.directory, root.free_table,    id.lease_ms()};
  return Status::OK();
}

Status SepHashIndex::locked_too_long(RAddr seg) const {
  return Status::Busy("sephash: segment at node " + std::to_string(raddr_node(seg)) +
                      " offset " + std::to_string(raddr_off(seg)) + " stayed locked for " +
                      std::to_string(params_.lease_ms + sessions_.timeout_ms()) +
                      " ms (lock lease + remote timeout; taking the lock over failed)");
}

std::vector<std::byte> SepHashIndex::curseg_image(std::uint64_t meta, std::uint64_t pattern,
                                                  std::uint64_t swap_floor) const {
  std::vector<std::byte> img(kCurSegBytes);
  std::memcpy(img.data() + kMetaOff, &meta, 8);
  std::memcpy(img.data() + kPatternOff, &pattern, 8);
  std::memcpy(img.data() + kSwapFloorOff, &swap_floor, 8);
  return img;
}

namespace {

// The check beyond the descriptor's ranges (the store has checked those).
Status check_create_options(const Config& c) {
  if (c.max_depth < c.initial_depth) {
    return Status::InvalidArgument("sephash.max_depth must be at least sephash.initial_depth (" +
                                   std::to_string(c.initial_depth) + "), got " +
                                   std::to_string(c.max_depth));
  }
  return Status::OK();
}

Status make_index(const Options& options, bool create, std::unique_ptr<Index>* out) {
  // The lease is chosen here, at create, and kept with the index (the
  // membership stamp); an open takes the stored one.
  const Config c = Config::from(options);
  auto params = [&](unsigned nodes, Params* p) {
    *p = Params{nodes, c.initial_depth, c.max_depth, c.main_max_slots, 0, 0, c.lock_lease_ms};
    return check_create_options(c);
  };
  return remote_index::start<SepHashIndex, Params>(options, "sephash", create, params, out);
}

Status create_remote(const Options& options, std::unique_ptr<Index>* out) {
  return make_index(options, true, out);
}
Status open_remote(const Options& options, std::unique_ptr<Index>* out) {
  return make_index(options, false, out);
}

Status no_params(const Options&, std::uint8_t*) { return Status::OK(); }

}  // namespace

void testing::set_append_hook(std::function<void()> hook) { append_hook() = std::move(hook); }
void testing::set_lock_hook(std::function<bool(LockStep)> hook) {
  lock_hook() = std::move(hook);
}
void testing::set_block_hook(
    std::function<void(BlockUse, unsigned, std::uint64_t, std::uint64_t)> hook) {
  block_hook() = std::move(hook);
}

const EngineInfo kEngineInfo = {&kDescriptor,   &no_params,    nullptr, nullptr,
                                &create_remote, &open_remote, kMagic};

}  // namespace pmhash::engine::sephash
