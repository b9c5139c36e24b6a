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

}  // namespace
}  // namespace deltafin::model
