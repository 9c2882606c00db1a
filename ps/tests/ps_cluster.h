// Test helpers: PsServers on 127.0.0.1 port 0 in this process, each with its own metrics
// registry, and reading those metrics back.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "prometheus/registry.h"
#include "ps/client.h"
#include "ps/metrics.h"
#include "ps/server.h"

namespace kubetrain::ps::testing {

// The value of metric `name` with exactly `labels` in `registry`; -1 when there is none.
// What a ps that no chief has initialised yet answers a push or a pull with.
inline constexpr absl::string_view kNotInitialised =
    "ps not initialised; waiting for the chief to restore it";

// Run "run-1" at step 0 under `config`, with every variable of `plan` and element i of each
// valued i % `period`.
inline ModelState InitialState(const PlacementPlan& plan, TrainingConfig config, int period) {
  ModelState state{config, 0, "run-1", {}};
  for (const VariableSpec& v : plan.variables()) {
    VariableState& var = state.variables.emplace_back();
    var.name = v.name;
    var.values.resize(v.elements);
    for (size_t i = 0; i < v.elements; ++i) var.values[i] = float(i % period);
  }
  return state;
}

// One buffer per variable of `plan`, each element `fill`, and spans over them.
inline std::vector<std::vector<float>> Buffers(const PlacementPlan& plan, float fill = 0) {
  std::vector<std::vector<float>> out;
  for (const VariableSpec& v : plan.variables()) out.emplace_back(v.elements, fill);
  return out;
}
inline std::vector<std::span<float>> Spans(std::vector<std::vector<float>>& buffers) {
  return {buffers.begin(), buffers.end()};
}

inline double Sample(prometheus::Registry& registry, const std::string& name,
                     const std::map<std::string, std::string>& labels = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : metric.label) have[l.name] = l.value;
      if (have != labels) continue;
      if (family.type == prometheus::MetricType::Counter) return metric.counter.value;
      if (family.type == prometheus::MetricType::Gauge) return metric.gauge.value;
    }
  }
  return -1;
}

class Cluster {
 public:
  explicit Cluster(int num_ps, ServiceOptions service = {}) {
    for (int i = 0; i < num_ps; ++i) {
      registries_.push_back(std::make_unique<prometheus::Registry>());
      metrics_.push_back(std::make_unique<PsMetrics>(*registries_.back()));
      auto server =
          PsServer::Start({.address = "127.0.0.1:0", .service = service}, metrics_.back().get());
      EXPECT_TRUE(server.ok()) << server.status();
      addresses_.push_back((*server)->address());
      servers_.push_back(*std::move(server));
    }
  }
  std::unique_ptr<PsClient> Client(const PlacementPlan& plan, bool shared_memory = true,
                                   bool pipeline = true) {
    return Client(plan, {.rpc_timeout = absl::Seconds(60),
                         .pull_timeout = absl::Seconds(60),
                         .shared_memory = shared_memory,
                         .pipeline = pipeline});
  }
  std::unique_ptr<PsClient> Client(const PlacementPlan& plan, const ClientOptions& options) {
    auto client = PsClient::Create(addresses_, plan, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }
  PsServer& server(int i) { return *servers_[i]; }
  prometheus::Registry& registry(int i) { return *registries_[i]; }
  // A metric summed over every ps (an unlabelled counter or gauge).
  double Total(const std::string& name) {
    double sum = 0;
    for (auto& r : registries_) sum += Sample(*r, name);
    return sum;
  }

 private:
  std::vector<std::unique_ptr<prometheus::Registry>> registries_;
  std::vector<std::unique_ptr<PsMetrics>> metrics_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<PsServer>> servers_;
};

}  // namespace kubetrain::ps::testing
