// Token-id list parsing and printing for the CLI (not the public API: the engine takes ids).
#include "token_ids.h"

#include <charconv>

#include "base/error.h"

namespace deltafin::apps {

std::vector<int32_t> parse_token_ids(std::string_view text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view item = text.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t id = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || id < 0)
      base::fail("token ids: '", item, "' (item ", ids.size() + 1,
                 ") is not a non-negative integer; expected a list like 1,2,3");
    ids.push_back(id);
    pos = comma + 1;
  }
  return ids;
}

std::string token_ids_json(std::span<const int32_t> ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

}  // namespace deltafin::apps
