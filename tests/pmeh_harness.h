// tests/pmeh_harness.h - a pmeh index opened directly on a pool and heap
// (no Store), so that tests reach the engine's hooks (pmeh_index.h): the
// zone switch tests of tests/unit and tests/stress share it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/hash.h"
#include "engine/index.h"
#include "engine/option_values.h"
#include "engine/pmeh/pmeh_index.h"
#include "heap/heap.h"
#include "pmhash/store.h"
#include "pool/pool.h"
#include "scratch_file.h"

namespace pmhash::testing {

class PmehHarness {
 public:
  explicit PmehHarness(const std::string& name) {
    path_ = scratch_path(name) + ".pool";
    ::unlink(path_.c_str());
    options.engine = "pmeh";
    options.pool_size = 128u << 20;
    options.set("pmeh.zone_bits", 4);
    options.set("pmeh.segment_kib", 4);
    options.set("pmeh.workers", 2);
    // Delegated, whatever the machine: the tests drive the zone modes
    // themselves (write mode auto would switch every zone on few cores).
    options.set("pmeh.write_mode", engine::pmeh::kWriteDelegated);
  }
  ~PmehHarness() {
    shut();
    ::unlink(path_.c_str());
  }
  Status create() {
    const engine::EngineInfo* info = engine::find_engine("pmeh");
    if (info == nullptr) return Status::NotFound("no pmeh engine");
    pool::CreateParams p;
    p.engine = "pmeh";
    p.size = options.pool_size;
    p.format_heap = heap::Heap::format;
    if (Status s = info->encode_params(options, p.engine_params.data()); !s.ok()) return s;
    if (Status s = pool::Pool::create(path_, p, &pool_); !s.ok()) return s;
    if (Status s = heap::Heap::open(pool_->region(), pool_->heap_offset(), pool_->heap_size(), &heap_);
        !s.ok()) {
      return s;
    }
    engine::Env env{pool_.get(), heap_.get(), options};
    std::unique_ptr<engine::Index> index;
    if (Status s = info->create(env, &index); !s.ok()) return s;
    index_ = std::move(index);
    pool_->begin_session();
    return Status::OK();
  }
  // A clean close, as Store::close does it.
  void shut() {
    if (index_) {
      index_->close();
      heap_->drain_all();
      pool_->mark_clean_shutdown();
    }
    index_.reset();
    heap_.reset();
    pool_.reset();
  }
  engine::Index& index() { return *index_; }
  engine::pmeh::PmehIndex& pmeh() { return static_cast<engine::pmeh::PmehIndex&>(*index_); }
  Stats stats() {
    Stats st;
    index_->fill_stats(&st);
    return st;
  }
  // Keys "<tag><n>" whose h1 lies in zone `zone` (the top Z bits).
  std::vector<std::string> zone_keys(unsigned zone, std::size_t n, const std::string& tag) const {
    std::vector<std::string> out;
    for (std::uint64_t i = 0; out.size() < n; ++i) {
      std::string k = tag + std::to_string(i);
      const std::uint64_t bits = engine::option_unsigned(options, "pmeh.zone_bits");
      if ((engine::make_key(k).h1 >> (64 - bits)) == zone) out.push_back(k);
    }
    return out;
  }

  Options options;

 private:
  std::string path_;
  std::unique_ptr<pool::Pool> pool_;
  std::unique_ptr<heap::Heap> heap_;
  std::unique_ptr<engine::Index> index_;
};

}  // namespace pmhash::testing
