// Building, saving and loading the expert manifest.
#include "setup/expert_manifest.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.h"
#include "format/inventory.h"

namespace deltafin::setup {

using base::fail;
using nlohmann::json;

const ExpertLayer* ExpertManifest::find_layer(int64_t layer) const {
  for (const ExpertLayer& l : layers)
    if (l.layer == layer) return &l;
  return nullptr;
}

int64_t ExpertManifest::n_experts() const {
  int64_t n = 0;
  for (const ExpertLayer& l : layers) n += l.n_experts();
  return n;
}

uint64_t ExpertManifest::total_bytes() const {
  uint64_t n = 0;
  for (const ExpertLayer& l : layers) n += l.span_bytes * static_cast<uint64_t>(l.n_experts());
  return n;
}

std::string ExpertManifest::to_json() const {
  json j;
  j["format"] = "deltafin-expert-manifest";
  j["version"] = 1;
  json jf = json::array();
  for (const RemoteFile& f : files)
    jf.push_back({{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}});
  j["files"] = jf;
  json jl = json::array();
  for (const ExpertLayer& l : layers) {
    json layout = json::array();
    for (const ExpertTensorLayout& t : l.layout) {
      layout.push_back({{"suffix", t.suffix},
                        {"dtype", format::dtype_name(t.dtype)},
                        {"shape", t.shape},
                        {"offset", t.offset},
                        {"nbytes", t.nbytes}});
    }
    // One [file, offset] pair per expert id: compact enough for K3's 82,432 experts (~2 MB).
    json experts = json::array();
    for (size_t e = 0; e < l.offset.size(); ++e)
      experts.push_back(json::array({l.file[e], l.offset[e]}));
    jl.push_back({{"layer", l.layer},
                  {"prefix", l.prefix},
                  {"span_bytes", l.span_bytes},
                  {"layout", layout},
                  {"experts", experts}});
  }
  j["layers"] = jl;
  return j.dump() + "\n";
}

ExpertManifest ExpertManifest::parse(const std::string& json_text, const std::string& path) {
  ExpertManifest m;
  try {
    const json j = json::parse(json_text);
    if (j.value("format", "") != "deltafin-expert-manifest" || j.value("version", 0) != 1)
      fail("expert manifest ", path, ": not a version-1 deltafin expert manifest");
    for (const json& f : j.at("files"))
      m.files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                         f.at("sha256").get<std::string>()});
    for (const json& jl : j.at("layers")) {
      ExpertLayer l;
      l.layer = jl.at("layer").get<int64_t>();
      l.prefix = jl.at("prefix").get<std::string>();
      l.span_bytes = jl.at("span_bytes").get<uint64_t>();
      uint64_t end = 0;
      for (const json& t : jl.at("layout")) {
        const auto dtype = format::dtype_from_name(t.at("dtype").get<std::string>());
        if (!dtype)
          fail("expert manifest ", path, ": layer ", l.layer, ": unknown dtype ", t.at("dtype"));
        ExpertTensorLayout x{t.at("suffix").get<std::string>(), *dtype,
                             t.at("shape").get<std::vector<int64_t>>(),
                             t.at("offset").get<uint64_t>(), t.at("nbytes").get<uint64_t>()};
        if (x.offset != end)
          fail("expert manifest ", path, ": layer ", l.layer, ": layout has a gap");
        end = x.offset + x.nbytes;
        l.layout.push_back(std::move(x));
      }
      if (end != l.span_bytes)
        fail("expert manifest ", path, ": layer ", l.layer, ": span_bytes mismatch");
      for (const json& e : jl.at("experts")) {
        const uint32_t file = e.at(0).get<uint32_t>();
        const uint64_t offset = e.at(1).get<uint64_t>();
        if (file >= m.files.size() || offset + l.span_bytes > m.files[file].size)
          fail("expert manifest ", path, ": layer ", l.layer, " expert ", l.offset.size(),
               " lies outside its file");
        l.file.push_back(file);
        l.offset.push_back(offset);
      }
      if (!m.layers.empty() && m.layers.back().layer >= l.layer)
        fail("expert manifest ", path, ": layers are not ascending");
      m.layers.push_back(std::move(l));
    }
  } catch (const json::exception& e) {
    fail("expert manifest ", path, ": ", e.what());
  }
  return m;
}

