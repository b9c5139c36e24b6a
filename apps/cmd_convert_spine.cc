// `deltafin convert-spine --model DIR --int8 [--lm-head] [--verify]`: writes the lossy int8 spine
// (format/spine_int8.h) next to the model, one safetensors file per layer, each written to a
// temporary name and renamed once whole, its sha256 recorded in the manifest after every file, so
// an interrupted run resumes where it stopped (finished files whose size and sha256 still match
// are skipped). --verify checks every file against the manifest and the source tensors instead.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/stopwatch.h"
#include "command.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "format/schema.h"
#include "format/spine_int8.h"
#include "quant/bf16.h"
#include "quant/int8.h"
#include "setup/digest.h"

namespace deltafin::apps {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// One tensor of an output file: a source tensor copied, quantized, or a quantized one's scales.
struct OutTensor {
  enum class Kind { kCopy, kInt8, kScales } kind;
  const format::TensorInfo* source;
  format::TensorDecl decl;
};

// One output file: a layer's spine, or the globals (the lm_head) with --lm-head.
struct OutFile {
  std::string name;
  int64_t layer = -1;  // -1: globals
  std::vector<OutTensor> tensors;
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const OutTensor& t : tensors) n += t.decl.nbytes();
    return n;
  }
  // The source tensors as the manifest records them (what a resumed run must find unchanged): each
  // one's name, dtype, shape, file, offset and the file's size and modification time, so a
  // rewritten shard makes its layers convert again without hashing the source.
  ordered_json sources() const {
    ordered_json out = ordered_json::array();
    for (const OutTensor& t : tensors) {
      if (t.kind == OutTensor::Kind::kScales) continue;
      std::error_code ec;
      const auto mtime = fs::last_write_time(t.source->file, ec).time_since_epoch().count();
      out.push_back({{"name", t.source->name},
                     {"dtype", format::dtype_name(t.source->dtype)},
                     {"shape", t.source->shape},
                     {"int8", t.kind == OutTensor::Kind::kInt8},
                     {"file", fs::path(t.source->file).filename().string()},
                     {"offset", t.source->offset},
                     {"file_bytes", fs::file_size(t.source->file, ec)},
                     {"file_mtime", static_cast<int64_t>(mtime)}});
    }
    return out;
  }
};

// Sorted F32, then BF16, then I8, so that every tensor of the file starts aligned to its element.
void order_for_alignment(std::vector<OutTensor>& tensors) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const OutTensor& a, const OutTensor& b) {
    return format::dtype_size(a.decl.dtype) > format::dtype_size(b.decl.dtype);
  });
}

void add_tensors(const format::Checkpoint& ckpt, const std::vector<format::ExpectedTensor>& want,
                 bool lm_head, bool only_eligible, OutFile& file) {
  for (const format::ExpectedTensor& t : want) {
    const format::TensorInfo& src = ckpt.get(t.name);
    const bool int8 = format::int8_spine_eligible(t, lm_head) &&
                      src.dtype == format::DType::kBF16 && src.shape.size() == 2;
    if (only_eligible && !int8) continue;
    if (int8) {
      file.tensors.push_back(
          {OutTensor::Kind::kInt8, &src, {t.name, format::DType::kI8, src.shape}});
      file.tensors.push_back(
          {OutTensor::Kind::kScales,
           &src,
           {t.name + format::kInt8ScaleSuffix, format::DType::kF32, {src.shape[0]}}});
    } else {
      file.tensors.push_back({OutTensor::Kind::kCopy, &src, {t.name, src.dtype, src.shape}});
    }
  }
  order_for_alignment(file.tensors);
}

std::vector<OutFile> plan_files(const format::Checkpoint& ckpt, const format::ModelConfig& config,
                                bool lm_head) {
  std::vector<OutFile> files;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    OutFile f;
    f.name = format::int8_spine_layer_file(l);
    f.layer = l;
    add_tensors(ckpt, format::layer_tensors(config, l), false, false, f);
    files.push_back(std::move(f));
  }
  if (lm_head) {
    OutFile f;
    f.name = format::kInt8SpineGlobalsFile;
    add_tensors(ckpt, format::global_tensors(config), true, true, f);
    if (f.tensors.empty())
      base::fail(
          "convert-spine --lm-head: the model has no separate BF16 lm_head (it is tied to "
          "the embedding)");
    files.push_back(std::move(f));
  }
  return files;
}

