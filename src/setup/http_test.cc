// HttpClient and the download steps against the real local server (tools/hfserver) with faults.
#include <gtest/gtest.h>

#include "base/error.h"
#include "setup/download.h"
#include "setup/files.h"
#include "setup/http.h"
#include "setup/testing/hf_test_server.h"

namespace deltafin::setup {
namespace {

const std::string kFixture = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";
const std::string kShard = "model-00002-of-000002.safetensors";
const std::string kCdn =
    std::string("/cdn/test/tiny/") + testing::HfTestServer::kCommit + "/" + kShard;

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "tools/hfserver did not start";
    opts_.backoff_initial_ms = 5;
    opts_.backoff_max_ms = 20;
    opts_.max_attempts = 3;
    opts_.stall_seconds = 1;
    opts_.token_host = url_host(server_.url());
  }
  std::string url(const std::string& file) const {
    return server_.url() + "/test/tiny/resolve/main/" + file;
  }
  std::string fetch(HttpClient& c, uint64_t offset, uint64_t n) {
    std::string out;
    c.get_range(url(kShard), offset, n, [&](const char* p, size_t k) { out.append(p, k); });
    return out;
  }

  testing::HfTestServer server_{{"test/tiny=" + kFixture}};
  HttpOptions opts_;
};

TEST_F(HttpTest, RangeThroughRedirectReusesTheTarget) {
  HttpStats stats;
  RedirectCache redirects;
  HttpClient c(opts_, &stats, &redirects);
  const std::string want = testing::read_bytes(kFixture + "/" + kShard, 1000, 5000);
  EXPECT_EQ(fetch(c, 1000, 5000), want);
  EXPECT_EQ(fetch(c, 1000, 5000), want);
  const auto log = server_.log();
  ASSERT_EQ(log.size(), 3u);  // resolve (302), CDN, then the CDN URL directly
  EXPECT_EQ(log[0]["status"], 302);
  EXPECT_EQ(log[2]["path"].get<std::string>().rfind("/cdn/", 0), 0u);
  EXPECT_EQ(log[1]["port"], log[2]["port"]);  // one kept-alive connection
  EXPECT_EQ(stats.bytes.load(), 10000u);
}

TEST_F(HttpTest, MetadataFromHead) {
  HttpClient c(opts_);
  const RemoteMeta lfs = remote_meta(c, url(kShard));
  EXPECT_EQ(lfs.size, std::filesystem::file_size(kFixture + "/" + kShard));
  ASSERT_EQ(lfs.digest_kind, DigestKind::kSha256);
  EXPECT_EQ(lfs.digest, file_digest_hex(DigestKind::kSha256, kFixture + "/" + kShard, 0));
  EXPECT_EQ(lfs.commit, testing::HfTestServer::kCommit);
  const RemoteMeta plain = remote_meta(c, url("config.json"));
  ASSERT_EQ(plain.digest_kind, DigestKind::kGitBlobSha1);
  EXPECT_EQ(plain.digest,
            file_digest_hex(DigestKind::kGitBlobSha1, kFixture + "/config.json", *plain.size));
  const ShardHeader h = fetch_shard_header(c, url(kShard));
  EXPECT_EQ(h.file_size, *lfs.size);
  EXPECT_EQ(h.prefix, testing::read_bytes(kFixture + "/" + kShard, 0, h.prefix.size()));
}

TEST_F(HttpTest, ResumesAfterTruncationAtTheExactByte) {
  HttpClient c(opts_);
  server_.faults("[{\"match\": \"" + kCdn +
                 "\", \"kind\": \"truncate\", \"after_bytes\": 3000, \"times\": 1},"
                 " {\"match\": \"" +
                 kCdn + "\", \"kind\": \"truncate\", \"after_bytes\": 2000, \"times\": 1}]");
  EXPECT_EQ(fetch(c, 100, 20000), testing::read_bytes(kFixture + "/" + kShard, 100, 20000));
  std::vector<std::string> ranges;
  for (const auto& r : server_.log())
    if (r["path"].get<std::string>().rfind("/cdn/", 0) == 0) ranges.push_back(r["range"]);
  EXPECT_EQ(ranges,
            (std::vector<std::string>{"bytes=100-20099", "bytes=3100-20099", "bytes=5100-20099"}));
}

TEST_F(HttpTest, SurvivesResets) {
  HttpClient c(opts_);
  // A reset may discard what the kernel had received but not delivered, so only the result and
  // the number of attempts are fixed.
  server_.faults("[{\"match\": \"" + kCdn +
                 "\", \"kind\": \"reset\", \"after_bytes\": 0, \"times\": 1},"
                 " {\"match\": \"" +
                 kCdn + "\", \"kind\": \"reset\", \"after_bytes\": 2000, \"times\": 1}]");
  EXPECT_EQ(fetch(c, 100, 20000), testing::read_bytes(kFixture + "/" + kShard, 100, 20000));
  int n_cdn = 0;
  for (const auto& r : server_.log()) n_cdn += r["path"].get<std::string>().rfind("/cdn/", 0) == 0;
  EXPECT_EQ(n_cdn, 3);
}

