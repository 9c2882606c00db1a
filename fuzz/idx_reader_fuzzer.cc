// The worker's IDX reader on a file of fuzzed bytes, plain or gzip-compressed.
//
// Input: one mode byte, then the file. Mode bit 0 gzips the rest before writing it, so the
// decompressed header and data are what the fuzzer mutates (a mutated gzip stream almost only
// reaches the CRC check); bit 1 expects images rather than labels.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "worker/core/data/idx_reader.h"

namespace {

std::string Gzip(absl::string_view bytes) {
  z_stream z{};
  // 15 + 16: a gzip header and trailer rather than zlib's.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace worker = kubetrain::worker;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool gzip = mode & 1;
  const std::string path = kubetrain::fuzz::ScratchDir() + (gzip ? "/data.idx.gz" : "/data.idx");
  kubetrain::fuzz::WriteFileOrDie(path, gzip ? Gzip(body) : std::string(body));
  const uint32_t magic = (mode & 2) ? worker::kIdxImagesMagic : worker::kIdxLabelsMagic;
  absl::StatusOr<worker::IdxArray> array = worker::ReadIdx(path, magic);
  if (!array.ok()) return 0;
  // The documented shape: product(dims) bytes of data.
  uint64_t elements = 1;
  for (int64_t d : array->dims) {
    if (d < 0) kubetrain::fuzz::Fail(absl::StrCat("negative dimension ", d, " accepted"));
    elements *= static_cast<uint64_t>(d);
  }
  if (elements != array->data.size()) {
    kubetrain::fuzz::Fail(
        absl::StrCat("dims say ", elements, " bytes, data holds ", array->data.size()));
  }
  return 0;
}
