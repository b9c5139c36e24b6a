// What the bench commands share: a model's shard files (and dropping them from the page cache),
// the synthetic prompt, min / median / max of samples, and JSON string escaping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::apps {

struct ModelShards {
  std::vector<std::string> paths;
  uint64_t smallest_bytes = UINT64_MAX;
};
// The shards of the checkpoint in `model_dir`; with drop_page_cache, each is dropped from the
// page cache first, so the run starts cold.
ModelShards model_shards(const std::string& model_dir, bool drop_page_cache);

// The benches' prompt: n ids (100 + 37 i) mod vocab, the same for every bench and run.
std::vector<int32_t> bench_prompt(int64_t n, int64_t vocab);

struct Spread {
  double min = 0, median = 0, max = 0;
};
Spread spread(std::vector<double> samples);  // all 0 for no samples
inline double median(std::vector<double> samples) { return spread(std::move(samples)).median; }

// `text` with '"' and '\' escaped, for a JSON string.
std::string json_escaped(const std::string& text);

}  // namespace deltafin::apps
