// pool/pool.cc - creating, validating and opening pool files.
//
// The layout and the create/open protocols are described in pool.h. Two
// rules shape this file:
//
//  * open() never writes to a file it rejects. Everything it validates is
//    read with pread() through a read-only descriptor; the file is mapped
//    read-write only once every check has passed.
//  * create() makes the header durable last. Until then the file has no
//    valid magic and checksum, so a crash in the middle of create leaves a
//    file that open() rejects as "not a pmhash pool" instead of a pool with
//    a half-formatted heap.
//
// Pool sizes are rounded up to a multiple of the page size (libpmem2 maps
// whole pages) and may not exceed 2^48 bytes, the offset width of a
// persistent pointer (pptr.h).
#include "pool/pool.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <utility>

#include "pool/pptr.h"

namespace pmhash::pool {

namespace {

// ShutdownState sits right after the header, in the first page.
constexpr std::uint64_t kShutdownOffset = sizeof(PoolHeader);
static_assert(kShutdownOffset % media::kCacheLineSize == 0);
static_assert(kShutdownOffset + sizeof(ShutdownState) <= kHeaderSize);

// The checksum covers every header byte before the checksum field.
constexpr std::size_t kChecksummedBytes = offsetof(PoolHeader, checksum);
static_assert(kChecksummedBytes == 248);

// Largest pool a 48-bit persistent pointer offset can address.
constexpr std::uint64_t kMaxPoolSize = kOffsetMask + 1;

std::uint64_t header_checksum(const PoolHeader& h) {
  return XXH3_64bits(&h, kChecksummedBytes);
}

std::string errno_text(int err) { return std::strerror(err); }

std::string engine_name_of(const PoolHeader& h) {
  return std::string(h.engine, ::strnlen(h.engine, kEngineNameSize));
}

// Checks that do not depend on the file: magic, version, checksum, and that
// the recorded layout is the one this build writes. `who` is "pool <path>".
Status validate_header(const std::string& who, const PoolHeader& h) {
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption(who + ": not a pmhash pool (bad magic)");
  }
  // Before the checksum: another layout version may checksum differently.
  if (h.layout_version != kLayoutVersion) {
    return Status::Corruption(who + ": layout version " + std::to_string(h.layout_version) +
                              ", this build reads version " + std::to_string(kLayoutVersion));
  }
  if (header_checksum(h) != h.checksum) {
    return Status::Corruption(who + ": header checksum mismatch (corrupted header)");
  }
  auto inconsistent = [&](const std::string& what) {
    return Status::Corruption(who + ": inconsistent header: " + what);
  };
  if (h.header_size != sizeof(PoolHeader)) {
    return inconsistent("header_size " + std::to_string(h.header_size) + ", expected " +
                        std::to_string(sizeof(PoolHeader)));
  }
  if (h.root_offset != kRootOffset || h.root_size != kRootSize) {
    return inconsistent("root at " + std::to_string(h.root_offset) + " size " +
                        std::to_string(h.root_size) + ", expected " + std::to_string(kRootOffset) +
                        " size " + std::to_string(kRootSize));
  }
  if (h.heap_offset != kHeapOffset) {
    return inconsistent("heap_offset " + std::to_string(h.heap_offset) + ", expected " +
                        std::to_string(kHeapOffset));
  }
  if (h.pool_size < kMinPoolSize || h.pool_size > kMaxPoolSize) {
    return inconsistent("pool_size " + std::to_string(h.pool_size) + " outside [" +
                        std::to_string(kMinPoolSize) + ", " + std::to_string(kMaxPoolSize) + "]");
  }
  if (h.heap_size != h.pool_size - h.heap_offset) {
    return inconsistent("heap_size " + std::to_string(h.heap_size) + ", expected pool_size - " +
                        "heap_offset = " + std::to_string(h.pool_size - h.heap_offset));
  }
  if (h.engine[0] == '\0' || ::strnlen(h.engine, kEngineNameSize) == kEngineNameSize) {
    return inconsistent("engine name empty or not NUL-terminated");
  }
  return Status::OK();
}

// Validates create parameters and returns the pool size to use.
Status check_params(const std::string& who, const CreateParams& params, std::uint64_t* size) {
  if (params.engine.empty() || params.engine.size() >= kEngineNameSize) {
    return Status::InvalidArgument(who + ": engine name '" + params.engine + "' must be 1 to " +
                                   std::to_string(kEngineNameSize - 1) + " characters");
  }
  if (params.engine.find('\0') != std::string::npos) {
    return Status::InvalidArgument(who + ": engine name contains a NUL byte");
  }
  if (params.size < kMinPoolSize) {
    return Status::InvalidArgument(who + ": pool size " + std::to_string(params.size) +
                                   " bytes is below the minimum " + std::to_string(kMinPoolSize) +
                                   " (4 MiB)");
  }
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t align =
      page > 0 && static_cast<std::uint64_t>(page) > kHeaderSize ? static_cast<std::uint64_t>(page)
                                                                  : kHeaderSize;
  if (params.size > kMaxPoolSize) {
    return Status::InvalidArgument(who + ": pool size " + std::to_string(params.size) +
                                   " bytes is above the maximum " + std::to_string(kMaxPoolSize) +
                                   " (2^48, the reach of a persistent pointer)");
  }
  *size = (params.size + align - 1) / align * align;
  return Status::OK();
}

// Writes everything but the header: zeroed header page and root, the
// shutdown state of a pool that is open (generation 1), and the heap area
// as its owner formats it (params.format_heap; zeroed without one).
// Durable on return.
Status format_body(media::Region& region, const CreateParams& params) {
  std::memset(region.base(), 0, kHeapOffset);
  auto* ss = region.at<ShutdownState>(kShutdownOffset);
  ss->clean = 0;  // create leaves the pool open
  ss->generation = 1;
  if (params.format_heap) {
    if (Status s = params.format_heap(region, kHeapOffset, region.size() - kHeapOffset); !s.ok()) {
      return s;
    }
  }
  // Root, shutdown state and heap must be durable before the header that
  // makes the file a pool: else a crash could leave a valid header over an
  // unformatted heap. format_heap persisted the heap area (a zeroed one is
  // zero on the media already: the file was sized from empty); the rest is
  // the first kHeapOffset bytes (a whole-pool persist would touch every
  // page).
  region.persist(region.base(), kHeapOffset);
  return Status::OK();
}

Status fill_header(const std::string& who, const CreateParams& params, std::uint64_t size,
                   PoolHeader* h) {
  std::memset(h, 0, sizeof(*h));
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->layout_version = kLayoutVersion;
  h->header_size = sizeof(PoolHeader);
  h->pool_size = size;
  if (::getrandom(h->uuid, sizeof(h->uuid), 0) != static_cast<ssize_t>(sizeof(h->uuid))) {
    return Status::IOError(who + ": cannot read random bytes for the uuid: " + errno_text(errno));
  }
  std::memcpy(h->engine, params.engine.data(), params.engine.size());
  std::memcpy(h->engine_params, params.engine_params.data(), kEngineParamsSize);
  h->root_offset = kRootOffset;
  h->root_size = kRootSize;
  h->heap_offset = kHeapOffset;
  h->heap_size = size - kHeapOffset;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  h->create_time_ns = static_cast<std::uint64_t>(now.tv_sec) * 1000000000u +
                      static_cast<std::uint64_t>(now.tv_nsec);
  h->checksum = header_checksum(*h);
  return Status::OK();
}

// Writes the header into the region and makes it durable: the last step of
// create.
void write_header(media::Region& region, const PoolHeader& h) {
  std::memcpy(region.base(), &h, sizeof(h));
  // The header is what turns the file into a pool; create must not report
  // success while a crash could still lose it.
  region.persist(region.base(), sizeof(h));
}

// Reads exactly n bytes at off; false with errno set on error or short file.
bool pread_full(int fd, void* buf, std::size_t n, off_t off) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) {
      errno = EIO;
      return false;
    }
    p += r;
    n -= static_cast<std::size_t>(r);
    off += r;
  }
  return true;
}

