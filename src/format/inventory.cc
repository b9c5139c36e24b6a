// The Kimi K3 / Kimi-Linear tensor roster derived from the config, and the inventory check.
#include "format/inventory.h"

#include "base/error.h"

namespace deltafin::format {

namespace {

const std::vector<DType> kBF16Only = {DType::kBF16};
// Norm weights, gates, biases, A_log, dt_bias and conv weights: some releases keep them in F32.
const std::vector<DType> kSmall = {DType::kF32, DType::kBF16};
const std::vector<DType> kU8 = {DType::kU8};

class Roster {
 public:
  explicit Roster(std::vector<ExpectedTensor>& out) : out_(out) {}
  void add(std::string name, std::vector<int64_t> shape, const std::vector<DType>& dtypes,
           int64_t layer, ShapeRule rule = ShapeRule::kExact) {
    out_.push_back(ExpectedTensor{std::move(name), std::move(shape), dtypes, TensorRole::kSpine,
                                  layer, -1, rule});
  }
  void add_expert(std::string name, std::vector<int64_t> shape, const std::vector<DType>& dtypes,
                  int64_t layer, int64_t expert) {
    out_.push_back(ExpectedTensor{std::move(name), std::move(shape), dtypes,
                                  TensorRole::kRoutedExpert, layer, expert, ShapeRule::kExact});
  }

