// Where a model folder keeps its drafters (MODEL/drafters/<name>/), shared by setup and synth
// (which write them) and the runtime (which loads the ones it finds).
#pragma once

#include <string>
#include <vector>

namespace deltafin::format {

inline constexpr const char* kDraftersDir = "drafters";
inline constexpr const char* kDSparkDrafter = "dspark";
inline constexpr const char* kQwen06Drafter = "qwen3-0.6b-base";
inline constexpr const char* kQwen17Drafter = "qwen3-1.7b-base";

enum class DrafterKind { kDSpark, kQwen3 };

struct DrafterDir {
  DrafterKind kind;
  std::string name;  // "dspark", "qwen3-0.6b-base", "qwen3-1.7b-base"
  std::string path;  // MODEL/drafters/<name>
};

// MODEL/drafters/<name>.
std::string drafter_path(const std::string& model_dir, const std::string& name);

// The drafter folders of `model_dir` that hold their files (dspark: config.json and
// model.safetensors; Qwen3: those and tokenizer.json), DSpark first, then Qwen3 0.6B, 1.7B.
// Folders that miss a file (an unfinished install) are left out. Never throws.
std::vector<DrafterDir> find_drafters(const std::string& model_dir);

}  // namespace deltafin::format
