// DirectFile and span alignment. O_DIRECT support is probed with a real read, because some
// filesystems accept the open flag and only fail the first read with EINVAL.
#include "io/direct_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace deltafin::io {
namespace {

using base::fail;

std::atomic<uint64_t> g_probes{0};

// Filesystems (st_dev) where an O_DIRECT read has worked. Whether O_DIRECT works is a property of
// the filesystem, so one successful probe there is enough: the probe is a real read, and a read
// waits behind the device's queue (under blk-throttle behind every queued request of the cgroup:
// a 4 KiB read took 0.38 s behind one 17.5 MB read at 50 MB/s), while placed experts open one
// file per read on the thread that submits the reads. Failures are not remembered, nor successes
// on overlayfs and FUSE, where files of one st_dev can live on filesystems that differ.
std::mutex g_direct_mu;
std::vector<dev_t> g_direct_devices;

bool direct_known_to_work(dev_t dev) {
  std::lock_guard<std::mutex> lock(g_direct_mu);
  return std::find(g_direct_devices.begin(), g_direct_devices.end(), dev) != g_direct_devices.end();
}

void remember_direct_works(dev_t dev) {
  std::lock_guard<std::mutex> lock(g_direct_mu);
  if (std::find(g_direct_devices.begin(), g_direct_devices.end(), dev) == g_direct_devices.end())
    g_direct_devices.push_back(dev);
}

// Returns true when an aligned O_DIRECT read of the first block works on this fd.
bool direct_read_works(int fd) {
  ++g_probes;
  void* probe = std::aligned_alloc(kDirectAlignment, kDirectAlignment);
  if (probe == nullptr) return false;
  const ssize_t got = pread(fd, probe, kDirectAlignment, 0);
  std::free(probe);
  return got >= 0;
}

}  // namespace

uint64_t direct_probe_count() { return g_probes.load(); }

const char* read_mode_name(ReadMode mode) {
  return mode == ReadMode::kDirect ? "O_DIRECT" : "buffered+DONTNEED";
}

DirectFile DirectFile::adopt(int fd, std::string name) {
  DirectFile file;
  file.fd_ = fd;
  file.path_ = std::move(name);
  file.mode_ = ReadMode::kBuffered;
  return file;
}

DirectFile DirectFile::open(const std::string& path, bool allow_direct) {
  DirectFile file;
  file.path_ = path;
  int fd = allow_direct ? ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
  if (fd >= 0) {
    struct stat st {};
    struct statfs fs {};
    constexpr long kOverlayfsMagic = 0x794c7630, kFuseMagic = 0x65735546;
    const bool cacheable = fstat(fd, &st) == 0 && fstatfs(fd, &fs) == 0 &&
                           fs.f_type != kOverlayfsMagic && fs.f_type != kFuseMagic;
    if (!cacheable || !direct_known_to_work(st.st_dev)) {
      if (direct_read_works(fd)) {
        if (cacheable) remember_direct_works(st.st_dev);
      } else {
        ::close(fd);
        fd = -1;
      }
    }
  }
  if (fd >= 0) {
    file.mode_ = ReadMode::kDirect;
  } else {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open ", path, ": ", std::strerror(errno));
    file.mode_ = ReadMode::kBuffered;
    if (allow_direct) {
      base::log_debug("io: ", path, " does not support O_DIRECT; reading buffered + DONTNEED");
    }
  }
  file.fd_ = fd;
  struct stat st {};
  if (fstat(fd, &st) != 0) fail("cannot stat ", path, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, " is not a regular file");
  file.size_bytes_ = static_cast<uint64_t>(st.st_size);
  return file;
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
}

DirectFile::DirectFile(DirectFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      size_bytes_(other.size_bytes_),
      mode_(other.mode_) {}

DirectFile& DirectFile::operator=(DirectFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    size_bytes_ = other.size_bytes_;
    mode_ = other.mode_;
  }
  return *this;
}

AlignedSpan align_span(uint64_t offset, size_t length, size_t alignment) {
  AlignedSpan span;
  span.read_offset = offset / alignment * alignment;
  span.data_offset = static_cast<size_t>(offset - span.read_offset);
  span.required_bytes = span.data_offset + length;
  span.read_length = (span.required_bytes + alignment - 1) / alignment * alignment;
  return span;
}

size_t read_span(const DirectFile& file, uint64_t offset, size_t length, void* buf,
                 size_t buf_capacity) {
  const AlignedSpan span = align_span(offset, length);
  DF_ASSERT(buf_capacity >= span.read_length);
  DF_ASSERT(reinterpret_cast<uintptr_t>(buf) % kDirectAlignment == 0);
  size_t done = 0;
  while (done < span.required_bytes) {
    const ssize_t got = pread(file.fd(), static_cast<uint8_t*>(buf) + done, span.read_length - done,
                              static_cast<off_t>(span.read_offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      fail("read of ", file.path(), " at offset ", span.read_offset + done,
           " failed: ", std::strerror(errno));
    }
    done += static_cast<size_t>(got);
    // A zero-byte read, or a short one that reached the file's end, means the span is cut off
    // (under O_DIRECT, reading on from an unaligned end would fail with EINVAL instead).
    if (done < span.required_bytes && (got == 0 || span.read_offset + done >= file.size_bytes())) {
      fail("file ", file.path(), " ends at byte ", file.size_bytes(), " but the span [", offset,
           ", ", offset + length, ") was requested");
    }
  }
  if (file.mode() == ReadMode::kBuffered) {
    posix_fadvise(file.fd(), static_cast<off_t>(span.read_offset),
                  static_cast<off_t>(span.read_length), POSIX_FADV_DONTNEED);
  }
  return span.data_offset;
}

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", path, " to drop its cached pages: ", std::strerror(errno));
  fdatasync(fd);  // DONTNEED skips dirty pages
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace deltafin::io
