#include "common/metrics.h"

#include <httplib.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "common/http_serve.h"
#include "prometheus/text_serializer.h"

namespace kubetrain {
absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(absl::string_view address) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitListenAddress(address, &host, &port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics: ", s.message()));
  }
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->server_ = std::make_unique<httplib::Server>();
  // Two threads are plenty for a scrape every few seconds.
  m->server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share a port
  // that is in use instead of failing.
  m->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  std::weak_ptr<prometheus::Registry> registry = m->registry_;
  m->server_->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    std::shared_ptr<prometheus::Registry> r = registry.lock();
    if (!r) {
      res.status = 503;
      return;
    }
    res.set_content(prometheus::TextSerializer().Serialize(r->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  m->port_ = port == 0 ? m->server_->bind_to_any_port(host)
                       : (m->server_->bind_to_port(host, port) ? port : -1);
  if (m->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address,
                     " (is the port in use? choose another with --metrics-port)"));
  }
  m->thread_ = ServeInBackground(*m->server_);
  return m;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kubetrain
