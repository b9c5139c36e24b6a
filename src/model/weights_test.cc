// The loader that binds by role: padded per-head vectors (A_log), shapes and dtypes checked
// against the schema and refused with the name.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "base/error.h"
#include "model/weights.h"

namespace deltafin::model {
namespace {

// Tensors held in memory under their names.
class MemorySource : public WeightSource {
 public:
  void add_f32(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    Entry& e = tensors_[name];
    e.info = {name, format::DType::kF32, std::move(shape), "memory", 0, values.size() * 4};
    e.bytes.resize(values.size() * 4);
    std::memcpy(e.bytes.data(), values.data(), e.bytes.size());
  }
  void add_raw(const std::string& name, format::DType dtype, std::vector<int64_t> shape,
               std::vector<uint8_t> bytes) {
    Entry& e = tensors_[name];
    e.info = {name, dtype, std::move(shape), "memory", 0, bytes.size()};
    e.bytes = std::move(bytes);
  }
  const format::TensorInfo& info(std::string_view name) const override {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) base::fail("missing tensor ", name);
    return it->second.info;
  }
  const uint8_t* bytes(const format::TensorInfo& t) override {
    return tensors_.at(t.name).bytes.data();
  }

 private:
  struct Entry {
    format::TensorInfo info;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Entry> tensors_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const base::Error& e) {
    return e.what();
  }
  return "";
}

// A schema entry for one tensor; the role only has to be unique within a test's loader.
format::ExpectedTensor want(std::string name, std::vector<int64_t> shape, format::Role role,
                            std::vector<format::DType> dtypes = {format::DType::kF32,
                                                                 format::DType::kBF16},
                            format::ShapeRule rule = format::ShapeRule::kExact) {
  format::ExpectedTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtypes = std::move(dtypes);
  t.role = role;
  t.shape_rule = rule;
  return t;
}

WeightLoader a_log_loader(MemorySource& src, const std::string& name) {
  return WeightLoader(src, {want(name, {3}, format::Role::kKdaALog, {format::DType::kF32},
                                 format::ShapeRule::kPerHeadVector)});
}

TEST(WeightLoader, PerHeadVectorKeepsTheHeadsAndChecksThePadding) {
  MemorySource src;
  src.add_f32("k3.A_log", {8}, {0.5f, -1.0f, 2.0f, 0, 0, 0, 0, 0});
  src.add_f32("kl.A_log", {1, 1, 3, 1}, {0.5f, -1.0f, 2.0f});
  src.add_f32("bad.A_log", {8}, {0.5f, -1.0f, 2.0f, 0, 0, 0, 1e-9f, 0});
  src.add_f32("short.A_log", {2}, {0.5f, -1.0f});
  src.add_f32("wide.A_log", {2, 4}, {0.5f, -1.0f, 2.0f, 0, 0, 0, 0, 0});
  const format::Role r = format::Role::kKdaALog;
  EXPECT_EQ(a_log_loader(src, "k3.A_log").per_head(r), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(a_log_loader(src, "kl.A_log").per_head(r), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_NE(
      error_of([&] { a_log_loader(src, "bad.A_log").per_head(r); }).find("element 6 is 1e-09"),
      std::string::npos);
  EXPECT_NE(error_of([&] { a_log_loader(src, "short.A_log").per_head(r); }).find("at least 3"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { a_log_loader(src, "wide.A_log").per_head(r); }).find("tensor wide.A_log"),
      std::string::npos);
}

TEST(WeightLoader, MatrixShapeAndDtypeAreCheckedAgainstTheSchema) {
  MemorySource src;
  src.add_f32("w", {2, 3}, {1, 2, 3, 4, 5, 6});
  using format::Role;
  WeightLoader ld(src, {want("w", {2, 3}, Role::kRouter), want("w", {3, 2}, Role::kMlpGate),
                        want("w", {2, 3}, Role::kMlpUp, {format::DType::kBF16}),
                        want("w", {5}, Role::kFinalNorm), want("w", {6}, Role::kInputNorm)});
  EXPECT_EQ(ld.matrix(Role::kRouter).rows, 2);
  EXPECT_EQ(ld.matrix(Role::kRouter).dtype, kernels::WeightDType::kF32);
  EXPECT_NE(error_of([&] { ld.matrix(Role::kMlpGate); }).find("expected shape [3, 2]"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { ld.matrix(Role::kMlpUp); }).find("tensor w (F32 [2, 3]): expected dtype BF16"),
      std::string::npos);
  EXPECT_NE(error_of([&] { ld.vector(Role::kFinalNorm); }).find("expected shape [5]"),
            std::string::npos);
  // A vector must have the schema's shape, not only its element count.
  EXPECT_NE(error_of([&] { ld.vector(Role::kInputNorm); }).find("expected shape [6]"),
            std::string::npos);
  EXPECT_TRUE(ld.has(Role::kMlpUp));
  EXPECT_FALSE(ld.has(Role::kLmHead));
  EXPECT_NE(error_of([&] { ld.matrix(Role::kLmHead); }).find("lists no tensor"), std::string::npos);
}

// The int8 spine: an I8 tensor where the schema wants a BF16 matrix binds as kInt8 with its
// NAME.int8_scale row scales; missing or misshapen scales are refused naming the tensor.
TEST(WeightLoader, BindsInt8MatrixWithItsScales) {
  MemorySource src;
  src.add_raw("w", format::DType::kI8, {2, 3}, {1, 2, 3, 0xff, 0x81, 0x7f});
  src.add_f32("w.int8_scale", {2}, {0.5f, 0.25f});
  WeightLoader ld(src, {want("w", {2, 3}, format::Role::kKdaQProj, {format::DType::kBF16})});
  const WeightMatrix m = ld.matrix(format::Role::kKdaQProj);
  EXPECT_EQ(m.dtype, kernels::WeightDType::kInt8);
  float row[3];
  kernels::decode_row(m, 1, row);
  EXPECT_EQ(row[0], -0.25f);
  EXPECT_EQ(row[1], -127 * 0.25f);
  EXPECT_EQ(row[2], 127 * 0.25f);

  MemorySource bad;
  bad.add_raw("w", format::DType::kI8, {2, 3}, std::vector<uint8_t>(6));
  bad.add_f32("w.int8_scale", {3}, {1, 1, 1});
  WeightLoader ld_bad(bad, {want("w", {2, 3}, format::Role::kKdaQProj, {format::DType::kBF16})});
  EXPECT_NE(error_of([&] { ld_bad.matrix(format::Role::kKdaQProj); }).find("int8 row scales of w"),
            std::string::npos);
  // A small tensor the schema allows in F32 is never taken as int8.
  MemorySource small;
  small.add_raw("n", format::DType::kI8, {4}, std::vector<uint8_t>(4));
  WeightLoader ld_small(small, {want("n", {4}, format::Role::kInputNorm)});
  EXPECT_NE(error_of([&] { ld_small.vector(format::Role::kInputNorm); }).find("expected dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace deltafin::model