 private:
  std::vector<ExpectedTensor>& out_;
};

std::string layer_prefix(const ModelConfig& c, int64_t layer) {
  return c.tensor_prefix + "model.layers." + std::to_string(layer) + ".";
}

void add_kda(const ModelConfig& c, int64_t l, Roster& r) {
  const std::string p = layer_prefix(c, l) + "self_attn.";
  const int64_t d = c.hidden_size, h = c.kda_num_heads, hd = c.kda_head_dim,
                w = c.short_conv_kernel_size;
  const int64_t proj = h * hd;
  for (const char* x : {"q", "k", "v"}) {
    r.add(p + x + "_proj.weight", {proj, d}, kBF16Only, l);    // [H*D, d]
    r.add(p + x + "_conv1d.weight", {proj, 1, w}, kSmall, l);  // depthwise [H*D, 1, W]
  }
  r.add(p + "f_a_proj.weight", {hd, d}, kBF16Only, l);  // forget gate, rank D
  r.add(p + "f_b_proj.weight", {proj, hd}, kBF16Only, l);
  r.add(p + "b_proj.weight", {h, d}, kBF16Only, l);  // beta logits per head
  r.add(p + "A_log", {h}, kSmall, l, ShapeRule::kPerHeadVector);
  r.add(p + "dt_bias", {proj}, kSmall, l);
  r.add(p + "o_norm.weight", {hd}, kSmall, l);
  r.add(p + "o_proj.weight", {d, proj}, kBF16Only, l);
  if (c.use_full_rank_gate) {
    r.add(p + "g_proj.weight", {proj, d}, kBF16Only, l);
  } else {
    r.add(p + "g_a_proj.weight", {hd, d}, kBF16Only, l);
    r.add(p + "g_b_proj.weight", {proj, hd}, kBF16Only, l);
  }
}

void add_mla(const ModelConfig& c, int64_t l, Roster& r) {
  const std::string p = layer_prefix(c, l) + "self_attn.";
  const int64_t d = c.hidden_size, h = c.num_attention_heads;
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  if (c.q_lora_rank > 0) {
    r.add(p + "q_a_proj.weight", {c.q_lora_rank, d}, kBF16Only, l);
    r.add(p + "q_a_layernorm.weight", {c.q_lora_rank}, kSmall, l);
    r.add(p + "q_b_proj.weight", {h * qk, c.q_lora_rank}, kBF16Only, l);
  } else {
    r.add(p + "q_proj.weight", {h * qk, d}, kBF16Only, l);
  }
  r.add(p + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, d}, kBF16Only, l);
  r.add(p + "kv_a_layernorm.weight", {c.kv_lora_rank}, kSmall, l);
  // Per head: k_nope rows first, then v rows.
  r.add(p + "kv_b_proj.weight", {h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
        kBF16Only, l);
  r.add(p + "o_proj.weight", {d, h * c.v_head_dim}, kBF16Only, l);
  if (c.mla_use_output_gate) r.add(p + "g_proj.weight", {h * c.v_head_dim, d}, kBF16Only, l);
}

// One routed expert's tensors in file order, with their shapes (the same for every expert).
struct ExpertPart {
  const std::string* suffix;
  std::vector<int64_t> shape;
  const std::vector<DType>* dtypes;
};

std::vector<ExpertPart> expert_parts(const ModelConfig& c) {
  const int64_t in = c.expert_in_size(), mid = c.moe_intermediate_size;
  const std::vector<std::string>& suffixes = expert_tensor_suffixes(c);
  // w1 (gate) and w3 (up) are [mid, in], w2 (down) is [in, mid].
  const int64_t rows[3] = {mid, in, mid}, cols[3] = {in, mid, in};
  std::vector<ExpertPart> parts;
  for (int w = 0; w < 3; ++w) {
    if (c.experts_mxfp4) {
      // packed: 2 codes per byte; scale: one E8M0 byte per 32 inputs.
      parts.push_back({&suffixes[2 * w], {rows[w], cols[w] / 2}, &kU8});
      parts.push_back({&suffixes[2 * w + 1], {rows[w], cols[w] / 32}, &kU8});
    } else {
      parts.push_back({&suffixes[w], {rows[w], cols[w]}, &kBF16Only});
    }
  }
  return parts;
}

void add_experts(const ModelConfig& c, int64_t l, Roster& r) {
  const std::vector<ExpertPart> parts = expert_parts(c);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const std::string p = expert_prefix(c, l, e);
    for (const ExpertPart& part : parts)
      r.add_expert(p + *part.suffix, part.shape, *part.dtypes, l, e);
  }
}

void add_mlp(const ModelConfig& c, int64_t l, Roster& r, bool with_experts) {
  const int64_t d = c.hidden_size;
  if (c.layer_kinds[l].mlp == MlpKind::kDense) {
    const std::string p = layer_prefix(c, l) + "mlp.";
    r.add(p + "gate_proj.weight", {c.intermediate_size, d}, kBF16Only, l);
    r.add(p + "up_proj.weight", {c.intermediate_size, d}, kBF16Only, l);
    r.add(p + "down_proj.weight", {d, c.intermediate_size}, kBF16Only, l);
    return;
  }
  const std::string p = layer_prefix(c, l) + "block_sparse_moe.";
  r.add(p + "gate.weight", {c.num_experts, d}, kSmall, l);
  r.add(p + "gate.e_score_correction_bias", {c.num_experts}, kSmall, l);
  if (c.num_shared_experts > 0) {
    const int64_t shared =
        c.moe_intermediate_size * c.num_shared_experts;  // the shared experts fused
    r.add(p + "shared_experts.gate_proj.weight", {shared, d}, kBF16Only, l);
    r.add(p + "shared_experts.up_proj.weight", {shared, d}, kBF16Only, l);
    r.add(p + "shared_experts.down_proj.weight", {d, shared}, kBF16Only, l);
  }
  if (c.routed_expert_hidden_size > 0) {
    const int64_t latent = c.routed_expert_hidden_size;
    r.add(p + "routed_expert_down_proj.weight", {latent, d}, kBF16Only, l);
    r.add(p + "routed_expert_up_proj.weight", {d, latent}, kBF16Only, l);
    if (c.latent_moe_use_norm) r.add(p + "routed_expert_norm.weight", {latent}, kSmall, l);
  }
  if (with_experts) add_experts(c, l, r);
}

std::string dtypes_to_string(const std::vector<DType>& dtypes) {
  std::string s;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i) s += i + 1 == dtypes.size() ? " or " : ", ";
    s += dtype_name(dtypes[i]);
  }
  return s;
}

void add_spine(const ModelConfig& c, Roster& r, bool with_experts) {
  const int64_t d = c.hidden_size;
  const std::string p = c.tensor_prefix;
  r.add(p + "model.embed_tokens.weight", {c.vocab_size, d}, kBF16Only, -1);
  r.add(p + "model.norm.weight", {d}, kSmall, -1);
  if (c.attn_res_block_size > 0) {
    r.add(p + "model.output_attn_res_norm.weight", {d}, kSmall, -1);
    r.add(p + "model.output_attn_res_proj.weight", {1, d}, kSmall, -1);
  }
  if (!c.tie_word_embeddings) r.add(p + "lm_head.weight", {c.vocab_size, d}, kBF16Only, -1);

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string lp = layer_prefix(c, l);
    r.add(lp + "input_layernorm.weight", {d}, kSmall, l);
    r.add(lp + "post_attention_layernorm.weight", {d}, kSmall, l);
    if (c.attn_res_block_size > 0) {
      r.add(lp + "self_attention_res_norm.weight", {d}, kSmall, l);
      r.add(lp + "self_attention_res_proj.weight", {1, d}, kSmall, l);
      r.add(lp + "mlp_res_norm.weight", {d}, kSmall, l);
      r.add(lp + "mlp_res_proj.weight", {1, d}, kSmall, l);
    }
    if (c.layer_kinds[l].attention == AttentionKind::kKda) {
      add_kda(c, l, r);
    } else {
      add_mla(c, l, r);
    }
    add_mlp(c, l, r, with_experts);
  }
}

