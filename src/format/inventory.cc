// The inventory check: a checkpoint against the tensors its family's schema lists for the config.
#include "format/inventory.h"

#include "base/error.h"

namespace deltafin::format {

namespace {

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
  if (!shape_matches(shape, rule, t->shape)) {
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
    std::vector<ExpectedTensor> roster = global_tensors(c_);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      for (ExpectedTensor& t : layer_tensors(c_, l)) roster.push_back(std::move(t));
    }
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
    const ExpertSchema schema = expert_schema(c_);
    const std::vector<ExpertSchema::Tensor>& parts = schema.tensors;
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
          name += parts[k].suffix;
          const TensorInfo* any = nullptr;
          found[k] = check_one(ckpt_, name, parts[k].shape, parts[k].dtypes, ShapeRule::kExact,
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
