// The engine's view of a streaming install (streaming_experts.h) against the local server: the
// catalog from the manifest matches the original checkpoint's expert layout, the fetcher's
// callbacks (shared, failing, never inline), and manifests that do not fit the config.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "base/error.h"
#include "format/checkpoint.h"
#include "format/inventory.h"
#include "setup/files.h"
#include "setup/setup.h"
#include "setup/streaming_experts.h"
#include "setup/testing/hf_test_server.h"

namespace deltafin::setup {
namespace {

const std::string kFixture = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";

class StreamingExpertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    SetupOptions o;
    o.remote = {server_.url(), "test/tiny", "main"};
    o.dir = dir_.path();
    o.mode = InstallMode::kStream;
    o.http.backoff_initial_ms = 5;
    o.http.backoff_max_ms = 20;
    o.http.max_attempts = 2;
    run_setup(o);
    server_.clear_log();
    config_ = format::load_config(dir_.path());
  }
  StreamingExperts open() {
    ExpertSourceOptions o;
    o.http.backoff_initial_ms = 5;
    o.http.backoff_max_ms = 20;
    o.http.max_attempts = 2;
    auto s = open_streaming_experts(dir_.path(), config_, o);
    EXPECT_TRUE(s.has_value());
    return std::move(*s);
  }
  // Runs fetch() and waits for its callback, which must run on a fetcher thread, never inside the
  // call (a flag set after fetch() returns cannot tell: the fetch may finish first under load).
  std::string fetch(experts::ExpertFetcher& f, int layer, int32_t expert) {
    std::promise<std::string> done;
    std::thread::id callback_thread;
    f.fetch(layer, expert, [&](const std::string& error) {
      callback_thread = std::this_thread::get_id();
      done.set_value(error);
    });
    std::string error = done.get_future().get();
    EXPECT_NE(callback_thread, std::this_thread::get_id());
    return error;
  }
  int range_gets() {
    int n = 0;
    for (int i = 0; i < 50; ++i) {  // the server logs just after answering
      n = 0;
      for (const auto& r : server_.log()) n += r["method"] == "GET" && r["status"] == 206;
      if (n > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return n;
  }

  testing::HfTestServer server_{{"test/tiny=" + kFixture}};
  testing::TempDir dir_;
  format::ModelConfig config_;
};

TEST_F(StreamingExpertsTest, CatalogMatchesTheOriginalCheckpoint) {
  const StreamingExperts s = open();
  const format::Checkpoint ckpt = format::Checkpoint::open(kFixture);
  const std::vector<format::ExpertSpan> spans = format::locate_experts(ckpt, config_);
  ASSERT_EQ(s.catalog.layers.size(), static_cast<size_t>(config_.num_hidden_layers));
  size_t n = 0;
  for (const experts::ExpertCatalog::Layer& l : s.catalog.layers) n += l.spans.size();
  EXPECT_EQ(n, spans.size());
  const std::vector<std::string>& sfx = format::expert_tensor_suffixes(config_);
  for (const format::ExpertSpan& orig : spans) {
    const experts::ExpertCatalog::Layer& l = s.catalog.layers[orig.layer];
    const format::ExpertSpan& got = l.spans[orig.expert];
    EXPECT_EQ(got.file, dir_ / expert_cache_relpath(orig.layer, orig.expert));
    EXPECT_EQ(got.offset, 0u);
    EXPECT_EQ(got.nbytes, orig.nbytes);
    EXPECT_EQ(l.layout.span_bytes, orig.nbytes);
    // Each matrix sits where it sits inside the original span.
    const std::string pre = format::expert_prefix(config_, orig.layer, orig.expert);
    EXPECT_EQ(l.layout.gate.data_offset, ckpt.get(pre + sfx[0]).offset - orig.offset);
    EXPECT_EQ(l.layout.up.data_offset,
              ckpt.get(pre + sfx[sfx.size() == 6 ? 4 : 2]).offset - orig.offset);
    if (sfx.size() == 6) {
      EXPECT_EQ(l.layout.down.scales_offset, ckpt.get(pre + sfx[3]).offset - orig.offset);
    }
  }
}

TEST_F(StreamingExpertsTest, FetcherMakesExpertsLocalWithOneRequest) {
  StreamingExperts s = open();
  experts::ExpertFetcher& f = *s.fetcher;
  EXPECT_FALSE(f.is_local(1, 5));
  // Two needs at once share one request.
  std::promise<std::string> a, b;
  f.fetch(1, 5, [&](const std::string& e) { a.set_value(e); });
  f.fetch(1, 5, [&](const std::string& e) { b.set_value(e); });
  EXPECT_EQ(a.get_future().get(), "");
  EXPECT_EQ(b.get_future().get(), "");
  EXPECT_TRUE(f.is_local(1, 5));
  EXPECT_EQ(range_gets(), 1);
  const format::ExpertSpan& span = s.catalog.layers[1].spans[5];
  EXPECT_EQ(file_size(span.file), span.nbytes);
  // Local already: the callback still comes from a fetch thread, and no request is sent.
  EXPECT_EQ(fetch(f, 1, 5), "");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(range_gets(), 1);
}

TEST_F(StreamingExpertsTest, IsLocalLooksAtTheCacheOnceThenRemembers) {
  StreamingExperts s = open();
  const format::ExpertSpan& span = s.catalog.layers[1].spans[3];
  EXPECT_FALSE(s.fetcher->is_local(1, 3));
  {
    // Another process publishes the expert: the next question finds the file.
    StreamingExperts other = open();
    EXPECT_EQ(fetch(*other.fetcher, 1, 3), "");
  }
  EXPECT_TRUE(s.fetcher->is_local(1, 3));
  // Published cache files are never removed by deltafin, so the answer is kept without another
  // stat(): even a file removed behind its back still counts (its read would then fail, naming it).
  std::filesystem::remove(span.file);
  EXPECT_TRUE(s.fetcher->is_local(1, 3));
  EXPECT_FALSE(s.fetcher->is_local(1, 4));
}

TEST_F(StreamingExpertsTest, FailedFetchNamesTheExpertAndLeavesNoFile) {
  StreamingExperts s = open();
  server_.faults("[{\"match\": \"/cdn/\", \"kind\": \"status\", \"status\": 503, \"times\": -1}]");
  const std::string error = fetch(*s.fetcher, 2, 7);
  EXPECT_NE(error.find("layer 2 expert 7"), std::string::npos) << error;
  EXPECT_NE(error.find("503"), std::string::npos) << error;
  EXPECT_FALSE(s.fetcher->is_local(2, 7));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "experts/L002"));
  server_.faults("[]");
  EXPECT_EQ(fetch(*s.fetcher, 2, 7), "");
  EXPECT_TRUE(s.fetcher->is_local(2, 7));
}

TEST_F(StreamingExpertsTest, ManifestThatDoesNotFitTheConfigIsRefused) {
  const std::string path = dir_ / kExpertManifest;
  const ExpertManifest m = ExpertManifest::parse(read_small_file(path), path);
  format::ModelConfig other = config_;
  other.num_experts = config_.num_experts + 1;
  try {
    catalog_from_manifest(m, other, dir_.path());
    FAIL() << "a manifest with fewer experts than the config was accepted";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.json: layer 1 has"), std::string::npos)
        << e.what();
  }
  ExpertManifest wrong = m;
  wrong.layers[0].layout[1].shape[0] += 1;
  EXPECT_THROW(catalog_from_manifest(wrong, config_, dir_.path()), base::Error);
  EXPECT_FALSE(open_streaming_experts(kFixture, config_).has_value());  // not an install
}

}  // namespace
}  // namespace deltafin::setup
