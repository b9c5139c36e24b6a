// What keeps web pages from driving the server on a user's behalf: the Host check (DNS
// rebinding), the Origin / Sec-Fetch-Site check, JSON-only POST bodies, and CORS for the origins
// the user allows (--allow-origin).
#pragma once

#include <string>
#include <vector>

#include "server/http.h"

namespace deltafin::server {

struct BrowserPolicy {
  // Host names accepted besides localhost, 127.0.0.1 and [::1] (lower-case; an IPv6 address in
  // brackets): the bound address and --allow-host.
  std::vector<std::string> allowed_hosts;
  // Bound to a wildcard address (0.0.0.0, ::): any IP literal is this server's address. A page
  // cannot rebind a literal, only a name.
  bool any_ip_literal = false;
  // Origins whose pages may call the server (lower-case, "scheme://host[:port]"); "*" for any.
  std::vector<std::string> allowed_origins;
};

// Refuses (throws ApiError) a request that a browser page could have sent without the user's
// server allowing it: 400 for a missing or repeated Host, 421 for a Host that is not this
// server's, 403 for a cross-origin request from an origin not allowed, 415 for a POST whose
// Content-Type is not application/json. For an allowed origin, adds the CORS headers to the
// response; returns true when the request was a CORS preflight, answered here.
bool apply_browser_policy(const BrowserPolicy& policy, const HttpRequest& request,
                          HttpConnection& conn);

}  // namespace deltafin::server
