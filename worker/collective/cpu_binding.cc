#include "worker/collective/cpu_binding.h"

#include <unistd.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process.h"
#include "common/status.h"

namespace kubetrain::worker {

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

absl::StatusOr<CpuBinding> CpuBinding::Bind(KeyValueStore& store, absl::string_view prefix,
                                            int rank, int size, absl::Duration timeout,
                                            bool enabled) {
  const std::vector<int> cpus = AllowedCpus(0);  // empty past cpu_set_t's 1024
  const std::string boot = BootId();
  // The host and the CPU list together: ranks share CPUs only where both match.
  const std::string place = absl::StrCat(boot, " ", absl::StrJoin(cpus, ","));
  RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, rank), place));
  int here = 0, index = 0;  // ranks at this place, and this rank's index among them
  for (int r = 0; r < size; ++r) {
    std::string theirs = place;
    if (r != rank) {
      ASSIGN_OR_RETURN(theirs, store.Get(absl::StrCat(prefix, r), timeout));
    }
    if (theirs != place) continue;
    if (r < rank) ++index;
    ++here;
  }
  CpuBinding binding;
  const size_t k = cpus.size(), m = static_cast<size_t>(here), i = static_cast<size_t>(index);
  if (!enabled || boot.empty() || m < 2 || k < m) return binding;
  std::vector<int> share(cpus.begin() + i * k / m, cpus.begin() + (i + 1) * k / m);
  if (!SetAllowedCpus(0, share)) return binding;  // a cpuset may refuse: stay as it was
  binding.thread_ = static_cast<int>(::gettid());
  binding.share_ = std::move(share);
  binding.before_ = cpus;
  return binding;
}

CpuBinding::CpuBinding(CpuBinding&& other) noexcept
    : thread_(std::exchange(other.thread_, 0)),
      share_(std::move(other.share_)),
      before_(std::move(other.before_)) {}

CpuBinding& CpuBinding::operator=(CpuBinding&& other) noexcept {
  if (this != &other) {
    Release();
    thread_ = std::exchange(other.thread_, 0);
    share_ = std::move(other.share_);
    before_ = std::move(other.before_);
  }
  return *this;
}

CpuBinding::~CpuBinding() { Release(); }

std::string CpuBinding::Describe() const {
  return thread_ == 0 ? "no" : absl::StrJoin(share_, ",");
}

void CpuBinding::Release() {
  if (thread_ == 0) return;
  pid_t tid = std::exchange(thread_, 0);
  // Only a thread of this process (an ended one's id may belong to another process by now), and
  // only while it still keeps to this share: whoever set other CPUs since (a later binding of
  // the same thread) decides.
  if (tid == ::gettid()) {
    tid = 0;
  } else if (::access(absl::StrCat("/proc/self/task/", tid).c_str(), F_OK) != 0) {
    return;
  }
  if (AllowedCpus(tid) == share_) SetAllowedCpus(tid, before_);
}

}  // namespace kubetrain::worker
