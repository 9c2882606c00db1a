// Makes Debian's abseil Mutex and CondVar visible to ThreadSanitizer. libabsl_synchronization is
// built without TSan, so its lock and unlock are invisible: every access guarded by an
// absl::Mutex (the parameter server's, and gRPC's own through gpr_mu) looks like a race. This
// file, linked into every program of a TSan build (cmake/TsanRuntime.cmake), defines the Mutex
// and CondVar entry points ahead of libabsl (the program exports them, so the shared libraries'
// calls come here too), tells TSan about each acquire and release, and calls the real function,
// the next definition (libabsl's). Compiled without TSan; in a process without it the
// annotations are absent and every call goes straight through. The symbols are those of
// Debian 12's abseil (inline namespace debian3); against another build nothing is interposed and
// the reports come back.
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>

extern "C" {
void __tsan_mutex_pre_lock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion) __attribute__((weak));
int __tsan_mutex_pre_unlock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_unlock(void* addr, unsigned flags) __attribute__((weak));
}

namespace {

constexpr unsigned kRead = 1 << 3;       // __tsan_mutex_read_lock
constexpr unsigned kTry = 1 << 4;        // __tsan_mutex_try_lock
constexpr unsigned kTryFailed = 1 << 5;  // __tsan_mutex_try_lock_failed

// Set while a function below runs on this thread: abseil calls some of its own entry points
// (CondVar::WaitWithTimeout calls WaitWithDeadline), and only the outermost call is annotated.
thread_local bool inside = false;

bool Annotate() { return __tsan_mutex_pre_lock != nullptr && !inside; }

// Marks the calling thread as inside an annotated call for its lifetime, when it is the
// outermost one.
class Outermost {
 public:
  Outermost() : outermost_(!inside) { inside = true; }
  ~Outermost() {
    if (outermost_) inside = false;
  }
  Outermost(const Outermost&) = delete;
  Outermost& operator=(const Outermost&) = delete;

 private:
  bool outermost_;
};

// The mutexes this thread holds as a reader, so that Await on one is annotated as a reader's
// release and reacquire.
thread_local void* read_held[16];
thread_local int read_count = 0;

void HeldAsReader(void* mu) {
  if (read_count < 16) read_held[read_count++] = mu;
}
void ReleasedAsReader(void* mu) {
  for (int i = read_count - 1; i >= 0; --i) {
    if (read_held[i] == mu) {
      read_held[i] = read_held[--read_count];
      return;
    }
  }
}
// kRead when this thread holds `mu` as a reader, else 0.
unsigned Mode(void* mu) {
  for (int i = 0; i < read_count; ++i) {
    if (read_held[i] == mu) return kRead;
  }
  return 0;
}

void PreLock(void* mu, unsigned flags) {
  if (Annotate()) __tsan_mutex_pre_lock(mu, flags);
}
void PostLock(void* mu, unsigned flags) {
  if (Annotate()) __tsan_mutex_post_lock(mu, flags, 0);
}
void PreUnlock(void* mu, unsigned flags) {
  if (Annotate()) __tsan_mutex_pre_unlock(mu, flags);
}
void PostUnlock(void* mu, unsigned flags) {
  if (Annotate()) __tsan_mutex_post_unlock(mu, flags);
}

// absl::Duration and absl::Time: an int64 and a uint32, passed by value in two registers.
struct Duration {
  int64_t hi;
  uint32_t lo;
};
using Time = Duration;
struct Condition;

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) abort();
  return reinterpret_cast<F>(f);
}

// Calls the real entry point with this thread marked as inside one.
template <typename F, typename... Args>
auto CallReal(F real, Args... args) {
  Outermost outermost;
  return real(args...);
}

#define REAL(name, type)                      \
  static const auto real = Real<type>(#name); \
  (void)0

}  // namespace

