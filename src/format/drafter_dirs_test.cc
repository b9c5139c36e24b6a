// find_drafters: only complete drafter folders, in a fixed order.
#include "format/drafter_dirs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace deltafin::format {
namespace {

namespace fs = std::filesystem;

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(DrafterDirs, ListsCompleteFoldersOnly) {
  const fs::path dir = fs::temp_directory_path() / ("df_drafters_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  EXPECT_TRUE(find_drafters(dir.string()).empty());
  const fs::path d = dir / "drafters";
  touch(d / "qwen3-0.6b-base/config.json");
  touch(d / "qwen3-0.6b-base/model.safetensors");  // no tokenizer.json yet
  touch(d / "dspark/config.json");
  touch(d / "dspark/model.safetensors");
  touch(d / "other/config.json");
  std::vector<DrafterDir> found = find_drafters(dir.string());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, DrafterKind::kDSpark);
  EXPECT_EQ(found[0].path, (d / "dspark").string());
  touch(d / "qwen3-0.6b-base/tokenizer.json");
  found = find_drafters(dir.string() + "/");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[1].kind, DrafterKind::kQwen3);
  EXPECT_EQ(found[1].name, "qwen3-0.6b-base");
  EXPECT_EQ(found[1].path, (d / "qwen3-0.6b-base").string());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltafin::format