// Writes one file's tensors: copies as they are, int8 rows quantized by quant/int8.h.
void write_file(const format::Checkpoint& ckpt, const OutFile& file, const std::string& path) {
  std::vector<format::TensorDecl> decls;
  for (const OutTensor& t : file.tensors) decls.push_back(t.decl);
  format::SafetensorsWriter w(path, decls, {},
                              {{"format", "pt"}, {"deltafin", "int8 spine (lossy)"}});
  // Scales are declared before their int8 values (F32 sorts first): compute a matrix's rows once,
  // keeping its q bytes until they are due.
  std::map<const format::TensorInfo*, std::vector<int8_t>> q_of;
  auto quantize = [&](const format::TensorInfo& src, std::vector<float>& scales) {
    const int64_t rows = src.shape[0], cols = src.shape[1];
    const uint8_t* p = ckpt.map(src).data();
    std::vector<int8_t>& q = q_of[&src];
    q.resize(static_cast<size_t>(rows * cols));
    scales.resize(static_cast<size_t>(rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t b;
        std::memcpy(&b, p + 2 * (r * cols + c), 2);
        row[c] = quant::bf16_to_f32(b);
        if (!std::isfinite(row[c]))
          base::fail("file ", src.file, ": tensor ", src.name, " row ", r, " column ", c, " is ",
                     row[c], "; only finite weights can be quantized");
      }
      scales[r] = quant::quantize_row_int8(row.data(), cols, q.data() + r * cols);
    }
  };
  for (const OutTensor& t : file.tensors) {
    switch (t.kind) {
      case OutTensor::Kind::kCopy: {
        const std::span<const uint8_t> bytes = ckpt.map(*t.source);
        w.write(bytes.data(), bytes.size());
        break;
      }
      case OutTensor::Kind::kScales: {
        std::vector<float> scales;
        quantize(*t.source, scales);
        w.write(scales.data(), scales.size() * sizeof(float));
        break;
      }
      case OutTensor::Kind::kInt8: {
        auto it = q_of.find(t.source);
        DF_ASSERT(it != q_of.end());
        w.write(it->second.data(), it->second.size());
        q_of.erase(it);
        break;
      }
    }
  }
  w.finish();
}

void write_json_file(const std::string& path, const ordered_json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(1) << "\n";
    if (!out) base::fail("file ", tmp, ": cannot write");
  }
  fs::rename(tmp, path);
}

std::string sha256_of(const std::string& path) {
  return setup::file_digest_hex(setup::DigestKind::kSha256, path, 0);
}

// Whether the manifest's entry for `file` still describes what is on disk and what the source
// holds now. With `hash`, the file's sha256 is checked too.
std::string entry_problem(const ordered_json& entry, const OutFile& file, const std::string& path,
                          bool hash) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "missing";
  if (entry.is_null()) return "not in the manifest";
  if (entry.value("sources", ordered_json()) != file.sources())
    return "the source tensors changed since it was written";
  const uint64_t size = fs::file_size(path, ec);
  if (size != entry.value("file_bytes", uint64_t{0}))
    return base::str_cat("size ", size, ", manifest says ", entry.value("file_bytes", 0));
  if (hash && sha256_of(path) != entry.value("sha256", "")) return "sha256 differs";
  return "";
}

