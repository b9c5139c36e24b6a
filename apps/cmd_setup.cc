// `deltafin setup`: install a model from a Hugging Face-style repository, whole or streaming, with
// its DSpark drafter (and the Qwen3 drafter on request); `deltafin setup-qwen`: the Qwen3 drafter
// alone, into an installed model's folder.
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "base/log.h"
#include "command.h"
#include "format/drafter_dirs.h"
#include "setup/drafter_setup.h"
#include "setup/files.h"
#include "setup/setup.h"

namespace deltafin::apps {
namespace {

std::string endpoint_arg(Args& args) {
  std::string e = args.get("endpoint", setup::default_endpoint());
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

setup::HttpOptions http_from_env() {
  setup::HttpOptions http;
  if (const char* token = std::getenv("HF_TOKEN")) http.token = token;
  http.apply_env();
  return http;
}

// The Qwen3 drafter install that --qwen / --qwen-repo / --qwen-revision ask for.
setup::DrafterInstallOptions qwen_options(Args& args, const std::string& endpoint,
                                          const std::string& model_dir) {
  const std::string size = args.get("qwen", "0.6b");
  if (size != "0.6b" && size != "1.7b") base::fail("--qwen must be 0.6b or 1.7b, not '", size, "'");
  const bool big = size == "1.7b";
  setup::DrafterInstallOptions q;
  q.remote.endpoint = endpoint;
  q.remote.repo = args.get("qwen-repo", big ? setup::kQwen17Repo : setup::kQwen06Repo);
  q.remote.revision = args.get("qwen-revision", setup::default_revision(q.remote.repo));
  q.dir = format::drafter_path(model_dir, big ? format::kQwen17Drafter : format::kQwen06Drafter);
  return q;
}

void report_drafter(const setup::DrafterInstallOptions& o, const setup::DrafterInstallReport& r) {
  base::log_info("setup: drafter ", o.remote.repo, " at ", r.commit.substr(0, 12), " ready in ",
                 o.dir, ": ", setup::human_bytes(r.local_bytes), " on disk, ",
                 setup::human_bytes(r.downloaded_bytes), " downloaded",
                 r.skipped_bytes
                     ? ", " + setup::human_bytes(r.skipped_bytes) + " of embedding not downloaded"
                     : std::string());
}

int run_setup_command(Args& args) {
  setup::SetupOptions o;
  const bool full = args.flag("full");
  const bool stream = args.flag("stream");
  if (full && stream) base::fail("deltafin setup: --full and --stream exclude each other");
  o.mode = full     ? setup::InstallMode::kFull
           : stream ? setup::InstallMode::kStream
                    : setup::InstallMode::kAuto;
  o.remote.repo = args.get("repo", setup::kDefaultRepo);
  o.remote.revision = args.get("revision", setup::default_revision(o.remote.repo));
  o.remote.endpoint = endpoint_arg(args);
  o.dir = args.get("dir", setup::default_model_dir(o.remote.repo));
  o.jobs = static_cast<int>(args.get_int("jobs", 4));
  if (o.jobs < 1 || o.jobs > 64) base::fail("deltafin setup: --jobs must be 1..64");
  // DSpark drafts for K3 only: on by default for K3 itself, or when a DSpark repo is named.
  const bool dspark_named = args.has("dspark-repo");
  setup::DrafterInstallOptions d;
  d.remote.endpoint = o.remote.endpoint;
  d.remote.repo = args.get("dspark-repo", setup::kDSparkRepo);
  d.remote.revision = args.get("dspark-revision", setup::default_revision(d.remote.repo));
  d.dir = format::drafter_path(o.dir, format::kDSparkDrafter);
  const bool dspark =
      !args.flag("no-dspark") && (dspark_named || o.remote.repo == setup::kDefaultRepo);
  const bool qwen = args.flag("include-qwen");
  setup::DrafterInstallOptions q = qwen_options(args, o.remote.endpoint, o.dir);
  args.check_done();
  o.http = http_from_env();
  d.http = q.http = o.http;

  const setup::SetupReport r = setup::run_setup(o);
  base::log_info("setup: ", setup::install_kind_name(r.kind), " install of ", o.remote.repo, " at ",
                 r.commit.substr(0, 12), " ready in ", o.dir, ": ",
                 setup::human_bytes(r.local_bytes), " on disk, ",
                 setup::human_bytes(r.downloaded_bytes), " downloaded in ",
                 static_cast<long>(r.seconds), " s");
  if (r.kind == setup::InstallKind::kStream) {
    base::log_info(
        "setup: experts are fetched the first time a token needs them; `deltafin fetch-experts "
        "--model ",
        o.dir, "` fetches them all now (a full install needs ", setup::human_bytes(r.full_bytes),
        ")");
  }
  if (dspark) {
    try {
      report_drafter(d, setup::install_dspark(d));
    } catch (const base::Error& e) {  // the model itself is installed: say so, and how to skip
      base::fail(e.what(), " (the model in ", o.dir, " is complete; rerun to resume the DSpark ",
                 "drafter, or pass --no-dspark)");
    }
  }
  if (qwen) report_drafter(q, setup::install_qwen(q));
  std::printf("%s\n", o.dir.c_str());  // for scripts: where the model is
  return 0;
}

int run_setup_qwen_command(Args& args) {
  const std::string endpoint = endpoint_arg(args);
  const std::string model = args.get("model", setup::default_model_dir());
  setup::DrafterInstallOptions q = qwen_options(args, endpoint, model);
  args.check_done();
  q.http = http_from_env();
  report_drafter(q, setup::install_qwen(q));
  std::printf("%s\n", q.dir.c_str());
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(
    setup_cmd, "setup",
    "install a model from Hugging Face: --full, --stream (spine now, experts on demand) or "
    "chosen by free disk; with K3 its DSpark drafter (--no-dspark skips it), --include-qwen adds "
    "the Qwen3 drafter",
    run_setup_command);

DELTAFIN_COMMAND(setup_qwen_cmd, "setup-qwen",
                 "install the Qwen3 raw-completion drafter into a model folder: [--model DIR] "
                 "[--qwen 0.6b|1.7b]",
                 run_setup_qwen_command);

}  // namespace deltafin::apps
