// A string double-quoted as Go's %q writes the names and values in the Kubernetes API server's
// messages ("x", "a\"b"); also how logfmt values are quoted. One implementation for the logs
// (logging.h) and localkube's Status messages (localkube/errors.h).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace kubetrain {

// `s` in double quotes with `"` and `\` backslash-escaped, newline, tab and carriage return as
// \n, \t, \r, and every other control byte and DEL as \xNN (where Go writes \a, \b, \f and \v
// by name); all other bytes, UTF-8 included, as they are.
std::string GoQuote(absl::string_view s);

}  // namespace kubetrain
