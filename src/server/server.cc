// The serve loop and the signal handlers that end it; the model-folder lookup the CLI shares.
#include "server/server.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"

namespace deltafin::server {
namespace {

HttpServer* g_server = nullptr;  // for the signal handler only

extern "C" void on_stop_signal(int) {
  if (g_server) g_server->request_stop();
}

}  // namespace

std::string model_id(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path canonical = fs::weakly_canonical(fs::path(model_dir));
  if (canonical.filename().empty()) canonical = canonical.parent_path();
  std::string id = canonical.filename().string();
  const fs::path owner = canonical.parent_path();
  if (owner.parent_path().filename() == "models") id = owner.filename().string() + "/" + id;
  return id;
}

void serve(Engine& engine, const std::string& model_dir, ServeOptions options) {
  // A lossy engine is never listed or accepted under the exact model's name.
  const std::string suffix = lossy_suffix(engine.info());
  if (options.service.model_id.empty()) options.service.model_id = model_id(model_dir);
  if (!options.service.model_id.ends_with(suffix)) options.service.model_id += suffix;
  options.service.spine_dtype = engine.info().spine_dtype;
  options.service.lossy = engine.info().lossy;
  const std::string folder = std::filesystem::path(model_dir).filename().string() +
                             (std::filesystem::path(model_dir).filename().empty() ? "" : suffix);
  if (!folder.empty() && folder != options.service.model_id)
    options.service.model_names.push_back(folder);
  Service service(engine, options.service);
  HttpServer http(options.http,
                  [&service](const HttpRequest& r, HttpConnection& c) { service.handle(r, c); });
  http.bind(options.host, options.port);
  http.set_shutdown_grace_ms(options.shutdown_grace_ms);

  struct sigaction sa = {};
  struct sigaction old_int = {};
  struct sigaction old_term = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  g_server = &http;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  const bool ipv6 = options.host.find(':') != std::string::npos;
  base::log_info("serve: model '", options.service.model_id, "' at http://",
                 ipv6 ? "[" + options.host + "]" : options.host, ":", http.port(), "/v1 (",
                 options.service.api_key.empty() ? "no API key" : "API key required", "; memo ",
                 options.service.memo ? "on" : "off", "; state reuse ",
                 options.service.reuse ? "on" : "off", ")");
  const HttpLimits& l = options.http;
  base::log_info("serve: limits: bodies ", l.max_body_bytes, " bytes each, ",
                 l.max_body_memory_bytes, " at once; ", l.max_connections, " connections; request ",
                 l.read_timeout_ms, " ms, write ", l.write_timeout_ms, " ms, shutdown grace ",
                 options.shutdown_grace_ms, " ms; browser origins ",
                 options.service.browser.allowed_origins.empty()
                     ? std::string("none")
                     : base::str_cat(options.service.browser.allowed_origins.size(), " allowed"));
  http.run();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_server = nullptr;
  const ServiceStats& s = service.stats();
  base::log_info("serve: stopped after ", s.generations.load(), " generations (",
                 s.memo_hits.load(), " memo hits, ", s.busy_refusals.load(), " busy refusals, ",
                 s.cancelled.load(), " cancelled)");
}

std::string resolve_model_dir(const std::string& flag, const std::string& installed_default) {
  namespace fs = std::filesystem;
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("DELTAFIN_MODEL"); env && *env) return env;
  if (fs::is_regular_file(fs::path(installed_default) / "config.json")) return installed_default;
  base::fail(
      "no model to run: --model is not given, $DELTAFIN_MODEL is not set, and nothing is "
      "installed at ",
      installed_default,
      ".\n  Install Kimi K3 with `deltafin setup` (whole, 1.56 TB; or `deltafin setup "
      "--stream` to fetch experts on demand),\n  or try the small built-in demo model: "
      "`deltafin demo`.");
}

}  // namespace deltafin::server
