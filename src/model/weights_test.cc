// The checked loader: padded per-head vectors (A_log), shapes and dtypes refused with the name.
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

TEST(WeightLoader, PerHeadVectorKeepsTheHeadsAndChecksThePadding) {
  MemorySource src;
  src.add_f32("k3.A_log", {8}, {0.5f, -1.0f, 2.0f, 0, 0, 0, 0, 0});
  src.add_f32("kl.A_log", {1, 1, 3, 1}, {0.5f, -1.0f, 2.0f});
  src.add_f32("bad.A_log", {8}, {0.5f, -1.0f, 2.0f, 0, 0, 0, 1e-9f, 0});
  src.add_f32("short.A_log", {2}, {0.5f, -1.0f});
  src.add_f32("wide.A_log", {2, 4}, {0.5f, -1.0f, 2.0f, 0, 0, 0, 0, 0});
  WeightLoader ld(src);
  EXPECT_EQ(ld.per_head("k3.A_log", 3), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(ld.per_head("kl.A_log", 3), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_NE(error_of([&] { ld.per_head("bad.A_log", 3); }).find("element 6 is 1e-09"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ld.per_head("short.A_log", 3); }).find("at least 3"), std::string::npos);
  EXPECT_NE(error_of([&] { ld.per_head("wide.A_log", 3); }).find("tensor wide.A_log"),
            std::string::npos);
}

TEST(WeightLoader, MatrixShapeAndDtypeAreChecked) {
  MemorySource src;
  src.add_f32("w", {2, 3}, {1, 2, 3, 4, 5, 6});
  WeightLoader ld(src);
  EXPECT_EQ(ld.matrix("w", 2, 3, /*allow_f32=*/true).rows, 2);
  EXPECT_NE(error_of([&] { ld.matrix("w", 3, 2, true); }).find("expected shape [3, 2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ld.matrix("w", 2, 3); }).find("expected dtype BF16"), std::string::npos);
  EXPECT_NE(error_of([&] { ld.vector("w", 5); }).find("expected 5 elements"), std::string::npos);
}

}  // namespace
}  // namespace deltafin::model
