// HugeBuffer: oversized mmap trimmed to 2 MiB alignment, a PROT_NONE guard page after the data,
// THP advice, then pre-faulting (in parallel for large buffers) so that no read ever waits on a
// page fault.
#include "io/huge_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"

namespace deltafin::io {
namespace {

constexpr size_t kGuardBytes = 4096;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Touches every 4 KiB page when MADV_POPULATE_WRITE is not supported (kernels before 5.14).
void prefault_range(uint8_t* data, size_t size) {
  if (madvise(data, size, MADV_POPULATE_WRITE) == 0) return;
  for (size_t i = 0; i < size; i += 4096) reinterpret_cast<volatile uint8_t*>(data)[i] = 0;
}

// The kernel zeroes every page it hands out, one thread at a time per caller: a 14 GiB slot pool
// took 4.3 s on one thread of a 16-core host. Large buffers are split into 2 MiB-aligned chunks
// of at least kChunkBytes, faulted by up to one thread per CPU.
void prefault(uint8_t* data, size_t size) {
  constexpr size_t kChunkBytes = size_t{256} << 20;
  const size_t n_threads =
      std::min<size_t>({size / kChunkBytes, static_cast<size_t>(base::available_cpus()), 16});
  if (n_threads <= 1) {
    prefault_range(data, size);
    return;
  }
  const size_t per = (size / n_threads + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n_threads && i * per < size; ++i)
    threads.emplace_back(prefault_range, data + i * per, std::min(per, size - i * per));
  prefault_range(data, std::min(per, size));
  for (std::thread& t : threads) t.join();
}

}  // namespace

const char* page_kind_name(PageKind pages) { return pages == PageKind::kHuge ? "huge" : "4k"; }

HugeBuffer::HugeBuffer(size_t size_bytes, PageKind pages) : pages_(pages) {
  if (size_bytes == 0) return;
  const size_t size = round_up(size_bytes, kHugePageBytes);
  const size_t map_len = size + kHugePageBytes + kGuardBytes;
  void* raw = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    base::fail("cannot map a ", size, "-byte I/O buffer: ", std::strerror(errno));
  }
  const auto base_addr = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(base_addr, kHugePageBytes);
  const uintptr_t guard = aligned + size;
  const uintptr_t map_end = base_addr + map_len;
  if (aligned > base_addr) munmap(raw, aligned - base_addr);
  if (map_end > guard + kGuardBytes) {
    munmap(reinterpret_cast<void*>(guard + kGuardBytes), map_end - guard - kGuardBytes);
  }
  mprotect(reinterpret_cast<void*>(guard), kGuardBytes, PROT_NONE);
  data_ = reinterpret_cast<uint8_t*>(aligned);
  size_ = size;
  // Advice failures are not fatal: the buffer still works, only the page size differs, and
  // huge_backed_bytes() reports what was actually obtained.
  madvise(data_, size_, pages == PageKind::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  prefault(data_, size_);
}

HugeBuffer::~HugeBuffer() { release(); }

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      pages_(other.pages_) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    pages_ = other.pages_;
  }
  return *this;
}

void HugeBuffer::release() {
  if (data_ != nullptr) munmap(data_, size_ + kGuardBytes);
  data_ = nullptr;
  size_ = 0;
}

size_t HugeBuffer::huge_backed_bytes() const {
  if (data_ == nullptr) return 0;
  std::ifstream smaps("/proc/self/smaps");
  const auto lo = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t hi = lo + size_;
  bool in_range = false;
  size_t total = 0;
  std::string line;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    // VMA headers look like "7f12a0000000-7f12a0400000 rw-p 00000000 00:00 0".
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      in_range = start < hi && end > lo;
      continue;
    }
    if (in_range && line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream fields(line.substr(14));
      size_t kib = 0;
      fields >> kib;
      total += kib * 1024;
    }
  }
  return total < size_ ? total : size_;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  if (!in || !std::getline(in, text)) return "unavailable";
  const size_t open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return text;
  return text.substr(open + 1, close - open - 1);
}

}  // namespace deltafin::io
