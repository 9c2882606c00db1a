#include "operator/api/restart.h"

#include <string.h>

#include "absl/strings/str_cat.h"

namespace kubetrain::api {

ExitAction DecideExit(RestartPolicy policy, int exit_code) {
  if (exit_code == 0) return ExitAction::kSucceeded;
  switch (policy) {
    case RestartPolicy::kAlways:
    case RestartPolicy::kOnFailure:
      return ExitAction::kRestart;
    case RestartPolicy::kNever:
      return ExitAction::kFail;
    case RestartPolicy::kExitCode:
      return exit_code >= 128 ? ExitAction::kRestart : ExitAction::kFail;
  }
  return ExitAction::kFail;
}

std::string DescribeExit(int exit_code) {
  std::string text = absl::StrCat("exited with code ", exit_code);
  if (exit_code > 128 && exit_code < 128 + 65) {
    const char* abbrev = sigabbrev_np(exit_code - 128);
    if (abbrev != nullptr) absl::StrAppend(&text, " (SIG", abbrev, ")");
  }
  return text;
}

}  // namespace kubetrain::api
