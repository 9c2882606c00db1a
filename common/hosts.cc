#include "common/hosts.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kubetrain {

std::map<std::string, std::string> ParseHostsFile(absl::string_view text) {
  std::map<std::string, std::string> hosts;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    for (size_t i = 1; i < fields.size(); ++i) {
      hosts.emplace(absl::AsciiStrToLower(fields[i]), std::string(fields[0]));
    }
  }
  return hosts;
}

std::string ResolveWithHostsFile(absl::string_view address, const std::string& hosts_path) {
  if (hosts_path.empty()) return std::string(address);
  size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return std::string(address);
  std::ifstream in(hosts_path);
  if (!in) return std::string(address);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::map<std::string, std::string> hosts = ParseHostsFile(buffer.str());
  auto it = hosts.find(absl::AsciiStrToLower(address.substr(0, colon)));
  if (it == hosts.end()) return std::string(address);
  return absl::StrCat(it->second, address.substr(colon));
}

std::string ResolveTaskAddress(absl::string_view address) {
  const char* path = std::getenv("KUBETRAIN_HOSTS_FILE");
  return ResolveWithHostsFile(address, path ? path : "");
}

}  // namespace kubetrain