Status fsync_parent_dir(const std::string& who, const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    return Status::IOError(who + ": cannot open directory " + dir + ": " + errno_text(errno));
  }
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) {
    return Status::IOError(who + ": cannot sync directory " + dir + ": " + errno_text(err));
  }
  return Status::OK();
}

// Closes a descriptor and, unless disarmed, removes the file it created.
class CreateGuard {
 public:
  CreateGuard(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~CreateGuard() {
    if (fd_ >= 0) ::close(fd_);
    if (armed_) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  void disarm() { armed_ = false; }
  // Disarms and hands the descriptor over to the caller.
  int release() {
    armed_ = false;
    return std::exchange(fd_, -1);
  }

 private:
  std::string path_;
  int fd_;
  bool armed_ = true;
};

}  // namespace

Pool::~Pool() {
  region_.reset();  // unmapped before the lock is released
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

// Takes the lock that says a Pool holds the file: exclusive, or shared
// (open_shared).
// The media layer names the file it maps "region PATH"; a user opened or
// created a pool, so its errors reach them naming the pool instead.
Status as_pool_error(const std::string& who, const std::string& path, const Status& s) {
  const std::string prefix = "region " + path + ": ";
  if (!s.is_io_error() || s.message().rfind(prefix, 0) != 0) return s;
  return Status::IOError(who + ": " + s.message().substr(prefix.size()));
}

Status lock_file(const std::string& who, int fd, bool shared = false) {
  if (::flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) return Status::OK();
  if (errno == EWOULDBLOCK) {
    return Status::Busy(who + ": in use (another process, or another store in this one, has it open)");
  }
  return Status::IOError(who + ": cannot lock: " + errno_text(errno));
}

}  // namespace

std::string Pool::engine() const { return engine_name_of(header_); }

Status Pool::create(const std::string& path, const CreateParams& params,
                    std::unique_ptr<Pool>* out) {
  const std::string who = "pool " + path;
  std::uint64_t size = 0;
  if (Status s = check_params(who, params, &size); !s.ok()) return s;

  const int flags = O_RDWR | O_CREAT | O_CLOEXEC | (params.force ? 0 : O_EXCL);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    if (errno == EEXIST) {
      return Status::AlreadyExists(who + ": file exists (use --force to replace it)");
    }
    return Status::IOError(who + ": cannot create: " + errno_text(errno));
  }
  // A pool someone has open is never truncated or removed under them.
  if (Status s = lock_file(who, fd); !s.ok()) {
    ::close(fd);
    return s;
  }
  // From here on, a failure removes the half-made file (with force, the old
  // contents are gone from here on).
  CreateGuard guard(path, fd);
  if (params.force && ::ftruncate(fd, 0) != 0) {
    return Status::IOError(who + ": cannot truncate: " + errno_text(errno));
  }

