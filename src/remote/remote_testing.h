// remote/remote_testing.h - the remote layer's test hooks
// (docs/architecture.md, "Test hooks"). Process-wide.
#pragma once

#include "remote/client.h"
#include "remote/transport.h"

namespace pmhash::remote::testing {

// Called by every Client of the process, on the posting thread, for each
// sub-batch it posts (node, verbs): its Fate (client.h). nullptr: every one
// is delivered. Set it while no Client posts.
void set_fate_hook(FateHook hook);

// connect() hands every spec of the form "sim:..." to this factory (the
// crash checker's in-process memory nodes, whose regions it watches;
// tests/crash_explore/memnode_explore.cc); without one such a spec is
// refused like any unknown form. nullptr removes it.
void set_connect_hook(ConnectHook hook);

}  // namespace pmhash::remote::testing
