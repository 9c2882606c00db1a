// network_bench's options and the programs its children run: network_bench re-executed inside a
// sandbox (a network namespace on an emulated node) with --role set. The driver, which builds the
// network and prints the table, is network_bench.cc.
//
//   --role=ring-rank  one rank of the ring all-reduce: joins the driver's CoordinatorServer and
//                     makes a GlooCommunicator listening on --host, as a training worker does;
//                     rank 0 prints one "result" line per size (bench/allreduce/pattern.h)
//   --role=ps         ps task --shard of --shards: a PsServer on --host, initialised (over its
//                     own address, so the bytes never cross the uplink) with its partitions of
//                     a sync-mode model of --sizes bytes for --nodes workers, placed as
//                     ps::PlacementPlan places a job's variables on its ps tasks; prints
//                     "ready <address>" and serves until killed
//   --role=ps-worker  one worker: PsClient push+pull (PushAndPull, sync mode) of that model
//                     against the ps tasks --ps (comma-separated, in shard order); prints its
//                     own "result" line
// ring-rank and ps-worker send 16-bit values with --gradient-compression=fp16|bf16.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bench/sizes.h"
#include "ps/half_float.h"

namespace kubetrain::network_bench {

struct Options {
  std::string sizes;  // empty: 16M,64M (--quick: 64M)
  int nodes = 2;      // ranks (workers); the 1-ps case's ps gets a node of its own
  double link_gbit = 1;
  // How each uplink queues (sandbox::UplinkQueue): "fifo" or "acks-first".
  std::string uplink_queue = "fifo";
  std::string modes = "ring,ps,ps-shards,torch-gloo,mpi";
  // "fp16" or "bf16": ring, ps and ps-shards run again with 16-bit values on the wire
  // (--gradient-compression, rows "ring+fp16"...); for a child, its own exchange's. "none": not.
  std::string compression = "none";
  // ps and ps-shards: each ps task's share moves in at most this many pieces a step
  // (ps::ClientOptions::max_pieces; 1: one PushAndPull per ps task, as before pipelining).
  int ps_pieces = 8;
  // ps and ps-shards: how far a worker's pieces may run ahead of the values it has back, MiB
  // (ps::ClientOptions::push_window_bytes; 0: no limit).
  int ps_push_window_mb = 16;
  int iters = 5;
  int warmup = 1;
  bool quick = false;
  bool json = false;
  absl::Duration timeout = absl::Minutes(5);
  // The training cases (training.h): none unless --train-model names a model.
  std::string train_model;  // a kubetrain-worker --model value: mlp, cnn, mlp:W1,W2,...
  std::string train_modes = "allreduce,ps-sync,ddp";
  int train_epochs = 3;
  int train_examples = 0;  // the first this many training examples (0: all 60,000)
  int test_examples = 0;   // the first this many test examples (0: all 10,000)
  int batch_size = 64;     // per worker
  double lr = 0.04;        // for a global batch of 128, scaled linearly with the nodes
  double target_accuracy = 0.885;
  int fusion_mb = 4;  // allreduce-overlap's --fusion-threshold-mb
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // Set by the driver on the processes it starts.
  std::string role;
  int rank = -1;
  std::string coordinator;  // ring-rank: the driver's CoordinatorServer, host:port
  std::string host;         // the sandbox's IP, to listen on
  std::string ps;           // ps-worker: the ps tasks' addresses, comma-separated
  int shard = 0;            // ps: which ps task this is
  int shards = 1;           // ps: of how many
  std::string secret;       // ring-rank: the coordinator's secret, from kSecretEnv
};

// The environment variable that hands the ring ranks the coordinator's secret.
inline constexpr char kSecretEnv[] = "NETWORK_BENCH_SECRET";

// "64K", "8M", "1G" or a byte count, comma-separated; each a positive multiple of 4 up to 4 GiB.
absl::StatusOr<std::vector<size_t>> ParseSizes(absl::string_view text);
using bench::SizeName;  // "64 MiB"

// opt.compression as a WireFloat; InvalidArgument naming the flag for anything else.
absl::StatusOr<ps::WireFloat> Compression(const Options& opt);

// The most pieces a ps-worker moves one ps task's share of a `bytes` model in a step, with
// `shards` ps tasks (ps::PlacementPlan::Pieces under --ps-pieces; 1: whole).
int PsPieces(const Options& opt, size_t bytes, int shards);

// Runs the child role named by opt.role.
absl::Status RunRole(const Options& opt);

}  // namespace kubetrain::network_bench
