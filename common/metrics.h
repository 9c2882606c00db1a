// Serves a Prometheus registry over HTTP (`GET /metrics`, text exposition format).
//
// Owns a prometheus-cpp Exposer and the registry it serves. Thread-safe: metric families from
// registry() may be created and updated from any thread while the server runs.
#pragma once

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace kubetrain {

class MetricsServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free port). Fails with UNAVAILABLE when the
  // address cannot be bound, naming it.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(absl::string_view address);

  prometheus::Registry& registry() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared_registry() { return registry_; }
  // The port actually bound (useful with port 0).
  int port() const { return port_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                std::shared_ptr<prometheus::Registry> registry, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_;
};

// Host/port helpers shared by servers that take "host:port" flags.
std::string JoinHostPort(absl::string_view host, int port);

}  // namespace kubetrain
