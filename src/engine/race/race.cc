// engine/race/race.cc - the race engine: the Index interface, create and open, registration.
#include "engine/race/race_index.h"
#include "engine/race/race_testing.h"

namespace pmhash::engine::race {

Status RaceIndex::get(const Key& key, std::string* value) {
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

Status RaceIndex::check() {
  return with_session([&](Session& ss) {
    return scan(ss, [](std::string_view, std::string_view) { return true; }, /*verify=*/true);
  });
}

Status RaceIndex::format(bool force) {
  std::unique_ptr<Session> ss;
  remote_index::Identity made;
  if (Status s = remote_index::start_create(sessions_, options_, params_.lease_ms, "race", force,
                                            sizeof(IndexRoot), &ss, &made);
      !s.ok()) {
    return s;
  }
  Session& c = *ss;

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
  return remote_index::finish_create(sessions_, c, b, kMagic, made, "race");
}

Status RaceIndex::attach() {
  std::unique_ptr<Session> ss;
  remote_index::Identity id;
  IndexRoot root{};
  if (Status s = remote_index::open_root(sessions_, "race", &root, sizeof(root), &ss, &id);
      !s.ok()) {
    return s;
  }
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

Place RaceIndex::place(const Key& key) const {
  Place p;
  p.h = key.h1;
  p.fp = key_fp(key.h2);
  const unsigned buckets = 2 * params_.groups;
  p.bucket[0] = static_cast<unsigned>((key.h1 >> 32) % buckets);
  p.bucket[1] = static_cast<unsigned>(key.h2 % buckets);
  if (p.bucket[1] == p.bucket[0]) p.bucket[1] = (p.bucket[0] + 1) % buckets;
  return p;
}

namespace {

// The check beyond the descriptor's ranges (the store has checked those).
Status check_create_options(const Config& c) {
  if (c.max_depth < c.initial_depth) {
    return Status::InvalidArgument("race.max_depth must be at least race.initial_depth (" +
                                   std::to_string(c.initial_depth) + "), got " +
                                   std::to_string(c.max_depth));
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
    const Config c = Config::from(options);
    *p = Params{nodes, c.initial_depth, c.max_depth, c.groups, 0, 2 * timeout};
    return check_create_options(c);
  };
  return remote_index::start<RaceIndex, Params>(options, "race", create, params, out);
}
Status create_remote(const Options& o, std::unique_ptr<Index>* out) { return start(o, true, out); }
Status open_remote(const Options& o, std::unique_ptr<Index>* out) { return start(o, false, out); }

Status no_params(const Options&, std::uint8_t*) { return Status::OK(); }

}  // namespace

void testing::set_split_hook(std::function<bool(SplitStep, bool)> hook) {
  split_hook() = std::move(hook);
}

const EngineInfo kEngineInfo = {&kDescriptor,   &no_params,    nullptr, nullptr,
                                &create_remote, &open_remote, kMagic};

}  // namespace pmhash::engine::race
