#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kubetrain {

namespace {

constexpr char kHelpRequested[] = "help requested";

absl::Status BadValue(absl::string_view what, absl::string_view source, absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": must be ", what, ", got \"", value, "\""));
}

bool ParseBool(absl::string_view text, bool* out) {
  if (text == "true" || text == "1" || text == "yes") {
    *out = true;
    return true;
  }
  if (text == "false" || text == "0" || text == "no") {
    *out = false;
    return true;
  }
  return false;
}

// Levenshtein distance, for "did you mean" suggestions on misspelt flags.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

FlagSet::Limits& FlagSet::Limits::Range(double min, double max) {
  min_ = min;
  max_ = max;
  return *this;
}

FlagSet::Limits& FlagSet::Limits::AtLeast(double min) {
  min_ = min;
  return *this;
}

FlagSet::Limits& FlagSet::Limits::Range(absl::Duration min, absl::Duration max) {
  min_duration_ = min;
  max_duration_ = max;
  return *this;
}

FlagSet::Limits& FlagSet::Limits::AtLeast(absl::Duration min) {
  min_duration_ = min;
  return *this;
}

bool FlagSet::Limits::Contains(double value) const {
  return (!min_ || value >= *min_) && (!max_ || value <= *max_);
}

bool FlagSet::Limits::Contains(absl::Duration value) const {
  return (!min_duration_ || value >= *min_duration_) && (!max_duration_ || value <= *max_duration_);
}

std::string FlagSet::Limits::Describe() const {
  auto describe = [](const auto& min, const auto& max, auto format) -> std::string {
    if (min && max) return absl::StrCat(" from ", format(*min), " to ", format(*max));
    if (min) return absl::StrCat(" >= ", format(*min));
    if (max) return absl::StrCat(" <= ", format(*max));
    return "";
  };
  return describe(min_, max_, [](double v) { return absl::StrCat(v); }) +
         describe(min_duration_, max_duration_,
                  [](absl::Duration d) { return absl::FormatDuration(d); });
}