ExpertSplit split_experts(const format::ModelConfig& config,
                          const std::vector<format::TensorInfo>& tensors,
                          const std::vector<RemoteFile>& files) {
  ExpertSplit out;
  out.manifest.files = files;
  out.is_expert.assign(tensors.size(), false);
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
  std::unordered_map<std::string, uint32_t> file_index;
  for (size_t i = 0; i < files.size(); ++i)
    file_index.emplace(files[i].name, static_cast<uint32_t>(i));
  const std::vector<std::string>& suffixes = format::expert_tensor_suffixes(config);

  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    if (config.layer_kinds[l].mlp != format::MlpKind::kMoe) continue;
    ExpertLayer layer;
    layer.layer = l;
    const std::string p0 = format::expert_prefix(config, l, 0);
    layer.prefix = p0.substr(0, p0.size() - 2);  // drop "0."
    for (int64_t e = 0; e < config.num_experts; ++e) {
      const std::string prefix = format::expert_prefix(config, l, e);
      std::vector<const format::TensorInfo*> parts;
      for (const std::string& s : suffixes) {
        auto it = by_name.find(prefix + s);
        if (it == by_name.end())
          fail("layer ", l, " expert ", e, ": tensor ", prefix + s, " is missing");
        out.is_expert[it->second] = true;
        parts.push_back(&tensors[it->second]);
      }
      const format::TensorInfo& first = *parts[0];
      for (size_t k = 1; k < parts.size(); ++k) {
        const format::TensorInfo& prev = *parts[k - 1];
        if (parts[k]->file != first.file || parts[k]->offset != prev.offset + prev.nbytes) {
          fail("file ", parts[k]->file, ": layer ", l, " expert ", e, ": tensor ", parts[k]->name,
               " does not follow ", prev.name,
               " directly; an expert's tensors must be back to back");
        }
      }
      const uint64_t span = parts.back()->offset + parts.back()->nbytes - first.offset;
      std::vector<ExpertTensorLayout> layout;
      for (size_t k = 0; k < parts.size(); ++k) {
        layout.push_back({suffixes[k], parts[k]->dtype, parts[k]->shape,
                          parts[k]->offset - first.offset, parts[k]->nbytes});
      }
      if (e == 0) {
        layer.layout = std::move(layout);
        layer.span_bytes = span;
      } else {
        for (size_t k = 0; k < layout.size(); ++k) {
          const ExpertTensorLayout& a = layer.layout[k];
          const ExpertTensorLayout& b = layout[k];
          if (a.dtype != b.dtype || a.shape != b.shape || a.offset != b.offset) {
            fail("file ", first.file, ": layer ", l, " expert ", e, ": tensor ", parts[k]->name,
                 " has dtype ", format::dtype_name(b.dtype), " shape ",
                 format::shape_to_string(b.shape), ", unlike expert 0 (",
                 format::dtype_name(a.dtype), " ", format::shape_to_string(a.shape), ")");
          }
        }
      }
      auto fi = file_index.find(first.file);
      if (fi == file_index.end()) fail("layer ", l, " expert ", e, ": unknown file ", first.file);
      layer.file.push_back(fi->second);
      layer.offset.push_back(first.offset);
    }
    out.manifest.layers.push_back(std::move(layer));
  }
  return out;
}

std::string expert_cache_relpath(int64_t layer, int64_t expert) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "experts/L%03lld/E%04lld.bin", static_cast<long long>(layer),
                static_cast<long long>(expert));
  return buf;
}

}  // namespace deltafin::setup
