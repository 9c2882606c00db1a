#include "worker/collective/shm_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kubetrain::worker {
namespace {

struct WatchedMapping {
  std::atomic<bool> used{false};   // claimed by a guard
  std::atomic<uintptr_t> base{0};  // 0 while not watched; set last, cleared first
  std::atomic<size_t> bytes{0};
  std::atomic<uint32_t> faulted{0};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<size_t>::is_always_lock_free);

WatchedMapping g_watched[ShmFaultGuard::kMaxWatched];
struct sigaction g_previous_sigbus;  // written once, before the handler can run
std::once_flag g_sigbus_installed;

// Whether `previous` is a handler function rather than SIG_DFL or SIG_IGN.
bool IsFunction(const struct sigaction& previous) {
  return previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // si_code > 0: raised by the kernel for an access (SI_USER, SI_QUEUE, SI_TKILL are <= 0).
  if (info != nullptr && info->si_code > 0) {
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    for (WatchedMapping& w : g_watched) {
      const uintptr_t base = w.base.load(std::memory_order_acquire);
      const size_t bytes = w.bytes.load(std::memory_order_relaxed);
      if (base == 0 || address < base || address - base >= bytes) continue;
      void* p = ::mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED) break;  // cannot recover: die of SIGBUS below
      w.faulted.store(1, std::memory_order_release);
      errno = saved_errno;
      return;  // the access runs again, on the anonymous memory
    }
  }
  if (IsFunction(g_previous_sigbus)) {
    if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
      g_previous_sigbus.sa_sigaction(sig, info, context);
    } else {
      g_previous_sigbus.sa_handler(sig);
    }
    errno = saved_errno;
    return;
  }
  // The default action, as though this handler had never been installed: a fault happens again
  // when the access runs again; a sent signal is sent again, delivered once this returns.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(SIGBUS);
  errno = saved_errno;
}

void InstallSigbusHandler() {
  struct sigaction ours {};
  ours.sa_sigaction = &OnSigbus;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  ::sigaction(SIGBUS, &ours, &g_previous_sigbus);
}

}  // namespace

absl::StatusOr<ShmFaultGuard> ShmFaultGuard::Watch(void* base, size_t bytes) {
  std::call_once(g_sigbus_installed, InstallSigbusHandler);
  for (int i = 0; i < kMaxWatched; ++i) {
    WatchedMapping& w = g_watched[i];
    bool expected = false;
    if (!w.used.compare_exchange_strong(expected, true)) continue;
    w.faulted.store(0, std::memory_order_relaxed);
    w.bytes.store(bytes, std::memory_order_relaxed);
    w.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return ShmFaultGuard(i);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("more than ", kMaxWatched, " shared-memory segments mapped at once"));
}

ShmFaultGuard& ShmFaultGuard::operator=(ShmFaultGuard&& other) noexcept {
  if (this != &other) {
    this->~ShmFaultGuard();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

ShmFaultGuard::~ShmFaultGuard() {
  if (slot_ < 0) return;
  WatchedMapping& w = g_watched[slot_];
  w.base.store(0, std::memory_order_release);
  w.bytes.store(0, std::memory_order_relaxed);
  w.used.store(false, std::memory_order_release);
  slot_ = -1;
}

bool ShmFaultGuard::faulted() const {
  return slot_ >= 0 && g_watched[slot_].faulted.load(std::memory_order_acquire) != 0;
}

}  // namespace kubetrain::worker
