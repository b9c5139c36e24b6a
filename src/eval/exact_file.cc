// The saved exact run: its layout (tensors and metadata), the size bound, and the match checks.
#include "eval/exact_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/memory_budget.h"
#include "format/checkpoint.h"
#include "format/safetensors.h"

namespace deltafin::eval {
namespace {

using base::fail;

constexpr const char* kMagicKey = "deltafin_eval";
constexpr const char* kLayoutVersion = "1";

std::vector<format::TensorDecl> layout(const ExactRunPlan& plan) {
  std::vector<format::TensorDecl> t;
  const auto n = static_cast<int64_t>(plan.corpus_ids.size());
  const auto n_prompts = static_cast<int64_t>(plan.prompts.size());
  if (n > 0) t.push_back({"corpus_ids", format::DType::kI32, {n}});
  if (n_prompts > 0) {
    int64_t total = 0;
    for (const auto& p : plan.prompts) total += static_cast<int64_t>(p.size());
    t.push_back({"prompt_ids", format::DType::kI32, {total}});
    t.push_back({"prompt_offsets", format::DType::kI64, {n_prompts + 1}});
    t.push_back({"greedy_ids", format::DType::kI32, {n_prompts, plan.max_new_tokens}});
  }
  if (n > 0) t.push_back({"logits", format::DType::kF32, {n, plan.model.vocab_size}});
  return t;
}

format::SafetensorsMetadata metadata_of(const ExactRunPlan& plan) {
  return {{"format", "pt"},
          {kMagicKey, kLayoutVersion},
          {"model_arch", plan.model.arch},
          {"model_vocab_size", std::to_string(plan.model.vocab_size)},
          {"model_hidden_size", std::to_string(plan.model.hidden_size)},
          {"model_layers", std::to_string(plan.model.n_layers)},
          {"model_config_fnv1a64", plan.model.config_hash},
          {"model_weights_sample_fnv1a64", plan.model.weights_hash},
          {"engine_flags", plan.engine_flags},
          {"window_tokens", std::to_string(plan.window_tokens)},
          {"max_new_tokens", std::to_string(plan.max_new_tokens)}};
}

std::string ids_preview(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 8; ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + (ids.size() > 8 ? ",...]" : "]");
}

}  // namespace

std::string ModelIdentity::describe() const {
  return base::str_cat(arch, ", ", n_layers, " layers, hidden ", hidden_size, ", vocab ",
                       vocab_size, ", config ", config_hash, ", weights ", weights_hash);
}

namespace {

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ULL;

uint64_t fnv1a(uint64_t h, const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex16(uint64_t h) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace

std::string config_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path, " (the model's config.json, its identity in saved logits)");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return hex16(fnv1a(kFnvBasis, bytes.data(), bytes.size()));
}

std::string weights_sample_hash(const std::string& model_dir) {
  const format::Checkpoint checkpoint = format::Checkpoint::open(model_dir);
  const format::TensorInfo* pick = nullptr;
  for (const format::TensorInfo& t : checkpoint.tensors()) {
    if (t.name.find(".experts.") != std::string::npos || t.nbytes == 0) continue;
    if (!pick || t.name < pick->name) pick = &t;
  }
  if (!pick) fail("model folder ", model_dir, ": no tensor outside the routed experts to identify");
  std::string bytes(std::min(pick->nbytes, kWeightsSampleBytes), '\0');
  const int fd = ::open(pick->file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", pick->file, ": ", std::strerror(errno));
  const ssize_t got = pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(pick->offset));
  ::close(fd);
  if (got != static_cast<ssize_t>(bytes.size()))
    fail("cannot read tensor ", pick->name, " of ", pick->file);
  // The name is hashed too: the same bytes under another name are another model.
  return hex16(
      fnv1a(fnv1a(kFnvBasis, pick->name.data(), pick->name.size()), bytes.data(), bytes.size()));
}

uint64_t saved_bytes(const ExactRunPlan& plan) {
  const std::vector<format::TensorDecl> tensors = layout(plan);
  uint64_t bytes = format::safetensors_header_json(tensors, metadata_of(plan)).size() + 8;
  for (const format::TensorDecl& t : tensors) bytes += t.nbytes();
  return bytes;
}

void check_saved_bytes(const ExactRunPlan& plan, uint64_t max_bytes, const std::string& path) {
  const uint64_t bytes = saved_bytes(plan);
  if (bytes <= max_bytes) return;
  const uint64_t row = static_cast<uint64_t>(plan.model.vocab_size) * sizeof(float);
  fail("the exact logits of ", plan.corpus_ids.size(), " positions (vocab ", plan.model.vocab_size,
       ", ", base::format_bytes(row), " each) would take ", base::format_bytes(bytes), " in ", path,
       ", over --max-saved-bytes ", base::format_bytes(max_bytes), ": evaluate fewer positions (",
       row ? max_bytes / row : 0,
       " fit; --max-positions N, or a shorter corpus) or raise --max-saved-bytes");
}

void check_same_run(const ExactRunPlan& saved, const ExactRunPlan& wanted,
                    const std::string& path) {
  if (!(saved.model == wanted.model))
    fail(path, " holds the exact logits of another model: ", saved.model.describe(),
         "; this one is ", wanted.model.describe());
  if (saved.window_tokens != wanted.window_tokens)
    fail(path, " was made with --window ", saved.window_tokens, ", not ", wanted.window_tokens,
         " (a window is a fresh sequence, so the logits depend on it)");
  if (saved.corpus_ids != wanted.corpus_ids) {
    size_t i = 0;
    while (i < saved.corpus_ids.size() && i < wanted.corpus_ids.size() &&
           saved.corpus_ids[i] == wanted.corpus_ids[i])
      ++i;
    fail(path, " holds ", saved.corpus_ids.size(), " corpus ids ", ids_preview(saved.corpus_ids),
         ", this run has ", wanted.corpus_ids.size(), " ", ids_preview(wanted.corpus_ids),
         ": they differ from position ", i);
  }
  if (saved.prompts != wanted.prompts)
    fail(path, " holds ", saved.prompts.size(), " greedy prompts that differ from this run's ",
         wanted.prompts.size());
  if (!saved.prompts.empty() && saved.max_new_tokens != wanted.max_new_tokens)
    fail(path, " holds greedy continuations of ", saved.max_new_tokens, " ids, not --max-new ",
         wanted.max_new_tokens);
}

ExactRunWriter::ExactRunWriter(const std::string& path, const ExactRunPlan& plan,
                               const std::vector<std::vector<int32_t>>& greedy) {
  DF_ASSERT(greedy.size() == plan.prompts.size());
  writer_ = std::make_unique<format::SafetensorsWriter>(
      path, layout(plan), format::SafetensorsWriterOptions{}, metadata_of(plan));
  writer_->write(plan.corpus_ids.data(), plan.corpus_ids.size() * sizeof(int32_t));
  if (plan.prompts.empty()) return;
  std::vector<int64_t> offsets{0};
  for (const auto& p : plan.prompts) {
    writer_->write(p.data(), p.size() * sizeof(int32_t));
    offsets.push_back(offsets.back() + static_cast<int64_t>(p.size()));
  }
  writer_->write(offsets.data(), offsets.size() * sizeof(int64_t));
  for (const auto& g : greedy) {
    DF_ASSERT(static_cast<int64_t>(g.size()) <= plan.max_new_tokens);
    std::vector<int32_t> row(g);
    row.resize(static_cast<size_t>(plan.max_new_tokens), -1);
    writer_->write(row.data(), row.size() * sizeof(int32_t));
  }
}

void ExactRunWriter::append_logits(std::span<const float> rows) {
  writer_->write(rows.data(), rows.size_bytes());
}

void ExactRunWriter::finish() { writer_->finish(); }

namespace {

// The header's __metadata__ (the format module validates the tensors but keeps no metadata).
std::map<std::string, std::string> read_metadata(int fd, const std::string& path) {
  uint64_t n = 0;
  if (pread(fd, &n, 8, 0) != 8 || n > format::kMaxHeaderBytes)
    fail(path, ": not a safetensors file");
  std::string json(n, '\0');
  if (pread(fd, json.data(), n, 8) != static_cast<ssize_t>(n)) fail(path, ": header truncated");
  const nlohmann::json header = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  std::map<std::string, std::string> out;
  if (!header.is_object() || !header.contains("__metadata__") ||
      !header["__metadata__"].is_object())
    return out;
  for (const auto& [key, value] : header["__metadata__"].items())
    if (value.is_string()) out[key] = value.get<std::string>();
  return out;
}

int64_t metadata_int(const std::map<std::string, std::string>& m, const char* key,
                     const std::string& path) {
  const auto it = m.find(key);
  if (it == m.end()) fail(path, ": metadata lacks ", key);
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < 0)
    fail(path, ": metadata ", key, " is '", it->second, "', expected a non-negative integer");
  return v;
}

}  // namespace

