// RouteTracingStore: JSON lines written as routes are requested, flushed per pass so a trace of an
// interrupted run is still readable.
#include "experts/route_trace.h"

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace deltafin::experts {

RouteTracingStore::RouteTracingStore(std::unique_ptr<ExpertStore> inner, const std::string& path)
    : inner_(std::move(inner)), path_(path), out_(std::fopen(path.c_str(), "w")) {
  if (out_ == nullptr) base::fail("--trace-routes ", path, ": ", std::strerror(errno));
}

RouteTracingStore::~RouteTracingStore() { std::fclose(out_); }

void RouteTracingStore::begin_pass(int64_t position, int64_t n_rows) {
  std::fflush(out_);
  position_ = position;
  rows_ = n_rows;
  inner_->begin_pass(position, n_rows);
}

std::unique_ptr<ExpertBatch> RouteTracingStore::request(int layer,
                                                        std::span<const int32_t> experts) {
  std::fprintf(out_, "{\"position\":%lld,\"rows\":%lld,\"layer\":%d,\"experts\":[",
               static_cast<long long>(position_), static_cast<long long>(rows_), layer);
  for (size_t i = 0; i < experts.size(); ++i) std::fprintf(out_, i ? ",%d" : "%d", experts[i]);
  std::fputs("]}\n", out_);
  if (std::ferror(out_)) base::fail("--trace-routes ", path_, ": write failed");
  return inner_->request(layer, experts);
}

void RouteTracingStore::prefetch(int layer, std::span<const int32_t> experts) {
  inner_->prefetch(layer, experts);
}

}  // namespace deltafin::experts
