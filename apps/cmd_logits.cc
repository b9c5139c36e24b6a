// `deltafin logits --model DIR --ids 1,2,3 --out FILE` (plus the streaming flags of
// stream_flags.h): the logits at every position of the ids, written as a safetensors file with one
// F32 tensor `logits` [T, vocab]. The ids go through the session one prefill pass
// (--prefill-group rows) at a time, and each pass's logits are written before the next runs, so
// the command holds one pass's rows (group x vocab x 4 bytes; 335 MB for K3 at 512 rows) whatever
// the prompt's length. Passes in one call or in several give the same bytes.
#include <algorithm>
#include <cstddef>
#include <span>

#include "base/log.h"
#include "command.h"
#include "deltafin/engine.h"
#include "format/safetensors_writer.h"
#include "load_engine.h"
#include "setup/expert_source.h"
#include "stream_flags.h"
#include "token_ids.h"

namespace deltafin::apps {
namespace {

int run_logits(Args& args) {
  EngineOptions options;
  options.model_dir = args.required("model");
  const std::vector<int32_t> ids = parse_token_ids(args.required("ids"));
  const std::string out = args.required("out");
  options.attention_chunk_tokens =
      static_cast<int>(args.get_int("chunk", options.attention_chunk_tokens));
  read_stream_flags(args, &options);
  options.drafters = DrafterLoad::kOff;  // a forward pass over given ids: nothing is drafted
  args.check_done();

  setup::warn_if_streaming(options.model_dir);  // experts still remote make the first tokens slow
  std::unique_ptr<Engine> engine = load_engine(options);
  std::unique_ptr<Session> session = engine->new_session();
  const int64_t vocab = engine->info().vocab_size;
  const size_t group = static_cast<size_t>(std::max(1, engine->memory_plan().prefill_group_tokens));
  // A lossy engine's logits say so in the file's metadata (the exact path's file is unchanged).
  format::SafetensorsMetadata metadata = {{"format", "pt"}};
  if (engine->info().lossy) {
    metadata["deltafin_spine_dtype"] = engine->info().spine_dtype;
    metadata["deltafin_lossy"] = "true";
  }
  format::SafetensorsWriter writer(
      out, {{"logits", format::DType::kF32, {static_cast<int64_t>(ids.size()), vocab}}}, {},
      metadata);
  for (size_t begin = 0; begin < ids.size(); begin += group) {
    const std::span<const int32_t> pass =
        std::span(ids).subspan(begin, std::min(group, ids.size() - begin));
    const std::vector<float> logits = session->forward(pass, /*all_rows=*/true);
    writer.write(logits.data(), logits.size() * sizeof(float));
  }
  writer.finish();
  base::log_info("logits", engine->info().lossy ? " (int8 spine, lossy)" : "", ": ", ids.size(),
                 " positions in ", session->stats().prefill_ms, " ms → ", out);
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(logits, "logits",
                 "logits at every position of --ids from one forward pass, as safetensors (--out)",
                 run_logits);

}  // namespace deltafin::apps
