// Shared by the fuzz targets that parse protobuf messages.
#pragma once

#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"

namespace kubetrain::fuzz {

// QuietLogs, and protobuf's own log as well: it reports every string field that is not UTF-8,
// and the parse result is what matters.
inline void QuietProtobufLogs() {
  QuietLogs();
  google::protobuf::SetLogHandler(nullptr);
}

}  // namespace kubetrain::fuzz
