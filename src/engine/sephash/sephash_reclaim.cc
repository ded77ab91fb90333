// engine/sephash/sephash_reclaim.cc - sephash allocation and block reuse
// (sephash.h, "Reclamation").
#include "engine/sephash/sephash_index.h"

namespace pmhash::engine::sephash {

Status SepHashIndex::alloc_direct(Session& ss, unsigned node, std::uint64_t bytes,
                                  std::uint64_t* off) {
  if (Status s = remote_index::alloc_direct(ss, node, bytes, off); !s.ok()) return s;
  bytes_bumped_.fetch_add(round64(bytes), std::memory_order_relaxed);
  return Status::OK();
}

Status SepHashIndex::alloc(Session& ss, unsigned node, std::uint64_t bytes, std::uint64_t* off) {
  bytes = round64(bytes);
  const std::uint64_t end = chunk_of(ss, node).second;
  if (Status s = ss.chunks.alloc(ss, node, bytes, off); !s.ok()) return s;
  // New space: a block too large for chunks, or a new chunk.
  if (bytes > remote_index::kChunkBytes / 4) {
    bytes_bumped_.fetch_add(bytes, std::memory_order_relaxed);
  } else if (chunk_of(ss, node).second != end) {
    bytes_bumped_.fetch_add(remote_index::kChunkBytes, std::memory_order_relaxed);
  }
  return Status::OK();
}

Status SepHashIndex::alloc_block(Session& ss, unsigned node, std::uint64_t units,
                                 std::uint64_t* off) {
  if (Status s = find_block(ss, node, units, off); !s.ok()) return s;
  note(BlockUse::kTaken, node, *off, units * 64);
  return Status::OK();
}

Status SepHashIndex::find_block(Session& ss, unsigned node, std::uint64_t units,
                                std::uint64_t* off) {
  if (take_free(ss, node, units, off)) return Status::OK();
  const std::uint64_t bytes = units * 64;
  const auto [next, end] = chunk_of(ss, node);
  if (bytes > remote_index::kChunkBytes / 4 || next + bytes > end) {
    // Records until one has a block of this length, or none is left.
    for (bool got = true; got;) {
      if (Status s = pop_record(ss, node, &got); !s.ok()) return s;
      if (got && take_free(ss, node, units, off)) return Status::OK();
    }
  }
  return alloc(ss, node, bytes, off);
}

bool SepHashIndex::take_free(Session& ss, unsigned node, std::uint64_t units, std::uint64_t* off) {
  auto it = ss.free[node].find(units);
  if (it == ss.free[node].end() || it->second.empty()) return false;
  *off = it->second.back();
  it->second.pop_back();
  blocks_reused_.fetch_add(1, std::memory_order_relaxed);
  bytes_reused_.fetch_add(units * 64, std::memory_order_relaxed);
  return true;
}

void SepHashIndex::release(Session& ss, unsigned node, std::uint64_t off, std::uint64_t units) {
  note(BlockUse::kFreed, node, off, units * 64);
  ss.free[node][units].push_back(off);
  blocks_freed_.fetch_add(1, std::memory_order_relaxed);
  bytes_freed_.fetch_add(units * 64, std::memory_order_relaxed);
}

SepHashIndex::Landed SepHashIndex::settle(Session& ss, unsigned node, std::uint64_t seen,
                                          std::uint64_t ours) {
  for (unsigned attempt = 0; attempt < kSettleTries; ++attempt) {
    Batch b;
    b.cas(node, params_.free_table, seen, next_head(seen, head_off(seen)));
    if (!exec(ss, b).ok()) continue;
    const std::uint64_t now = b.result(0);
    if (now == seen) return Landed::kNo;
    if (head_tag(now) != head_tag(next_head(seen, 0))) return Landed::kUnknown;
    return now == ours ? Landed::kAsOurs : Landed::kNo;
  }
  return Landed::kUnknown;
}

std::uint64_t SepHashIndex::entries_bytes(const std::uint64_t* e, std::size_t n) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += entry_units(e[i]) * 64;
  return total;
}

