// network_bench's training cases (--train-model): one Fashion-MNIST job trained by --nodes
// workers, worker r on node r behind that node's shaped uplink, by kubetrain and by PyTorch:
//
//   allreduce          kubetrain-worker --mode=allreduce --communicator=gloo: the ring between
//                      the nodes; worker 0 is the chief and holds the rendezvous
//   allreduce-overlap  the same with --overlap-allreduce --fusion-threshold-mb=--fusion-mb: each
//                      fused buffer's all-reduce starts while backward computes the layers below
//   ps-sync            kubetrain-worker --mode=ps-sync against one kubetrain-ps per node, each in
//                      a sandbox of its own beside that node's worker (a pod of its own), the
//                      variables placed on them as in a job with that many ps tasks
//   ddp                PyTorch DistributedDataParallel (gloo backend), bench/peers/torch_peer.py
//                      train: the same model, initialisation, data order, optimizer and schedule
// With --gradient-compression, allreduce and ps-sync run again with 16-bit values on the wire
// ("allreduce+fp16"), and with fp16 DDP runs again with its fp16_compress_hook ("ddp+fp16"; its
// bf16 hook needs a backend that sums bfloat16, which gloo is not). Every process gets its place
// as a pod does: kubetrain's TF_CONFIG with the sandboxes' IPs (the job's secret, no shared
// memory with the ps), torch's rank 0 address; one compute thread each. Both sides evaluate the
// test set after every epoch on the chief and checkpoint every 30 s and at the end; their timing
// runs from training's start (data loaded) to the end of the final evaluation.
//
// Per row: examples/s over the run; the steady-state step time (kubetrain: the median over the
// chief's progress lines, one a second, after the first; DDP: the median of rank 0's steps after
// the first two) beside the alpha-beta model's time for one step's exchange at the configured rate
// R, 2(N-1)/N·M/R for every mode here (the ring's, and ps with one shard per node's; M the model's
// bytes on the wire); seconds to the first evaluation at or above --target-accuracy; the final
// accuracy; and examples/s over DDP's in float32 and over DDP's with the row's wire ("/ddp wire":
// allreduce+fp16 over ddp+fp16).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/network/cases.h"

namespace kubetrain::network_bench {

struct TrainResult {
  std::string mode;
  double examples_per_sec = 0;
  double wall_seconds = 0;
  double accuracy = 0;            // the final evaluation's
  double seconds_to_target = -1;  // negative: no evaluation reached --target-accuracy
  double step_seconds = 0;        // the steady-state step: median after the warm-up

  double exchange_model_seconds = 0;
};

// The training modes --train-modes may name, in the order they run.
const std::vector<std::string>& TrainModes();

// Runs every --train-modes mode (ddp skipped, with a note, where python3 lacks torch).
absl::StatusOr<std::vector<TrainResult>> RunTraining(Setup& s);

// The table (or, --json, one object per row).
void PrintTraining(const Setup& s, const std::vector<TrainResult>& rows);

}  // namespace kubetrain::network_bench
