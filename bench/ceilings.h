// bench/ceilings.h - the machine's ceilings: what its memory allows on the
// same kind of region the hash indexes use, so that every benchmark result
// can be shown as a fraction of the matching ceiling.
//
// measure_ceilings() maps a region exactly as an index pool is mapped (a
// file through libpmem2 with the granularity forced, or anonymous DRAM),
// touches every page, then runs seven time-boxed tests on `threads` threads
// that start together. Each rate is operations (or bytes) summed over the
// threads, divided by the wall time of that test:
//
//   dependent_reads_per_s    random 64-byte lines read one after another,
//                            each address loaded from the line before (a
//                            pointer chase round one random cycle): the
//                            latency bound, one miss in flight per thread.
//                            An index lookup that follows pointers (bucket,
//                            then item) sits near this ceiling.
//   independent_reads_per_s  random 64-byte lines whose addresses do not
//                            depend on each other, issued in batches: the
//                            memory-level-parallelism bound, the most random
//                            line reads the machine serves.
//   persists_per_s           a random 8-byte store made durable with
//                            libpmem2's persist (flush + fence; an msync on
//                            page granularity): the most durable small
//                            writes the region takes.
//   nt_persists_per_s        a random 8-byte non-temporal store (movnti)
//                            followed by a fence (sfence): the way an index
//                            can make one word durable without a flush,
//                            since a non-temporal store bypasses the cache
//                            and the fence waits until it has reached the
//                            memory controller (durable under ADR).
//   nt16_persists_per_s      the same with a 16-byte non-temporal store
//                            (movntdq, 16-byte aligned) + sfence: a small
//                            key-value pair in one store.
//                            Both only on byte and cache_line granularity
//                            (0 elsewhere: on an ordinary file a
//                            non-temporal store is not durable, and DRAM
//                            has nothing to persist).
//   seq_read_bytes_per_s     each thread summing its own slice: bandwidth.
//   seq_write_bytes_per_s    each thread writing its own slice in 1 MiB
//                            chunks with libpmem2's memset, which also
//                            makes the bytes durable.
//
// How the benchmark uses them: the driver charges every read operation of a
// workload against independent_reads_per_s and every write operation
// against persists_per_s (a mix by its shares), so a result reads as a
// fraction of what the memory allows. A fraction near 1 means the index
// costs about one random line read per lookup (or one persist per update);
// a small one means it spends its time elsewhere. The other three ceilings
// put latency-bound lookups and bulk loads in context.
//
// Granularity "none" maps anonymous DRAM (MAP_PRIVATE | MAP_ANONYMOUS):
// nothing there is durable, so a "persist" is just the store (no flush, no
// fence) and the sequential write is a plain memset. Those ceilings belong
// to the volatile peers and to indexes run with granularity none.
//
// Page size. A file region is mapped the way media::Region maps a pool,
// huge-page advice included (MADV_HUGEPAGE: 2 MiB pages where the file
// system allows them, a tmpfs mounted huge=advise or huge=always; none on
// one mounted huge=never, the default of /dev/shm). After the set-up has
// touched every page, the share of the region the kernel maps with huge
// pages is read from /proc/self/smaps, so every result says which page
// size it ran on.
//
// The region's file is created under `dir` with a name unique to the
// process and unlinked as soon as it is open: it is gone when
// measure_ceilings() returns or throws, and even if the process is killed.
//
#pragma once


#include <cstdint>
#include <string>

namespace pmhash::bench {

struct CeilingConfig {
  std::string dir = "/dev/shm";            // where the region's file is created (ignored for "none")
  std::string granularity = "cache_line";  // byte | cache_line | page | none
  unsigned threads = 1;
  std::uint64_t region_bytes = 1ull << 30; // size of the mapped region (rounded to 2 MiB); at least 16 MiB
  double seconds_per_test = 0.5;           // duration of each measurement
};

struct Ceilings {
  unsigned threads = 0;
  std::string granularity;         // as measured (what libpmem2 reported, or "none")
  std::string region;              // "file DIR/..." or "anonymous DRAM"
  std::uint64_t region_bytes = 0;
  double dependent_reads_per_s = 0;    // random 64-byte line reads, each address depending on the previous (pointer chase), summed over threads
  double independent_reads_per_s = 0;  // random 64-byte line reads with independent addresses (memory-level parallelism), summed over threads
  double persists_per_s = 0;           // random 8-byte store + flush + fence (libpmem2 persist), summed over threads
  double nt_persists_per_s = 0;        // random 8-byte non-temporal store + sfence, summed over threads (0: not measured)
  double nt16_persists_per_s = 0;      // random 16-byte non-temporal store + sfence, summed over threads (0: not measured)
  double seq_read_bytes_per_s = 0;     // sequential read bandwidth, summed over threads
  double seq_write_bytes_per_s = 0;    // sequential write bandwidth including making the bytes durable, summed over threads
  double huge_page_fraction = 0;       // share of the region mapped with 2 MiB pages (smaps), 0 to 1
  std::string page_size;               // "4 KiB", "2 MiB" or "2 MiB on 37% of the region, else 4 KiB"
};

// Maps the region `config` describes, measures the seven ceilings above and
// releases the region (unmaps, closes and unlinks its file). Takes about
// 7 x seconds_per_test plus the time to fill the region once. Sets
// PMEM2_FORCE_GRANULARITY to config.granularity while mapping a file and
// restores its previous value afterwards, so do not call it while another
// thread maps a pool.
//
// Errors:
//   std::invalid_argument  an unknown granularity, threads == 0, a region
//                          under 16 MiB or under 1 MiB per thread, or a
//                          seconds_per_test that is not positive.
//   std::runtime_error     the region cannot be created or mapped; the
//                          one-line message names the path and the reason.
Ceilings measure_ceilings(const CeilingConfig& config);

}  // namespace pmhash::bench
