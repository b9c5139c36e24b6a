// `deltafin setup`: install a model from a Hugging Face-style repository, whole or streaming.
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "base/log.h"
#include "command.h"
#include "setup/files.h"
#include "setup/setup.h"

namespace deltafin::apps {
namespace {

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
  o.remote.endpoint = args.get("endpoint", setup::default_endpoint());
  while (!o.remote.endpoint.empty() && o.remote.endpoint.back() == '/')
    o.remote.endpoint.pop_back();
  o.dir = args.get("dir", setup::default_model_dir(o.remote.repo));
  o.jobs = static_cast<int>(args.get_int("jobs", 4));
  if (o.jobs < 1 || o.jobs > 64) base::fail("deltafin setup: --jobs must be 1..64");
  args.check_done();
  if (const char* token = std::getenv("HF_TOKEN")) o.http.token = token;
  o.http.apply_env();

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
  std::printf("%s\n", o.dir.c_str());  // for scripts: where the model is
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(
    setup_cmd, "setup",
    "install a model from Hugging Face: --full, --stream (spine now, experts on demand) or "
    "chosen by free disk",
    run_setup_command);

}  // namespace deltafin::apps
