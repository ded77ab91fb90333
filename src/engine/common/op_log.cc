// engine/common/op_log.cc - writing and replaying slot-update records
// (the persist order is in op_log.h).
#include "engine/common/op_log.h"

namespace pmhash::engine::common {

void write_slot_update(media::Region& region, OpLog& log, Slot& slot, std::atomic<std::uint16_t>& meta,
                       std::uint16_t new_meta, std::uint64_t w0, std::uint64_t w1,
                       planted::Bug clear_bug) {
  // 1. The record's fields, while op says "none".
  log.op.store(kOpNone, std::memory_order_relaxed);
  log.meta.store(log_meta(new_meta, region.offset_of(&meta)), std::memory_order_relaxed);
  log.w0.store(w0, std::memory_order_relaxed);
  log.w1.store(w1, std::memory_order_relaxed);
  region.flush(&log, sizeof(OpLog));
  // Drain #1: the record's fields (and what the caller wrote before: a new
  // item, a retire entry) are durable before the record can be taken as
  // committed.
  region.drain();
  log.op.store(op_slot_update(region.offset_of(&slot)), std::memory_order_relaxed);
  // Persist #2, the commit point: from here recovery writes the new slot.
  region.persist(&log.op, sizeof(std::uint64_t));
  slot.w0.store(w0, std::memory_order_release);
  slot.w1.store(w1, std::memory_order_release);
  meta.store(new_meta, std::memory_order_release);
  region.flush(&slot, sizeof(Slot));
  region.flush(&meta, sizeof(std::uint16_t));
  // Drain #3: the slot is whole on media before the record is cleared.
  region.drain();
  log.op.store(kOpNone, std::memory_order_relaxed);
  // Persist #4: a committed record always belongs to an operation in flight,
  // so a replay never undoes a later write of this slot.
  if (!planted::active(clear_bug)) region.persist(&log.op, sizeof(std::uint64_t));
}

void replay_slot_update(media::Region& region, const OpLog& log, Slot* slot,
                        std::atomic<std::uint16_t>* meta) {
  slot->w0.store(log.w0.load());
  slot->w1.store(log.w1.load());
  meta->store(log_meta_value(log.meta.load()));
  region.flush(slot, sizeof(Slot));
  region.flush(meta, sizeof(std::uint16_t));
}

void clear_op_logs(media::Region& region, std::span<OpLog* const> records) {
  if (records.empty()) return;
  // What the records stand for (replayed slots, the engine's own repairs)
  // is durable before a record is cleared: else a crash of this recovery
  // could keep a cleared record and lose what it stood for, and the next
  // recovery would not know to redo it.
  region.drain();
  for (OpLog* log : records) {
    log->op.store(kOpNone);
    region.flush(&log->op, sizeof(std::uint64_t));
  }
}

int busy_op_log(std::span<const OpLog> logs) {
  for (std::size_t t = 0; t < logs.size(); ++t) {
    if (logs[t].op.load() != kOpNone) return static_cast<int>(t);
  }
  return -1;
}

}  // namespace pmhash::engine::common
