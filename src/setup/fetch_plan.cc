// Layer ranges, the fetch plan and the bounded fetch loop.
#include "setup/fetch_plan.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <future>

#include "base/error.h"
#include "setup/progress.h"

namespace deltafin::setup {

using base::fail;

bool LayerRanges::contains(int64_t layer) const {
  if (ranges.empty()) return true;
  for (const auto& [a, b] : ranges)
    if (layer >= a && layer <= b) return true;
  return false;
}

LayerRanges LayerRanges::parse(const std::string& spec) {
  LayerRanges out;
  size_t pos = 0;
  while (pos <= spec.size() && !spec.empty()) {
    const size_t comma = spec.find(',', pos);
    const std::string part =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long long a = std::strtoll(part.c_str(), &end, 10);
    long long b = a;
    if (end != part.c_str() && *end == '-') {
      const char* rest = end + 1;
      b = std::strtoll(rest, &end, 10);
      if (end == rest) end = const_cast<char*>(rest - 1);  // "3-" is malformed
    }
    if (part.empty() || !std::isdigit(static_cast<unsigned char>(part[0])) || *end != '\0' || b < a)
      fail("--layers '", spec, "': '", part, "' is not a layer or a range like 1-40");
    out.ranges.emplace_back(a, b);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

ExpertFetchPlan plan_expert_fetch(const RemoteExpertSource& source, const LayerRanges& layers) {
  ExpertFetchPlan plan;
  for (const ExpertLayer& l : source.manifest().layers) {
    if (!layers.contains(l.layer)) continue;
    ExpertFetchPlan::LayerCount& c = plan.layers[l.layer];
    c.n_experts = l.n_experts();
    for (int64_t e = 0; e < l.n_experts(); ++e) {
      if (source.find_local(l.layer, e)) continue;
      plan.missing.emplace_back(l.layer, e);
      c.n_missing++;
      c.missing_bytes += l.span_bytes;
    }
    plan.n_selected += c.n_experts;
    plan.missing_bytes += c.missing_bytes;
  }
  return plan;
}

void fetch_planned(RemoteExpertSource& source, const ExpertFetchPlan& plan, int n_in_flight,
                   Progress* progress) {
  std::deque<std::shared_future<ExpertBytes>> in_flight;
  std::exception_ptr first_error;
  size_t next = 0;
  const size_t window = static_cast<size_t>(std::max(1, n_in_flight));
  while (next < plan.missing.size() || !in_flight.empty()) {
    while (!first_error && next < plan.missing.size() && in_flight.size() < window) {
      const auto [layer, expert] = plan.missing[next++];
      in_flight.push_back(source.fetch_async(layer, expert));
    }
    if (in_flight.empty()) break;
    try {
      const ExpertBytes b = in_flight.front().get();
      if (progress) progress->add(b.nbytes);
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
    in_flight.pop_front();
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace deltafin::setup
