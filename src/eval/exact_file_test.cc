// The saved exact run: what goes in comes back, streamed rows in order, and each mismatch or
// oversize plan is refused with a message naming it.
#include "eval/exact_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace deltafin::eval {
namespace {

namespace fs = std::filesystem;

class ExactFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deltafin_eval_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }

  static ExactRunPlan plan() {
    ExactRunPlan p;
    p.model = {"kimi_k3", 7, 16, 2, "00112233aabbccdd", "0123456789abcdef"};
    p.engine_flags = "--experts mapped";
    p.window_tokens = 3;
    p.max_new_tokens = 4;
    p.corpus_ids = {1, 2, 3, 4, 5};
    p.prompts = {{1, 2}, {6}};
    return p;
  }

  fs::path dir_;
};

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const base::Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(ExactFileTest, RoundTripsInStreamedRows) {
  const ExactRunPlan p = plan();
  std::vector<float> logits(5 * 7);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.5f * static_cast<float>(i) - 3.0f;
  {
    ExactRunWriter w(path("a.safetensors"), p, {{9, 8, 7, 6}, {5, 4}});
    w.append_logits(std::span(logits).subspan(0, 2 * 7));  // a pass of 2 rows, then one of 3
    w.append_logits(std::span(logits).subspan(2 * 7));
    w.finish();
  }
  EXPECT_EQ(fs::file_size(path("a.safetensors")), saved_bytes(p));
  ExactRunReader r(path("a.safetensors"));
  EXPECT_EQ(r.plan().model, p.model);
  EXPECT_EQ(r.plan().engine_flags, p.engine_flags);
  EXPECT_EQ(r.plan().window_tokens, 3);
  EXPECT_EQ(r.plan().max_new_tokens, 4);
  EXPECT_EQ(r.plan().corpus_ids, p.corpus_ids);
  EXPECT_EQ(r.plan().prompts, p.prompts);
  EXPECT_EQ(r.greedy(), (std::vector<std::vector<int32_t>>{{9, 8, 7, 6}, {5, 4}}));
  std::vector<float> rows(2 * 7);
  r.read_logits(3, rows);
  EXPECT_EQ(rows, std::vector<float>(logits.begin() + 3 * 7, logits.end()));
  check_same_run(r.plan(), p, "a");  // no throw
}

TEST_F(ExactFileTest, PromptsOnlyOrCorpusOnly) {
  ExactRunPlan p = plan();
  p.corpus_ids.clear();
  {
    ExactRunWriter w(path("p.safetensors"), p, {{1, 1, 1, 1}, {2, 2, 2, 2}});
    w.finish();
  }
  EXPECT_TRUE(ExactRunReader(path("p.safetensors")).plan().corpus_ids.empty());
  p = plan();
  p.prompts.clear();
  {
    ExactRunWriter w(path("c.safetensors"), p, {});
    w.append_logits(std::vector<float>(5 * 7, 1.0f));
    w.finish();
  }
  EXPECT_TRUE(ExactRunReader(path("c.safetensors")).greedy().empty());
}

TEST_F(ExactFileTest, AnUnfinishedWriterLeavesNoFile) {
  {
    ExactRunWriter w(path("u.safetensors"), plan(), {{1}, {2}});
    w.append_logits(std::vector<float>(7, 0.0f));
  }
  EXPECT_FALSE(fs::exists(path("u.safetensors")));
}

TEST_F(ExactFileTest, RefusesAnOversizePlanNamingTheBound) {
  const ExactRunPlan p = plan();
  check_saved_bytes(p, saved_bytes(p), "x");  // exactly at the bound is fine
  const std::string e = error_of([&] { check_saved_bytes(p, 100, "x.safetensors"); });
  EXPECT_NE(e.find("--max-saved-bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("5 positions"), std::string::npos) << e;
  EXPECT_NE(e.find("--max-positions"), std::string::npos) << e;
}

TEST_F(ExactFileTest, RefusesAnotherModelOrOtherIds) {
  const ExactRunPlan saved = plan();
  ExactRunPlan other = saved;
  other.model.config_hash = "ffffffffffffffff";
  EXPECT_NE(error_of([&] { check_same_run(saved, other, "f"); }).find("another model"),
            std::string::npos);
  other = saved;
  other.model.weights_hash = "ffffffffffffffff";
  EXPECT_NE(error_of([&] { check_same_run(saved, other, "f"); }).find("weights ffffffffffffffff"),
            std::string::npos);
  other = saved;
  other.corpus_ids[3] = 99;
  EXPECT_NE(error_of([&] { check_same_run(saved, other, "f"); }).find("differ from position 3"),
            std::string::npos);
  other = saved;
  other.window_tokens = 4;
  EXPECT_NE(error_of([&] { check_same_run(saved, other, "f"); }).find("--window 3"),
            std::string::npos);
  other = saved;
  other.prompts[1] = {7};
  EXPECT_NE(error_of([&] { check_same_run(saved, other, "f"); }).find("prompts"),
            std::string::npos);
  other = saved;
  other.max_new_tokens = 8;
  EXPECT_NE(error_of([&] { check_same_run(saved, other, "f"); }).find("--max-new 8"),
            std::string::npos);
  other = saved;
  other.engine_flags = "--experts stream";  // the flags are a record, not part of the identity
  check_same_run(saved, other, "f");
}

TEST_F(ExactFileTest, RefusesAFileThatIsNotAnExactRun) {
  {
    format::SafetensorsWriter w(path("plain.safetensors"),
                                {{"logits", format::DType::kF32, {1, 2}}});
    const float x[2] = {0, 1};
    w.write(x, sizeof x);
    w.finish();
  }
  EXPECT_NE(
      error_of([&] { ExactRunReader r(path("plain.safetensors")); }).find("not a saved exact run"),
      std::string::npos);
}

TEST_F(ExactFileTest, ConfigHashIsFnv1aOfTheBytes) {
  std::ofstream(path("config.json"), std::ios::binary) << "a";
  EXPECT_EQ(config_hash(path("config.json")), "af63dc4c8601ec8c");  // FNV-1a 64 of "a"
  std::ofstream(path("empty.json"), std::ios::binary) << "";
  EXPECT_EQ(config_hash(path("empty.json")), "cbf29ce484222325");  // the offset basis
  EXPECT_NE(error_of([&] { config_hash(path("missing.json")); }).find("missing.json"),
            std::string::npos);
}

TEST(WeightsSample, HashesTheLowestNamedSpineTensor) {
  const std::string dir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";
  const std::string h = weights_sample_hash(dir);
  EXPECT_EQ(h.size(), 16u);
  EXPECT_EQ(h, weights_sample_hash(dir));  // a property of the files, not of the call
  EXPECT_NE(error_of([] {
              weights_sample_hash("/nonexistent-model-dir");
            }).find("/nonexistent-model-dir"),
            std::string::npos);
}

}  // namespace
}  // namespace deltafin::eval
