// Qwen3 dense's config.json reading (format/family_qwen3.cc), for parse_config_json to dispatch
// to on model_type "qwen3".
#pragma once

#include "base/json_fields.h"
#include "format/config.h"

namespace deltafin::format {

// The whole config of a Qwen3ForCausalLM folder (`top` is the document); throws base::Error naming
// config.json and the field for a missing, mistyped or unsupported one.
ModelConfig parse_qwen3_config(const base::JsonObject& top);

}  // namespace deltafin::format