Status SepHashIndex::pop_record(Session& ss, unsigned node, bool* got) {
  *got = false;
  const std::uint64_t table = params_.free_table;
  std::uint64_t head = 0;
  Batch b;
  b.read(node, table, &head, 8);
  if (Status s = exec(ss, b); !s.ok()) return s;
  std::vector<std::uint64_t> rec(kFreeRecordBytes / 8);
  for (;;) {
    if (head_off(head) == 0) return Status::OK();
    b.clear();
    b.read(node, head_off(head), rec.data(), static_cast<std::uint32_t>(kFreeRecordBytes));
    if (Status s = exec(ss, b); !s.ok()) return s;
    // The record's bytes count only if the head is still the one read
    // before them: the tag changes with every push and pop.
    const std::uint64_t popped = next_head(head, rec[0]);
    b.clear();
    b.cas(node, table, head, popped);
    if (Status s = exec(ss, b); !s.ok()) {
      // Taken only if it surely ran, which no answer proves: another
      // client popping the same head writes the same word. So nothing
      // is taken; the record stays on the stack (kNo) or, popped by this
      // CAS, is nobody's (leaked, as if this client had died here).
      if (settle(ss, node, head, popped) != Landed::kNo) {
        leak(kFreeRecordBytes +
             (rec[1] <= kFreeRecordEntries ? entries_bytes(rec.data() + 2, rec[1]) : 0));
      }
      return s;
    }
    if (b.result(0) == head) break;
    head = b.result(0);
  }
  const std::uint64_t size = ss.client->node_size(node);
  if (rec[1] > kFreeRecordEntries) {
    return Status::Corruption("sephash: free record at node " + std::to_string(node) +
                              " offset " + std::to_string(head_off(head)) + " counts " +
                              std::to_string(rec[1]) + " blocks");
  }
  for (std::uint64_t i = 0; i < rec[1]; ++i) {
    const std::uint64_t e = rec[2 + i];
    if (entry_off(e) < remote::kFirstAllocatable || entry_units(e) == 0 ||
        entry_off(e) + entry_units(e) * 64 > size) {
      return Status::Corruption("sephash: free record at node " + std::to_string(node) +
                                " offset " + std::to_string(head_off(head)) +
                                " names a block outside the node");
    }
    ss.free[node][entry_units(e)].push_back(entry_off(e));
  }
  note(BlockUse::kFreed, node, head_off(head), kFreeRecordBytes);
  ss.free[node][kFreeRecordBytes / 64].push_back(head_off(head));
  *got = true;
  return Status::OK();
}

Status SepHashIndex::hand_back(Session& ss) {
  Status first;
  for (unsigned node = 0; node < ss.free.size(); ++node) {
    if (node < ss.chunks.per_node.size()) {
      auto& [next, end] = ss.chunks.per_node[node];
      if (end > next) ss.free[node][(end - next) / 64].push_back(next);
      next = end = 0;
    }
    std::vector<std::uint64_t> entries;
    for (auto& [units, offs] : ss.free[node]) {
      for (std::uint64_t o : offs) entries.push_back(free_entry(units, o));
    }
    ss.free[node].clear();
    if (Status s = push_blocks(ss, node, &entries, true); !s.ok() && first.ok()) first = s;
    // What a failing node did not take is lost with the session.
    leak(entries_bytes(entries.data(), entries.size()));
  }
  return first;
}

void SepHashIndex::shed_surplus(Session& ss, unsigned node) {
  std::size_t total = 0;
  for (const auto& [units, offs] : ss.free[node]) total += offs.size();
  if (total <= kKeepFreeBlocks) return;
  std::vector<std::uint64_t> entries;
  for (auto& [units, offs] : ss.free[node]) {
    for (std::size_t give = offs.size() / 2; give > 0 && entries.size() < kFreeRecordEntries; --give) {
      entries.push_back(free_entry(units, offs.back()));
      offs.pop_back();
    }
  }
  // The record's block may be new space (4 KiB for up to 510 blocks; the
  // client that pops it reuses it too). What push_blocks leaves in
  // `entries` is still this client's (not pushed, and surely not).
  (void)push_blocks(ss, node, &entries, true);
  for (std::uint64_t e : entries) ss.free[node][entry_units(e)].push_back(entry_off(e));
}

