// Where the forward pass gets each layer's plan from. Without one, every layer's views point into
// the checkpoint's mapping (all resident); a streamed spine makes a layer's bytes addressable only
// between acquire() and release(), reading the next one while the current one computes.
#pragma once

#include <cstdint>

#include "model/plan.h"

namespace deltafin::model {

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  // A forward pass starts: reads for its first layers may begin.
  virtual void begin_pass() = 0;
  // The layer's plan, valid until release(layer). Blocks until its bytes are in memory.
  virtual const LayerPlan& acquire(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
  // Total time acquire() has blocked on reads since construction.
  virtual double wait_seconds() const = 0;
};

}  // namespace deltafin::model
