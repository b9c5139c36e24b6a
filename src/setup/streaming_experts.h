// What the engine needs to run a streaming install: the routed-expert catalog built from the
// expert manifest (each span is the expert's cache file, present or not) and an ExpertFetcher
// over RemoteExpertSource that the streaming expert store calls for experts still remote.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "experts/expert_fetcher.h"
#include "experts/expert_store.h"
#include "format/config.h"
#include "setup/expert_source.h"

namespace deltafin::setup {

struct StreamingExperts {
  experts::ExpertCatalog catalog;  // spans: DIR/experts/L###/E####.bin at offset 0
  std::shared_ptr<experts::ExpertFetcher> fetcher;
};

// The catalog a streaming install's manifest describes, checked against `config`: the manifest's
// layers are the config's MoE layers, each with config.num_experts experts whose tensors have the
// names, order, dtypes and shapes the architecture expects. Throws base::Error naming the
// manifest, layer and tensor otherwise.
experts::ExpertCatalog catalog_from_manifest(const ExpertManifest& manifest,
                                             const format::ModelConfig& config,
                                             const std::string& model_dir);

// nullopt when `model_dir` is not a streaming install; otherwise its catalog and a fetcher that
// owns a RemoteExpertSource (whose connections start idle: a complete pool sends no request).
std::optional<StreamingExperts> open_streaming_experts(const std::string& model_dir,
                                                       const format::ModelConfig& config,
                                                       ExpertSourceOptions options = {});

}  // namespace deltafin::setup
