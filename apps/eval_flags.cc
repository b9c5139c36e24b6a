// Splitting, merging and reading the engine flags of `deltafin eval`'s two runs.
#include "eval_flags.h"

#include "base/error.h"
#include "command.h"
#include "speculation_flags.h"
#include "stream_flags.h"

namespace deltafin::apps {

EngineFlags read_engine_flags(const std::vector<std::string>& words, const std::string& model_dir,
                              const char* what) {
  EngineFlags f;
  for (const std::string& w : words) {
    if (!f.text.empty()) f.text += ' ';
    f.text += w.find(' ') == std::string::npos ? w : "'" + w + "'";
  }
  const std::string command = std::string("eval ") + what;
  try {
    Args args(command, words);
    f.engine.model_dir = model_dir;
    read_chunk_flag(args, command.c_str(), &f.engine);
    read_stream_flags(args, &f.engine);
    const bool speculate = args.has("speculate") || args.has("draft");
    f.speculation = read_speculation_flags(args, command.c_str());
    if (!speculate) f.speculation.mode = Speculation::kOff;
    // A model drafter only changes speed: loaded when these flags draft with one, as in run.
    f.engine.drafters = drafters_for(f.speculation);
    args.check_done();
  } catch (const base::Error& e) {
    // The shared readers name the flag but not where it came from: say which set it was in.
    const std::string message = e.what();
    if (message.rfind("deltafin ", 0) == 0) throw;
    base::fail("deltafin ", command, ": ", message);
  }
  return f;
}

}  // namespace deltafin::apps
