#include "common/http_serve.h"

#include <httplib.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

namespace kubetrain {
namespace {

// A server stopped as soon as it was started (a SIGTERM during start-up) ends: its thread is
// joined within seconds. Started without the wait, the stop lands before the accept loop runs,
// does nothing, and the join never returns.
TEST(ServeInBackground, AServerStoppedAtOnceStops) {
  for (int i = 0; i < 50; ++i) {
    auto server = std::make_shared<httplib::Server>();
    ASSERT_GT(server->bind_to_any_port("127.0.0.1"), 0);
    auto loop = std::make_shared<std::thread>(ServeInBackground(*server));
    server->stop();
    std::promise<void> joined;
    std::future<void> done = joined.get_future();
    std::thread joiner([server, loop, p = std::move(joined)]() mutable {
      loop->join();
      p.set_value();
    });
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      joiner.detach();  // the loop serves on; leave it rather than hang the test
      FAIL() << "the server did not stop (start " << i << ")";
    }
    joiner.join();
  }
}

}  // namespace
}  // namespace kubetrain
