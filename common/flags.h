// Typed command-line flags with environment-variable fallback, parsed once in main into a
// struct the program passes down (no global flag registry).
//
//   struct Options { int port = 2222; std::string data_dir = "/usr/share/datasets/fashion-mnist";
//   }; Options opt; FlagSet flags("kubetrain-ps", "Serves variables to workers.");
//   flags.Add("port", &opt.port, "gRPC port", "KUBETRAIN_PORT").Port();
//   ASSIGN_OR_RETURN(std::vector<std::string> args, flags.Parse(argc, argv));
//
// Precedence: a flag on the command line, then its environment variable, then the default.
// Accepted forms: --name=value, --name value, and for booleans --name, --name=false, --no-name.
// `--` ends flag parsing. Parse returns CANCELLED after printing help for -h/--help.
// Not thread-safe; use from main.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kubetrain {

// Whether `status` is Parse's answer to -h/--help (help printed; the program exits 0).
bool HelpRequested(const absl::Status& status);

// For a program's main() after Parse (or a ParseFlags built on it) failed: 0 after --help;
// otherwise writes "<program>: <message>" to stderr and returns 2, the usage-error code.
int UsageExit(absl::string_view program, const absl::Status& status);

class FlagSet {
 public:
  // The accepted range of a numeric or duration flag, checked for the command line and the
  // environment alike, so an out-of-range value is refused with the flag's name instead of
  // being used (a port of 99999 would otherwise wrap or pick a random port). Both ends are
  // inclusive; unset ends are unbounded.
  class Limits {
   public:
    Limits& Range(double min, double max);
    Limits& AtLeast(double min);
    Limits& Port() { return Range(0, 65535); }
    Limits& Range(absl::Duration min, absl::Duration max);
    Limits& AtLeast(absl::Duration min);

    bool Contains(double value) const;
    bool Contains(absl::Duration value) const;
    // " from 0 to 65535", " >= 0s", ...; "" when unbounded. Completes "must be an integer".
    std::string Describe() const;

   private:
    std::optional<double> min_, max_;
    std::optional<absl::Duration> min_duration_, max_duration_;
  };

  FlagSet(std::string program, std::string summary);

  void Add(absl::string_view name, std::string* target, absl::string_view help,
           absl::string_view env = "");
  // The numeric flag types: int, int64_t, uint64_t (which refuses a negative value) and double.
  template <typename T>
  static constexpr bool kIsNumber = std::is_same_v<T, int> || std::is_same_v<T, int64_t> ||
                                    std::is_same_v<T, uint64_t> || std::is_same_v<T, double>;
  template <typename Number>
  Limits& Add(absl::string_view name, Number* target, absl::string_view help,
              absl::string_view env = "") requires kIsNumber<Number>;
  void Add(absl::string_view name, bool* target, absl::string_view help,
           absl::string_view env = "");
  // A boolean that may stay unset (nullopt), leaving the choice to the program.
  void Add(absl::string_view name, std::optional<bool>* target, absl::string_view help,
           absl::string_view env = "");
  // Durations as Go/absl strings: "30s", "1m30s", "500ms"; a bare number means seconds.
  Limits& Add(absl::string_view name, absl::Duration* target, absl::string_view help,
              absl::string_view env = "");
  // A flag that may be given several times; each value is appended.
  void Add(absl::string_view name, std::vector<std::string>* target, absl::string_view help,
           absl::string_view env = "");

  // Positional argument names shown in the usage line, e.g. "FILE...".
  void SetPositionalUsage(absl::string_view usage) { positional_usage_ = std::string(usage); }

  // Parses argv[1..]; returns the positional arguments. Writes help to stdout for --help.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, const char* const* argv);
  absl::StatusOr<std::vector<std::string>> Parse(const std::vector<std::string>& args);

  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string env;
    std::string default_text;
    bool is_bool = false;
    std::function<absl::Status(absl::string_view)> set;
    // Shared with `set`, which checks parsed values against it; null for unbounded types.
    std::shared_ptr<Limits> limits;
  };

  void AddFlag(Flag flag);
  Limits& AddLimited(Flag flag, std::shared_ptr<Limits> limits);
  absl::Status Set(const Flag& flag, absl::string_view value, absl::string_view source);
  absl::Status ApplyEnvironment(const std::map<std::string, bool>& seen);
  std::string Suggest(absl::string_view name) const;

  std::string program_;
  std::string summary_;
  std::string positional_usage_;
  std::vector<Flag> flags_;
};

}  // namespace kubetrain
