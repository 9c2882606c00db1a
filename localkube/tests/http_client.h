// Test support shared by localkube's API tests: one HTTP call to the server under test and what
// came back (status, JSON body, Warning headers), so each test reads as requests and answers.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube::testing {

struct Reply {
  int code = 0;         // 0 when no answer came (the call has already failed the test)
  nlohmann::json body;  // discarded (is_discarded()) when the answer is not JSON
  std::vector<std::string> warnings;  // the Warning header values, in order
};

// A client of 127.0.0.1:`port` that waits up to 10 s for an answer.
std::unique_ptr<httplib::Client> LoopbackClient(int port);

// Sends `method` (GET, POST, PUT, PATCH or DELETE) for `path` with `body`: none when null, its
// text when a JSON string (YAML, or bytes that are not JSON), else its JSON form. `headers` come
// on top of the client's default headers. A call that gets no answer fails the test.
Reply Call(httplib::Client& client, const std::string& method, const std::string& path,
           const nlohmann::json& body = nullptr,
           const std::string& content_type = "application/json",
           const httplib::Headers& headers = {});

// Call as the user of bearer token `token`.
Reply CallAs(httplib::Client& client, const std::string& token, const std::string& method,
             const std::string& path, const nlohmann::json& body = nullptr,
             const std::string& content_type = "application/json");

}  // namespace kubetrain::localkube::testing
