#include "worker/runtime/allreduce_agreement.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "common/status.h"

namespace kubetrain::worker {

void EncodeU64(uint64_t v, float* out) {
  for (int i = 0; i < kU64Chunks; ++i) out[i] = static_cast<float>((v >> (16 * i)) & 0xffff);
}

uint64_t DecodeU64(const float* in) {
  uint64_t v = 0;
  for (int i = 0; i < kU64Chunks; ++i) v |= static_cast<uint64_t>(in[i]) << (16 * i);
  return v;
}

absl::Status CompareChecksums(Device& device, Communicator& comm, Tensor& scratch,
                              uint64_t checksum, int64_t pos) {
  float chunks[2 * kU64Chunks];
  EncodeU64(checksum, chunks);
  for (int i = 0; i < kU64Chunks; ++i) chunks[kU64Chunks + i] = -chunks[i];
  device.Upload(chunks, scratch, 2 * kU64Chunks);
  RETURN_IF_ERROR(comm.AllReduce(scratch.data(), 2 * kU64Chunks, ReduceOp::kMax),
                  "comparing parameter checksums");
  float reduced[2 * kU64Chunks];
  device.Download(scratch, reduced, 2 * kU64Chunks);
  RETURN_IF_ERROR(device.Synchronize());
  for (int i = 0; i < kU64Chunks; ++i) {
    if (reduced[i] != chunks[i] || -reduced[kU64Chunks + i] != chunks[i]) {
      return absl::InternalError(absl::StrFormat(
          "parameters differ across ranks at step %d (this rank's checksum %016x): the ranks "
          "did not apply the same updates",
          pos, checksum));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> SumEvaluations(Device& device, Communicator& comm, Tensor& scratch,
                                          const EvalResult& mine) {
  float sums[3] = {static_cast<float>(mine.loss * static_cast<double>(mine.examples)),
                   static_cast<float>(std::llround(mine.accuracy * mine.examples)),
                   static_cast<float>(mine.examples)};
  device.Upload(sums, scratch, 3);
  RETURN_IF_ERROR(comm.AllReduce(scratch.data(), 3, ReduceOp::kSum),
                  "summing the ranks' evaluations");
  device.Download(scratch, sums, 3);
  RETURN_IF_ERROR(device.Synchronize());
  const auto examples = static_cast<int64_t>(sums[2]);
  return EvalResult{sums[0] / static_cast<double>(examples),
                    sums[1] / static_cast<double>(examples), examples};
}

uint64_t ParameterChecksum(const float* values, size_t count) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(values);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < count * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace kubetrain::worker
