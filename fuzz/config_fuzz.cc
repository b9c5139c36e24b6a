// libFuzzer target for config.json parsing and the tensor roster it implies: any input either
// parses or raises base::Error; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "format/config.h"
#include "format/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto config = deltafin::format::parse_config_json(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    if (config.layer_kinds.size() != static_cast<size_t>(config.num_hidden_layers))
      __builtin_trap();
    // The roster of a small model exercises every shape formula; a huge one would only be slow.
    if (config.num_hidden_layers * config.num_experts <= 4096) {
      for (const auto& t : deltafin::format::expected_tensors(config)) {
        for (int64_t d : t.shape) {
          if (d < 0) __builtin_trap();
        }
      }
    }
  } catch (const deltafin::base::Error&) {
  }
  return 0;
}
