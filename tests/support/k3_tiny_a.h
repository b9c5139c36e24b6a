// The k3-tiny-a fixture's prompt and the oracle's greedy continuation of it
// (tests/fixtures/k3-tiny-a/README.md), for the tests that run that fixture.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::testing {

inline const std::string kK3TinyADir =
    std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";
inline const std::vector<int32_t> kK3TinyAPrompt = {488, 250, 115, 269, 384, 67,  152, 153,
                                                    398, 289, 199, 395, 485, 75,  449, 114,
                                                    323, 470, 200, 333, 180, 382, 244, 329};
inline const std::vector<int32_t> kK3TinyAGreedy = {376, 232, 269, 171, 355, 346, 332, 163,
                                                    13,  203, 67,  428, 204, 509, 508, 113};

}  // namespace deltafin::testing
