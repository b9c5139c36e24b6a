// The bench commands' shared pieces.
#include "bench_common.h"

#include <algorithm>

#include "format/checkpoint.h"
#include "io/direct_file.h"

namespace deltafin::apps {

ModelShards model_shards(const std::string& model_dir, bool drop_page_cache) {
  ModelShards shards;
  const format::Checkpoint checkpoint = format::Checkpoint::open(model_dir);
  for (const format::Checkpoint::Shard& s : checkpoint.shards()) {
    shards.paths.push_back(s.path);
    shards.smallest_bytes = std::min(shards.smallest_bytes, s.size_bytes);
  }
  if (drop_page_cache) {
    for (const std::string& p : shards.paths) io::drop_page_cache(p);
  }
  return shards;
}

std::vector<int32_t> bench_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < n; ++i) prompt.push_back(static_cast<int32_t>((100 + 37 * i) % vocab));
  return prompt;
}

Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {v.front(), n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.back()};
}

std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace deltafin::apps
