// engine/remote_index.h - the helpers the engines on memory nodes share
// live in engine/remote_common/remote_index.h; this header forwards to it
// for the code outside the engines that includes it (the store, the
// memory-node crash explorer).
#pragma once

#include "engine/remote_common/remote_index.h"
