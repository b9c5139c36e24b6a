// The exact path's results saved once for later variants (`deltafin eval --save-exact FILE`,
// `--exact-from FILE`): a safetensors file holding the corpus ids, the greedy prompts and their
// continuations, and the logits of every corpus position, F32 [positions, vocab], streamed out a
// pass at a time; the model's identity and the run's settings are in its __metadata__.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "format/safetensors_writer.h"

namespace deltafin::eval {

// What ties saved logits to a model: its shape, a hash of its config.json and a hash of a sample
// of its weights (so that two checkpoints of one config, like synth's seeds, are told apart).
struct ModelIdentity {
  std::string arch;
  int64_t vocab_size = 0, hidden_size = 0, n_layers = 0;
  std::string config_hash;   // config_hash() of the folder's config.json
  std::string weights_hash;  // weights_sample_hash() of the folder
  bool operator==(const ModelIdentity&) const = default;
  // "kimi_k3, 61 layers, hidden 7168, vocab 163840, config 1a2b..., weights 3c4d..."
  std::string describe() const;
};

// FNV-1a 64 of the file's bytes, as 16 hex digits. Throws base::Error naming the file.
std::string config_hash(const std::string& config_json_path);

// The bytes hashed for a model folder's weights: the first kWeightsSampleBytes of the tensor with
// the lowest name that is not a routed expert (the embedding or the lm_head in K3's layout), a
// tensor every install holds, full or streaming, with the same bytes.
inline constexpr uint64_t kWeightsSampleBytes = uint64_t{1} << 20;
// FNV-1a 64 of that sample, as 16 hex digits. Reads the checkpoint's headers and index (seconds
// for K3's) and one MiB; throws base::Error naming the folder.
std::string weights_sample_hash(const std::string& model_dir);

// Everything an exact run's logits depend on besides the engine, and what it ran.
struct ExactRunPlan {
  ModelIdentity model;
  std::string engine_flags;  // the exact path's engine flags, as given (for the report only)
  int64_t window_tokens = 0;
  int64_t max_new_tokens = 0;
  std::vector<int32_t> corpus_ids;
  std::vector<std::vector<int32_t>> prompts;
};

// Bytes of the file the plan makes: the logits dominate (positions x vocab x 4).
uint64_t saved_bytes(const ExactRunPlan& plan);
// Fails, before anything runs, when saved_bytes(plan) > max_bytes, naming both and what to cut.
void check_saved_bytes(const ExactRunPlan& plan, uint64_t max_bytes, const std::string& path);

// Fails naming the first difference between what a file holds and what this run asks for: the
// model's identity, the window, the corpus ids (the first differing position), the prompts or the
// continuation length.
void check_same_run(const ExactRunPlan& saved, const ExactRunPlan& wanted, const std::string& path);

class ExactRunWriter {
 public:
  // Writes the header and the ids (greedy[i]: the exact continuation of plan.prompts[i], padded
  // with -1 to max_new_tokens where it stopped early); the logits follow through append_logits.
  ExactRunWriter(const std::string& path, const ExactRunPlan& plan,
                 const std::vector<std::vector<int32_t>>& greedy);
  // The next rows of logits, in corpus order, [rows, vocab] row-major.
  void append_logits(std::span<const float> rows);
  // Throws unless every position's logits arrived; a writer destroyed before finish() removes the
  // file.
  void finish();

 private:
  std::unique_ptr<format::SafetensorsWriter> writer_;
};

class ExactRunReader {
 public:
  // Opens and checks the file: a deltafin eval file, its tensors of the shapes its metadata
  // implies. Throws base::Error naming the file and what is wrong.
  explicit ExactRunReader(const std::string& path);
  ~ExactRunReader();
  ExactRunReader(const ExactRunReader&) = delete;
  ExactRunReader& operator=(const ExactRunReader&) = delete;

  const ExactRunPlan& plan() const { return plan_; }
  // The exact greedy continuation of each prompt (the -1 padding removed).
  const std::vector<std::vector<int32_t>>& greedy() const { return greedy_; }
  // Rows [first, first + out.size() / vocab) of the logits, read with pread.
  void read_logits(int64_t first_row, std::span<float> out) const;

 private:
  std::string path_;
  int fd_ = -1;
  ExactRunPlan plan_;
  std::vector<std::vector<int32_t>> greedy_;
  uint64_t logits_offset_ = 0;
};

}  // namespace deltafin::eval
