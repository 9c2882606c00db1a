// pods/log: Server::ServeLog answers a container's log (tailLines, limitBytes, timestamps,
// previous) and, with follow, streams what the container writes until it stops.
#include <httplib.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "localkube/errors.h"
#include "localkube/request.h"
#include "localkube/server.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

void Server::ServeLog(const Target& target, const httplib::Request& req, httplib::Response& res) {
  auto pod = api_->Get(Target{target.type, target.ns, target.name, ""});
  if (!pod.ok()) return ReplyError(res, pod.status());
  std::string container = Param(req, "container");
  const json containers = (*pod)["spec"].value("containers", json::array());
  if (container.empty()) {
    if (containers.size() != 1) {
      return ReplyError(res, BadRequestError(absl::StrCat(
                                 "a container name must be specified for pod ", target.name)));
    }
    container = containers[0].value("name", "");
  }
  if (!logs_) {
    return ReplyError(
        res, BadRequestError(absl::StrCat("container \"", container, "\" in pod \"", target.name,
                                          "\" is waiting to start: no kubelet")));
  }
  auto path = logs_->LogPath(target.ns, target.name, container, ParseBool(Param(req, "previous")));
  if (!path.ok()) return ReplyError(res, path.status());
  bool follow = ParseBool(Param(req, "follow"));
  bool timestamps = ParseBool(Param(req, "timestamps"));
  absl::StatusOr<int64_t> tail_lines = IntParam(req, "tailLines", -1);
  if (!tail_lines.ok()) return ReplyError(res, tail_lines.status());
  absl::StatusOr<int64_t> bytes = IntParam(req, "limitBytes", -1);
  if (!bytes.ok()) return ReplyError(res, bytes.status());
  const int64_t tail = *tail_lines, limit_bytes = *bytes;
  // Each stored line is "<timestamp> <text>"; strip the stamp unless asked for.
  auto render = [timestamps](const std::string& line) {
    if (timestamps) return line + "\n";
    size_t space = line.find(' ');
    return (space == std::string::npos ? line : line.substr(space + 1)) + "\n";
  };
  std::ifstream in(*path);
  std::vector<std::string> lines;
  std::string line;
  std::streamoff offset = 0;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial last line is sent once it is complete
    lines.push_back(line);
    offset = in.tellg();
  }
  size_t start = tail >= 0 && static_cast<size_t>(tail) < lines.size() ? lines.size() - tail : 0;
  std::string initial;
  for (size_t i = start; i < lines.size(); ++i) initial += render(lines[i]);
  if (limit_bytes >= 0 && initial.size() > static_cast<size_t>(limit_bytes)) {
    initial.resize(limit_bytes);
  }
  if (!follow) {
    res.set_content(initial, "text/plain");
    return;
  }
  res.set_chunked_content_provider("text/plain", [this, target, container, file = *path, initial,
                                                  offset, render](size_t, httplib::DataSink& sink) {
    if (!initial.empty() && !sink.write(initial.data(), initial.size())) return false;
    std::ifstream f(file);
    f.seekg(offset);
    std::string pending;
    while (!stopping_ && sink.is_writable()) {
      bool running = logs_->Running(target.ns, target.name, container);
      std::string chunk;
      char buf[4096];
      f.clear();
      while (f.read(buf, sizeof(buf)) || f.gcount() > 0) chunk.append(buf, f.gcount());
      pending += chunk;
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string out = render(pending.substr(0, nl));
        pending.erase(0, nl + 1);
        if (!sink.write(out.data(), out.size())) return false;
      }
      if (!running && chunk.empty()) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    sink.done();
    return true;
  });
}

}  // namespace kubetrain::localkube
