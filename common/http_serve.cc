#include "common/http_serve.h"

#include <httplib.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain {

std::thread ServeInBackground(httplib::Server& server) {
  std::thread loop([&server] { server.listen_after_bind(); });
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!server.is_running() && absl::Now() < deadline) absl::SleepFor(absl::Microseconds(200));
  return loop;
}

}  // namespace kubetrain
