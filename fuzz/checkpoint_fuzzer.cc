// Restoring a checkpoint directory whose checkpoint file holds fuzzed bytes.
//
// Input: one mode byte, then the kubetrain.v1.Checkpoint payload. Mode bit 0 frames the payload
// with the magic, a correct CRC-32 and length, as Checkpointer::Save does (otherwise it is read
// as the older, unframed format); bit 1 adds a manifest naming the file; bit 2 expects "cnn"
// rather than "mlp".
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/protobuf_fuzz_util.h"
#include "worker/runtime/checkpoint.h"

namespace {

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// The file layout of worker/runtime/checkpoint.h: magic, CRC-32, payload length, payload.
std::string Frame(absl::string_view payload) {
  std::string out = "KTCKPT1\n";
  uLong crc = crc32(0L, Z_NULL, 0);
  crc =
      crc32(crc, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size()));
  PutLittleEndian(crc, 4, &out);
  PutLittleEndian(payload.size(), 8, &out);
  out.append(payload.data(), payload.size());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace worker = kubetrain::worker;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const absl::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string& dir = kubetrain::fuzz::ScratchDir();
  kubetrain::fuzz::WriteFileOrDie(dir + "/ckpt-7.pb",
                                  (mode & 1) ? Frame(payload) : std::string(payload));
  std::error_code ec;
  if (mode & 2) {
    kubetrain::fuzz::WriteFileOrDie(dir + "/checkpoint.json",
                                    R"({"latest": "ckpt-7.pb", "all": ["ckpt-7.pb"]})");
  } else {
    std::filesystem::remove(dir + "/checkpoint.json", ec);
  }
  const worker::Checkpointer checkpointer(worker::CheckpointOptions{dir, 3});
  (void)checkpointer.LoadLatest((mode & 4) ? "cnn" : "mlp");
  return 0;
}
