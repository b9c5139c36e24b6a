// The benchmark's shared harness (harness.h): the fill and read kernels, the statistics, the
// launch stream and device globals, the DELTAFIN_BENCH_ONLY / DELTAFIN_BENCH_N filters and the
// row printing.
#include "cuda/bench/harness.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace deltafin::cuda::bench {
namespace {

// mode 0: any bits (packed nibbles); 1: bytes in 120..127 (finite E8M0 scales); 2: floats in
// [0.5, 1) (activations); 3: bf16 pairs in [0.5, 1) (weights).
__global__ void fill_kernel(uint32_t* p, size_t words, uint32_t seed, uint32_t mode) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < words;
       k += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(k) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const uint32_t modes[4] = {h, (h & 0x07070707u) | 0x78787878u, (h & 0x007fffffu) | 0x3f000000u,
                               (h & 0x007f007fu) | 0x3f003f00u};
    p[k] = modes[mode & 3u];
  }
}

}  // namespace

__global__ void read_kernel(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldcs(p + k);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads alive; practically never true
}

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

void fill(void* p, size_t bytes, uint32_t seed, uint32_t mode) {
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, mode);
  check(cudaGetLastError(), "fill");
}

cudaStream_t g_stream = nullptr;
bool g_graph = false;

bool switch_on(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "1";
}

bool wanted(const char* key) {
  const char* only = std::getenv("DELTAFIN_BENCH_ONLY");
  return only == nullptr || std::string(only).find(key) != std::string::npos;
}

bool rows_wanted(int n) {
  const char* list = std::getenv("DELTAFIN_BENCH_N");
  if (list == nullptr) return true;
  // Appended piece by piece: g++ 12 sees a false overlap (-Werror=restrict) in "," + string.
  std::string s(1, ','), key(1, ',');
  s.append(list).push_back(',');
  key.append(std::to_string(n)).push_back(',');
  return s.find(key) != std::string::npos;
}

std::vector<int> wanted_rows(std::initializer_list<int> candidates) {
  std::vector<int> ns;
  for (const int n : candidates)
    if (rows_wanted(n)) ns.push_back(n);
  return ns;
}

int g_sms = 0;
uint32_t* g_sink = nullptr;
double g_copy_read_gbs = 0;

Stats same_bytes_read(int reps, int copies, size_t stride_bytes, size_t bytes,
                      const uint8_t* base) {
  return stats(time_launches(
      reps, copies, static_cast<double>(bytes),
      [&](int k) {
        read_kernel<<<g_sms * 8, 256, 0, g_stream>>>(
            reinterpret_cast<const uint4*>(base + k * stride_bytes), bytes / 16, g_sink);
      },
      true));
}

void print_row(const std::string& name, const Stats& s, const Stats& read) {
  std::printf("%-28s %7.0f %7.0f %7.0f   read %7.0f   %5.2f   %5.2f\n", name.c_str(), s.min,
              s.median, s.max, read.median, s.median / read.median, s.median / g_copy_read_gbs);
}

const Stats& faster(const Stats& a, const Stats& b) { return b.median > a.median ? b : a; }

std::pair<double, double> fit_line(const std::vector<double>& bytes,
                                   const std::vector<double>& us) {
  const double k = static_cast<double>(bytes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    sx += bytes[i], sy += us[i], sxx += bytes[i] * bytes[i], sxy += bytes[i] * us[i];
  }
  const double b = (k * sxy - sx * sy) / (k * sxx - sx * sx);
  return {(sy - b * sx) / k, 1e-3 / b};
}

}  // namespace deltafin::cuda::bench