  // On tmpfs the pages are allocated after the mapping is made and advised
  // to use huge pages, through it (media/region.h, "Page size"); elsewhere
  // (DAX, disk files) by posix_fallocate before it, as ever. Either way
  // every page exists before create returns, so a full file system is an
  // error here, never a SIGBUS later.
  struct statfs fs {};
  const bool tmpfs = ::fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  const auto allocate = [&]() -> Status {
    int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (err == EOPNOTSUPP) err = ::ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
    if (err == 0) return Status::OK();
    return Status::IOError(who + ": cannot size the file to " + std::to_string(size) +
                           " bytes: " + errno_text(err));
  };
  if (!tmpfs) {
    if (Status s = allocate(); !s.ok()) return s;
  } else {
    // What fallocate would say at once: no room for the whole pool.
    struct statvfs room {};
    int err = 0;
    if (::fstatvfs(fd, &room) == 0 &&
        static_cast<std::uint64_t>(room.f_bavail) * room.f_frsize < size) {
      err = ENOSPC;
    } else if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      err = errno;
    }
    if (err != 0) {
      return Status::IOError(who + ": cannot size the file to " + std::to_string(size) +
                             " bytes: " + errno_text(err));
    }
  }

  auto pool = std::unique_ptr<Pool>(new Pool());
  if (Status s = media::Region::map_file(path, size, &pool->region_); !s.ok()) {
    return as_pool_error(who, path, s);
  }
  if (tmpfs) {
    Status s = pool->region_->populate();
    if (s.is_not_supported()) s = allocate();
    if (!s.ok()) return as_pool_error(who, path, s);
  }
  if (Status s = format_body(*pool->region_, params); !s.ok()) return s;
  if (Status s = fill_header(who, params, size, &pool->header_); !s.ok()) return s;
  write_header(*pool->region_, pool->header_);

  // The file's size and its directory entry must survive a crash after
  // create returns, not only its mapped bytes.
  if (::fsync(guard.fd()) != 0) return Status::IOError(who + ": cannot sync: " + errno_text(errno));
  if (Status s = fsync_parent_dir(who, path); !s.ok()) return s;

  pool->lock_fd_ = guard.release();
  pool->was_clean_ = true;
  pool->generation_ = 1;
  *out = std::move(pool);
  return Status::OK();
}

Status Pool::create_volatile(const CreateParams& params, std::unique_ptr<Pool>* out) {
  const std::string who = "volatile pool";
  std::uint64_t size = 0;
  if (Status s = check_params(who, params, &size); !s.ok()) return s;

  auto pool = std::unique_ptr<Pool>(new Pool());
  if (Status s = media::Region::anonymous(size, &pool->region_); !s.ok()) return s;
  if (Status s = format_body(*pool->region_, params); !s.ok()) return s;
  if (Status s = fill_header(who, params, size, &pool->header_); !s.ok()) return s;
  write_header(*pool->region_, pool->header_);

  pool->was_clean_ = true;
  pool->generation_ = 1;
  *out = std::move(pool);
  return Status::OK();
}

Status Pool::open(const std::string& path, const std::string& engine,
                  std::unique_ptr<Pool>* out) {
  return open_locked(path, engine, /*shared=*/false, out);
}

Status Pool::open_shared(const std::string& path, const std::string& engine,
                         std::unique_ptr<Pool>* out) {
  return open_locked(path, engine, /*shared=*/true, out);
}