TEST_F(HttpTest, FinalErrorsSayWhatIsWrong) {
  HttpClient c(opts_);
  auto message = [&](const std::string& rules, uint64_t offset = 0) {
    server_.faults(rules);
    try {
      fetch(c, offset, 1000);
    } catch (const HttpError& e) {
      server_.faults("[]");
      return std::string(e.what());
    }
    server_.faults("[]");
    return std::string("no error");
  };
  EXPECT_NE(message("[{\"match\": \"/cdn/\", \"kind\": \"wrong_range\", \"times\": -1}]")
                .find("Content-Range"),
            std::string::npos);
  EXPECT_NE(message("[{\"match\": \"/cdn/\", \"kind\": \"no_range\", \"times\": -1}]", 10)
                .find("ignored the Range"),
            std::string::npos);
  const std::string gave_up =
      message("[{\"match\": \"/cdn/\", \"kind\": \"status\", \"status\": 503, \"times\": -1}]");
  EXPECT_NE(gave_up.find("HTTP 503"), std::string::npos) << gave_up;
  EXPECT_NE(gave_up.find("gave up after 3 attempts"), std::string::npos) << gave_up;
  // 404 is final at once: no retries.
  server_.clear_log();
  EXPECT_NE(
      message("[{\"match\": \"/cdn/\", \"kind\": \"status\", \"status\": 404, \"times\": -1}]")
          .find("HTTP 404"),
      std::string::npos);
  EXPECT_EQ(server_.log().size(), 2u);  // the resolve redirect and one CDN request
  // A whole-file request may be answered with 200.
  const uint64_t size = std::filesystem::file_size(kFixture + "/config.json");
  server_.faults("[{\"match\": \"config.json\", \"kind\": \"no_range\", \"times\": -1}]");
  std::string body;
  c.get_range(url("config.json"), 0, size, [&](const char* p, size_t n) { body.append(p, n); });
  EXPECT_EQ(body.size(), size);
}

TEST_F(HttpTest, StallIsDetectedAndRetried) {
  HttpClient c(opts_);
  server_.faults("[{\"match\": \"" + kCdn +
                 "\", \"kind\": \"stall\", \"after_bytes\": 100, \"seconds\": 20, \"times\": 1}]");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(fetch(c, 0, 200000), testing::read_bytes(kFixture + "/" + kShard, 0, 200000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(HttpTest, SinkErrorsEndTheTransferUnchanged) {
  HttpClient c(opts_);
  try {
    c.get_range(url(kShard), 0, 100000,
                [](const char*, size_t) { throw base::Error("disk full (test)"); });
    FAIL() << "no exception";
  } catch (const HttpError&) {
    FAIL() << "a sink error became an HTTP error";
  } catch (const base::Error& e) {
    EXPECT_STREQ(e.what(), "disk full (test)");
  }
}

TEST(HttpToken, SentToTheEndpointOnly) {
  testing::HfTestServer server({"test/tiny=" + kFixture}, {"--token", "s3cret"});
  ASSERT_TRUE(server.ok());
  HttpOptions o;
  o.max_attempts = 1;
  o.token_host = url_host(server.url());
  const std::string u = server.url() + "/test/tiny/resolve/main/config.json";
  try {
    HttpClient(o).head(u);
    FAIL() << "no token accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 401);
    EXPECT_NE(std::string(e.what()).find("set HF_TOKEN"), std::string::npos) << e.what();
  }
  o.token = "s3cret";
  EXPECT_EQ(HttpClient(o).head(u).status, 200);
  o.token_host = "huggingface.co";  // a different host never sees the token
  EXPECT_THROW(HttpClient(o).head(u), HttpError);
}

TEST_F(HttpTest, DownloadFileVerifiesAndResumes) {
  testing::TempDir dir;
  HttpClient c(opts_);
  const RemoteMeta m = remote_meta(c, url(kShard));
  const std::string dest = dir / kShard;
  // A partial file from an earlier run in this boot: the download continues after its bytes.
  PartialFile(dest, *m.size)
      .write(testing::read_bytes(kFixture + "/" + kShard, 0, 70000).data(), 70000);
  server_.clear_log();
  download_file(c, url(kShard), dest, *m.size, {DigestKind::kSha256, m.digest}, nullptr);
  EXPECT_EQ(read_small_file(dest), read_small_file(kFixture + "/" + kShard));
  EXPECT_EQ(server_.log().back()["range"], "bytes=70000-" + std::to_string(*m.size - 1));
  // A partial file with a wrong byte fails its hash, is thrown away and downloaded again.
  std::string bad = testing::read_bytes(kFixture + "/" + kShard, 0, 50000);
  bad[1234] ^= 1;
  const std::string dest2 = dir / "again.safetensors";
  PartialFile(dest2, *m.size).write(bad.data(), bad.size());
  download_file(c, url(kShard), dest2, *m.size, {DigestKind::kSha256, m.digest}, nullptr);
  EXPECT_EQ(read_small_file(dest2), read_small_file(kFixture + "/" + kShard));
}

}  // namespace
}  // namespace deltafin::setup
