// Streaming content hashes for verifying downloads: SHA-256 (HF publishes it for LFS files) and the
// git blob SHA-1 (the ETag HF gives regular files: sha1("blob <size>\0" + content)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deltafin::setup {

enum class DigestKind { kSha256, kGitBlobSha1 };

class Digest {
 public:
  // For kGitBlobSha1 the blob's total size goes into the hash before the content.
  explicit Digest(DigestKind kind, uint64_t blob_size = 0);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void update(const void* data, size_t n_bytes);
  std::string hex_final();  // lowercase hex; the object is spent afterwards

 private:
  void* ctx_;  // EVP_MD_CTX
};

std::string sha256_hex(std::string_view data);
// Hashes a file's first `n_bytes` bytes (all when n_bytes is UINT64_MAX). Throws naming the file.
std::string file_digest_hex(DigestKind kind, const std::string& path, uint64_t blob_size,
                            uint64_t n_bytes = UINT64_MAX);

const char* digest_name(DigestKind kind);  // "sha256", "git-sha1"

}  // namespace deltafin::setup
