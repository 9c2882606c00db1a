// The byte-level checks yaml.cc makes on manifest text before and after the YAML parser: no
// UTF-16/32 byte-order mark, no NUL or control characters, valid UTF-8. Internal to
// operator/api. input_checks.cc also defines InvalidUtf8Offset and CheckJsonShape (declared in
// yaml.h), the checks on strings and JSON values from outside.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {

// UTF-16 and UTF-32 streams start with a byte-order mark (yaml-cpp would decode them).
bool HasWideByteOrderMark(absl::string_view text);

// Binary input gets a plain answer instead of whatever the YAML scanner trips over first.
absl::Status CheckText(absl::string_view text);

// The refusal of text whose byte at `offset` is not valid UTF-8, naming its line and column.
absl::Status InvalidUtf8Text(absl::string_view text, size_t offset);

}  // namespace kubetrain::api
