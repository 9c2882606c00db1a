// A chief's Prometheus endpoint on a loopback port for the progress tests, unit and live alike:
// /metrics answers with fixed text, or with a step that grows on every read at an epoch the
// test sets.
#pragma once

#include <httplib.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kubetrain::controller::testing {

class FakeChief {
 public:
  // Step n at the n-th read (from 1), at the epoch set_epoch gave last (`epoch` until then).
  explicit FakeChief(int epoch = 0) : epoch_(epoch) { Serve(); }
  // `metrics` at every read.
  explicit FakeChief(std::string metrics) : metrics_(std::move(metrics)) { Serve(); }
  ~FakeChief() {
    server_.stop();
    thread_.join();
  }
  FakeChief(const FakeChief&) = delete;
  FakeChief& operator=(const FakeChief&) = delete;

  int port() const { return port_; }
  int reads() const { return reads_.load(); }
  void set_epoch(int e) { epoch_ = e; }

 private:
  void Serve() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const int read = ++reads_;
      res.set_content(metrics_ ? *metrics_
                               : absl::StrCat("kubetrain_worker_global_step ", read,
                                              "\nkubetrain_worker_epoch ", epoch_.load(), "\n"),
                      "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }

  const std::optional<std::string> metrics_;
  httplib::Server server_;
  int port_ = 0;
  std::atomic<int> reads_{0};
  std::atomic<int> epoch_{0};
  std::thread thread_;
};

}  // namespace kubetrain::controller::testing