bool shape_ok(const std::vector<int64_t>& want, ShapeRule rule, const std::vector<int64_t>& got) {
  if (rule == ShapeRule::kExact) return got == want;
  // At most one dimension differs from 1, so the element count is that dimension (no overflow).
  int64_t numel = 1, n_wide = 0;
  for (int64_t dim : got) {
    if (dim == 1) continue;
    ++n_wide;
    numel = dim;
  }
  return n_wide <= 1 && numel >= want[0];
}

// Finds one expected tensor and checks shape and dtype. Returns it when usable as expected; `found`
// is set whenever a tensor of that name exists.
const TensorInfo* check_one(const Checkpoint& ckpt, std::string_view name,
                            const std::vector<int64_t>& shape, const std::vector<DType>& dtypes,
                            ShapeRule rule, std::vector<InventoryProblem>& problems,
                            const TensorInfo** found) {
  const TensorInfo* t = ckpt.find(name);
  *found = t;
  if (!t) {
    problems.push_back(
        {base::str_cat("checkpoint ", ckpt.dir(), ": missing tensor ", name, " (expected ",
                       dtypes_to_string(dtypes), " ", shape_to_string(shape), ")")});
    return nullptr;
  }
  bool ok = true;
  if (!shape_ok(shape, rule, t->shape)) {
    problems.push_back(
        {base::str_cat("file ", t->file, ": tensor ", name, " has shape ",
                       shape_to_string(t->shape), ", expected ", shape_to_string(shape),
                       rule == ShapeRule::kPerHeadVector ? " (or a longer vector)" : "")});
    ok = false;
  }
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= d == t->dtype;
  if (!dtype_ok) {
    problems.push_back(
        {base::str_cat("file ", t->file, ": tensor ", name, " has dtype ", dtype_name(t->dtype),
                       ", expected ", dtypes_to_string(dtypes))});
    ok = false;
  }
  return ok ? t : nullptr;
}

class Scanner {
 public:
  Scanner(const Checkpoint& ckpt, const ModelConfig& c, InventoryReport& report)
      : ckpt_(ckpt), c_(c), report_(report), used_(ckpt.tensors().size(), false) {
    report_.spine_bytes_by_layer.assign(static_cast<size_t>(c.num_hidden_layers), 0);
    report_.experts_by_layer.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  }

  void spine() {
    std::vector<ExpectedTensor> roster;
    Roster r(roster);
    add_spine(c_, r, /*with_experts=*/false);
    for (const ExpectedTensor& e : roster) {
      const TensorInfo* found = nullptr;
      check_one(ckpt_, e.name, e.shape, e.dtypes, e.shape_rule, report_.problems, &found);
      if (!found) continue;
      mark_used(found);
      (e.layer < 0 ? report_.global_spine_bytes
                   : report_.spine_bytes_by_layer[static_cast<size_t>(e.layer)]) += found->nbytes;
    }
  }

