// Tests for the safetensors header parser: the accepted form, and each rejection issue 2 lists,
// with the file and tensor named in the message.
#include "format/safetensors.h"

#include <gtest/gtest.h>

#include "format/test_util.h"

namespace deltafin::format {
namespace {

using testing::error_of;
using testing::make_file;

std::vector<TensorInfo> parse(const std::string& header, uint64_t data_bytes) {
  const std::string file = make_file(header, data_bytes);
  return parse_safetensors_header(file, file.size(), "m.safetensors");
}

std::string parse_error(const std::string& header, uint64_t data_bytes) {
  return error_of([&] { parse(header, data_bytes); });
}

// Two tensors, "b" listed first but stored second; 16 + 3 data bytes.
const char* kGood =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16],"future_field":{"x":[1,{"y":null}]}}})";

TEST(Safetensors, ParsesTensorsInOffsetOrderWithAbsoluteOffsets) {
  const std::string file = make_file(kGood, 19);
  const uint64_t header_bytes = file.size() - 8 - 19;
  const auto tensors = parse_safetensors_header(file, file.size(), "m.safetensors");
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "a");
  EXPECT_EQ(tensors[0].dtype, DType::kF32);
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(tensors[0].numel(), 4);
  EXPECT_EQ(tensors[0].offset, 8 + header_bytes);
  EXPECT_EQ(tensors[0].nbytes, 16u);
  EXPECT_EQ(tensors[0].file, "m.safetensors");
  EXPECT_EQ(tensors[1].name, "b");
  EXPECT_EQ(tensors[1].offset, 8 + header_bytes + 16);
  EXPECT_EQ(tensors[1].nbytes, 3u);
}

TEST(Safetensors, AcceptsEmptyHeaderScalarsAndZeroSizedTensors) {
  EXPECT_TRUE(parse("{}", 0).empty());
  EXPECT_TRUE(parse(R"({"__metadata__":null})", 0).empty());
  const auto t = parse(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                       R"("z":{"dtype":"I64","shape":[0,5],"data_offsets":[8,8]}})",
                       8);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].numel(), 1);
  EXPECT_EQ(t[1].numel(), 0);
}

TEST(Safetensors, DTypeTable) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  EXPECT_STREQ(dtype_name(DType::kI32), "I32");
  EXPECT_EQ(dtype_from_name("F16"), DType::kF16);
  EXPECT_FALSE(dtype_from_name("bf16").has_value());
}

