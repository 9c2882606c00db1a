// The all-reduce strategy of GradientExchange (worker/runtime/gradient_exchange.h), with no
// parameter servers: every rank holds the whole model, sums its gradients with its peers through a
// Communicator (Gloo on the CPU, NCCL on GPUs), and applies the same optimizer update on its
// device, so every rank keeps bit-identical parameters (checked with ParameterChecksum at the
// end, and each epoch in builds without NDEBUG). Rank 0 restores the chief's latest checkpoint
// and broadcasts step, values and optimizer slots, so every rank starts from one state. In a
// fixed-size job the ranks evaluate each epoch's end and the final parameters together, each on
// its share of the test set (GradientExchange::shared_evaluation), and the chief reports it.
//
// Gradients travel in fused buffers (Horovod's tensor fusion): variables are packed, in order,
// into buffers of at most `fusion_bytes`, one all-reduce each. The step's mean loss rides in the
// last buffer, so the chief logs the loss over every rank's batch at no extra collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "worker/runtime/gradient_exchange.h"

namespace kubetrain::worker {

// `context.id.communicator` must be set, with rank() == id.rank and size() == id.num_workers
// (Setup checks).
std::unique_ptr<GradientExchange> MakeAllReduceExchange(const ExchangeContext& context);

}  // namespace kubetrain::worker
