// Opening the tokenizer next to the weights and checking that the two agree.
#include "server/loaded_model.h"

#include <filesystem>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "base/thread_pool.h"

namespace deltafin::server {

LoadedModel load_model(const EngineOptions& options, std::unique_ptr<Engine> engine) {
  namespace fs = std::filesystem;
  LoadedModel m;
  m.dir = options.model_dir;
  const fs::path dir(options.model_dir);
  const fs::path vocab = dir / "tiktoken.model", config = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(vocab))
    base::fail("model folder ", options.model_dir, " has no tiktoken.model (the tokenizer)");
  m.engine = std::move(engine);
  m.tokenizer = std::make_unique<tokenizer::Tokenizer>(
      tokenizer::Tokenizer::load(vocab.string(), tokenizer::Pattern::kKimi,
                                 fs::is_regular_file(config) ? config.string() : std::string()));
  const ModelInfo& info = m.engine->info();
  if (m.tokenizer->vocab_size() > info.vocab_size)
    base::fail("model folder ", options.model_dir, ": the tokenizer has ",
               m.tokenizer->vocab_size(), " ids but config.json's vocab_size is ", info.vocab_size);
  if (info.eos_id >= 0) {
    m.eos_id = static_cast<int32_t>(info.eos_id);
  } else if (auto id = m.tokenizer->special_id("<|end_of_msg|>")) {
    m.eos_id = *id;
  } else {
    base::fail("model folder ", options.model_dir,
               ": config.json names no eos_token_id and the tokenizer has no <|end_of_msg|>");
  }
  // Installs live at .../models/<owner>/<name>; clients know the model as owner/name.
  fs::path canonical = fs::weakly_canonical(dir);
  if (canonical.filename().empty()) canonical = canonical.parent_path();
  m.id = canonical.filename().string();
  const fs::path owner = canonical.parent_path();
  if (owner.parent_path().filename() == "models") m.id = owner.filename().string() + "/" + m.id;
  return m;
}

void log_model_plan(const LoadedModel& m) {
  const ModelInfo& info = m.engine->info();
  base::log_info("model: ", m.id, " (", info.arch, ", ", info.n_layers, " layers, hidden ",
                 info.hidden_size, ", vocab ", info.vocab_size, ") from ", m.dir);
  // The engine logged its memory plan (budget, resident spine, expert slots) while loading.
  const MemoryPlanInfo plan = m.engine->memory_plan();
  base::log_info("memory: ", base::format_bytes(base::current_rss_bytes()),
                 " resident after load; experts ",
                 plan.streaming ? "read from disk as tokens route to them" : "mapped", ", ",
                 plan.streamed_layers, " spine layers streamed per pass");
  base::log_info("kernels: ", base::isa_name(base::selected_isa()), " on ",
                 base::default_pool().size(), " threads (", base::cpu_summary(), ")");
}

}  // namespace deltafin::server
