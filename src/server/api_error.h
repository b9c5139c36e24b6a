// Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}} with an HTTP status,
// which the openai SDKs map to their APIError subclasses by status.
#pragma once

#include <string>

namespace deltafin::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // "server_error", "rate_limit_error", ...
  std::string param;                           // the offending field ("" = null)
  std::string code;                            // machine-readable reason ("" = null)
};

// 400 invalid_request_error naming `param`.
inline ApiError bad_request(std::string param, std::string message,
                            std::string code = "invalid_value") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

// The JSON body for `error`, on one line.
std::string error_json(const ApiError& error);

}  // namespace deltafin::server
