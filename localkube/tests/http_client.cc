#include "localkube/tests/http_client.h"

#include <gtest/gtest.h>

namespace kubetrain::localkube::testing {

void PrintTo(const Reply& reply, std::ostream* os) {
  *os << "code " << reply.code << ", body " << reply.body.dump();
}

std::unique_ptr<httplib::Client> LoopbackClient(int port) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_read_timeout(10, 0);
  return client;
}

Reply Call(httplib::Client& client, const std::string& method, const std::string& path,
           const nlohmann::json& body, const std::string& content_type,
           const httplib::Headers& headers) {
  const std::string text = body.is_string() ? body.get<std::string>()
                           : body.is_null() ? ""
                                            : body.dump();
  httplib::Result r = method == "POST"     ? client.Post(path, headers, text, content_type)
                      : method == "PUT"    ? client.Put(path, headers, text, content_type)
                      : method == "PATCH"  ? client.Patch(path, headers, text, content_type)
                      : method != "DELETE" ? client.Get(path, headers)
                      : text.empty()       ? client.Delete(path, headers)
                                           : client.Delete(path, headers, text, content_type);
  EXPECT_TRUE(r) << method << " " << path << ": " << httplib::to_string(r.error());
  if (!r) return {};
  Reply reply{r->status, nlohmann::json::parse(r->body, nullptr, false), {}};
  for (const auto& [name, value] : r->headers) {
    if (name == "Warning") reply.warnings.push_back(value);
  }
  return reply;
}

Reply CallAs(httplib::Client& client, const std::string& token, const std::string& method,
             const std::string& path, const nlohmann::json& body, const std::string& content_type) {
  return Call(client, method, path, body, content_type, {{"Authorization", "Bearer " + token}});
}

}  // namespace kubetrain::localkube::testing
