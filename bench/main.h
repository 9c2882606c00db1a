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
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/flags.h"
#include "common/logging.h"

namespace kubetrain::bench {

// A failed run: "<program>: <status>" on stderr, and the exit status 1.
inline int FailureExit(absl::string_view program, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", std::string(program).c_str(), status.ToString().c_str());
  return 1;
}

inline int RunMain(absl::string_view program, FlagSet& flags, int argc, char** argv,
                   absl::FunctionRef<absl::Status()> run) {
  auto args = flags.Parse(argc, argv);
  if (!args.ok()) return UsageExit(program, args.status());
  log::SetLevel(log::Level::kWarn);
  if (absl::Status s = run(); !s.ok()) return FailureExit(program, s);
  return 0;
}

// The end of a main() whose run makes a report: a failed run as FailureExit says; else the
// report, as indented JSON with --json (to_json returns an nlohmann::json) or as print_table
// prints it, and the exit status 0.
template <typename Report, typename ToJson, typename PrintTable>
int ReportExit(absl::string_view program, const absl::StatusOr<Report>& report, bool json,
               ToJson to_json, PrintTable print_table) {
  if (!report.ok()) return FailureExit(program, report.status());
  if (json) {
    std::printf("%s\n", to_json(*report).dump(2).c_str());
  } else {
    print_table(*report);
  }
  return 0;
}

}  // namespace kubetrain::bench
