// What kind of forward pass runs: the one description the layers, the thread policy, the lookahead,
// the timeline and the stats read, instead of guessing from the row count.
#pragma once

namespace deltafin::model {

enum class PassKind {
  kPrefill,  // prompt rows: the chunked KDA form and the cheaper MLA form for many rows
  kDecode,   // one generated row: recurrent KDA, MLA as chosen for one row
  // Several rows whose state stays tentative until Model::commit keeps a prefix of them. Every row
  // uses the decode numerics, so row i equals, bit for bit, the i-th of as many decode passes.
  kVerify,
};

inline const char* pass_label(PassKind kind) {
  switch (kind) {
    case PassKind::kPrefill:
      return "prefill pass";
    case PassKind::kDecode:
      return "decode step";
    case PassKind::kVerify:
      return "verify pass";
  }
  return "pass";
}

}  // namespace deltafin::model
