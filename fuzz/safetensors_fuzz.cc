// libFuzzer target for the safetensors header and shard-index parsers and the JSON reader under
// them: any input either parses or raises base::Error; anything else (a crash, a sanitizer report,
// another exception) is a bug. The reader must also accept exactly the documents nlohmann accepts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "format/checkpoint.h"
#include "format/json_reader.h"
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
    deltafin::format::parse_shard_index(std::string(bytes), "fuzz.index.json");
  } catch (const deltafin::base::Error&) {
  }

  bool accepted = true, too_deep = false;
  try {
    deltafin::format::detail::JsonReader reader(bytes, "fuzz.json");
    reader.skip_value();
    reader.expect_end();
  } catch (const deltafin::base::Error& e) {
    accepted = false;
    too_deep = std::string_view(e.what()).find("nesting deeper") != std::string_view::npos;
  }
  // Differential check against nlohmann, except where it differs by design: it stops at a NUL byte
  // as if the input ended there, and refuses numbers beyond double range (RFC 8259 allows both).
  if (too_deep || bytes.find('\0') != std::string_view::npos) return 0;
  bool theirs = true;
  try {
    (void)nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    if (std::string_view(e.what()).find("number overflow") != std::string_view::npos) return 0;
    theirs = false;
  }
  if (accepted != theirs) __builtin_trap();
  return 0;
}
