// engine/common/slot16.cc - reading a slot for check() (slot16.h).
#include "engine/common/slot16.h"

#include "engine/hash.h"
#include "engine/item.h"
#include "pool/pptr.h"

namespace pmhash::engine::common {

std::string check_slot(const heap::Heap& heap, const media::Region& region, std::uint16_t m,
                       std::uint64_t w0, std::uint64_t w1, SlotTag tag, SlotContent* out) {
  if (meta_is_inline(m)) {
    const unsigned kl = meta_key_len(m), vl = meta_value_len(m);
    if (kl > kInlineMax || vl > kInlineMax || (kl < 8 && (w0 >> (8 * kl)) != 0) ||
        (vl < 8 && (w1 >> (8 * vl)) != 0)) {
      return "has a malformed inline slot";
    }
    out->key = std::string(unpack_word(w0, kl));
    const Key k = make_key(out->key);
    out->h1 = k.h1;
    out->h2 = k.h2;
    out->item = 0;
    return "";
  }
  const std::uint64_t ioff = pool::pptr_offset(w0);
  if ((m & ~(kMetaValid | kMetaFpMask)) != 0 || (tag == SlotTag::kZero && w0 != ioff) ||
      !heap.is_allocated(ioff)) {
    return "has a malformed pointer slot";
  }
  const auto* item = region.at<ItemHeader>(ioff);
  if (heap.block_size(ioff) < sizeof(ItemHeader) + std::uint64_t{item->key_len} + item->value_len) {
    return "names an item larger than its block";
  }
  out->key = std::string(item_key(item));
  const Key k = make_key(out->key);
  if (item->state.load() != w1 || k.h1 != w1 ||
      (tag == SlotTag::kFromH2 && pool::pptr_tag(w0) != pointer_tag(k.h2))) {
    return "names an item whose hash does not match the slot";
  }
  if (fits_inline(item->key_len, item->value_len)) return "points to an item small enough to be inline";
  out->h1 = w1;
  out->h2 = k.h2;
  out->item = ioff;
  return "";
}

}  // namespace pmhash::engine::common
