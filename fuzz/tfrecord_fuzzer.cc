// TFRecord framing (worker/summary/tfrecord.h) and the event file writer.
//
// Input: a mode byte, then the payload. Modes (mode % 3):
//   0 the payload is a file: ReadTfRecords must not crash, and records it accepts, framed again,
//     give back exactly the payload.
//   1 the payload is cut into records at every 0xFF byte: framed, they read back the same; with
//     one byte changed (position from the next byte), the reader refuses the file.
//   2 the payload is cut into tags at every 0xFF byte: EventFileWriter writes them as one step's
//     scalars, and the file reads back as the version record and that Event.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "tensorflow/core/util/event.pb.h"
#include "worker/summary/event_file_writer.h"
#include "worker/summary/tfrecord.h"

namespace {

namespace summary = kubetrain::summary;
using kubetrain::fuzz::Fail;

std::string Frame(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) summary::AppendTfRecord(r, &out);
  return out;
}

void ReadFile(absl::string_view file) {
  auto records = summary::ReadTfRecords(file, "input", 1 << 16);
  if (records.ok() && Frame(*records) != file)
    Fail("accepted records do not frame back to the file");
}

void RoundTrip(absl::string_view payload) {
  if (payload.empty()) return;
  const size_t flip_at = static_cast<unsigned char>(payload[0]);
  std::vector<std::string> records = absl::StrSplit(payload.substr(1), '\xFF');
  const std::string file = Frame(records);
  auto back = summary::ReadTfRecords(file, "framed");
  if (!back.ok() || *back != records) Fail("framed records do not read back");
  // CRC-32C catches every burst of up to 32 bits, so any one changed byte.
  std::string damaged = file;
  damaged[flip_at % damaged.size()] ^= static_cast<char>(1 + flip_at % 255);
  if (summary::ReadTfRecords(damaged, "damaged").ok()) Fail("a changed byte went unnoticed");
}

void Write(absl::string_view payload) {
  std::vector<summary::Scalar> values;
  float v = 0;
  for (absl::string_view tag : absl::StrSplit(payload, '\xFF')) {
    if (!tag.empty()) values.push_back({std::string(tag), v++});
  }
  if (values.empty() || values.size() > 64) return;
  const std::string dir = kubetrain::fuzz::ScratchDir() + "/summaries";
  std::string path;
  {
    auto writer = summary::EventFileWriter::Create({.directory = dir, .host = "fuzz"});
    if (!writer.ok()) Fail("cannot create an event file in the scratch directory");
    path = (*writer)->path();
    absl::Status added = (*writer)->AddScalars(7, 1.5, values);
    if (!added.ok()) {
      // Only a tag that is not UTF-8 (a protobuf string must be) is refused.
      if (added.code() != absl::StatusCode::kInvalidArgument)
        Fail("AddScalars: " + added.ToString());
      writer->reset();
      std::remove(path.c_str());
      return;
    }
  }
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  auto records = summary::ReadTfRecords(file, path);
  if (!records.ok() || records->size() != 2) Fail("the event file does not hold two records");
  tensorflow::Event version, event;
  if (!version.ParseFromString((*records)[0]) || version.file_version() != "brain.Event:2") {
    Fail("the first record is not the file version");
  }
  if (!event.ParseFromString((*records)[1]) || event.step() != 7 ||
      event.summary().value_size() != static_cast<int>(values.size())) {
    Fail("the step's Event does not decode");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const auto& got = event.summary().value(static_cast<int>(i));
    if (got.tag() != values[i].tag || got.simple_value() != values[i].value)
      Fail("a value changed");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (kubetrain::fuzz::QuietLogs(), true);
  (void)quiet;
  if (size < 1) return 0;
  absl::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      ReadFile(payload);
      break;
    case 1:
      RoundTrip(payload);
      break;
    default:
      Write(payload);
      break;
  }
  return 0;
}
