// Serves a Prometheus registry over HTTP (`GET /metrics`, text exposition format).
//
// Owns the registry and a small cpp-httplib server (prometheus-cpp's text serializer renders each
// scrape). Not prometheus-cpp's civetweb Exposer: civetweb's threads have fixed 100 KiB stacks,
// which cannot hold the static TLS of large libraries the worker loads (cuBLAS alone takes
// ~110 KiB), so it fails to start in such processes. Thread-safe: metric families from
// registry() may be created and updated from any thread while the server runs.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_port.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}

namespace kubetrain {

class MetricsServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free port). Fails with UNAVAILABLE when the
  // address cannot be bound, naming it.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(absl::string_view address);
  ~MetricsServer();  // stops serving

  prometheus::Registry& registry() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared_registry() { return registry_; }
  // The port actually bound (useful with port 0).
  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kubetrain
