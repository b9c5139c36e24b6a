// bench decode's GPU floor without a GPU: the counters' differences, the read floor and the
// operations' overhead, and the "gpu" JSON object (valid JSON, the fields the issue asks for, and
// figures consistent with one another).
#include "gpu_floor.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "format/json_reader.h"

namespace deltafin::apps {
namespace {

GpuStats pass_stats(uint64_t scale) {
  GpuStats s;
  s.passes = 1;
  s.rows = 1;
  s.spine_bytes = 600 * scale;
  s.expert_bytes = 300 * scale;
  s.experts = 16;
  s.head_bytes = 50 * scale;
  s.embed_bytes = 10;
  s.attention_cache_bytes = 20;
  s.kda_state_bytes = 30 * scale;
  s.launches = 1000;
  s.copies = 200;
  s.syncs = 5;
  s.expert_batch_splits = 2 * scale;
  s.device_seconds = 0.002;
  return s;
}

// Every number of a JSON object by its dotted path ("decode.bytes.total").
void flatten(format::detail::JsonReader& r, const std::string& prefix,
             std::map<std::string, double>* out) {
  r.begin_object();
  std::string_view key;
  while (r.next_key(&key)) {
    const std::string path = prefix + std::string(key);
    if (r.peek() == format::detail::JsonReader::Type::kObject) {
      flatten(r, path + ".", out);
    } else {
      (*out)[path] = std::stod(std::string(r.read_number()));
    }
  }
}

std::map<std::string, double> parse(const std::string& json) {
  format::detail::JsonReader r(json, "gpu_json");
  std::map<std::string, double> out;
  flatten(r, "", &out);
  r.expect_end();
  return out;
}

TEST(GpuFloor, DifferencesAndFloors) {
  GpuStats before = pass_stats(1), after = pass_stats(3);
  after.passes = 4;
  after.device_seconds = 0.5;
  const GpuStats d = stats_difference(after, before);
  EXPECT_EQ(d.passes, 3u);
  EXPECT_EQ(d.spine_bytes, 1200u);
  EXPECT_EQ(d.expert_bytes, 600u);
  EXPECT_EQ(d.kda_state_bytes, 60u);
  EXPECT_EQ(d.launches, 0u);
  EXPECT_EQ(d.expert_batch_splits, 4u);
  EXPECT_DOUBLE_EQ(d.device_seconds, 0.498);
  EXPECT_EQ(pass_stats(1).touched_bytes(), 600u + 300 + 50 + 10 + 20 + 30);

  GpuCosts c;
  c.read_gbps = 1e-6;  // 1000 bytes per second
  c.launch_seconds = 2e-6;
  c.copy_seconds = 3e-6;
  c.sync_seconds = 1e-5;
  EXPECT_DOUBLE_EQ(read_floor_seconds(pass_stats(1), c), 1.01);
  EXPECT_DOUBLE_EQ(op_overhead_seconds(pass_stats(1), c), 1000 * 2e-6 + 200 * 3e-6 + 5 * 1e-5);
  EXPECT_EQ(read_floor_seconds(pass_stats(1), GpuCosts{}), 0);  // no rate measured: no floor
}

TEST(GpuFloor, JsonHasTheFiguresAndTheyAgree) {
  GpuCosts c;
  c.read_bytes = 1 << 30;
  c.read_gbps = 4000;
  c.launch_seconds = 2e-6;
  c.copy_seconds = 2.5e-6;
  c.sync_seconds = 8e-6;
  // Three one-id passes and one verify pass of two ids (counted per id).
  std::vector<GpuPass> decode;
  for (int i = 0; i < 3; ++i)
    decode.push_back({pass_stats(uint64_t{1} << 24), 0.010 + 0.001 * i, 1});
  GpuStats two = pass_stats(uint64_t{1} << 25);
  two.launches *= 2;
  two.copies *= 2;
  two.syncs *= 2;
  decode.push_back({two, 0.024, 2});
  GpuStats prompt = pass_stats(uint64_t{1} << 26);
  prompt.passes = 32;
  prompt.rows = 512;
  prompt.device_seconds = 0.4;

  const std::map<std::string, double> j = parse(gpu_json(decode, prompt, 512, 0.5, c));
  for (const char* key : {"read_gbps",
                          "read_probe_bytes",
                          "launch_seconds",
                          "copy_seconds",
                          "sync_seconds",
                          "decode.tokens",
                          "decode.seconds_per_token.min",
                          "decode.seconds_per_token.median",
                          "decode.seconds_per_token.max",
                          "decode.bytes.spine",
                          "decode.bytes.experts",
                          "decode.bytes.lm_head",
                          "decode.bytes.embedding",
                          "decode.bytes.attention_cache",
                          "decode.bytes.kda_state",
                          "decode.bytes.total",
                          "decode.experts",
                          "decode.launches",
                          "decode.copies",
                          "decode.syncs",
                          "decode.read_floor_seconds_per_token",
                          "decode.op_overhead_seconds_per_token",
                          "decode.floor_seconds_per_token",
                          "decode.ratio",
                          "decode.pass_ratio.median",
                          "decode.device_seconds_per_token",
                          "decode.device_share_of_wall",
                          "prompt.tokens",
                          "prompt.seconds",
                          "prompt.tokens_per_second",
                          "prompt.passes",
                          "prompt.bytes.total",
                          "prompt.floor_seconds",
                          "prompt.ratio",
                          "prompt.device_seconds",
                          "prompt.device_share_of_wall"})
    EXPECT_EQ(j.count(key), 1u) << key;

  EXPECT_EQ(j.at("decode.tokens"), 5);
  EXPECT_DOUBLE_EQ(j.at("decode.seconds_per_token.min"), 0.010);
  EXPECT_DOUBLE_EQ(j.at("decode.seconds_per_token.max"), 0.012);
  // Every pass touched the same bytes per id: 980 units of 2^24 bytes (and a few unscaled ones).
  const double per_token = 980.0 * (1 << 24);
  EXPECT_NEAR(j.at("decode.bytes.total"), per_token, per_token * 1e-5);
  const double read_floor = per_token / 4000e9;
  EXPECT_NEAR(j.at("decode.read_floor_seconds_per_token"), read_floor, read_floor * 1e-5);
  const double overhead = 1000 * 2e-6 + 200 * 2.5e-6 + 5 * 8e-6;
  EXPECT_NEAR(j.at("decode.op_overhead_seconds_per_token"), overhead, overhead * 1e-5);
  EXPECT_NEAR(j.at("decode.floor_seconds_per_token"), read_floor + overhead, 1e-8);
  EXPECT_NEAR(j.at("decode.ratio"),
              j.at("decode.seconds_per_token.median") / j.at("decode.floor_seconds_per_token"),
              1e-4);
  EXPECT_LE(j.at("decode.pass_ratio.min"), j.at("decode.pass_ratio.median"));
  EXPECT_LE(j.at("decode.pass_ratio.median"), j.at("decode.pass_ratio.max"));
  EXPECT_NEAR(j.at("decode.device_share_of_wall"), 4 * 0.002 / (0.010 + 0.011 + 0.012 + 0.024),
              1e-5);
  EXPECT_DOUBLE_EQ(j.at("prompt.tokens_per_second"), 1024);
  EXPECT_EQ(j.at("prompt.passes"), 32);
  const double prompt_floor = 980.0 * (1 << 26) / 4000e9 + overhead;
  EXPECT_NEAR(j.at("prompt.floor_seconds"), prompt_floor, prompt_floor * 1e-5);
  EXPECT_NEAR(j.at("prompt.ratio"), 0.5 / prompt_floor, 1e-3);
  EXPECT_NEAR(j.at("prompt.device_share_of_wall"), 0.8, 1e-6);
}

}  // namespace
}  // namespace deltafin::apps
