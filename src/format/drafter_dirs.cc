// Drafter folder lookup inside a model folder.
#include "format/drafter_dirs.h"

#include <sys/stat.h>

namespace deltafin::format {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string drafter_path(const std::string& model_dir, const std::string& name) {
  std::string base = model_dir;
  if (!base.empty() && base.back() != '/') base += '/';
  return base + kDraftersDir + "/" + name;
}

std::vector<DrafterDir> find_drafters(const std::string& model_dir) {
  struct Known {
    DrafterKind kind;
    const char* name;
    bool needs_tokenizer;
  };
  const Known kKnown[] = {{DrafterKind::kDSpark, kDSparkDrafter, false},
                          {DrafterKind::kQwen3, kQwen06Drafter, true},
                          {DrafterKind::kQwen3, kQwen17Drafter, true}};
  std::vector<DrafterDir> out;
  for (const Known& k : kKnown) {
    const std::string dir = drafter_path(model_dir, k.name);
    if (!is_file(dir + "/config.json") || !is_file(dir + "/model.safetensors")) continue;
    if (k.needs_tokenizer && !is_file(dir + "/tokenizer.json")) continue;
    out.push_back({k.kind, k.name, dir});
  }
  return out;
}

}  // namespace deltafin::format
