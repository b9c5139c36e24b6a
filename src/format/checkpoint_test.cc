// Tests for checkpoint folders: the fixture's two shards through the index, a single-file model,
// mapping, and every disagreement between index and shards.
#include "format/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>

#include "format/test_util.h"

namespace deltafin::format {
namespace {

using testing::error_of;
using testing::make_file;
using testing::TempDir;

constexpr const char* kShard1 = "model-00001-of-000002.safetensors";
constexpr const char* kShard2 = "model-00002-of-000002.safetensors";

TEST(Checkpoint, OpensTheFixtureThroughItsIndex) {
  const Checkpoint ckpt = Checkpoint::open(testing::fixture_dir());
  EXPECT_EQ(ckpt.dir(), testing::fixture_dir());
  ASSERT_EQ(ckpt.shards().size(), 2u);
  EXPECT_EQ(ckpt.shards()[0].path, testing::fixture_dir() + "/" + kShard1);
  EXPECT_EQ(ckpt.shards()[0].n_tensors, 1118u);
  EXPECT_EQ(ckpt.shards()[1].n_tensors, 1526u);
  EXPECT_EQ(ckpt.shards()[1].size_bytes, 1221192u);
  EXPECT_EQ(ckpt.tensors().size(), 2644u);

  const TensorInfo& head = ckpt.get("language_model.lm_head.weight");
  EXPECT_EQ(head.file, testing::fixture_dir() + "/" + kShard2);
  EXPECT_EQ(head.offset, 8u + 208384u);
  EXPECT_EQ(head.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(ckpt.find("language_model.lm_head.weightx"), nullptr);
  const std::string msg = error_of([&] { ckpt.get("no.such.tensor"); });
  EXPECT_EQ(msg, "checkpoint " + testing::fixture_dir() + ": missing tensor no.such.tensor");
}

TEST(Checkpoint, MapsTheBytesOfTheFile) {
  Checkpoint ckpt = Checkpoint::open(testing::fixture_dir());
  const std::string shard = testing::read_file(testing::fixture_dir() + "/" + kShard2);
  for (const char* name :
       {"language_model.lm_head.weight", "language_model.model.norm.weight",
        "language_model.model.layers.12.block_sparse_moe.experts.9.w3.weight_scale"}) {
    const TensorInfo& t = ckpt.get(name);
    const auto bytes = ckpt.map(t);
    ASSERT_EQ(bytes.size(), t.nbytes);
    EXPECT_EQ(std::memcmp(bytes.data(), shard.data() + t.offset, t.nbytes), 0) << name;
  }
  // Moving the checkpoint keeps lookups and mappings valid.
  Checkpoint moved = std::move(ckpt);
  const TensorInfo& t = moved.get("language_model.lm_head.weight");
  EXPECT_EQ(std::memcmp(moved.map(t).data(), shard.data() + t.offset, 16), 0);
  TensorInfo outside = t;
  outside.offset = shard.size();
  EXPECT_NE(error_of([&] { moved.map(outside); }).find("outside the file"), std::string::npos);
  outside.file = "/elsewhere";
  EXPECT_NE(error_of([&] { moved.map(outside); }).find("not one of its shards"), std::string::npos);
}

TEST(Checkpoint, OpensASingleFileModel) {
  TempDir dir;
  testing::write_file(
      dir.file("model.safetensors"),
      make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8, '\x7f'));
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  ASSERT_EQ(ckpt.tensors().size(), 1u);
  EXPECT_EQ(ckpt.get("w").file, dir.file("model.safetensors"));
  EXPECT_EQ(ckpt.map(ckpt.get("w"))[7], 0x7f);
}

// An overlay (the int8 spine's folder) serves its tensors in place of the base's of the same name
// and beside them, maps from its own files, and leaves tensors() the base's.
TEST(Checkpoint, OverlayServesItsTensorsFirst) {
  TempDir base, over;
  testing::write_file(base.file("model.safetensors"),
                      make_file(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                                R"("n":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                8, '\x11'));
  testing::write_file(
      over.file("model.safetensors"),
      make_file(R"({"w":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},)"
                R"("w.int8_scale":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                6, '\x22'));
  Checkpoint ckpt = Checkpoint::open(base.path());
  EXPECT_EQ(ckpt.overlay(), nullptr);
  ckpt.set_overlay(Checkpoint::open(over.path()));
  ASSERT_NE(ckpt.overlay(), nullptr);
  EXPECT_EQ(ckpt.get("w").dtype, DType::kI8);
  EXPECT_EQ(ckpt.get("w").file, over.file("model.safetensors"));
  EXPECT_EQ(ckpt.map(ckpt.get("w"))[0], 0x22);
  EXPECT_EQ(ckpt.map(ckpt.get("w.int8_scale")).size(), 4u);
  EXPECT_EQ(ckpt.get("n").dtype, DType::kF32);
  EXPECT_EQ(ckpt.map(ckpt.get("n"))[0], 0x11);
  EXPECT_EQ(ckpt.tensors().size(), 2u);
}

TEST(Checkpoint, RejectsFoldersWithoutWeights) {
  TempDir dir;
  EXPECT_NE(error_of([&] {
              Checkpoint::open(dir.path());
            }).find("neither model.safetensors.index.json nor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Checkpoint::open(dir.file("absent")); }).find("not a directory"),
            std::string::npos);
}

// A two-shard folder: a.safetensors holds x, b.safetensors holds y, plus the given index text.
void write_pair(const TempDir& dir, const std::string& index_json) {
  testing::write_file(dir.file("a.safetensors"),
                      make_file(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4));
  testing::write_file(dir.file("b.safetensors"),
                      make_file(R"({"y":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  testing::write_file(dir.file(kIndexFileName), index_json);
}

std::string open_error(const std::string& index_json) {
  TempDir dir;
  write_pair(dir, index_json);
  return error_of([&] { Checkpoint::open(dir.path()); });
}

TEST(Checkpoint, AcceptsAConsistentIndex) {
  TempDir dir;
  write_pair(
      dir,
      R"({"metadata":{"total_size":6,"x":[1,{}]},"weight_map":{"y":"b.safetensors","x":"a.safetensors"}})");
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  ASSERT_EQ(ckpt.tensors().size(), 2u);
  EXPECT_EQ(ckpt.tensors()[0].name, "x");  // shards in name order
  EXPECT_EQ(ckpt.tensors()[1].name, "y");
}

TEST(Checkpoint, RejectsAnIndexNamingAMissingShard) {
  const std::string msg = open_error(R"({"weight_map":{"x":"a.safetensors","y":"c.safetensors"}})");
  EXPECT_NE(msg.find("names shard c.safetensors, which does not exist"), std::string::npos) << msg;
}

TEST(Checkpoint, RejectsAnIndexListingATensorTheShardLacks) {
  const std::string msg =
      open_error(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}})");
  EXPECT_NE(msg.find("lists tensor z in shard b.safetensors, which does not hold it"),
            std::string::npos)
      << msg;
}

TEST(Checkpoint, RejectsAShardTensorTheIndexDoesNotList) {
  TempDir dir;
  write_pair(dir, R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  testing::write_file(dir.file("a.safetensors"),
                      make_file(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                R"("w":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}})",
                                5));
  const std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(msg.find("shard a.safetensors holds tensor w, which"), std::string::npos) << msg;
  const std::string wrong =
      open_error(R"({"weight_map":{"x":"b.safetensors","y":"a.safetensors"}})");
  EXPECT_NE(wrong.find("puts tensor x in b.safetensors but it is in a.safetensors"),
            std::string::npos)
      << wrong;
}

TEST(Checkpoint, RejectsATensorInTwoShards) {
  TempDir dir;
  write_pair(dir, R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  testing::write_file(dir.file("b.safetensors"),
                      make_file(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  const std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(msg.find("tensor x is in both"), std::string::npos) << msg;
}

TEST(Checkpoint, RejectsBrokenIndexes) {
  struct Case {
    const char* index;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"weight_map":{"x":"a.safetensors")", "invalid JSON"},
      {R"({"metadata":{}})", "no weight_map object"},
      {R"([])", "expected a JSON object"},
      {R"({"weight_map":[]})", "weight_map is an array"},
      {R"({"weight_map":{"x":1}})", "weight_map[\"x\"] is a number"},
      {R"({"weight_map":{"x":"../a.safetensors"}})", "not a plain file name"},
      {R"({"weight_map":{"x":".."}})", "not a plain file name"},
      {R"({"weight_map":{},"weight_map":{}})", "weight_map appears twice"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of([&] { parse_shard_index(c.index, "idx.json"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.index << " -> " << msg;
    EXPECT_NE(msg.find("idx.json"), std::string::npos) << msg;
  }
  const std::string msg = open_error("{\"weight_map\": {");
  EXPECT_NE(msg.find(kIndexFileName), std::string::npos) << msg;
}

TEST(Checkpoint, ReportsABrokenShardByName) {
  TempDir dir;
  testing::copy_fixture(dir.path());
  testing::edit_header(dir.file(kShard2), [](nlohmann::json& h) {
    h["language_model.lm_head.weight"]["dtype"] = "F32";  // twice the bytes its range holds
  });
  const std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(msg.find(kShard2), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor language_model.lm_head.weight"), std::string::npos) << msg;
}

TEST(Checkpoint, IndexShardsComeBackSorted) {
  const ShardIndex index = parse_shard_index(
      R"({"weight_map":{"p":"z.st","q\u00e9":"a.st","r":"z.st"},"extra":[{"a":[]}]})", "i");
  ASSERT_EQ(index.shards, (std::vector<std::string>{"a.st", "z.st"}));
  ASSERT_EQ(index.entries.size(), 3u);
  EXPECT_EQ(index.entries[0].name, "p");
  EXPECT_EQ(index.entries[0].shard, 1u);
  EXPECT_EQ(index.entries[1].name, "q\xc3\xa9");  // decoded from its escape
  EXPECT_EQ(index.entries[1].shard, 0u);
  EXPECT_EQ(index.entries[2].name, "r");
}

TEST(Checkpoint, RejectsATensorListedTwice) {
  const std::string msg =
      open_error(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors","x":"a.safetensors"}})");
  EXPECT_NE(msg.find("lists tensor x twice"), std::string::npos) << msg;
}

}  // namespace
}  // namespace deltafin::format
