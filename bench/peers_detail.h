// bench/peers_detail.h - how peers.cc reaches the peers of the other two
// files. Each maker returns nullptr for a name that is not one of its peers.
#pragma once

#include <memory>
#include <string>

#include "table.h"

namespace pmhash::bench::peers_detail {

// libcuckoo, tbb, std (peers_volatile.cc).
std::unique_ptr<Table> make_volatile_peer(const std::string& name, const TableConfig& config);

// lmdb, rocksdb (peers_files.cc).
std::unique_ptr<Table> make_file_peer(const std::string& name, const TableConfig& config);

}  // namespace pmhash::bench::peers_detail