// Each function below is named by the mangled symbol of the abseil member it stands in for;
// `self` is the Mutex or CondVar.
extern "C" {

// Mutex::Lock(), ReaderLock(), TryLock(), ReaderTryLock().
void MutexLock(void* self) __asm__("_ZN4absl7debian35Mutex4LockEv");
void MutexLock(void* self) {
  REAL(_ZN4absl7debian35Mutex4LockEv, void (*)(void*));
  PreLock(self, 0);
  CallReal(real, self);
  PostLock(self, 0);
}
void MutexReaderLock(void* self) __asm__("_ZN4absl7debian35Mutex10ReaderLockEv");
void MutexReaderLock(void* self) {
  REAL(_ZN4absl7debian35Mutex10ReaderLockEv, void (*)(void*));
  PreLock(self, kRead);
  CallReal(real, self);
  PostLock(self, kRead);
  HeldAsReader(self);
}
bool MutexTryLock(void* self) __asm__("_ZN4absl7debian35Mutex7TryLockEv");
bool MutexTryLock(void* self) {
  REAL(_ZN4absl7debian35Mutex7TryLockEv, bool (*)(void*));
  PreLock(self, kTry);
  bool locked = CallReal(real, self);
  PostLock(self, locked ? kTry : kTry | kTryFailed);
  return locked;
}
bool MutexReaderTryLock(void* self) __asm__("_ZN4absl7debian35Mutex13ReaderTryLockEv");
bool MutexReaderTryLock(void* self) {
  REAL(_ZN4absl7debian35Mutex13ReaderTryLockEv, bool (*)(void*));
  PreLock(self, kRead | kTry);
  bool locked = CallReal(real, self);
  PostLock(self, locked ? kRead | kTry : kRead | kTry | kTryFailed);
  if (locked) HeldAsReader(self);
  return locked;
}

// Mutex::Unlock(), ReaderUnlock(). TSan releases at the pre-unlock annotation and ignores the
// accesses up to the post one, which covers the conditions abseil evaluates while unlocking.
void MutexUnlock(void* self) __asm__("_ZN4absl7debian35Mutex6UnlockEv");
void MutexUnlock(void* self) {
  REAL(_ZN4absl7debian35Mutex6UnlockEv, void (*)(void*));
  PreUnlock(self, 0);
  CallReal(real, self);
  PostUnlock(self, 0);
}
void MutexReaderUnlock(void* self) __asm__("_ZN4absl7debian35Mutex12ReaderUnlockEv");
void MutexReaderUnlock(void* self) {
  REAL(_ZN4absl7debian35Mutex12ReaderUnlockEv, void (*)(void*));
  PreUnlock(self, kRead);
  CallReal(real, self);
  PostUnlock(self, kRead);
  ReleasedAsReader(self);
}

// Mutex::LockWhen*, ReaderLockWhen*: acquire, holding the mutex on return whatever they return.
void MutexLockWhen(void* self,
                   const Condition* c) __asm__("_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
void MutexLockWhen(void* self, const Condition* c) {
  REAL(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, void (*)(void*, const Condition*));
  PreLock(self, 0);
  CallReal(real, self, c);
  PostLock(self, 0);
}
void MutexReaderLockWhen(void* self, const Condition* c) __asm__(
    "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
void MutexReaderLockWhen(void* self, const Condition* c) {
  REAL(_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE, void (*)(void*, const Condition*));
  PreLock(self, kRead);
  CallReal(real, self, c);
  PostLock(self, kRead);
  HeldAsReader(self);
}
bool MutexLockWhenWithTimeout(void* self, const Condition* c, Duration d) __asm__(
    "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool MutexLockWhenWithTimeout(void* self, const Condition* c, Duration d) {
  REAL(_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
       bool (*)(void*, const Condition*, Duration));
  PreLock(self, 0);
  bool met = CallReal(real, self, c, d);
  PostLock(self, 0);
  return met;
}
bool MutexLockWhenWithDeadline(void* self, const Condition* c, Time t) __asm__(
    "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool MutexLockWhenWithDeadline(void* self, const Condition* c, Time t) {
  REAL(_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
       bool (*)(void*, const Condition*, Time));
  PreLock(self, 0);
  bool met = CallReal(real, self, c, t);
  PostLock(self, 0);
  return met;
}
bool MutexReaderLockWhenWithTimeout(void* self, const Condition* c, Duration d) __asm__(
    "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool MutexReaderLockWhenWithTimeout(void* self, const Condition* c, Duration d) {
  REAL(_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
       bool (*)(void*, const Condition*, Duration));
  PreLock(self, kRead);
  bool met = CallReal(real, self, c, d);
  PostLock(self, kRead);
  HeldAsReader(self);
  return met;
}
bool MutexReaderLockWhenWithDeadline(void* self, const Condition* c, Time t) __asm__(
    "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool MutexReaderLockWhenWithDeadline(void* self, const Condition* c, Time t) {
  REAL(_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
       bool (*)(void*, const Condition*, Time));
  PreLock(self, kRead);
  bool met = CallReal(real, self, c, t);
  PostLock(self, kRead);
  HeldAsReader(self);
  return met;
}

// Mutex::Await* and CondVar::Wait*: release the held mutex while waiting and hold it again on
// return, in the mode (reader or writer) it was held in.
void MutexAwait(void* self,
                const Condition* c) __asm__("_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
void MutexAwait(void* self, const Condition* c) {
  REAL(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, void (*)(void*, const Condition*));
  const unsigned mode = Mode(self);
  PreUnlock(self, mode);
  CallReal(real, self, c);
  PostUnlock(self, mode);
  PreLock(self, mode);
  PostLock(self, mode);
}
bool MutexAwaitWithTimeout(void* self, const Condition* c, Duration d) __asm__(
    "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool MutexAwaitWithTimeout(void* self, const Condition* c, Duration d) {
  REAL(_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
       bool (*)(void*, const Condition*, Duration));
  const unsigned mode = Mode(self);
  PreUnlock(self, mode);
  bool met = CallReal(real, self, c, d);
  PostUnlock(self, mode);
  PreLock(self, mode);
  PostLock(self, mode);
  return met;
}
bool MutexAwaitWithDeadline(void* self, const Condition* c, Time t) __asm__(
    "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool MutexAwaitWithDeadline(void* self, const Condition* c, Time t) {
  REAL(_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE,
       bool (*)(void*, const Condition*, Time));
  const unsigned mode = Mode(self);
  PreUnlock(self, mode);
  bool met = CallReal(real, self, c, t);
  PostUnlock(self, mode);
  PreLock(self, mode);
  PostLock(self, mode);
  return met;
}
void CondVarWait(void* self, void* mu) __asm__("_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
void CondVarWait(void* self, void* mu) {
  REAL(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, void (*)(void*, void*));
  const unsigned mode = Mode(mu);
  PreUnlock(mu, mode);
  CallReal(real, self, mu);
  PostUnlock(mu, mode);
  PreLock(mu, mode);
  PostLock(mu, mode);
}
bool CondVarWaitWithTimeout(void* self, void* mu, Duration d) __asm__(
    "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
bool CondVarWaitWithTimeout(void* self, void* mu, Duration d) {
  REAL(_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE,
       bool (*)(void*, void*, Duration));
  const unsigned mode = Mode(mu);
  PreUnlock(mu, mode);
  bool timed_out = CallReal(real, self, mu, d);
  PostUnlock(mu, mode);
  PreLock(mu, mode);
  PostLock(mu, mode);
  return timed_out;
}
bool CondVarWaitWithDeadline(void* self, void* mu, Time t) __asm__(
    "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
bool CondVarWaitWithDeadline(void* self, void* mu, Time t) {
  REAL(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE,
       bool (*)(void*, void*, Time));
  const unsigned mode = Mode(mu);
  PreUnlock(mu, mode);
  bool timed_out = CallReal(real, self, mu, t);
  PostUnlock(mu, mode);
  PreLock(mu, mode);
  PostLock(mu, mode);
  return timed_out;
}

}  // extern "C"
