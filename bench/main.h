// The part of a benchmark's main() that every benchmark shares: parse the flags (after --help:
// exit 0; a bad flag: "<program>: <message>", exit 2), keep the log to warnings (the servers'
// and ranks' info lines would split the result tables), run, and report a failure as
// "<program>: <status>" with exit 1.
//
//   int main(int argc, char** argv) {
//     Options o;
//     kubetrain::FlagSet flags("scaling", "...");
//     flags.Add("epochs", &o.epochs, "epochs per run");
//     return kubetrain::bench::RunMain("scaling", flags, argc, argv, [&] { return Run(o); });
//   }
#pragma once

#include <cstdio>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/flags.h"
#include "common/logging.h"

namespace kubetrain::bench {

inline int RunMain(absl::string_view program, FlagSet& flags, int argc, char** argv,
                   absl::FunctionRef<absl::Status()> run) {
  auto args = flags.Parse(argc, argv);
  if (!args.ok()) return UsageExit(program, args.status());
  log::SetLevel(log::Level::kWarn);
  if (absl::Status s = run(); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", std::string(program).c_str(), s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kubetrain::bench
