// Everything a forward pass computes in besides the sequence state: the residual stream, a
// layer's input and output rows, and each block kind's intermediates. The model owns one and every
// pass reuses it, so a pass allocates only when it is larger than all earlier ones. This is the
// state a backend keeps to itself: a GPU backend would hold these, the caches and the weights on
// the device and take whole layers (Model::layer) as its unit of work, not single products.
#pragma once

#include "model/attn_res.h"
#include "model/gqa.h"
#include "model/kda.h"
#include "model/lookahead.h"
#include "model/mla.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/scratch.h"

namespace deltafin::model {

struct Workspace {
  ResidualStream stream;
  Scratch<float> x;  // [n, hidden]: a block's normalized input; the output mix
  Scratch<float> y;  // [n, hidden]: a block's output; the final norm
  KdaWorkspace kda;
  MlaWorkspace mla;
  GqaWorkspace gqa;
  GluWorkspace dense;
  MoeWorkspace moe;
  LookaheadWorkspace lookahead;
};

}  // namespace deltafin::model
