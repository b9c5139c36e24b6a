// POSIX file helpers for the downloader: explicit error messages, fsync discipline, statvfs.
#include "setup/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace deltafin::setup {

using base::fail;

OutFile::OutFile(const std::string& path, bool truncate) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd_ < 0) fail("cannot create ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot stat ", path, ": ", std::strerror(errno));
  size_ = static_cast<uint64_t>(st.st_size);
  if (::lseek(fd_, 0, SEEK_END) < 0) fail("cannot seek in ", path, ": ", std::strerror(errno));
}

OutFile::~OutFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutFile::write(const void* data, size_t n_bytes) {
  const char* p = static_cast<const char*>(data);
  while (n_bytes > 0) {
    const ssize_t n = ::write(fd_, p, n_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing ", path_, ": ", std::strerror(errno));
    p += n;
    n_bytes -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
}

void OutFile::truncate_to(uint64_t n_bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(n_bytes)) != 0)
    fail("cannot truncate ", path_, ": ", std::strerror(errno));
  if (::lseek(fd_, 0, SEEK_END) < 0) fail("cannot seek in ", path_, ": ", std::strerror(errno));
  size_ = n_bytes;
}

void OutFile::sync() {
  if (::fsync(fd_) != 0) fail("fsync of ", path_, " failed: ", std::strerror(errno));
}

void OutFile::drop_cache() { ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED); }

void OutFile::close() {
  sync();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing ", path_, " failed: ", std::strerror(errno));
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open folder ", dir, ": ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) fail("fsync of folder ", dir, " failed: ", std::strerror(err));
}

void publish_file(const std::string& tmp_path, const std::string& final_path) {
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0)
    fail("cannot rename ", tmp_path, " to ", final_path, ": ", std::strerror(errno));
  fsync_dir(parent_dir(final_path));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  OutFile out(tmp, /*truncate=*/true);
  out.write(content.data(), content.size());
  out.close();
  publish_file(tmp, path);
}

std::string read_small_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open ", path, ": ", std::strerror(errno));
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) fail("cannot read ", path);
  return out;
}

std::optional<uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

void make_dirs(const std::string& path) {
  if (path.empty()) return;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) fail(path, " exists and is not a folder");
    return;
  }
  const std::string parent = parent_dir(path);
  if (parent != path) make_dirs(parent);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    fail("cannot create folder ", path, ": ", std::strerror(errno));
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    fail("cannot remove ", path, ": ", std::strerror(errno));
}

uint64_t free_bytes(const std::string& path) {
  std::string p = path.empty() ? "." : path;
  struct statvfs vfs {};
  while (::statvfs(p.c_str(), &vfs) != 0) {
    if (errno != ENOENT) fail("cannot query free space at ", p, ": ", std::strerror(errno));
    const std::string up = parent_dir(p);
    if (up == p) fail("cannot query free space at ", path);
    p = up;
  }
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

std::string boot_id() {
  FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return "";
  char buf[64] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string id(buf, n);
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

namespace {
// The length the previous writer left, trusted according to the mark (see PartialFile).
uint64_t trusted_length(const std::string& partial, uint64_t size) {
  const std::string mark = partial + ".mark";
  if (!file_size(mark)) return 0;  // no mark: nothing is known to be durable
  const std::string text = read_small_file(mark);
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return 0;
  const std::string boot = text.substr(0, nl);
  const uint64_t durable = std::strtoull(text.c_str() + nl + 1, nullptr, 10);
  if (!boot.empty() && boot == boot_id()) return size;
  return std::min(durable, size);
}
}  // namespace

PartialFile::PartialFile(const std::string& dest, uint64_t max_bytes)
    : dest_(dest), out_(dest + ".partial", /*truncate=*/false) {
  uint64_t keep = out_.size() > max_bytes ? 0 : trusted_length(out_.path(), out_.size());
  if (keep != out_.size()) out_.truncate_to(keep);
  synced_ = keep;
  mark();
}

void PartialFile::write(const void* data, size_t n_bytes) {
  out_.write(data, n_bytes);
  if (out_.size() - synced_ >= kSyncBytes) mark();
}

void PartialFile::truncate_to(uint64_t n_bytes) {
  out_.truncate_to(n_bytes);
  mark();
}

void PartialFile::mark() {
  out_.sync();
  out_.drop_cache();
  synced_ = out_.size();
  write_file_atomic(out_.path() + ".mark", boot_id() + "\n" + std::to_string(synced_) + "\n");
}

void PartialFile::try_mark() noexcept {
  try {
    mark();
  } catch (...) {  // the next run trusts less of the file; nothing is lost
  }
}

void PartialFile::publish(uint64_t expected_bytes) {
  out_.close();
  if (out_.size() != expected_bytes)
    fail(out_.path(), ": holds ", out_.size(), " bytes, expected ", expected_bytes);
  publish_file(out_.path(), dest_);
  remove_file(out_.path() + ".mark");
}

void PartialFile::discard() {
  remove_file(out_.path());
  remove_file(out_.path() + ".mark");
}

std::string human_bytes(uint64_t n_bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(n_bytes);
  int u = 0;
  while (v >= 1000.0 && u < 5) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n_bytes));
  else
    std::snprintf(buf, sizeof buf,
                  v < 10    ? "%.2f %s"
                  : v < 100 ? "%.1f %s"
                            : "%.0f %s",
                  v, kUnits[u]);
  return buf;
}

}  // namespace deltafin::setup
