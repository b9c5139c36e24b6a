// HugeBuffer: anonymous, 2 MiB-aligned, pre-faulted memory that O_DIRECT reads land in. Backed by
// transparent huge pages (madvise, no root) so one 17.5 MB request is a few physical segments
// instead of ~4,300 4 KiB pages (a request with 4 KiB pages carries at most ~1 MiB on virtio).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace deltafin::io {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

enum class PageKind {
  kHuge,   // MADV_HUGEPAGE: transparent huge pages where the kernel can find them
  kSmall,  // MADV_NOHUGEPAGE: 4 KiB pages (for comparison measurements)
};
const char* page_kind_name(PageKind pages);

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // size_bytes is rounded up to a multiple of 2 MiB. Throws base::Error when mmap fails.
  explicit HugeBuffer(size_t size_bytes, PageKind pages = PageKind::kHuge);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  PageKind pages() const { return pages_; }
  bool empty() const { return size_ == 0; }

  // Bytes of this buffer that transparent huge pages back right now (AnonHugePages of its
  // mapping in /proc/self/smaps). Each buffer keeps a guard page after it so its mapping never
  // merges with a neighbour's and the figure is this buffer's own.
  size_t huge_backed_bytes() const;

 private:
  void release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  PageKind pages_ = PageKind::kHuge;
};

// The active mode of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise" or
// "never"), or "unavailable" when the file does not exist.
std::string thp_mode();

}  // namespace deltafin::io
