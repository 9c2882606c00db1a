// localkube's cluster DNS (localkube/cluster_dns.h): what a pod sends the name server, and the
// resolv.conf the kubelet forms from a pod's spec and the node's resolv.conf.
//
// Input: a mode byte; bit 0 clear: a hosts file up to the first 0xFF byte, then the DNS query
// datagram; bit 0 set: a pod spec (JSON) up to the first 0xFF byte, then the node's resolv.conf.
// Checks that an answer is a reply to the query: its id, QR set, at most 512 bytes, the question
// echoed as it came; and that a resolv.conf keeps to the kubelet's limits.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fuzz/fuzz_util.h"
#include "localkube/cluster_dns.h"

namespace {

using kubetrain::fuzz::Fail;

void FuzzQuery(const std::string& hosts, const std::vector<uint8_t>& query) {
  std::vector<uint8_t> answer = kubetrain::localkube::AnswerDnsQuery(query, hosts);
  if (answer.empty()) {
    if (query.size() >= 12 && !(query[2] & 0x80)) Fail("a query was left unanswered");
    return;
  }
  if (answer.size() < 12 || answer.size() > 512) Fail(absl::StrCat(answer.size(), " bytes"));
  if (answer[0] != query[0] || answer[1] != query[1] || !(answer[2] & 0x80)) {
    Fail("not a reply to the query");
  }
  const int questions = answer[4] << 8 | answer[5];
  if (questions > 1) Fail("more than one question");
  if (questions == 1) {  // echoed as it came: its name's labels, then type and class
    size_t at = 12;
    while (at < answer.size() && answer[at] != 0) at += answer[at] + 1;
    if (at + 5 > answer.size() || at + 5 > query.size() ||
        !std::equal(answer.begin() + 12, answer.begin() + static_cast<ptrdiff_t>(at + 5),
                    query.begin() + 12)) {
      Fail("the question is not the query's");
    }
  }
}

void FuzzResolvConf(const std::string& spec_text, const std::string& node) {
  nlohmann::json spec = nlohmann::json::parse(spec_text, nullptr, /*allow_exceptions=*/false);
  const std::string text = kubetrain::localkube::PodResolvConf(spec, "ns", "198.18.0.1", node);
  int nameservers = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "nameserver ")) ++nameservers;
    if (absl::StartsWith(line, "search ") &&
        std::vector<absl::string_view>(absl::StrSplit(line, ' ')).size() > 33) {
      Fail("more than 32 search paths");
    }
  }
  if (nameservers > 3) Fail("more than 3 nameservers");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (kubetrain::fuzz::QuietLogs(), true);
  (void)quiet;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t cut = rest.find('\xff');
  const std::string first = rest.substr(0, cut);
  const std::string second = cut == std::string::npos ? "" : rest.substr(cut + 1);
  if (mode & 1) {
    FuzzResolvConf(first, second);
  } else {
    FuzzQuery(first, std::vector<uint8_t>(second.begin(), second.end()));
  }
  return 0;
}
