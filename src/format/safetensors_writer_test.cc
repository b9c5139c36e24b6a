// Tests for the streaming safetensors writer: exact header bytes (checked against a real oracle
// shard), chunked data, byte-count enforcement, and files the reader accepts.
#include "format/safetensors_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "format/safetensors.h"

namespace deltafin::format {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deltafin_writer_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(SafetensorsHeader, CompactMetadataFirstPaddedToEight) {
  const std::vector<TensorDecl> tensors = {
      {"a.weight", DType::kBF16, {2, 3}}, {"b", DType::kU8, {5}}, {"c", DType::kF32, {}}};
  const std::string json = safetensors_header_json(tensors, {{"format", "pt"}});
  const std::string expected =
      R"({"__metadata__":{"format":"pt"},"a.weight":{"dtype":"BF16","shape":[2,3],)"
      R"("data_offsets":[0,12]},"b":{"dtype":"U8","shape":[5],"data_offsets":[12,17]},)"
      R"("c":{"dtype":"F32","shape":[],"data_offsets":[17,21]}})";
  ASSERT_EQ(json.size() % 8, 0u);
  EXPECT_EQ(json.substr(0, expected.size()), expected);
  EXPECT_EQ(json.find_first_not_of(' ', expected.size()), std::string::npos);
  EXPECT_LT(json.size() - expected.size(), 8u);
}

TEST(SafetensorsHeader, RejectsDuplicateAndReservedNames) {
  EXPECT_THROW(safetensors_header_json({{"x", DType::kU8, {1}}, {"x", DType::kU8, {1}}}, {}),
               base::Error);
  EXPECT_THROW(safetensors_header_json({{"__metadata__", DType::kU8, {1}}}, {}), base::Error);
  EXPECT_THROW(safetensors_header_json({{"", DType::kU8, {1}}}, {}), base::Error);
  EXPECT_THROW(safetensors_header_json({{"n", DType::kU8, {-1}}}, {}), base::Error);
}

// The oracle shard was written by Python's json + the safetensors convention; re-declaring its
// tensors must reproduce its header byte for byte.
TEST(SafetensorsHeader, ReproducesOracleShardHeader) {
  const fs::path shard =
      fs::path(DELTAFIN_SOURCE_DIR) / "tests/fixtures/k3-tiny-a/model-00001-of-000002.safetensors";
  const std::string raw = read_file(shard);
  ASSERT_GT(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  const std::string original = raw.substr(8, n);
  const auto header = nlohmann::ordered_json::parse(original);
  std::vector<TensorDecl> decls;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    decls.push_back({name, *dtype_from_name(entry["dtype"].get<std::string>()),
                     entry["shape"].get<std::vector<int64_t>>()});
  }
  ASSERT_GT(decls.size(), 100u);
  EXPECT_EQ(safetensors_header_json(decls, {{"format", "pt"}}), original);
}

TEST_F(WriterTest, ChunkedWritesProduceTheExactFile) {
  const std::vector<TensorDecl> decls = {{"first", DType::kF32, {3, 700}},
                                         {"second", DType::kU8, {10001}},
                                         {"third", DType::kBF16, {7}}};
  uint64_t total = 0;
  for (const auto& d : decls) total += d.nbytes();
  std::vector<std::byte> data(total);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);

  const fs::path path = dir_ / "chunked.safetensors";
  SafetensorsWriterOptions options;
  options.buffer_bytes = 4096;
  SafetensorsWriter writer(path.string(), decls, options);
  // Odd small pieces through the buffer, then one piece larger than it that bypasses it.
  size_t pos = 0;
  for (size_t step : {1u, 3u, 1000u, 5000u, 7u}) {
    writer.write(data.data() + pos, step);
    pos += step;
  }
  writer.write(data.data() + pos, data.size() - pos);
  writer.finish();

  const std::string json = safetensors_header_json(decls, {{"format", "pt"}});
  EXPECT_EQ(writer.header_bytes(), 8 + json.size());
  EXPECT_EQ(writer.tensor_offset(1), 8 + json.size() + 3 * 700 * 4);
  std::string expected(8, '\0');
  for (int i = 0; i < 8; ++i) expected[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  expected += json;
  expected.append(reinterpret_cast<const char*>(data.data()), data.size());
  EXPECT_EQ(read_file(path), expected);

  const std::vector<TensorInfo> infos = read_safetensors_header(path.string());
  ASSERT_EQ(infos.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(infos[i].name, decls[i].name);
    EXPECT_EQ(infos[i].offset, writer.tensor_offset(i));
    EXPECT_EQ(infos[i].nbytes, decls[i].nbytes());
  }
}

TEST_F(WriterTest, RejectsExtraBytesAndRemovesAnUnfinishedFile) {
  const fs::path path = dir_ / "short.safetensors";
  {
    SafetensorsWriter writer(path.string(), {{"t", DType::kU8, {4}}});
    const std::byte five[5] = {};
    EXPECT_THROW(writer.write(five, 5), base::Error);
    writer.write(five, 3);
    EXPECT_THROW(writer.finish(), base::Error);
    EXPECT_TRUE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(WriterTest, WriteSafetensorsChecksEachTensorsSize) {
  const float values[3] = {1.0f, -2.0f, 0.5f};
  const fs::path path = dir_ / "small.safetensors";
  write_safetensors(path.string(),
                    {{"logits", DType::kF32, {1, 3}, std::as_bytes(std::span(values))}});
  const std::vector<TensorInfo> infos = read_safetensors_header(path.string());
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].nbytes, 12u);
  const std::string raw = read_file(path);
  float back[3];
  std::memcpy(back, raw.data() + infos[0].offset, 12);
  EXPECT_EQ(back[1], -2.0f);

  EXPECT_THROW(
      write_safetensors(path.string(),
                        {{"logits", DType::kF32, {1, 4}, std::as_bytes(std::span(values))}}),
      base::Error);
}

// Larger than two write-back windows, so the sync_file_range / fadvise path runs; the bytes must
// be the same as with the page cache kept.
TEST_F(WriterTest, DropPageCacheKeepsTheBytes) {
  const size_t n = (size_t{150} << 20) + 12345;
  std::vector<std::byte> chunk(size_t{1} << 20);
  SafetensorsWriterOptions options;
  options.drop_page_cache = true;
  const fs::path path = dir_ / "big.safetensors";
  SafetensorsWriter writer(path.string(), {{"big", DType::kU8, {static_cast<int64_t>(n)}}},
                           options);
  for (size_t pos = 0; pos < n; pos += chunk.size()) {
    const size_t len = std::min(chunk.size(), n - pos);
    for (size_t i = 0; i < len; i += 4096) chunk[i] = static_cast<std::byte>((pos + i) >> 12);
    writer.write(chunk.data(), len);
  }
  writer.finish();
  EXPECT_EQ(fs::file_size(path), writer.file_bytes());
  std::ifstream in(path, std::ios::binary);
  const uint64_t probe = (uint64_t{100} << 20) + 3 * 8192;
  in.seekg(static_cast<std::streamoff>(writer.tensor_offset(0) + probe));
  char c = 0;
  in.read(&c, 1);
  EXPECT_EQ(static_cast<uint8_t>(c), static_cast<uint8_t>(probe >> 12));
}

}  // namespace
}  // namespace deltafin::format
