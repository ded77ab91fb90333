// engine/remote_common/remote_index_testing.h - test hooks of the indexes
// on memory nodes (docs/architecture.md, "Test hooks"). Process-wide.
#pragma once

#include <cstdint>

namespace pmhash::engine::remote_index::testing {

// When not 0, every index this process attaches to is used as if its lease
// were `ms` (Identity::lease_ms), whatever its create stored; 0 restores
// the stored lease. A crash checker's verifier, the only client of node
// images whose clients are all dead, takes their locks over quickly with
// it. Never for an index with live clients: clients with different leases
// break the lock's and the fence's assumptions.
void set_lease(std::uint32_t ms);

}  // namespace pmhash::engine::remote_index::testing
