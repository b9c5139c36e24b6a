// ExpertFetcher: how a streaming store makes an expert local when the file its catalog span names
// may not exist yet (a streaming install's expert cache, filled over the network on demand).
// The experts module only sees this interface; setup implements it over its HTTP source.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace deltafin::experts {

class ExpertFetcher {
 public:
  // Runs exactly once per fetch() call: `error` is empty when the expert's catalog span can now be
  // read, else the cause (naming the layer and expert).
  using Done = std::function<void(const std::string& error)>;

  virtual ~ExpertFetcher() = default;
  // Whether the expert's catalog span can be read now (only whole files are ever published).
  virtual bool is_local(int layer, int32_t expert) const = 0;
  // Starts making the expert local; concurrent calls for one expert share one transfer. `done`
  // runs on a fetcher thread, never inside this call, so callers may hold their own locks here.
  virtual void fetch(int layer, int32_t expert, Done done) = 0;
};

}  // namespace deltafin::experts
