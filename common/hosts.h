// Host-name lookups through a hosts(5) file before DNS. localkube and `kubetrain run` publish
// task addresses in the file named by KUBETRAIN_HOSTS_FILE; on a real cluster the variable is
// unset and names go to cluster DNS unchanged.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain {

// Parses hosts(5) text: "IP name [aliases...]" lines, '#' comments. Later lines do not override
// earlier ones, as in glibc.
std::map<std::string, std::string> ParseHostsFile(absl::string_view text);

// "host:port" with the host replaced by its address from the hosts file at `hosts_path` (read
// afresh on each call, so a moved task is found); unchanged when the path is empty, the file
// has no entry, or the host is already an address.
std::string ResolveWithHostsFile(absl::string_view address, const std::string& hosts_path);

// Same, with the path taken from the KUBETRAIN_HOSTS_FILE environment variable.
std::string ResolveTaskAddress(absl::string_view address);

}  // namespace kubetrain
