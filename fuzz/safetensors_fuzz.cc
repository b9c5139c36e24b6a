// libFuzzer target for the safetensors header and shard-index parsers: any input either parses or
// raises base::Error; anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/error.h"
#include "format/checkpoint.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    // The input is a whole file: the parser must hold whatever the length field claims.
    const auto tensors =
        deltafin::format::parse_safetensors_header(bytes, size, "fuzz.safetensors");
    for (const auto& t : tensors) {
      if (t.offset + t.nbytes > size) __builtin_trap();  // a range outside the file got through
    }
  } catch (const deltafin::base::Error&) {
  }
  try {
    deltafin::format::parse_shard_index(bytes, "fuzz.index.json");
  } catch (const deltafin::base::Error&) {
  }
  return 0;
}