Status Pool::open_locked(const std::string& path, const std::string& engine, bool shared,
                         std::unique_ptr<Pool>* out) {
  const std::string who = "pool " + path;
  PoolHeader h{};
  // Validation reads through a read-only descriptor: a rejected file is
  // never written, not even its access time through a mapping. The same
  // descriptor holds the pool's lock, taken before anything is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(who + ": cannot open: " + errno_text(errno));
  struct LockHolder {
    int fd;
    ~LockHolder() {
      if (fd >= 0) ::close(fd);
    }
  } lock{fd};
  if (Status s = lock_file(who, fd, shared); !s.ok()) return s;
  {
    struct stat st {};
    const bool stat_ok = ::fstat(fd, &st) == 0;
    const int stat_err = errno;
    if (!stat_ok) {
      return Status::IOError(who + ": cannot stat: " + errno_text(stat_err));
    }
    if (!S_ISREG(st.st_mode)) {
      return Status::IOError(who + ": not a regular file");
    }
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    if (file_size < kHeaderSize) {
      return Status::Corruption(who + ": truncated or not a pool: file is " +
                                std::to_string(file_size) + " bytes, a pool header needs " +
                                std::to_string(kHeaderSize));
    }
    const bool read_ok = pread_full(fd, &h, sizeof(h), 0);
    const int read_err = errno;
    if (!read_ok) return Status::IOError(who + ": cannot read the header: " + errno_text(read_err));

    if (Status s = validate_header(who, h); !s.ok()) return s;
    if (file_size < h.pool_size) {
      return Status::Corruption(who + ": truncated: file is " + std::to_string(file_size) +
                                " bytes, header says " + std::to_string(h.pool_size));
    }
  }
  const std::string held = engine_name_of(h);
  if (!engine.empty() && engine != held) {
    return Status::InvalidArgument(who + ": engine mismatch: file holds '" + held +
                                   "', asked for '" + engine + "' (open with --engine " + held +
                                   ")");
  }

  auto pool = std::unique_ptr<Pool>(new Pool());
  if (Status s = media::Region::map_file(path, h.pool_size, &pool->region_, shared); !s.ok()) {
    return as_pool_error(who, path, s);
  }
  // The file could have been replaced between the checks and the mapping.
  if (std::memcmp(pool->region_->base(), &h, sizeof(h)) != 0) {
    return Status::Corruption(who + ": header changed while opening (another process writing it?)");
  }
  pool->header_ = h;

  // Read only: the heap and the engine may still reject the pool, and a
  // rejected pool is left unchanged. begin_session() writes.
  auto* ss = pool->region_->at<ShutdownState>(kShutdownOffset);
  pool->was_clean_ = std::atomic_ref<std::uint64_t>(ss->clean).load(std::memory_order_relaxed) == 1;
  pool->generation_ =
      std::atomic_ref<std::uint64_t>(ss->generation).load(std::memory_order_relaxed) + 1;

  pool->lock_fd_ = std::exchange(lock.fd, -1);
  *out = std::move(pool);
  return Status::OK();
}

void Pool::begin_session() {
  auto* ss = region_->at<ShutdownState>(kShutdownOffset);
  std::atomic_ref<std::uint64_t>(ss->generation).store(generation_, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(ss->clean).store(0, std::memory_order_relaxed);
  // Durable before the first operation: otherwise a crash in this session
  // could leave clean == 1 (the next open would report a clean shutdown) or
  // reuse this generation in the next open (engines tag the items that
  // operations write with it). If only part of this line reaches media, the
  // crash came before any operation, so either stale field is still
  // truthful.
  region_->persist(ss, sizeof(*ss));
}

void Pool::mark_clean_shutdown() {
  // Everything the session wrote must be durable before the flag that says
  // so, or a crash right after it would hide lost writes from recovery.
  // Engines persist what they write (Index::close leaves the index durable);
  // this fence orders their last flushes before the flag. On page
  // granularity persist_all writes back every page written in this session,
  // which also covers anything written without an explicit persist.
  if (region_->granularity() == media::Granularity::kPage) {
    region_->persist_all();
  } else {
    region_->drain();
  }
  auto* ss = region_->at<ShutdownState>(kShutdownOffset);
  std::atomic_ref<std::uint64_t>(ss->clean).store(1, std::memory_order_relaxed);
  // Without it a crash after close loses the flag and the next open runs
  // recovery for nothing (safe, but slower).
  region_->persist(ss, sizeof(*ss));
}

Status Pool::verify_header() const {
  const std::string who = path().empty() ? std::string("volatile pool") : "pool " + path();
  const auto* mapped = region_->at<const PoolHeader>(0);
  if (Status s = validate_header(who, *mapped); !s.ok()) return s;
  if (std::memcmp(mapped, &header_, sizeof(header_)) != 0) {
    return Status::Corruption(who + ": header changed since the pool was opened");
  }
  return Status::OK();
}

}  // namespace pmhash::pool