int run_convert_spine(Args& args) {
  const std::string model = args.required("model");
  const bool int8 = args.flag("int8");
  const bool lm_head = args.flag("lm-head");
  const bool verify = args.flag("verify");
  args.check_done();
  if (!int8) base::fail("convert-spine: say which spine to write: --int8 (the only one so far)");

  const format::ModelConfig config = format::load_config(model);
  const format::Checkpoint ckpt = format::Checkpoint::open(model);
  const std::string dir = format::int8_spine_dir(model);
  const std::string manifest_path = (fs::path(dir) / format::kInt8SpineManifest).string();

  ordered_json manifest;
  std::error_code ec;
  if (fs::exists(manifest_path, ec)) {
    std::ifstream in(manifest_path);
    manifest = ordered_json::parse(in, nullptr, false);
    if (!manifest.is_object() || manifest.value("format", "") != format::kInt8SpineFormat ||
        manifest.value("version", 0) != format::kInt8SpineVersion)
      manifest = ordered_json();
  }
  ordered_json old_files = manifest.is_object() ? manifest.value("files", ordered_json::object())
                                                : ordered_json::object();
  // --verify checks what was written: with the lm_head when the conversion included it.
  const bool with_lm_head =
      lm_head || (verify && manifest.is_object() && manifest.value("lm_head", false));
  const std::vector<OutFile> files = plan_files(ckpt, config, with_lm_head);

  if (verify) {
    int bad = 0;
    if (!manifest.is_object())
      base::fail("convert-spine --verify: ", manifest_path, " is missing or unreadable");
    for (const OutFile& f : files) {
      const std::string path = (fs::path(dir) / f.name).string();
      const ordered_json entry = old_files.contains(f.name) ? old_files[f.name] : ordered_json();
      const std::string problem = entry_problem(entry, f, path, true);
      if (!problem.empty()) {
        std::fprintf(stderr, "convert-spine --verify: %s: %s\n", path.c_str(), problem.c_str());
        ++bad;
      }
    }
    if (!manifest.value("complete", false)) {
      std::fprintf(stderr, "convert-spine --verify: %s: the conversion has not finished\n",
                   manifest_path.c_str());
      ++bad;
    }
    ordered_json summary = {{"dir", dir},
                            {"files", files.size()},
                            {"bad", bad},
                            {"lm_head", with_lm_head},
                            {"verified", bad == 0}};
    std::printf("%s\n", summary.dump().c_str());
    return bad == 0 ? 0 : 1;
  }

  fs::create_directories(dir);
  // The index goes away until the conversion finishes: the folder opens as a checkpoint only whole.
  fs::remove((fs::path(dir) / format::kIndexFileName).string(), ec);
  manifest = {{"format", format::kInt8SpineFormat},
              {"version", format::kInt8SpineVersion},
              {"lossy", true},
              {"quantization",
               "per-row symmetric int8, fp32 scale = max|w|/127, round to nearest "
               "even (src/quant/int8.h)"},
              {"source", model},
              {"lm_head", lm_head},
              {"complete", false},
              {"files", ordered_json::object()}};
  base::Stopwatch total;
  uint64_t source_bytes = 0, written_bytes = 0;
  int skipped = 0;
  ordered_json weight_map = ordered_json::object();
  for (size_t i = 0; i < files.size(); ++i) {
    const OutFile& f = files[i];
    const std::string path = (fs::path(dir) / f.name).string();
    uint64_t f_source = 0;
    for (const OutTensor& t : f.tensors)
      if (t.kind != OutTensor::Kind::kScales) f_source += t.source->nbytes;
    source_bytes += f_source;
    const ordered_json entry = old_files.contains(f.name) ? old_files[f.name] : ordered_json();
    if (entry_problem(entry, f, path, true).empty()) {
      manifest["files"][f.name] = entry;
      ++skipped;
      std::fprintf(stderr, "convert-spine: %zu/%zu %s: already written and verified, skipped\n",
                   i + 1, files.size(), f.name.c_str());
    } else {
      base::Stopwatch sw;
      const std::string tmp = path + ".tmp";
      write_file(ckpt, f, tmp);
      fs::rename(tmp, path);
      manifest["files"][f.name] = {{"layer", f.layer},          {"file_bytes", fs::file_size(path)},
                                   {"tensor_bytes", f.bytes()}, {"source_bytes", f_source},
                                   {"sha256", sha256_of(path)}, {"sources", f.sources()}};
      std::fprintf(stderr, "convert-spine: %zu/%zu %s: %.1f MB of source -> %.1f MB in %.1f s\n",
                   i + 1, files.size(), f.name.c_str(), f_source / 1e6, f.bytes() / 1e6,
                   sw.elapsed_ms() / 1e3);
      write_json_file(manifest_path, manifest);
    }
    written_bytes += manifest["files"][f.name].value("file_bytes", uint64_t{0});
    for (const OutTensor& t : f.tensors) weight_map[t.decl.name] = f.name;
  }
  // Files of an earlier run that this one does not name (a globals file without --lm-head).
  for (const auto& [name, entry] : old_files.items()) {
    if (!manifest["files"].contains(name)) fs::remove((fs::path(dir) / name).string(), ec);
  }
  write_json_file((fs::path(dir) / format::kIndexFileName).string(),
                  {{"metadata", {{"total_size", written_bytes}}}, {"weight_map", weight_map}});
  manifest["complete"] = true;
  write_json_file(manifest_path, manifest);
  ordered_json summary = {{"dir", dir},
                          {"files", files.size()},
                          {"skipped", skipped},
                          {"lm_head", lm_head},
                          {"source_bytes", source_bytes},
                          {"file_bytes", written_bytes},
                          {"seconds", total.elapsed_ms() / 1e3},
                          {"lossy", true}};
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(convert_spine, "convert-spine",
                 "write the lossy int8 spine next to a model, for --spine-dtype int8: --model DIR "
                 "--int8 [--lm-head] (DIR/spine-int8/, one file per layer, resumable); --verify "
                 "checks it against its manifest and the source",
                 run_convert_spine);

}  // namespace deltafin::apps
