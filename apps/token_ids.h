// Token-id lists as text, for command lines and JSON output: "1,2,3" in, "[1,2,3]" out.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin::apps {

// Parses comma-separated non-negative decimal ids ("1, 2,3" is fine); throws std::runtime_error
// (deltafin's Error) naming the bad item.
std::vector<int32_t> parse_token_ids(std::string_view text);
// A JSON array on one line: [1,2,3].
std::string token_ids_json(std::span<const int32_t> ids);

}  // namespace deltafin::apps