ExactRunReader::ExactRunReader(const std::string& path) : path_(path) {
  const std::vector<format::TensorInfo> tensors = format::read_safetensors_header(path);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open ", path, ": ", std::strerror(errno));
  const std::map<std::string, std::string> meta = read_metadata(fd_, path);
  if (!meta.count(kMagicKey))
    fail(path, " is not a saved exact run of deltafin eval (no ", kMagicKey,
         " in its metadata); make one with deltafin eval --save-exact");
  if (meta.at(kMagicKey) != kLayoutVersion)
    fail(path, ": layout ", meta.at(kMagicKey), ", this deltafin reads ", kLayoutVersion);
  const auto get = [&](const char* key) {
    const auto it = meta.find(key);
    if (it == meta.end()) fail(path, ": metadata lacks ", key);
    return it->second;
  };
  plan_.model.arch = get("model_arch");
  plan_.model.vocab_size = metadata_int(meta, "model_vocab_size", path);
  plan_.model.hidden_size = metadata_int(meta, "model_hidden_size", path);
  plan_.model.n_layers = metadata_int(meta, "model_layers", path);
  plan_.model.config_hash = get("model_config_fnv1a64");
  plan_.model.weights_hash = get("model_weights_sample_fnv1a64");
  plan_.engine_flags = get("engine_flags");
  plan_.window_tokens = metadata_int(meta, "window_tokens", path);
  plan_.max_new_tokens = metadata_int(meta, "max_new_tokens", path);

  std::map<std::string, const format::TensorInfo*> by_name;
  for (const format::TensorInfo& t : tensors) by_name[t.name] = &t;
  const auto read_tensor = [&](const char* name, format::DType dtype, void* out, uint64_t bytes) {
    const format::TensorInfo& t = *by_name.at(name);
    if (t.dtype != dtype || t.nbytes != bytes)
      fail(path, ": tensor ", name, " is ", format::dtype_name(t.dtype), " ",
           format::shape_to_string(t.shape), ", not what the metadata implies");
    if (bytes &&
        pread(fd_, out, bytes, static_cast<off_t>(t.offset)) != static_cast<ssize_t>(bytes))
      fail(path, ": tensor ", name, " is truncated");
  };
  if (by_name.count("corpus_ids")) {
    plan_.corpus_ids.resize(static_cast<size_t>(by_name["corpus_ids"]->numel()));
    read_tensor("corpus_ids", format::DType::kI32, plan_.corpus_ids.data(),
                plan_.corpus_ids.size() * sizeof(int32_t));
    if (!by_name.count("logits")) fail(path, ": corpus ids without a logits tensor");
    const format::TensorInfo& logits = *by_name["logits"];
    const std::vector<int64_t> shape{static_cast<int64_t>(plan_.corpus_ids.size()),
                                     plan_.model.vocab_size};
    if (logits.dtype != format::DType::kF32 || logits.shape != shape)
      fail(path, ": logits are ", format::dtype_name(logits.dtype), " ",
           format::shape_to_string(logits.shape), ", expected F32 ",
           format::shape_to_string(shape));
    logits_offset_ = logits.offset;
  }
  if (by_name.count("prompt_offsets")) {
    if (!by_name.count("prompt_ids") || !by_name.count("greedy_ids"))
      fail(path, ": prompt offsets without prompt_ids and greedy_ids");
    std::vector<int64_t> offsets(static_cast<size_t>(by_name["prompt_offsets"]->numel()));
    read_tensor("prompt_offsets", format::DType::kI64, offsets.data(),
                offsets.size() * sizeof(int64_t));
    std::vector<int32_t> ids(static_cast<size_t>(by_name["prompt_ids"]->numel()));
    read_tensor("prompt_ids", format::DType::kI32, ids.data(), ids.size() * sizeof(int32_t));
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (offsets[i] < 0 || offsets[i] > offsets[i + 1] ||
          offsets[i + 1] > static_cast<int64_t>(ids.size()))
        fail(path, ": prompt_offsets are not increasing within prompt_ids");
      plan_.prompts.emplace_back(ids.begin() + offsets[i], ids.begin() + offsets[i + 1]);
    }
    const size_t width = static_cast<size_t>(plan_.max_new_tokens);
    std::vector<int32_t> greedy(plan_.prompts.size() * width);
    read_tensor("greedy_ids", format::DType::kI32, greedy.data(), greedy.size() * sizeof(int32_t));
    for (size_t i = 0; i < plan_.prompts.size(); ++i) {
      std::vector<int32_t> row(greedy.begin() + i * width, greedy.begin() + (i + 1) * width);
      while (!row.empty() && row.back() == -1) row.pop_back();
      greedy_.push_back(std::move(row));
    }
  }
}

ExactRunReader::~ExactRunReader() {
  if (fd_ >= 0) ::close(fd_);
}

void ExactRunReader::read_logits(int64_t first_row, std::span<float> out) const {
  const auto vocab = static_cast<uint64_t>(plan_.model.vocab_size);
  DF_ASSERT(vocab > 0 && out.size() % vocab == 0 && first_row >= 0 &&
            static_cast<uint64_t>(first_row) + out.size() / vocab <= plan_.corpus_ids.size());
  auto* dst = reinterpret_cast<char*>(out.data());
  uint64_t left = out.size_bytes();
  uint64_t offset = logits_offset_ + static_cast<uint64_t>(first_row) * vocab * sizeof(float);
  while (left > 0) {
    const ssize_t got = pread(fd_, dst, left, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail("cannot read ", path_, " at byte ", offset, ": ", std::strerror(errno));
    dst += got;
    offset += static_cast<uint64_t>(got);
    left -= static_cast<uint64_t>(got);
  }
}

}  // namespace deltafin::eval
