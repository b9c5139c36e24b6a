// One generate call and what it leaves, for tests that compare speculation off and on through the
// public API: the ids, stop reason, what the callback saw, the session's ids, the next call's ids,
// the stats and every pass's report; and the comparison of two such outcomes.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "deltafin/engine.h"

namespace deltafin::testing {

struct Outcome {
  GenerateResult result;
  std::vector<int32_t> streamed;  // what the callback saw
  std::vector<int32_t> session_ids;
  std::vector<int32_t> next;  // a second generate call on the same session
  SessionStats stats;         // after the first call
  std::vector<PassReport> passes;
};

// A fresh session generates after `prompt`; the callback stops it after stop_after_callbacks ids
// (-1: never). Then, unless the context is full, a second call of 5 ids continues it.
inline Outcome generate(Engine& engine, GenerateOptions opt, const std::vector<int32_t>& prompt,
                        int stop_after_callbacks = -1) {
  Outcome r;
  std::unique_ptr<Session> s = engine.new_session();
  opt.on_pass = [&](const PassReport& p) { r.passes.push_back(p); };
  r.result = s->generate(prompt, opt, [&](int32_t id) {
    r.streamed.push_back(id);
    return stop_after_callbacks < 0 || static_cast<int>(r.streamed.size()) < stop_after_callbacks;
  });
  r.session_ids = s->ids();
  r.stats = s->stats();
  GenerateOptions more = opt;
  more.max_new_tokens = 5;
  if (r.result.stop != StopReason::kContextFull) r.next = s->generate({}, more).ids;
  return r;
}

// Speculation may change how fast ids come, never which: everything a user sees is equal.
inline void expect_same(const Outcome& off, const Outcome& on, const std::string& what) {
  EXPECT_EQ(off.result.ids, on.result.ids) << what;
  EXPECT_EQ(off.result.stop, on.result.stop) << what;
  EXPECT_EQ(off.streamed, on.streamed) << what;
  EXPECT_EQ(off.session_ids, on.session_ids) << what;
  EXPECT_EQ(off.next, on.next) << what;
}

}  // namespace deltafin::testing