TEST(Safetensors, RejectsHeaderLongerThanTheLimit) {
  const std::string file = testing::le64(kMaxHeaderBytes + 1) + "{}";
  const std::string msg =
      error_of([&] { parse_safetensors_header(file, kMaxHeaderBytes * 2, "big.safetensors"); });
  EXPECT_NE(msg.find("big.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exceeds the limit"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsHeaderLongerThanTheFile) {
  const std::string file = testing::le64(64) + "{}";
  const std::string msg =
      error_of([&] { parse_safetensors_header(file, file.size(), "m.safetensors"); });
  EXPECT_NE(msg.find("runs past the end of the file"), std::string::npos) << msg;
  const std::string tiny = "abc";
  EXPECT_NE(error_of([&] { parse_safetensors_header(tiny, 3, "m"); }).find("too short"),
            std::string::npos);
}

TEST(Safetensors, RejectsOffsetsOutsideTheFile) {
  const std::string msg =
      parse_error(R"({"a":{"dtype":"U8","shape":[20],"data_offsets":[0,20]}})", 19);
  EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run past the end of the data section"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsOverlappingRanges) {
  const std::string msg = parse_error(R"({"a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},)"
                                      R"("b":{"dtype":"U8","shape":[10],"data_offsets":[5,15]}})",
                                      15);
  EXPECT_NE(msg.find("tensor b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlap tensor a"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsReversedRanges) {
  const std::string msg =
      parse_error(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4);
  EXPECT_NE(msg.find("tensor a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("end before they begin"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsGapsAndTrailingBytesLikeTheReference) {
  const std::string gap = parse_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                                      12);
  EXPECT_NE(gap.find("bytes [4, 8)"), std::string::npos) << gap;
  EXPECT_NE(gap.find("tensor b"), std::string::npos) << gap;
  const std::string lead =
      parse_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6);
  EXPECT_NE(lead.find("bytes [0, 2)"), std::string::npos) << lead;
  const std::string trailing =
      parse_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9);
  EXPECT_NE(trailing.find("cover 4 bytes of the 9-byte data section"), std::string::npos)
      << trailing;
}

TEST(Safetensors, RejectsByteCountsThatDisagreeWithShapeAndDType) {
  const std::string msg =
      parse_error(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,6]}})", 6);
  EXPECT_NE(msg.find("tensor a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("BF16 [2, 3] needs 6 x 2 bytes"), std::string::npos) << msg;
  const std::string overflow = parse_error(
      R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(overflow.find("overflows"), std::string::npos) << overflow;
  const std::string partial_overflow =  // 2^32 * (2^31 + 1) fits in uint64 but not in int64
      parse_error(R"({"a":{"dtype":"U8","shape":[4294967296,2147483649,0],"data_offsets":[0,0]}})",
                  0);
  EXPECT_NE(partial_overflow.find("overflows"), std::string::npos) << partial_overflow;
  const std::string bytes_overflow =
      parse_error(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(bytes_overflow.find("needs"), std::string::npos) << bytes_overflow;
}

TEST(Safetensors, RejectsDuplicateNames) {
  const std::string msg = parse_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                      R"("a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                                      8);
  EXPECT_NE(msg.find("tensor a appears twice"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsInvalidJson) {
  const std::string msg = parse_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})", 4);
  EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
  EXPECT_NE(parse_error("{} x", 0).find("invalid JSON"), std::string::npos);
  EXPECT_NE(parse_error("{\"\xff\":1}", 0).find("invalid JSON"), std::string::npos);  // not UTF-8
}

TEST(Safetensors, RejectsUnknownDTypes) {
  const std::string msg =
      parse_error(R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4);
  EXPECT_NE(msg.find("tensor w"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype \"F8_E4M3\" is not supported"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsMalformedEntries) {
  struct Case {
    const char* header;
    const char* expect;
  };
  const Case cases[] = {
      {"[]", "expected a JSON object"},
      {R"({"a":3})", "tensor a: entry is a number"},
      {R"({"__metadata__":{"k":1}})", "__metadata__ holds a number"},
      {R"({"__metadata__":[]})", "__metadata__ is an array"},
      {R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "field \"dtype\" is missing"},
      {R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "field \"shape\" is missing"},
      {R"({"a":{"dtype":"U8","shape":[1]}})", "field \"data_offsets\" is missing"},
      {R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
       "field \"dtype\" appears twice"},
      {R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})",
       "dtype is a number, expected a string"},
      {R"({"a":{"dtype":"U8","shape":{},"data_offsets":[0,1]}})", "shape is an object"},
      {R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})",
       "shape holds -1, not a non-negative integer"},
      {R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "shape holds 1.5"},
      {R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", "shape holds an array"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "exactly 2 numbers, got 1"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "exactly 2 numbers"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}})",
       "data_offsets holds"},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.header, 1);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " -> " << msg;
    EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
  }
}

TEST(Safetensors, ReadsTheFixtureShardsHeaderFromDisk) {
  const std::string path = testing::fixture_dir() + "/model-00001-of-000002.safetensors";
  const auto tensors = read_safetensors_header(path);
  ASSERT_EQ(tensors.size(), 1118u);
  EXPECT_EQ(tensors[0].name, "language_model.model.embed_tokens.weight");
  EXPECT_EQ(tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(tensors[0].offset, 8u + 151872u);
  EXPECT_EQ(tensors[0].nbytes, 65536u);
  EXPECT_EQ(tensors.back().offset + tensors.back().nbytes, 1003080u);  // the whole file
}

TEST(Safetensors, ReadRejectsMissingAndTruncatedFiles) {
  testing::TempDir dir;
  EXPECT_NE(error_of([&] {
              read_safetensors_header(dir.file("absent.safetensors"));
            }).find("cannot open"),
            std::string::npos);
  const std::string shard =
      testing::read_file(testing::fixture_dir() + "/model-00002-of-000002.safetensors");
  testing::write_file(dir.file("cut.safetensors"), shard.substr(0, shard.size() - 100));
  const std::string msg = error_of([&] { read_safetensors_header(dir.file("cut.safetensors")); });
  EXPECT_NE(msg.find("cut.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor language_model.model.output_attn_res_proj.weight"), std::string::npos)
      << msg;  // the last
  EXPECT_NE(msg.find("run past the end"), std::string::npos) << msg;
  testing::write_file(dir.file("head.safetensors"), shard.substr(0, 1000));
  EXPECT_NE(error_of([&] {
              read_safetensors_header(dir.file("head.safetensors"));
            }).find("runs past the end of the file"),
            std::string::npos);
}

}  // namespace
}  // namespace deltafin::format
