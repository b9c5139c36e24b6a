// Unit tests for setup's small parts: hashes, header parsing, names, sizes, layer ranges, the
// partial-file trust rule and progress lines.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/error.h"
#include "setup/digest.h"
#include "setup/fetch_plan.h"
#include "setup/files.h"
#include "setup/http.h"
#include "setup/progress.h"
#include "setup/repo.h"
#include "setup/testing/hf_test_server.h"

namespace deltafin::setup {
namespace {

TEST(Digest, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // `git hash-object` of a file holding "hello\n".
  Digest git(DigestKind::kGitBlobSha1, 6);
  git.update("hello\n", 6);
  EXPECT_EQ(git.hex_final(), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(Digest, FilePrefix) {
  testing::TempDir dir;
  write_file_atomic(dir / "f", "abcdef");
  EXPECT_EQ(file_digest_hex(DigestKind::kSha256, dir / "f", 0, 3), sha256_hex("abc"));
  EXPECT_EQ(file_digest_hex(DigestKind::kSha256, dir / "f", 0), sha256_hex("abcdef"));
  EXPECT_THROW(file_digest_hex(DigestKind::kSha256, dir / "f", 0, 7), base::Error);
}

TEST(Http, ContentRange) {
  auto r = parse_content_range("bytes 0-7/1003080");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 0u);
  EXPECT_EQ(r->last, 7u);
  EXPECT_EQ(*r->total, 1003080u);
  r = parse_content_range(" bytes 100-199/* ");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->total);
  EXPECT_FALSE(parse_content_range("bytes 8-7/100"));    // last before first
  EXPECT_FALSE(parse_content_range("bytes 0-100/100"));  // past the end
  EXPECT_FALSE(parse_content_range("items 0-1/2"));
  EXPECT_FALSE(parse_content_range("bytes */100"));
}

TEST(Http, EtagAndUrls) {
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag(" \"d6ac\" "), "d6ac");
  EXPECT_EQ(url_host("https://huggingface.co/x/y"), "huggingface.co");
  EXPECT_EQ(url_host("http://User@127.0.0.1:8080/a?b"), "127.0.0.1:8080");
  EXPECT_EQ(url_for_messages("https://cdn/x?X-Amz-Signature=secret"), "https://cdn/x");
}

TEST(Files, HumanBytes) {
  EXPECT_EQ(human_bytes(812), "812 B");
  EXPECT_EQ(human_bytes(17547264), "17.5 MB");
  EXPECT_EQ(human_bytes(1560936091448ull), "1.56 TB");
  EXPECT_EQ(human_bytes(215000000000ull), "215 GB");
}

TEST(Repo, NamesAndDefaults) {
  EXPECT_NO_THROW(check_repo_id("moonshotai/Kimi-K3"));
  EXPECT_THROW(check_repo_id("Kimi-K3"), base::Error);
  EXPECT_THROW(check_repo_id("a/b/c"), base::Error);
  EXPECT_THROW(check_repo_id("a/.."), base::Error);
  EXPECT_NO_THROW(check_remote_file_name("model-00001-of-000096.safetensors", "index"));
  for (const char* bad : {"../x", "a/b", ".hidden", "", "x\ny"})
    EXPECT_THROW(check_remote_file_name(bad, "index"), base::Error) << bad;
  EXPECT_EQ(default_revision("moonshotai/Kimi-K3"), kKimiK3Revision);
  EXPECT_EQ(default_revision("someone/else"), "main");
  EXPECT_EQ(pinned_files(kDefaultRepo, kKimiK3Revision).size(), 5u);
  EXPECT_TRUE(pinned_files(kDefaultRepo, "main").empty());
  ::setenv("DELTAFIN_HOME", "/srv/df", 1);
  EXPECT_EQ(default_model_dir(), "/srv/df/models/moonshotai/Kimi-K3");
  ::unsetenv("DELTAFIN_HOME");
  ::setenv("XDG_DATA_HOME", "/x", 1);
  EXPECT_EQ(default_model_dir("a/b"), "/x/deltafin/models/a/b");
  ::unsetenv("XDG_DATA_HOME");
  RemoteRepo r{"https://huggingface.co", "moonshotai/Kimi-K3", kKimiK3Revision};
  EXPECT_EQ(r.file_url("config.json"),
            "https://huggingface.co/moonshotai/Kimi-K3/resolve/"
            "c5d1dd4c428bd1ce8b88c5044f3b6ccde9e3b721/config.json");
}

TEST(FetchPlan, LayerRanges) {
  const LayerRanges all = LayerRanges::parse("");
  EXPECT_TRUE(all.contains(0) && all.contains(92));
  const LayerRanges r = LayerRanges::parse("1-40,50");
  EXPECT_TRUE(r.contains(1) && r.contains(40) && r.contains(50));
  EXPECT_FALSE(r.contains(0) || r.contains(41) || r.contains(51));
  for (const char* bad : {"3-", "-3", "a", "5-2", "1,,2", "1-x"})
    EXPECT_THROW(LayerRanges::parse(bad), base::Error) << bad;
}

// A partial file is trusted whole in the boot that wrote it, and only up to its fsynced length
// after a reboot.
TEST(Files, PartialFileTrust) {
  testing::TempDir dir;
  const std::string dest = dir / "shard";
  {
    PartialFile p(dest, 100);
    p.write("0123456789", 10);
  }  // as if killed: no mark() after the write
  EXPECT_EQ(PartialFile(dest, 100).size(), 10u);
  write_file_atomic(dest + ".partial.mark", "another-boot\n4\n");
  EXPECT_EQ(PartialFile(dest, 100).size(), 4u);
  EXPECT_EQ(file_size(dest + ".partial"), 4u);
  {
    PartialFile p(dest, 100);
    p.write("456789", 6);
    EXPECT_THROW(p.publish(11), base::Error);  // the size is checked before the rename
  }
  EXPECT_FALSE(file_size(dest));
  PartialFile p(dest, 10);
  EXPECT_EQ(p.size(), 10u);
  p.publish(10);
  EXPECT_EQ(read_small_file(dest), "0123456789");
  EXPECT_FALSE(file_size(dest + ".partial"));
  EXPECT_FALSE(file_size(dest + ".partial.mark"));
  EXPECT_EQ(PartialFile(dir / "other", 3).size(), 0u);
}

TEST(Files, OversizedPartialIsDiscarded) {
  testing::TempDir dir;
  write_file_atomic(dir / "s.partial", "0123456789");
  EXPECT_EQ(PartialFile(dir / "s", 5).size(), 0u);
}

TEST(Progress, Lines) {
  EXPECT_EQ(Progress::render("download", 500, 1000, 100, false),
            "download:  50%  500 B / 1.00 kB  100 B/s  ETA 0:05");
  const std::string bar = Progress::render("x", 1000, 1000, 0, true);
  EXPECT_NE(bar.find("[############################] 100%"), std::string::npos) << bar;
  EXPECT_NE(Progress::render("x", 1, 1000000000000ull, 1, false).find("ETA --:--"),
            std::string::npos);
}

}  // namespace
}  // namespace deltafin::setup
