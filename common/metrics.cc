#include "common/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace kubetrain {

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                             std::shared_ptr<prometheus::Registry> registry, int port)
    : exposer_(std::move(exposer)), registry_(std::move(registry)), port_(port) {}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(absl::string_view address) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb takes "host:port"; one thread is plenty for a scrape every few seconds.
    exposer = std::make_unique<prometheus::Exposer>(std::string(address), 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what(),
                     " (is the port in use? choose another with --metrics-port)"));
  }
  auto ports = exposer->GetListeningPorts();
  int port = ports.empty() ? 0 : ports.front();
  auto registry = std::make_shared<prometheus::Registry>();
  exposer->RegisterCollectable(registry);
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), registry, port));
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace kubetrain