Status SepHashIndex::push_blocks(Session& ss, unsigned node, std::vector<std::uint64_t>* entries,
                                 bool may_bump) {
  const std::uint64_t rec_units = kFreeRecordBytes / 64;
  while (!entries->empty()) {
    std::uint64_t rec_off = 0;
    auto fit = std::find_if(entries->begin(), entries->end(),
                            [&](std::uint64_t e) { return entry_units(e) >= rec_units; });
    std::uint64_t fit_entry = 0;
    std::size_t fit_at = 0;
    if (fit != entries->end()) {
      fit_entry = *fit;
      fit_at = static_cast<std::size_t>(fit - entries->begin());
      rec_off = entry_off(*fit);
      if (entry_units(*fit) == rec_units) {
        *fit = entries->back();
        entries->pop_back();
      } else {
        *fit = free_entry(entry_units(*fit) - rec_units, rec_off + kFreeRecordBytes);
      }
    } else if (!may_bump) {
      return Status::OK();
    } else if (Status s = alloc_direct(ss, node, kFreeRecordBytes, &rec_off); !s.ok()) {
      return s;
    }
    note(BlockUse::kTaken, node, rec_off, kFreeRecordBytes);
    const std::size_t n = std::min<std::size_t>(entries->size(), kFreeRecordEntries);
    std::vector<std::uint64_t> rec(kFreeRecordBytes / 8, 0);
    rec[1] = n;
    std::copy(entries->end() - static_cast<std::ptrdiff_t>(n), entries->end(), rec.begin() + 2);
    Unpushed left = Unpushed::kIntact;
    if (Status s = push_record(ss, node, rec_off, &rec, &left); !s.ok()) {
      if (left == Unpushed::kIntact) {
        // Nothing was sent: the record's block is this client's again.
        note(BlockUse::kFreed, node, rec_off, kFreeRecordBytes);
        if (fit_entry == 0) {
          entries->push_back(free_entry(rec_units, rec_off));
        } else if (entry_units(fit_entry) == rec_units) {
          entries->push_back(fit_entry);
        } else {
          (*entries)[fit_at] = fit_entry;  // the piece's rest stood there
        }
        return s;
      }
      // A request that did not answer may still write the record's
      // block: it is given up (a piece's rest stays free).
      leak(kFreeRecordBytes);
      if (left == Unpushed::kUnknown) {
        // The record may be on the stack: its blocks are given up too.
        leak(entries_bytes(rec.data() + 2, n));
        entries->resize(entries->size() - n);
      }
      return s;
    }
    entries->resize(entries->size() - n);
  }
  return Status::OK();
}

Status SepHashIndex::push_record(Session& ss, unsigned node, std::uint64_t rec_off,
                                 std::vector<std::uint64_t>* rec, Unpushed* left) {
  *left = Unpushed::kIntact;
  const std::uint64_t table = params_.free_table;
  std::uint64_t head = 0;
  Batch b;
  b.read(node, table, &head, 8);
  if (Status s = exec(ss, b); !s.ok()) return s;
  for (;;) {
    (*rec)[0] = head_off(head);
    const std::uint64_t pushed = next_head(head, rec_off);
    b.clear();
    // The record is complete before the CAS that publishes it (same node,
    // in order).
    b.write(node, rec_off, rec->data(), static_cast<std::uint32_t>(kFreeRecordBytes));
    b.cas(node, table, head, pushed);
    if (Status s = exec(ss, b); !s.ok()) {
      const Landed landed = settle(ss, node, head, pushed);
      // No other change makes `pushed` (the record's block is this
      // client's alone): the push ran, its write before its CAS.
      if (landed == Landed::kAsOurs) return Status::OK();
      *left = landed == Landed::kNo ? Unpushed::kEntries : Unpushed::kUnknown;
      return s;
    }
    if (b.result(1) == head) return Status::OK();
    head = b.result(1);
  }
}

}  // namespace pmhash::engine::sephash
