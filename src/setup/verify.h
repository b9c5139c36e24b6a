// End-to-end check of a streaming install: HF publishes a sha256 per shard, not per expert, so
// the local copy of a shard (its header, the spine tensors and the cached experts, in file order)
// is hashed and compared with the shard's published sha256 once all its experts are local.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::setup {

struct ShardCheck {
  std::string shard;
  enum class Result { kOk, kMismatch, kIncomplete, kNoHash } result;
  int64_t n_missing = 0;  // experts not yet local (kIncomplete)
  std::string detail;     // the hashes, for a mismatch
};

// Checks every remote shard of the streaming install in `model_dir`. Reads each complete shard's
// bytes once (1.56 TB for a complete K3 pool).
std::vector<ShardCheck> verify_streaming_install(const std::string& model_dir);

}  // namespace deltafin::setup
