// network_bench's peers: the same all-reduce by other libraries, each rank in the same sandbox
// behind the same shaped uplink as kubetrain's ring rank (cases.h), timed the same way (the
// median over the timed iterations of the slowest rank's time), with the ring's model.
//
//   torch-gloo  torch.distributed.all_reduce (gloo backend, CPU float32) from torch_rank.py,
//               one python3 process per rank in its sandbox; rank 0 holds the rendezvous store.
//               Skipped, saying why, where python3 cannot import torch (Debian's python3-torch,
//               scripts/install-deps --peers).
//   mpi         OpenMPI's MPI_Allreduce (bench/allreduce/mpi_allreduce) under mpirun on the host,
//               every sandbox a "host" of its own: mpirun's rsh launcher starts one orted per
//               sandbox through this program's --role=rsh, which runs the command inside the
//               sandbox's namespace as ssh would on a remote node; ranks talk over the ob1 PML
//               and the tcp BTL on eth0 only. Skipped, saying why, without MPI at build time or
//               mpirun at run time.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/network/cases.h"

namespace kubetrain::network_bench {

// Whether python3 in a rank's sandbox imports torch.distributed with gloo; a line in s.notes
// either way, naming `mode` (PyTorch's version, or why it is skipped and how to install it).
absl::StatusOr<bool> TorchUsable(Setup& s, absl::string_view mode);

// Empty, with a line in s.notes, when the peer is not installed.
absl::StatusOr<std::vector<Result>> RunTorchGloo(Setup& s);
absl::StatusOr<std::vector<Result>> RunMpi(Setup& s);

// mpirun's launch agent (--role=rsh HOST COMMAND...): runs COMMAND (the words joined, through
// /bin/sh as ssh runs it) inside the network namespace of the sandbox whose IP is HOST, from the
// IP=netns=name list in kNodesEnv, in a UTS namespace with that name as its host name and with
// TMPDIR a folder of that name under kNodesTmpEnv. Returns only on failure, with the exit code.
int RunRsh(const std::vector<std::string>& args);

inline constexpr char kNodesEnv[] = "NETWORK_BENCH_NODES";
inline constexpr char kNodesTmpEnv[] = "NETWORK_BENCH_NODES_TMP";

}  // namespace kubetrain::network_bench
