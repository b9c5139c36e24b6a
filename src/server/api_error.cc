// The OpenAI error body.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace deltafin::server {

std::string error_json(const ApiError& error) {
  const auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
  };
  const nlohmann::ordered_json body = {{"error",
                                        {{"message", error.message},
                                         {"type", error.type},
                                         {"param", or_null(error.param)},
                                         {"code", or_null(error.code)}}}};
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace deltafin::server
