// SHA-256 and git blob SHA-1 through OpenSSL's EVP interface.
#include "setup/digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace deltafin::setup {

Digest::Digest(DigestKind kind, uint64_t blob_size) : ctx_(EVP_MD_CTX_new()) {
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  DF_ASSERT(ctx != nullptr);
  DF_ASSERT(EVP_DigestInit_ex(ctx, kind == DigestKind::kSha256 ? EVP_sha256() : EVP_sha1(),
                              nullptr) == 1);
  if (kind == DigestKind::kGitBlobSha1) {
    const std::string prefix = "blob " + std::to_string(blob_size);
    update(prefix.data(), prefix.size() + 1);  // the terminating NUL is part of the object header
  }
}

Digest::~Digest() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Digest::update(const void* data, size_t n_bytes) {
  DF_ASSERT(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n_bytes) == 1);
}

std::string Digest::hex_final() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  DF_ASSERT(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n) == 1);
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Digest d(DigestKind::kSha256);
  d.update(data.data(), data.size());
  return d.hex_final();
}

std::string file_digest_hex(DigestKind kind, const std::string& path, uint64_t blob_size,
                            uint64_t n_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) base::fail("cannot open ", path, ": ", std::strerror(errno));
  Digest d(kind, blob_size);
  std::vector<char> buf(size_t{4} << 20);
  uint64_t left = n_bytes;
  while (left > 0) {
    const size_t want = left < buf.size() ? static_cast<size_t>(left) : buf.size();
    const ssize_t n = ::read(fd, buf.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      base::fail("cannot read ", path, ": ", std::strerror(err));
    }
    if (n == 0) break;
    d.update(buf.data(), static_cast<size_t>(n));
    left -= static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (n_bytes != UINT64_MAX && left != 0) base::fail("file ", path, " is shorter than expected");
  return d.hex_final();
}

const char* digest_name(DigestKind kind) {
  return kind == DigestKind::kSha256 ? "sha256" : "git-sha1";
}

}  // namespace deltafin::setup
