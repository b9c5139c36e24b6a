// The drafter interface: anything that guesses the next ids for the target model to verify in one
// pass. The guess is only a proposal; the verify pass decides, so a bad drafter costs time, never
// correctness.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deltafin::runtime {

struct Draft {
  std::vector<int32_t> ids;
  // Per id in [0, 1]: the drafter's estimate that this id is accepted given that the ids before it
  // were. Empty when the drafter has none.
  std::vector<float> confidence;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // history = prompt + generated ids so far; its last id is the pending one (sampled, not yet run
  // through the model). Propose up to max_tokens ids that would follow it.
  virtual Draft propose(std::span<const int32_t> history, int max_tokens) = 0;
  // After a verify pass: of `proposed` ids, the first `accepted` were accepted.
  virtual void observe(int proposed, int accepted) {
    (void)proposed;
    (void)accepted;
  }
};

}  // namespace deltafin::runtime
