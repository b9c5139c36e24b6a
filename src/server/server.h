// `deltafin serve` as a library call: the service on an HTTP server, stopped by SIGINT/SIGTERM.
#pragma once

#include <functional>
#include <string>

#include "deltafin/engine.h"
#include "server/http.h"
#include "server/service.h"

namespace deltafin::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  HttpLimits http;
  int shutdown_grace_ms = 5'000;  // after SIGINT/SIGTERM, for requests in flight (see HttpServer)
  ServiceOptions service;         // model_id is filled from the model folder when empty
};

// Binds, logs the address, serves `engine` (loaded from `model_dir`) until SIGINT or SIGTERM,
// then stops accepting, lets requests in flight finish within shutdown_grace_ms, ends the rest
// with an error (a whole body, or an error event and [DONE]) and returns. Throws base::Error when
// it cannot listen or the folder has no tokenizer.
void serve(Engine& engine, const std::string& model_dir, ServeOptions options);

// The name clients know a model folder by: owner/name for an install at .../models/<owner>/<name>,
// else the folder's last component.
std::string model_id(const std::string& model_dir);

// The model folder to use: `flag` (--model) if given, else $DELTAFIN_MODEL, else
// `installed_default` (where `deltafin setup` installs). Throws base::Error explaining how to
// install a model or try the demo when none of them holds a model.
std::string resolve_model_dir(const std::string& flag, const std::string& installed_default);

}  // namespace deltafin::server