FlagSet::FlagSet(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagSet::AddFlag(Flag flag) { flags_.push_back(std::move(flag)); }

FlagSet::Limits& FlagSet::AddLimited(Flag flag, std::shared_ptr<Limits> limits) {
  flag.limits = std::move(limits);
  Limits& out = *flag.limits;
  AddFlag(std::move(flag));
  return out;
}

void FlagSet::Add(absl::string_view name, std::string* target, absl::string_view help,
                  absl::string_view env) {
  AddFlag({std::string(name), std::string(help), std::string(env),
           target->empty() ? "" : absl::StrCat("\"", *target, "\""), false,
           [target](absl::string_view v) {
             *target = std::string(v);
             return absl::OkStatus();
           }});
}

template <typename Number>
FlagSet::Limits& FlagSet::Add(absl::string_view name, Number* target, absl::string_view help,
                              absl::string_view env) requires kIsNumber<Number> {
  auto limits = std::make_shared<Limits>();
  return AddLimited(
      {std::string(name), std::string(help), std::string(env), absl::StrCat(*target), false,
       [target, limits](absl::string_view v) {
         constexpr absl::string_view kWhat = std::is_floating_point_v<Number> ? "a number"
                                             : std::is_signed_v<Number>       ? "an integer"
                                                                        : "a non-negative integer";
         Number parsed;
         bool ok;
         if constexpr (std::is_floating_point_v<Number>) {
           ok = absl::SimpleAtod(v, &parsed);
         } else {
           ok = absl::SimpleAtoi(v, &parsed);
         }
         if (!ok || !limits->Contains(static_cast<double>(parsed))) {
           return absl::InvalidArgumentError(absl::StrCat(kWhat, limits->Describe()));
         }
         *target = parsed;
         return absl::OkStatus();
       }},
      limits);
}
template FlagSet::Limits& FlagSet::Add(absl::string_view, int*, absl::string_view,
                                       absl::string_view);
template FlagSet::Limits& FlagSet::Add(absl::string_view, int64_t*, absl::string_view,
                                       absl::string_view);
template FlagSet::Limits& FlagSet::Add(absl::string_view, uint64_t*, absl::string_view,
                                       absl::string_view);
template FlagSet::Limits& FlagSet::Add(absl::string_view, double*, absl::string_view,
                                       absl::string_view);

void FlagSet::Add(absl::string_view name, bool* target, absl::string_view help,
                  absl::string_view env) {
  AddFlag({std::string(name), std::string(help), std::string(env), *target ? "true" : "false", true,
           [target](absl::string_view v) {
             bool parsed;
             if (!ParseBool(v, &parsed)) return absl::InvalidArgumentError("true or false");
             *target = parsed;
             return absl::OkStatus();
           }});
}

void FlagSet::Add(absl::string_view name, std::optional<bool>* target, absl::string_view help,
                  absl::string_view env) {
  AddFlag({std::string(name), std::string(help), std::string(env),
           target->has_value() ? (**target ? "true" : "false") : "unset", true,
           [target](absl::string_view v) {
             bool parsed;
             if (!ParseBool(v, &parsed)) return absl::InvalidArgumentError("true or false");
             *target = parsed;
             return absl::OkStatus();
           }});
}

FlagSet::Limits& FlagSet::Add(absl::string_view name, absl::Duration* target,
                              absl::string_view help, absl::string_view env) {
  auto limits = std::make_shared<Limits>();
  return AddLimited(
      {std::string(name), std::string(help), std::string(env), absl::FormatDuration(*target), false,
       [target, limits](absl::string_view v) {
         absl::Duration parsed;
         double seconds;
         if (absl::SimpleAtod(v, &seconds)) {
           parsed = absl::Seconds(seconds);
         } else if (!absl::ParseDuration(v, &parsed)) {
           return absl::InvalidArgumentError(
               absl::StrCat("a duration such as 30s, 2m or 500ms", limits->Describe()));
         }
         if (!limits->Contains(parsed)) {
           return absl::InvalidArgumentError(absl::StrCat("a duration", limits->Describe()));
         }
         *target = parsed;
         return absl::OkStatus();
       }},
      limits);
}

void FlagSet::Add(absl::string_view name, std::vector<std::string>* target, absl::string_view help,
                  absl::string_view env) {
  AddFlag({std::string(name), std::string(help), std::string(env), absl::StrJoin(*target, ","),
           false, [target](absl::string_view v) {
             target->emplace_back(v);
             return absl::OkStatus();
           }});
}

absl::Status FlagSet::Set(const Flag& flag, absl::string_view value, absl::string_view source) {
  absl::Status s = flag.set(value);
  if (s.ok()) return s;
  return BadValue(s.message(), source, value);
}

std::string FlagSet::Suggest(absl::string_view name) const {
  const Flag* best = nullptr;
  size_t best_distance = 3;
  for (const Flag& f : flags_) {
    size_t d = EditDistance(name, f.name);
    if (d < best_distance) {
      best = &f;
      best_distance = d;
    }
  }
  return best ? absl::StrCat("; did you mean --", best->name, "?") : "";
}

absl::Status FlagSet::ApplyEnvironment(const std::map<std::string, bool>& seen) {
  for (const Flag& f : flags_) {
    if (f.env.empty() || seen.count(f.name)) continue;
    const char* value = std::getenv(f.env.c_str());
    if (value == nullptr) continue;
    absl::Status s = Set(f, value, absl::StrCat("environment variable ", f.env));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return Parse(args);
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  std::map<std::string, bool> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      std::cout << Help();
      return absl::CancelledError(kHelpRequested);
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      positional.push_back(arg);
      continue;
    }
    absl::string_view body = arg;
    body.remove_prefix(absl::StartsWith(body, "--") ? 2 : 1);
    std::string name(body.substr(0, body.find('=')));
    std::optional<std::string> value;
    if (body.find('=') != absl::string_view::npos)
      value = std::string(body.substr(name.size() + 1));

    auto it =
        std::find_if(flags_.begin(), flags_.end(), [&](const Flag& f) { return f.name == name; });
    if (it == flags_.end() && absl::StartsWith(name, "no-") && !value) {
      auto neg = std::find_if(flags_.begin(), flags_.end(),
                              [&](const Flag& f) { return f.is_bool && f.name == name.substr(3); });
      if (neg != flags_.end()) {
        absl::Status s = Set(*neg, "false", absl::StrCat("--", name));
        if (!s.ok()) return s;
        seen[neg->name] = true;
        continue;
      }
    }
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, Suggest(name), " (see ", program_, " --help)"));
    }
    if (!value) {
      if (it->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": needs a value"));
      }
    }
    absl::Status s = Set(*it, *value, absl::StrCat("--", name));
    if (!s.ok()) return s;
    seen[name] = true;
  }
  absl::Status env = ApplyEnvironment(seen);
  if (!env.ok()) return env;
  return positional;
}

std::string FlagSet::Help() const {
  std::string out =
      absl::StrCat("Usage: ", program_, " [flags]", positional_usage_.empty() ? "" : " ",
                   positional_usage_, "\n\n", summary_, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("  --", f.name, f.is_bool ? "" : " VALUE");
    absl::StrAppend(&out, absl::StrFormat("%-28s %s", left, f.help));
    const std::string range = f.limits ? f.limits->Describe() : "";
    if (!f.default_text.empty()) {
      absl::StrAppend(&out, " (default ", f.default_text, range.empty() ? "" : ";", range, ")");
    } else if (!range.empty()) {
      absl::StrAppend(&out, " (", absl::StripLeadingAsciiWhitespace(range), ")");
    }
    if (!f.env.empty()) absl::StrAppend(&out, " [$", f.env, "]");
    out += "\n";
  }
  absl::StrAppend(&out, absl::StrFormat("%-28s %s\n", "  -h, --help", "show this help"));
  return out;
}

bool HelpRequested(const absl::Status& status) {
  return status.code() == absl::StatusCode::kCancelled && status.message() == kHelpRequested;
}

int UsageExit(absl::string_view program, const absl::Status& status) {
  if (HelpRequested(status)) return 0;
  std::fprintf(stderr, "%s: %s\n", std::string(program).c_str(),
               std::string(status.message()).c_str());
  return 2;
}

}  // namespace kubetrain
