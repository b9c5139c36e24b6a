// The int8 spine's files (issue #21 part 2, an explicit, lossy opt-in): `deltafin convert-spine
// --int8` writes MODEL/spine-int8/, a checkpoint of its own (model.safetensors.index.json and one
// safetensors file per layer, plus globals.safetensors with --lm-head) that the model opens as an
// overlay of the original checkpoint (Checkpoint::set_overlay) under --spine-dtype int8. Each
// layer's file holds every spine tensor of the layer: the eligible 2-D BF16 weights as I8 [rows,
// cols] under their own name plus NAME.int8_scale F32 [rows] (quant/int8.h), the rest copied
// unchanged, so a streamed layer is one contiguous read. manifest.json records the source tensors,
// each file's size and sha256, and whether the conversion finished.
#pragma once

#include <string>

#include "format/checkpoint.h"
#include "format/schema.h"

namespace deltafin::format {

inline constexpr const char* kInt8SpineDir = "spine-int8";
inline constexpr const char* kInt8SpineManifest = "manifest.json";
inline constexpr const char* kInt8ScaleSuffix = ".int8_scale";
inline constexpr const char* kInt8SpineFormat = "deltafin-spine-int8";
inline constexpr int kInt8SpineVersion = 1;

// MODEL/spine-int8.
std::string int8_spine_dir(const std::string& model_dir);
// "layer-00005.safetensors"; "globals.safetensors".
std::string int8_spine_layer_file(int64_t layer);
inline constexpr const char* kInt8SpineGlobalsFile = "globals.safetensors";

// Whether a tensor of the schema is quantized: a 2-D matrix the family stores only as BF16 (never
// norms, biases, routers, A_log, dt_bias, conv kernels or other small tensors the table allows in
// F32), of a layer's spine, or the lm_head when `lm_head` asks for it. Never the embedding or a
// routed expert.
bool int8_spine_eligible(const ExpectedTensor& tensor, bool lm_head);

// MODEL/spine-int8 as a checkpoint (to overlay MODEL's), once its manifest says the conversion
// finished. Throws base::Error naming the folder and the command that writes or resumes it.
Checkpoint open_int8_spine(const std::string& model_dir);

}  // namespace deltafin::format
