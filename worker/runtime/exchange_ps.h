// The parameter-server strategies of GradientExchange (worker/runtime/gradient_exchange.h): a step
// pushes this worker's gradients to every ps and pulls the parameters they applied.
//   ps-sync   SyncReplicasOptimizer semantics (ps/store.h): the ps average num_workers pushes
//             per global step; a worker pulls with min_step one further, waiting for the step.
//   ps-async  every push is applied on arrival; a worker pulls whatever the ps hold.
// The chief fills the ps (resumes the run they hold, restores the latest checkpoint, or
// initialises from the seeded model and writes a checkpoint at step 0), watches them from a
// thread of its own and refills one that comes back empty from the latest checkpoint, and shuts
// them down at the end. Workers wait for initialised ps; every task waits for lost ps to come
// back. An evaluator reads the parameters from the ps.
#pragma once

#include <memory>

#include "worker/runtime/gradient_exchange.h"

namespace kubetrain::worker {

std::unique_ptr<GradientExchange> MakePsSyncExchange(const ExchangeContext& context);
std::unique_ptr<GradientExchange> MakePsAsyncExchange(const ExchangeContext& context);

}  // namespace kubetrain::worker
