// The browser checks of every request (Host, Origin, Sec-Fetch-Site, Content-Type) and the CORS
// preflight answer.
#include "server/browser_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "base/error.h"
#include "server/api_error.h"

namespace deltafin::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

size_t count_headers(const HttpRequest& request, std::string_view name) {
  return static_cast<size_t>(std::count_if(request.headers.begin(), request.headers.end(),
                                           [&](const auto& h) { return h.first == name; }));
}

// The host part of "host[:port]" (lower-case, IPv6 kept in brackets), or "" when malformed.
std::string host_of(std::string_view authority) {
  std::string_view host = authority, port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return "";
    port = host.substr(close + 1);
    host = host.substr(0, close + 1);
    if (!port.empty() && port.front() != ':') return "";
  } else if (const size_t colon = host.find(':'); colon != std::string_view::npos) {
    port = host.substr(colon);
    host = host.substr(0, colon);
  }
  if (!port.empty()) {
    port.remove_prefix(1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return "";
  }
  return lower(host);
}

bool is_ip_literal(const std::string& host) {
  unsigned char addr[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    return ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), addr) == 1;
  return ::inet_pton(AF_INET, host.c_str(), addr) == 1;
}

void check_host(const BrowserPolicy& policy, const HttpRequest& request) {
  const size_t n_host = count_headers(request, "host");
  if (n_host > 1)
    throw ApiError{400, "Send one Host header, not several.", "invalid_request_error"};
  const std::string* header = request.header("host");
  if (request.authority.empty() && !header) {
    if (request.version_minor == 0) return;  // HTTP/1.0 may leave it out; browsers never do
    throw ApiError{400, "An HTTP/1.1 request needs a Host header.", "invalid_request_error"};
  }
  // An absolute-form target names the host itself and overrides the header (RFC 9112 3.2.2).
  const std::string_view authority = request.authority.empty() ? *header : request.authority;
  const std::string host = host_of(authority);
  const bool loopback = host == "localhost" || host == "127.0.0.1" || host == "[::1]";
  if (loopback || (policy.any_ip_literal && is_ip_literal(host)) ||
      (!host.empty() && std::find(policy.allowed_hosts.begin(), policy.allowed_hosts.end(), host) !=
                            policy.allowed_hosts.end()))
    return;
  throw ApiError{421,
                 base::str_cat("The Host '", authority,
                               "' is not this server's address: use localhost, 127.0.0.1, [::1] "
                               "or the --host address, or allow the name with --allow-host (a "
                               "web page reaching the server under another name is refused)"),
                 "invalid_request_error", "", "invalid_host"};
}

bool origin_allowed(const BrowserPolicy& policy, const std::string& origin) {
  for (const std::string& allowed : policy.allowed_origins)
    if (allowed == "*" || allowed == lower(origin)) return true;
  return false;
}

bool any_origin(const BrowserPolicy& policy) {
  return std::find(policy.allowed_origins.begin(), policy.allowed_origins.end(), "*") !=
         policy.allowed_origins.end();
}

// Whether the media type of a Content-Type value is application/json (parameters aside).
bool is_json(const std::string* content_type) {
  if (!content_type) return false;
  std::string_view type = *content_type;
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  return lower(type) == "application/json";
}

}  // namespace

bool apply_browser_policy(const BrowserPolicy& policy, const HttpRequest& request,
                          HttpConnection& conn) {
  check_host(policy, request);
  const std::string* origin = request.header("origin");
  if (count_headers(request, "origin") > 1)
    throw ApiError{400, "Send one Origin header, not several.", "invalid_request_error"};
  if (origin) {
    if (!origin_allowed(policy, *origin))
      throw ApiError{403,
                     base::str_cat("Requests from web pages are refused: the Origin '", *origin,
                                   "' is not allowed (deltafin serve --allow-origin ORIGIN)"),
                     "invalid_request_error", "", "origin_not_allowed"};
    conn.add_response_header("Access-Control-Allow-Origin", any_origin(policy) ? "*" : *origin);
    conn.add_response_header("Vary", "Origin");
    conn.add_response_header("Access-Control-Expose-Headers", "Retry-After, X-Deltafin-Memo");
  } else if (const std::string* site = request.header("sec-fetch-site")) {
    // A page's no-cors GET (an <img> or <script> source) carries no Origin, but the browser
    // still says where it came from.
    const std::string s = lower(*site);
    if (s != "none" && s != "same-origin" && !any_origin(policy))
      throw ApiError{403,
                     base::str_cat("Requests from web pages are refused (Sec-Fetch-Site: ", *site,
                                   "; deltafin serve --allow-origin ORIGIN)"),
                     "invalid_request_error", "", "origin_not_allowed"};
  }
  if (origin && request.method == "OPTIONS" && request.header("access-control-request-method")) {
    conn.add_response_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    if (const std::string* asked = request.header("access-control-request-headers"))
      conn.add_response_header("Access-Control-Allow-Headers", *asked);
    if (request.header("access-control-request-private-network"))
      conn.add_response_header("Access-Control-Allow-Private-Network", "true");
    conn.add_response_header("Access-Control-Max-Age", "600");
    conn.send(200, "text/plain", "");
    return true;
  }
  // A page may POST text/plain, form data or a bare Blob without a preflight; JSON needs one.
  if (request.method == "POST" && !is_json(request.header("content-type")))
    throw ApiError{
        415,
        base::str_cat("The request body must be JSON, sent with 'Content-Type: "
                      "application/json' (got ",
                      request.header("content-type") ? "'" + *request.header("content-type") + "'"
                                                     : std::string("no Content-Type"),
                      ")"),
        "invalid_request_error", "", "unsupported_media_type"};
  return false;
}

}  // namespace deltafin::server
