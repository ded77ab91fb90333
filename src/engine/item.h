// engine/item.h - the key-value item every engine stores out of its table.
//
// An item is one heap block, written once and never changed except for its
// state word:
//
//   0        8          12           16                 16+key_len
//   +--------+----------+------------+------------------+-------------+
//   | state  | key_len  | value_len  | key bytes        | value bytes |
//   +--------+----------+------------+------------------+-------------+
//
// `state` belongs to the engine that owns the item (clevel documents its
// bits in clevel.h). key_len <= kMaxKeySize, value_len <= kMaxValueSize.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "engine/hash.h"
#include "heap/checked.h"
#include "media/region.h"
#include "pmhash/options.h"

namespace pmhash::engine {

struct ItemHeader {
  std::atomic<std::uint64_t> state;
  std::uint32_t key_len;
  std::uint32_t value_len;
};
static_assert(sizeof(ItemHeader) == 16);

inline std::size_t item_size(std::size_t key_len, std::size_t value_len) {
  return sizeof(ItemHeader) + key_len + value_len;
}

inline void item_write(void* at, std::uint64_t state, std::string_view key,
                       std::string_view value) {
  auto* h = static_cast<ItemHeader*>(at);
  h->state.store(state, std::memory_order_relaxed);
  h->key_len = static_cast<std::uint32_t>(key.size());
  h->value_len = static_cast<std::uint32_t>(value.size());
  auto* p = reinterpret_cast<char*>(h + 1);
  std::memcpy(p, key.data(), key.size());
  std::memcpy(p + key.size(), value.data(), value.size());
}

inline std::string_view item_key(const ItemHeader* h) {
  return {reinterpret_cast<const char*>(h + 1), h->key_len};
}
inline std::string_view item_value(const ItemHeader* h) {
  return {reinterpret_cast<const char*>(h + 1) + h->key_len, h->value_len};
}

// Checked access (heap/checked.h) to an item named by an offset read from the
// pool: the item when its header lies in the heap, 8-byte aligned, its
// lengths are within the limits, and its key and value lie in the heap too
// (`in_block`: inside the allocated block that starts at off); nullptr
// otherwise, which on a pool the engine wrote can only mean damage. An
// item's header never changes once it is published, so the lengths checked
// here are the ones item_key() and item_value() read.
inline const ItemHeader* checked_item(const heap::PoolView& pool, std::uint64_t off,
                                      bool in_block = false) {
  const auto* h = pool.at<const ItemHeader>(off);
  if (h == nullptr || h->key_len > kMaxKeySize || h->value_len > kMaxValueSize) return nullptr;
  const std::uint64_t n = sizeof(ItemHeader) + std::uint64_t{h->key_len} + h->value_len;
  if (in_block ? pool.block_size(off) < n : !pool.contains(off, n)) return nullptr;
  return h;
}

// Heap recovery, in engines whose items carry their key's h1 as the state
// word (nehash, pmeh): the key of the item in the allocated `size`-byte
// block at `off` when the block holds a whole item whose state is its key's
// h1; nothing otherwise (such as a block whose item an interrupted insert
// never finished writing).
inline std::optional<Key> hashed_item_key(const media::Region& region, std::uint64_t off,
                                          std::size_t size) {
  if (size < sizeof(ItemHeader)) return std::nullopt;
  const auto* item = region.at<ItemHeader>(off);
  if (item->key_len > kMaxKeySize ||
      sizeof(ItemHeader) + std::uint64_t{item->key_len} + item->value_len > size) {
    return std::nullopt;
  }
  const Key key = make_key(item_key(item));
  if (item->state.load() != key.h1) return std::nullopt;
  return key;
}

}  // namespace pmhash::engine
