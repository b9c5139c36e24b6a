// Speculation flags and their --stats summary.
#include "speculation_flags.h"

#include "base/error.h"

namespace deltafin::apps {

namespace {
constexpr long long kMaxDraft = 16;  // SpecController::kMaxDraft: the controller's widest pass
}

SpeculationOptions read_speculation_flags(Args& args, const char* command) {
  SpeculationOptions o;
  // --draft is the drafter's name for the same choice (issue #17's spelling); one of the two.
  const bool has_speculate = args.has("speculate"), has_draft = args.has("draft");
  if (has_speculate && has_draft)
    base::fail("deltafin ", command, ": give --speculate or --draft, not both");
  const char* flag = has_draft ? "--draft" : "--speculate";
  const std::string mode = has_draft ? args.get("draft", "auto") : args.get("speculate", "auto");
  if (mode == "auto") {
    o.mode = Speculation::kAuto;
  } else if (mode == "off") {
    o.mode = Speculation::kOff;
  } else if (mode == "ngram") {
    o.mode = Speculation::kNgram;
  } else if (mode == "dspark") {
    o.mode = Speculation::kDspark;
  } else if (mode == "qwen") {
    o.mode = Speculation::kQwen;
  } else {
    base::fail("deltafin ", command, ": ", flag, " must be auto, off, ngram, dspark or qwen, got '",
               mode, "'");
  }
  const long long draft_max = args.get_int("draft-max", o.draft_max);
  const long long draft_min = args.get_int("draft-min", 0);
  if (draft_max < 0 || draft_max > kMaxDraft)
    base::fail("deltafin ", command, ": --draft-max must be between 0 and ", kMaxDraft);
  if (draft_min < 0 || draft_min > kMaxDraft)
    base::fail("deltafin ", command, ": --draft-min must be between 0 and ", kMaxDraft);
  o.draft_max = static_cast<int>(draft_max);
  o.draft_min = static_cast<int>(draft_min);
  if (o.draft_min > o.draft_max) o.draft_max = o.draft_min;
  return o;
}

DrafterLoad drafters_for(const SpeculationOptions& options) {
  switch (options.mode) {
    case Speculation::kAuto:
      return DrafterLoad::kAuto;
    case Speculation::kDspark:
      return DrafterLoad::kDSpark;
    case Speculation::kQwen:
      return DrafterLoad::kQwen;
    case Speculation::kOff:
    case Speculation::kNgram:
    case Speculation::kScript:
      break;
  }
  return DrafterLoad::kOff;
}

const char* speculation_name(Speculation mode) {
  switch (mode) {
    case Speculation::kAuto:
      return "auto";
    case Speculation::kOff:
      return "off";
    case Speculation::kNgram:
      return "ngram";
    case Speculation::kDspark:
      return "dspark";
    case Speculation::kQwen:
      return "qwen";
    case Speculation::kScript:
      return "script";
  }
  return "?";
}

std::string describe_speculation(const SessionStats& s, const SpeculationOptions& options) {
  if (options.mode == Speculation::kOff && s.drafted_tokens == 0) return "";
  const double per_pass =
      s.decode_passes > 0 ? static_cast<double>(s.decode_tokens) / s.decode_passes : 0.0;
  return base::str_cat(
      "speculation ", speculation_name(options.mode), ": ", s.decode_tokens, " ids in ",
      s.decode_passes, " passes (", per_pass, " per pass), ", s.verify_passes,
      " verify passes, drafted ", s.drafted_tokens, ", accepted ", s.accepted_tokens,
      s.drafted_tokens > 0 ? base::str_cat(" (", 100.0 * s.accepted_tokens / s.drafted_tokens, "%)")
                           : std::string());
}

}  // namespace deltafin::apps
