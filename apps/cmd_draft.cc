// `deltafin draft --model K3DIR --drafter DIR --ids IDS --steps N [--json] [--logits FILE]`: a
// model drafter's trace against the target's greedy continuation (include/deltafin/draft.h): per
// step the context length, the anchor, the drafts, the accepted count and the new context length.
// --logits writes the draft logits as safetensors: `logits` and `logits_markov`, F32
// [steps, 7, vocab].
#include <cstdio>
#include <string>

#include "base/json_fields.h"
#include "base/log.h"
#include "command.h"
#include "deltafin/draft.h"
#include "format/safetensors_writer.h"
#include "token_ids.h"

namespace deltafin::apps {
namespace {

void print_json(const DraftTraceOptions& o, const DraftTrace& t) {
  base::Json out;
  out["prompt_ids"] = o.prompt_ids;
  out["target_ids"] = t.target_ids;
  base::Json steps = base::Json::array();
  for (size_t s = 0; s < t.steps.size(); ++s) {
    const DraftTraceStep& st = t.steps[s];
    base::Json j;
    j["step"] = s;
    j["context_length"] = st.context_length;
    j["anchor"] = st.anchor;
    j["draft_ids"] = st.draft_ids;
    j["confidence"] = st.confidence;
    j["accepted"] = st.accepted;
    j["new_context_length"] = st.new_context_length;
    steps.push_back(std::move(j));
  }
  out["steps"] = std::move(steps);
  std::printf("%s\n", out.dump().c_str());
}

void print_table(const DraftTrace& t) {
  std::printf("step  L      anchor  accepted  new L  drafts\n");
  for (size_t s = 0; s < t.steps.size(); ++s) {
    const DraftTraceStep& st = t.steps[s];
    std::printf("%-5zu %-6lld %-7d %-9d %-6lld %s\n", s, static_cast<long long>(st.context_length),
                st.anchor, st.accepted, static_cast<long long>(st.new_context_length),
                token_ids_json(st.draft_ids).c_str());
  }
}

int run_draft(Args& args) {
  DraftTraceOptions o;
  o.model_dir = args.required("model");
  o.drafter_dir = args.required("drafter");
  o.prompt_ids = parse_token_ids(args.required("ids"));
  o.steps = static_cast<int>(args.get_int("steps", 1));
  const bool json = args.flag("json");
  const std::string logits_path = args.get("logits");
  o.keep_logits = !logits_path.empty();
  args.check_done();

  const DraftTrace t = run_draft_trace(o);
  if (json) {
    print_json(o, t);
  } else {
    print_table(t);
  }
  std::fflush(stdout);
  if (o.keep_logits) {
    const std::vector<int64_t> shape = {static_cast<int64_t>(t.steps.size()), t.rows_per_step,
                                        t.vocab_size};
    format::SafetensorsWriter writer(logits_path, {{"logits", format::DType::kF32, shape},
                                                   {"logits_markov", format::DType::kF32, shape}});
    writer.write(t.logits.data(), t.logits.size() * sizeof(float));
    writer.write(t.logits_markov.data(), t.logits_markov.size() * sizeof(float));
    writer.finish();
    base::log_info("draft: logits of ", t.steps.size(), " steps → ", logits_path);
  }
  int accepted = 0;
  for (const DraftTraceStep& s : t.steps) accepted += s.accepted;
  base::log_info("draft: ", t.steps.size(), " steps, ", accepted, " of ",
                 t.steps.size() * t.rows_per_step, " drafts accepted");
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(draft, "draft",
                 "a drafter's (DSpark) trace against the model's greedy continuation (--json)",
                 run_draft);

}  // namespace deltafin::apps