  // Every routed expert, names built in one buffer: K3 has 494,592 of these tensors.
  void experts() {
    const std::vector<ExpertPart> parts = expert_parts(c_);
    std::vector<const TensorInfo*> found(parts.size());
    std::string name;
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      if (c_.layer_kinds[l].mlp != MlpKind::kMoe) continue;
      for (int64_t e = 0; e < c_.num_experts; ++e) {
        name = expert_prefix(c_, l, e);
        const size_t prefix_len = name.size();
        bool whole = true;
        for (size_t k = 0; k < parts.size(); ++k) {
          name.resize(prefix_len);
          name += *parts[k].suffix;
          const TensorInfo* any = nullptr;
          found[k] = check_one(ckpt_, name, parts[k].shape, *parts[k].dtypes, ShapeRule::kExact,
                               report_.problems, &any);
          if (any) mark_used(any);
          whole &= found[k] != nullptr;
        }
        if (whole) check_contiguous(l, e, found);
      }
    }
  }

  void unused() {
    for (size_t i = 0; i < used_.size(); ++i) {
      if (used_[i]) continue;
      report_.unused.push_back(&ckpt_.tensors()[i]);
      report_.unused_bytes += ckpt_.tensors()[i].nbytes;
    }
  }

 private:
  void mark_used(const TensorInfo* t) {
    used_[static_cast<size_t>(t - ckpt_.tensors().data())] = true;
  }

  void check_contiguous(int64_t layer, int64_t expert,
                        const std::vector<const TensorInfo*>& parts) {
    for (size_t k = 1; k < parts.size(); ++k) {
      const TensorInfo& prev = *parts[k - 1];
      const TensorInfo& t = *parts[k];
      if (t.file != prev.file) {
        report_.problems.push_back({base::str_cat(
            "layer ", layer, " expert ", expert, ": tensor ", t.name, " is in ", t.file, " but ",
            prev.name, " is in ", prev.file, "; one expert's tensors must share one file")});
        return;
      }
      if (t.offset != prev.offset + prev.nbytes) {
        std::string order;
        for (const std::string& s : expert_tensor_suffixes(c_))
          order += (order.empty() ? "" : ", ") + s;
        report_.problems.push_back(
            {base::str_cat("file ", t.file, ": layer ", layer, " expert ", expert, ": tensor ",
                           t.name, " starts at byte ", t.offset, ", expected ",
                           prev.offset + prev.nbytes, " (right after ", prev.name,
                           "); an expert's tensors must be back to back in the order ", order)});
        return;
      }
    }
    const uint64_t nbytes = parts.back()->offset + parts.back()->nbytes - parts.front()->offset;
    report_.experts.push_back(
        ExpertSpan{layer, expert, parts.front()->file, parts.front()->offset, nbytes});
    report_.experts_by_layer[static_cast<size_t>(layer)]++;
    report_.expert_bytes += nbytes;
  }

  const Checkpoint& ckpt_;
  const ModelConfig& c_;
  InventoryReport& report_;
  std::vector<bool> used_;
};

}  // namespace

std::string expert_prefix(const ModelConfig& c, int64_t layer, int64_t expert) {
  return layer_prefix(c, layer) + "block_sparse_moe.experts." + std::to_string(expert) + ".";
}

const std::vector<std::string>& expert_tensor_suffixes(const ModelConfig& c) {
  static const std::vector<std::string> kMxfp4 = {"w1.weight_packed", "w1.weight_scale",
                                                  "w2.weight_packed", "w2.weight_scale",
                                                  "w3.weight_packed", "w3.weight_scale"};
  static const std::vector<std::string> kBf16 = {"w1.weight", "w2.weight", "w3.weight"};
  return c.experts_mxfp4 ? kMxfp4 : kBf16;
}

uint64_t expert_span_bytes(const ModelConfig& c) {
  const uint64_t in = static_cast<uint64_t>(c.expert_in_size());
  const uint64_t mid = static_cast<uint64_t>(c.moe_intermediate_size);
  if (!c.experts_mxfp4) return 3 * in * mid * 2;
  return 3 * (in * mid / 2 + in * mid / 32);  // each matrix: packed codes + scales
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  Roster r(out);
  add_spine(c, r, /*with_experts=*/true);
  return out;
}

bool shape_matches(const ExpectedTensor& e, const std::vector<int64_t>& shape) {
  return shape_ok(e.shape, e.shape_rule, shape);
}

std::vector<ExpertSpan> locate_experts(const Checkpoint& checkpoint, const ModelConfig& config) {
  InventoryReport report;
  Scanner(checkpoint, config, report).experts();
  if (!report.problems.empty()) base::fail(report.problems.front().message);
  return std::move(report.experts);
}

InventoryReport inspect_inventory(const Checkpoint& checkpoint, const ModelConfig& config) {
  InventoryReport report;
  Scanner scanner(checkpoint, config, report);
  scanner.spine();
  scanner.experts();
  scanner.unused();
  return report;
}

std::vector<InventoryProblem> check_inventory(const Checkpoint& checkpoint,
                                              const ModelConfig& config) {
  return inspect_inventory(checkpoint, config).problems;
}

}  // namespace deltafin::format
