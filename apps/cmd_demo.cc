// `deltafin demo`: makes the small demo model once (random weights in the exact K3 layout, with
// its tokenizer) in a cache folder, then runs one chat turn on it with `deltafin run --chat`.
// It shows the whole pipeline working on any machine, in seconds; the words are noise.
#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "command.h"
#include "synth/synth.h"

namespace deltafin::apps {
namespace {

// $DELTAFIN_HOME/demo, else $XDG_CACHE_HOME/deltafin/demo, else ~/.cache/deltafin/demo.
std::string default_demo_dir() {
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  if (!env("DELTAFIN_HOME").empty()) return env("DELTAFIN_HOME") + "/demo";
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/deltafin/demo";
  if (env("HOME").empty()) base::fail("deltafin demo: set HOME or DELTAFIN_HOME, or pass --dir");
  return env("HOME") + "/.cache/deltafin/demo";
}

int run_demo(Args& args) {
  const std::string dir = args.get("dir", default_demo_dir());
  const std::string prompt = args.get("prompt", "Hello! What can you do?");
  const std::string max_new = args.get("max-new", "48");
  const bool stats = args.flag("stats");
  args.check_done();

  // synthesize() writes the index last, so its presence means a complete model.
  if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors.index.json")) {
    base::log_info("demo: making the demo model in ", dir, " (once; random weights)");
    synth::SynthOptions options;
    options.out_dir = dir;
    options.preset = "demo";
    const synth::SynthReport r = synth::synthesize(options);
    base::log_info("demo: ", r.dims.num_hidden_layers, " layers, ", r.file_bytes >> 20,
                   " MiB, made in ", r.seconds, " s");
  }
  base::log_info("demo: a chat turn on the demo model in ", dir,
                 ". Its weights are random, so the reasoning and answer are noise; the same "
                 "command runs Kimi K3 with --model, or by default once `deltafin setup` has "
                 "installed it.");
  std::vector<std::string> argv = {"--model", dir,         "--chat", "--prompt",
                                   prompt,    "--max-new", max_new};
  if (stats) argv.push_back("--stats");
  Args run_args("run", argv);
  return commands().at("run").run(run_args);
}

}  // namespace

DELTAFIN_COMMAND(demo, "demo",
                 "a chat turn on a small random-weight demo model made on first use: [--prompt "
                 "TEXT] [--max-new N] [--dir DIR] [--stats]",
                 run_demo);

}  // namespace deltafin::apps
