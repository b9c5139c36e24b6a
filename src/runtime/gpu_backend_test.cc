// The device choice (--device) and, in a CUDA build, the GPU backend's host side: the K3 oracle
// bound to the GPU model's views, its VRAM plan, and the refusals without a GPU. The GPU runs are
// tests/gpu/gpu_model_test.cc (label gpu).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "runtime/gpu_backend.h"

#if DELTAFIN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/gpu_tiers.h"
#include "runtime/gpu_bind.h"
#endif

namespace deltafin::runtime {
namespace {

TEST(Device, ParsesTheChoices) {
  EXPECT_EQ(parse_device("auto").kind, DeviceRequest::Kind::kAuto);
  EXPECT_EQ(parse_device("").kind, DeviceRequest::Kind::kAuto);
  EXPECT_EQ(parse_device("cpu").kind, DeviceRequest::Kind::kCpu);
  EXPECT_EQ(parse_device("cuda").kind, DeviceRequest::Kind::kCuda);
  EXPECT_EQ(parse_device("cuda").index, -1);
  const DeviceRequest r = parse_device("cuda:3");
  EXPECT_EQ(r.kind, DeviceRequest::Kind::kCuda);
  EXPECT_EQ(r.index, 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA", "cpu:0"}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const base::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device"), std::string::npos) << e.what();
    }
  }
}

const std::string kK3 = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";

#if DELTAFIN_WITH_CUDA
TEST(GpuBackend, BindsTheK3OracleAndPlansItsVram) {
  const std::unique_ptr<model::Model> m = model::Model::load(kK3);
  const cuda::GpuModelDesc desc = bind_gpu_model(*m);
  cuda::check_gpu_shapes(desc);
  ASSERT_EQ(desc.layers.size(), 13u);
  for (size_t l = 0; l < desc.layers.size(); ++l) {
    const bool mla = l == 3 || l == 7 || l == 11 || l == 12;
    EXPECT_EQ(desc.layers[l].kda, !mla) << l;
    EXPECT_EQ(desc.layers[l].moe, l != 0) << l;
    if (l != 0) {
      ASSERT_EQ(desc.layers[l].moe_w.experts.size(), 32u);
      const cuda::GpuGlu& e = desc.layers[l].moe_w.experts[5];
      EXPECT_EQ(e.gate.dtype, cuda::HostMatrix::DType::kMxfp4);
      EXPECT_EQ(e.gate.rows, 32);
      EXPECT_EQ(e.gate.cols, 32);
      EXPECT_EQ(e.down.rows, 32);
    }
  }
  EXPECT_EQ(desc.shape.kda_dim, 16);
  EXPECT_EQ(desc.shape.kv_rank, 32);
  EXPECT_EQ(desc.shape.rope, 8);
  EXPECT_EQ(desc.shape.router.top_k, 4);

  const cuda::VramPlan a = cuda::plan_vram(desc, {1000, 17});
  const cuda::VramPlan b = cuda::plan_vram(desc, {2000, 17});
  // Each expert matrix: 512 packed bytes and 32 scale bytes, each allocation 256-aligned; and
  // per layer the table of its 32 experts' 3 matrices for device-side routing.
  EXPECT_EQ(a.expert_bytes, uint64_t{12} * (32 * 3 * (512 + 256) + cuda::expert_table_bytes(32)));
  EXPECT_EQ(a.spine_bytes, b.spine_bytes);
  // 1000 more positions in 4 MLA layers: (32 + 8) floats each, up to each piece's alignment.
  const uint64_t more = 4 * 1000 * (32 + 8) * sizeof(float);
  EXPECT_GE(b.sequence_bytes - a.sequence_bytes, more);
  EXPECT_LE(b.sequence_bytes - a.sequence_bytes, more + 8 * 256);
  EXPECT_GT(b.workspace_bytes, a.workspace_bytes);  // the MLA scores span the context
  EXPECT_EQ(a.total(), a.spine_bytes + a.expert_bytes + a.workspace_bytes + a.sequence_bytes);
}

TEST(GpuBackend, AutoFallsBackAndCudaRefusesWithoutAGpu) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) GTEST_SKIP() << "a GPU is present";
  EngineOptions o;
  o.model_dir = kK3;
  std::string why;
  EXPECT_EQ(load_gpu_backend(o, 64, &why), nullptr);
  EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  o.device = "cuda:1";
  try {
    load_gpu_backend(o, 64, &why);
    ADD_FAILURE() << "cuda accepted without a GPU";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda:1: no CUDA device"), std::string::npos)
        << e.what();
  }
}
TEST(GpuBackend, CpuOnlyOptionsKeepAutoOnTheCpuAndCudaRefusesThem) {
  const std::vector<std::pair<std::function<void(EngineOptions&)>, std::string>> cases = {
      {[](EngineOptions& o) { o.spine = SpineMode::kStream; }, "--spine stream"},
      {[](EngineOptions& o) { o.expert_slots = 8; }, "--expert-slots"},
      {[](EngineOptions& o) { o.trace_routes = "/tmp/routes.jsonl"; }, "--trace-routes"},
  };
  for (const auto& [set, flag] : cases) {
    EngineOptions o;
    o.model_dir = kK3;
    set(o);
    std::string why;
    EXPECT_EQ(load_gpu_backend(o, 64, &why), nullptr) << flag;
    EXPECT_NE(why.find(flag), std::string::npos) << why;
    o.device = "cuda";
    try {
      load_gpu_backend(o, 64, &why);
      ADD_FAILURE() << "cuda accepted " << flag;
    } catch (const base::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda: " + flag), std::string::npos)
          << e.what();
    }
  }
}
// --experts stream (and --expert-slots with it, the RAM tier) keep auto on the CPU; cuda takes
// them: its expert cache's misses are read from the disk.
TEST(GpuBackend, CudaTakesStreamedExperts) {
  EngineOptions o;
  o.model_dir = kK3;
  o.experts = ExpertMode::kStream;
  o.expert_slots = 40;
  std::string why;
  EXPECT_EQ(load_gpu_backend(o, 64, &why), nullptr);
  EXPECT_NE(why.find("--experts mapped|stream"), std::string::npos) << why;
  o.device = "cuda";
  try {
    load_gpu_backend(o, 64, &why);  // loads where a GPU is present
  } catch (const base::Error& e) {
    EXPECT_EQ(std::string(e.what()).find("--experts"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("--expert-slots"), std::string::npos) << e.what();
  }
}
#else
TEST(GpuBackend, CudaIsAnErrorInABuildWithoutIt) {
  EngineOptions o;
  o.model_dir = kK3;
  std::string why = "x";
  EXPECT_EQ(load_gpu_backend(o, 64, &why), nullptr);
  EXPECT_TRUE(why.empty());
  o.device = "cuda";
  EXPECT_THROW(load_gpu_backend(o, 64, &why), base::Error);
}
#endif

}  // namespace
}  // namespace deltafin::runtime
