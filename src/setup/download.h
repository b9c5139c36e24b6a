// The download steps setup is made of: a remote file's metadata from HEAD (size, published hash,
// commit), a shard's safetensors header by two range requests, resumable verified whole-file
// downloads, and a small pool of worker threads with one connection each.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "setup/digest.h"
#include "setup/http.h"

namespace deltafin::setup {

class PartialFile;
class Progress;

struct RemoteMeta {
  std::optional<uint64_t> size;  // X-Linked-Size, or Content-Length of a 2xx answer
  std::string commit;            // X-Repo-Commit ("" from servers that are not HF-like)
  std::optional<DigestKind> digest_kind;
  std::string digest;  // lowercase hex of the content (sha256) or of the git blob (sha1)
};
// HEAD of a resolve URL. A 64-hex X-Linked-Etag or ETag is the content's sha256 (LFS); a 40-hex
// ETag is the git blob sha1 (regular files). Hashes are trusted only from a server that sends
// X-Repo-Commit, since other servers' ETags mean something else.
RemoteMeta remote_meta(HttpClient& client, const std::string& url);

struct ShardHeader {
  std::string prefix;  // the file's first 8 + N bytes: length word and JSON header
  uint64_t file_size = 0;
};
// Fetches bytes 0-7 (the header length; the Content-Range total gives the file size), then the
// header itself. Throws naming the URL if the length is absurd.
ShardHeader fetch_shard_header(HttpClient& client, const std::string& url);

struct ExpectedDigest {
  DigestKind kind = DigestKind::kSha256;
  std::string hex;  // empty: verify the size only
};

// Downloads `url` (`size` bytes) to `dest`: bytes go to a PartialFile, which a later call resumes
// with a Range from where it stopped; the result is checked against `size` and `digest`, fsynced
// and renamed into place. A hash mismatch deletes the partial file and starts once more from byte 0
// before failing. Returns the bytes transferred. An existing `dest` of the right size is taken as
// done: only verified files are ever renamed to their final name. `stop` aborts the transfer
// between chunks.
uint64_t download_file(HttpClient& client, const std::string& url, const std::string& dest,
                       uint64_t size, const ExpectedDigest& digest, Progress* progress,
                       const std::atomic<bool>* stop = nullptr);

// Runs `transfer`, which appends to `part` (the download of `dest`). If it throws, the partial
// file is fsynced and marked so that a rerun resumes from its last byte, and the error is rethrown;
// a local error (a full disk: a base::Error that is not an HttpError) gets the free space at
// dest's folder added. Publishing stays with the caller, after its own checks.
void resumable_transfer(PartialFile& part, const std::string& dest,
                        const std::function<void()>& transfer);

// Bytes of `dest` (or of dest.partial) already on disk, for resume accounting.
uint64_t local_progress(const std::string& dest, uint64_t size);

// Runs fn(i, client) for i in [0, n) on up to `jobs` threads, each with its own connection.
// After the first exception no new item starts and `stop` is raised for those running; the first
// exception is rethrown once every thread has ended.
void run_parallel(size_t n, int jobs, const HttpOptions& options, HttpStats* stats,
                  RedirectCache* redirects, std::atomic<bool>* stop,
                  const std::function<void(size_t, HttpClient&)>& fn);

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

}  // namespace deltafin::setup
