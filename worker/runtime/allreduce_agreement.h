// What the all-reduce ranks agree on besides gradients (worker/runtime/exchange_allreduce.h):
// 64-bit values carried as floats, the comparison of their parameter checksums, and the sum of
// their evaluations of the test set's shares.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/collective/communicator.h"
#include "worker/core/device.h"
#include "worker/core/model.h"

namespace kubetrain::worker {

// Collectives move floats only; a 64-bit value travels as four 16-bit chunks, each exact in a
// float.
inline constexpr int kU64Chunks = 4;
void EncodeU64(uint64_t v, float* out);
uint64_t DecodeU64(const float* in);

// Every rank must hold bit-identical parameters: compares this rank's `checksum` with every
// other's (one max all-reduce of the checksum's chunks and their negations gives max and min).
// INTERNAL naming the step `pos` when they differ. `scratch` holds at least 2 * kU64Chunks floats.
absl::Status CompareChecksums(Device& device, Communicator& comm, Tensor& scratch,
                              uint64_t checksum, int64_t pos);

// One sum all-reduce of [loss sum, correct, examples] of every rank's share gives every rank the
// whole set's result. The counts are exact (floats hold integers up to 2^24); the loss is the
// float sum of the ranks' sums. `scratch` holds at least 3 floats.
absl::StatusOr<EvalResult> SumEvaluations(Device& device, Communicator& comm, Tensor& scratch,
                                          const EvalResult& mine);

// FNV-1a over the bytes of `values`: the parameter checksum ranks compare.
uint64_t ParameterChecksum(const float* values, size_t count);

}  // namespace kubetrain::worker
