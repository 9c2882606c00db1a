#include "common/program.h"

#include "absl/synchronization/mutex.h"

namespace kubetrain {

void SetUpProgram() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace kubetrain
