// The drafter pins: revisions and the facts of spec/drafting.md §1.1 and §2.1.
#include "setup/drafter_setup.h"

#include <gtest/gtest.h>

#include <string>

#include "setup/repo.h"

namespace deltafin::setup {
namespace {

uint64_t pinned_size(const std::string& repo, const std::string& revision,
                     const std::string& name) {
  for (const PinnedFile& f : pinned_files(repo, revision))
    if (name == f.name) return f.size;
  return 0;
}

TEST(DrafterPins, RevisionsAndSizes) {
  EXPECT_EQ(default_revision(kDSparkRepo), kDSparkRevision);
  EXPECT_EQ(default_revision(kQwen06Repo), kQwen06Revision);
  EXPECT_EQ(default_revision(kQwen17Repo), kQwen17Revision);
  EXPECT_EQ(pinned_size(kDSparkRepo, kDSparkRevision, "model.safetensors"), 7124633450u);
  EXPECT_EQ(pinned_size(kDSparkRepo, kDSparkRevision, "config.json"), 1251u);
  EXPECT_EQ(pinned_size(kQwen06Repo, kQwen06Revision, "model.safetensors"), 1192135096u);
  EXPECT_EQ(pinned_size(kQwen17Repo, kQwen17Revision, "model.safetensors"), 3441185608u);
  EXPECT_EQ(pinned_size(kQwen06Repo, kQwen06Revision, "tokenizer.json"), 7031645u);
  // Another revision of the same repository pins nothing: the server's hashes are used.
  EXPECT_TRUE(pinned_files(kDSparkRepo, "main").empty());
  for (const PinnedFile& f : pinned_files(kQwen17Repo, kQwen17Revision))
    EXPECT_EQ(std::string(f.sha256).size(), 64u) << f.name;
}

}  // namespace
}  // namespace deltafin::setup
