// Keeps the ranks of a collective that share a host off each other's CPUs
// (docs/architecture.md §5.3). Two ranks that wait on each other (a futex, a socket) tend to be
// put on one CPU by the kernel, each waking the other onto the core it just gave up, while
// another CPU idles: a 1 MiB all-reduce then ran at a fifth of its speed, through shared memory
// and over loopback TCP alike. So the ranks on one host whose threads may use the same CPUs, at
// least one each, keep to shares of their own (the i-th of the m ranks there the i-th of m
// equal, contiguous parts of the list), as mpirun binds its ranks. Ranks alone on their host, in
// cpusets of their own, or more than the CPUs, are left where the kernel puts them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/collective/rendezvous.h"

namespace kubetrain::worker {

// The running kernel's id: the same for every container of one host, new at each boot.
std::string BootId();

// The calling thread's share of its host's CPUs while this lives; threads it starts meanwhile
// inherit it. Destruction gives that thread back the CPUs it could use before, unless they were
// changed since (by a later binding).
class CpuBinding {
 public:
  CpuBinding() = default;
  CpuBinding(CpuBinding&& other) noexcept;
  CpuBinding& operator=(CpuBinding&& other) noexcept;
  CpuBinding(const CpuBinding&) = delete;
  CpuBinding& operator=(const CpuBinding&) = delete;
  ~CpuBinding();

  // Collective: every rank calls it with the same store (keys under `prefix`), `enabled` or
  // not (a rank that is not bound still says where it is). Returns an unbound CpuBinding
  // where this rank stays where it is.
  static absl::StatusOr<CpuBinding> Bind(KeyValueStore& store, absl::string_view prefix, int rank,
                                         int size, absl::Duration timeout, bool enabled);

  // The CPUs this thread keeps to ("0,1"), or "no".
  std::string Describe() const;
  // Gives the bound thread back its CPUs now (as destruction does); idempotent.
  void Release();

 private:
  int thread_ = 0;  // the bound thread (0: none)
  std::vector<int> share_;
  std::vector<int> before_;  // the CPUs it could use before
};

}  // namespace kubetrain::worker
