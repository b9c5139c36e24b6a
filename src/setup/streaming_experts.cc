// The engine's view of a streaming install: manifest → catalog, RemoteExpertSource → fetcher.
#include "setup/streaming_experts.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <vector>

#include "base/error.h"
#include "format/inventory.h"
#include "setup/files.h"

namespace deltafin::setup {

using base::fail;

namespace {

// Remembers which experts it has seen local: a cache file, once published, stays, so after the
// first look the store's question (asked under its lock, for every miss and guess) costs no stat().
class RemoteFetcher : public experts::ExpertFetcher {
 public:
  RemoteFetcher(std::unique_ptr<RemoteExpertSource> source, int64_t n_layers, int64_t n_experts)
      : n_experts_(n_experts),
        known_local_(static_cast<size_t>(n_layers * n_experts)),
        source_(std::move(source)) {}

  bool is_local(int layer, int32_t expert) const override {
    std::atomic<bool>& known = flag(layer, expert);
    if (known.load(std::memory_order_relaxed)) return true;
    if (!source_->find_local(layer, expert)) return false;
    known.store(true, std::memory_order_relaxed);
    return true;
  }

  void fetch(int layer, int32_t expert, Done done) override {
    std::atomic<bool>* known = &flag(layer, expert);
    source_->fetch_then(layer, expert, [known, done = std::move(done)](std::exception_ptr error) {
      if (!error) {
        known->store(true, std::memory_order_relaxed);
        return done("");
      }
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        done(e.what());  // RemoteExpertSource's errors name the layer, expert, shard and cause
      }
    });
  }

 private:
  std::atomic<bool>& flag(int layer, int32_t expert) const {
    DF_ASSERT(layer >= 0 && expert >= 0 && expert < n_experts_ &&
              static_cast<size_t>(layer * n_experts_ + expert) < known_local_.size());
    return known_local_[static_cast<size_t>(layer * n_experts_ + expert)];
  }

  int64_t n_experts_;
  mutable std::vector<std::atomic<bool>> known_local_;  // [layer * n_experts + expert]
  // Last, so it is destroyed first: fetches still running then finish while the flags exist.
  std::unique_ptr<RemoteExpertSource> source_;
};

}  // namespace

experts::ExpertCatalog catalog_from_manifest(const ExpertManifest& manifest,
                                             const format::ModelConfig& config,
                                             const std::string& model_dir) {
  const std::string where = join_path(model_dir, kExpertManifest);
  const format::ExpertSchema schema = format::expert_schema(config);
  const std::vector<format::ExpertSchema::Tensor>& want = schema.tensors;

  experts::ExpertCatalog catalog;
  catalog.layers.resize(config.num_hidden_layers);
  size_t next = 0;  // into manifest.layers, ascending
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    if (config.layer_kinds[l].mlp != format::MlpKind::kMoe) continue;
    if (next >= manifest.layers.size() || manifest.layers[next].layer != l)
      fail(where, ": no experts for MoE layer ", l, " of ", model_dir, "/config.json");
    const ExpertLayer& ml = manifest.layers[next++];
    if (ml.n_experts() != config.num_experts)
      fail(where, ": layer ", l, " has ", ml.n_experts(), " experts, the config says ",
           config.num_experts);
    if (ml.layout.size() != want.size())
      fail(where, ": layer ", l, " has ", ml.layout.size(), " tensors per expert, expected ",
           want.size());
    std::vector<uint64_t> rel;
    for (size_t k = 0; k < want.size(); ++k) {
      const ExpertTensorLayout& t = ml.layout[k];
      const bool dtype_ok =
          std::find(want[k].dtypes.begin(), want[k].dtypes.end(), t.dtype) != want[k].dtypes.end();
      if (t.suffix != want[k].suffix || !dtype_ok || t.shape != want[k].shape ||
          t.offset + t.nbytes > ml.span_bytes) {
        fail(where, ": layer ", l, " tensor ", k, " is ", t.suffix, " ",
             format::dtype_name(t.dtype), " ", format::shape_to_string(t.shape), " at byte ",
             t.offset, ", expected ", want[k].suffix, " ",
             format::dtype_name(want[k].dtypes.front()), " ",
             format::shape_to_string(want[k].shape), " inside the span of ", ml.span_bytes,
             " bytes");
      }
      rel.push_back(t.offset);
    }
    experts::ExpertCatalog::Layer& layer = catalog.layers[l];
    layer.layout = experts::expert_layout(schema, rel, ml.span_bytes);
    for (int64_t e = 0; e < ml.n_experts(); ++e) {
      layer.spans.push_back(
          {l, e, join_path(model_dir, expert_cache_relpath(l, e)), 0, ml.span_bytes});
    }
  }
  if (next != manifest.layers.size())
    fail(where, ": layer ", manifest.layers[next].layer, " is not a MoE layer of the config");
  return catalog;
}

std::optional<StreamingExperts> open_streaming_experts(const std::string& model_dir,
                                                       const format::ModelConfig& config,
                                                       ExpertSourceOptions options) {
  if (!is_streaming_install(model_dir)) return std::nullopt;
  std::unique_ptr<RemoteExpertSource> source =
      RemoteExpertSource::open(model_dir, std::move(options));
  StreamingExperts out;
  out.catalog = catalog_from_manifest(source->manifest(), config, model_dir);
  out.fetcher = std::make_shared<RemoteFetcher>(std::move(source), config.num_hidden_layers,
                                                config.num_experts);
  return out;
}

}  // namespace deltafin::setup
