// Which drafter folders an engine weighs for loading, and what each would cost in memory.
#include "runtime/model_drafters.h"

#include <filesystem>

#include "base/error.h"
#include "format/safetensors.h"

namespace deltafin::runtime {
namespace {

// The bytes of DIR/model.safetensors's tensors, less the ones named `skip` (borrowed).
uint64_t tensor_bytes(const std::string& dir, const char* skip) {
  uint64_t bytes = 0;
  for (const format::TensorInfo& t : format::read_safetensors_header(dir + "/model.safetensors"))
    if (skip == nullptr || t.name != skip) bytes += t.nbytes;
  return bytes;
}

}  // namespace

std::vector<DrafterCandidate> drafter_candidates(const std::string& model_dir,
                                                 const format::ModelConfig& target,
                                                 DrafterLoad load) {
  std::vector<DrafterCandidate> out;
  if (load == DrafterLoad::kOff) return out;
  const bool want_dspark = load == DrafterLoad::kAuto || load == DrafterLoad::kDSpark;
  const bool want_qwen = load == DrafterLoad::kAuto || load == DrafterLoad::kQwen;
  bool have_dspark = false, have_qwen = false;
  for (const format::DrafterDir& d : format::find_drafters(model_dir)) {
    if (d.kind == format::DrafterKind::kDSpark && want_dspark && !have_dspark &&
        target.arch == format::Arch::kKimiK3) {
      have_dspark = true;
      const uint64_t bytes =
          tensor_bytes(d.path, "embed_tokens.weight") + dspark_context_bytes(d.path);
      out.push_back({d, {d.name, bytes, kDSparkExpectedSaving, load == DrafterLoad::kDSpark}});
    } else if (d.kind == format::DrafterKind::kQwen3 && want_qwen && !have_qwen &&
               std::filesystem::is_regular_file(model_dir + "/tiktoken.model")) {
      have_qwen = true;
      const uint64_t bytes = tensor_bytes(d.path, nullptr) + qwen_context_bytes(d.path);
      out.push_back({d, {d.name, bytes, kQwenExpectedSaving, load == DrafterLoad::kQwen}});
    }
  }
  if (load == DrafterLoad::kDSpark && !have_dspark)
    base::fail("--draft dspark: ", model_dir, " has no DSpark drafter in ",
               format::drafter_path(model_dir, format::kDSparkDrafter),
               target.arch == format::Arch::kKimiK3 ? " (deltafin setup installs it)"
                                                    : " (DSpark drafts for Kimi K3 only)");
  if (load == DrafterLoad::kQwen && !have_qwen)
    base::fail("--draft qwen: ", model_dir, " has no Qwen3 drafter in ",
               format::drafter_path(model_dir, format::kQwen06Drafter),
               " (deltafin setup-qwen installs it) or no tiktoken.model to translate its text");
  return out;
}

}  // namespace deltafin::runtime
