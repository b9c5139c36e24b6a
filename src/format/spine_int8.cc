// The int8 spine's names and which tensors it quantizes.
#include "format/spine_int8.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deltafin::format {

std::string int8_spine_dir(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / kInt8SpineDir).string();
}

std::string int8_spine_layer_file(int64_t layer) {
  char name[48];
  std::snprintf(name, sizeof(name), "layer-%05lld.safetensors", static_cast<long long>(layer));
  return name;
}

bool int8_spine_eligible(const ExpectedTensor& tensor, bool lm_head) {
  if (tensor.shape.size() != 2 || tensor.dtypes.size() != 1 || tensor.dtypes[0] != DType::kBF16)
    return false;
  if (tensor.role == Role::kLmHead) return lm_head;
  return tensor.placement == Placement::kLayer && tensor.layer >= 0 &&
         tensor.role != Role::kRouter && tensor.role != Role::kTokenEmbedding;
}

Checkpoint open_int8_spine(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string dir = int8_spine_dir(model_dir);
  const std::string manifest = (fs::path(dir) / kInt8SpineManifest).string();
  const std::string convert =
      base::str_cat("`deltafin convert-spine --model ", model_dir, " --int8`");
  std::error_code ec;
  if (!fs::exists(manifest, ec))
    base::fail("--spine-dtype int8: ", manifest, " does not exist; write the int8 spine with ",
               convert);
  std::ifstream in(manifest);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kInt8SpineFormat)
    base::fail("--spine-dtype int8: ", manifest, " is not a ", kInt8SpineFormat, " manifest");
  if (j.value("version", 0) != kInt8SpineVersion)
    base::fail("--spine-dtype int8: ", manifest, " has version ", j.value("version", 0),
               ", this build reads version ", kInt8SpineVersion, "; convert again with ", convert);
  if (!j.value("complete", false))
    base::fail("--spine-dtype int8: ", manifest,
               " says the conversion has not finished; resume it with ", convert);
  return Checkpoint::open(dir);
}

}  // namespace deltafin::format
