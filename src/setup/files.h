// File-system steps every download shares: writes that report the file and errno, publication by
// fsync + rename + directory fsync (so a crash leaves the old state or the new one, never a torn
// file), free space, and byte counts printed for people.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace deltafin::setup {

// An open file being written; closes (without publishing) on destruction.
class OutFile {
 public:
  // Opens for appending, creating it (mode 0644) if absent. `truncate` empties an existing file.
  OutFile(const std::string& path, bool truncate);
  ~OutFile();
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  // Throws base::Error naming the file and the errno text (e.g. "No space left on device").
  void write(const void* data, size_t n_bytes);
  uint64_t size() const { return size_; }
  void truncate_to(uint64_t n_bytes);
  void sync();  // fsync
  // Drops the file's pages from the page cache (after sync(), so they are clean): a 1.5 TB
  // download must not evict what the machine is using.
  void drop_cache();
  void close();  // fsync + close; throws on failure
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A download in progress: `<dest>.partial` plus `<dest>.partial.mark`, which records the boot it
// was written in and how many bytes are known to be on disk (fsynced). A rerun in the same boot
// resumes from the partial file's size (after a kill, the page cache holds every byte written);
// after a reboot (a power loss may have left a torn tail) only from the fsynced length.
class PartialFile {
 public:
  // `max_bytes`: the complete size; a longer partial file is discarded.
  PartialFile(const std::string& dest, uint64_t max_bytes);
  uint64_t size() const { return out_.size(); }  // where writing resumes
  const std::string& path() const { return out_.path(); }
  void write(const void* data, size_t n_bytes);  // fsyncs and marks every kSyncBytes
  void truncate_to(uint64_t n_bytes);
  void mark();  // fsync, then record the size as durable
  // mark() for a transfer that stopped early; never throws (the disk may be full), so the error
  // that stopped it is the one reported.
  void try_mark() noexcept;
  // fsync, close, check the size, rename to `dest`, fsync the folder, drop the mark.
  void publish(uint64_t expected_bytes);
  void discard();  // removes the partial file and its mark

  static constexpr uint64_t kSyncBytes = uint64_t{256} << 20;

 private:
  std::string dest_;
  OutFile out_;
  uint64_t synced_ = 0;
};

std::string boot_id();  // /proc/sys/kernel/random/boot_id ("" where unavailable)

// fsync(tmp) is the caller's job (OutFile::close); this renames and fsyncs the directory.
void publish_file(const std::string& tmp_path, const std::string& final_path);
// Writes a small file atomically: DIR/.name.tmp, fsync, rename, directory fsync.
void write_file_atomic(const std::string& path, const std::string& content);
std::string read_small_file(const std::string& path);        // throws naming the file
std::optional<uint64_t> file_size(const std::string& path);  // nullopt if absent
void make_dirs(const std::string& path);                     // mkdir -p; throws naming the path
void remove_file(const std::string& path);                   // ignores absence
void fsync_dir(const std::string& dir);
std::string parent_dir(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);

// Bytes available to this user on the file system that holds `path` (or its nearest existing
// ancestor, since the install folder may not exist yet).
uint64_t free_bytes(const std::string& path);

// "1.56 TB", "17.5 MB", "812 B": decimal units, as disks and the HF website count.
std::string human_bytes(uint64_t n_bytes);

}  // namespace deltafin::setup
