// Test support shared by localkube's API tests: one HTTP call to the server under test and what
// came back (status, JSON body, Warning headers), so each test reads as requests and answers, and
// a matcher of the apiserver's refusals.
#pragma once

#include <httplib.h>

#include <gmock/gmock.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube::testing {

struct Reply {
  int code = 0;         // 0 when no answer came (the call has already failed the test)
  nlohmann::json body;  // discarded (is_discarded()) when the answer is not JSON
  std::vector<std::string> warnings;  // the Warning header values, in order
};

// How a failed assertion shows a Reply: its code and body.
void PrintTo(const Reply& reply, std::ostream* os);

// Matches a Reply that is the apiserver's Status for a refused request: HTTP `code`, and `reason`
// and `message` in its body, e.g.
//   EXPECT_THAT(Call("POST", pods, pod), IsFailure(422, "Invalid", "Pod \"p\" is invalid: ..."));
MATCHER_P3(IsFailure, code, reason, message,
           std::string(negation ? "is not" : "is") + " the apiserver's refusal " +
               ::testing::PrintToString(code) + " " + ::testing::PrintToString(reason) + ": " +
               ::testing::PrintToString(message)) {
  return arg.code == code && arg.body.is_object() &&
         arg.body.value("reason", "") == std::string(reason) &&
         arg.body.value("message", "") == std::string(message);
}

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
