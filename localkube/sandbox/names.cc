#include "localkube/sandbox/names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::sandbox {
namespace {

bool IsLowerHex(char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); }

bool HasInstancePrefix(absl::string_view family, absl::string_view object) {
  if (object.size() < family.size() + 5 || !absl::StartsWith(object, family)) return false;
  for (char c : object.substr(family.size(), 4)) {
    if (!IsLowerHex(c)) return false;
  }
  return true;
}

// The third and second octets of a /24 counted from 198.18.0.0.
std::string Net24(int block, int node) {
  const int index = block * kMaxNodes + node;
  return absl::StrCat("198.", 18 + index / 256, ".", index % 256);
}

}  // namespace

absl::Status ValidateFamily(absl::string_view family) {
  bool ok = !family.empty() && family.size() <= 3;
  for (char c : family) ok = ok && absl::ascii_islower(c);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "sandbox name family \"", family, "\" must be 1 to 3 lowercase letters, e.g. \"kt\""));
}

absl::Status ValidatePrefix(absl::string_view family, absl::string_view prefix) {
  if (prefix.size() == family.size() + 4 && absl::StartsWith(prefix, family) &&
      HasInstancePrefix(family, absl::StrCat(prefix, "-"))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "sandbox prefix \"", prefix, "\" must be the family \"", family,
      "\" and 4 lowercase hex digits, e.g. \"", family, "00a1\"; or empty to pick one"));
}

absl::Status ValidateSandboxName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 && absl::ascii_isalnum(name[0]);
  for (char c : name) {
    ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sandbox name \"", name,
                   "\" must be 1 to 63 of a-z, 0-9, '-' and '.', starting with a letter or digit"));
}

std::optional<std::string> InstanceOfLink(absl::string_view family, absl::string_view object) {
  if (!HasInstancePrefix(family, object) || object.size() < family.size() + 6) return std::nullopt;
  const char kind = object[family.size() + 4];
  if ((kind != 'b' && kind != 'i' && kind != 'v') ||
      !absl::ascii_isdigit(object[family.size() + 5])) {
    return std::nullopt;
  }
  return std::string(object.substr(0, family.size() + 4));
}

std::optional<std::string> InstanceOfNetns(absl::string_view family, absl::string_view object) {
  if (!HasInstancePrefix(family, object) || object[family.size() + 4] != '-') return std::nullopt;
  return std::string(object.substr(0, family.size() + 4));
}

uint32_t LinkGroup(absl::string_view prefix) {
  uint32_t group = 0;
  const size_t letters = prefix.size() - 4;
  for (char c : prefix.substr(0, letters)) group = group * 32 + static_cast<uint32_t>(c - 'a' + 1);
  for (char c : prefix.substr(letters)) {
    group = group * 16 + static_cast<uint32_t>(absl::ascii_isdigit(c) ? c - '0' : c - 'a' + 10);
  }
  return group;
}

std::string BridgeName(absl::string_view prefix, int node) {
  return absl::StrCat(prefix, "b", node);
}
std::string IfbName(absl::string_view prefix, int node) { return absl::StrCat(prefix, "i", node); }
std::string VethName(absl::string_view prefix, int node, int serial) {
  return absl::StrCat(prefix, "v", node, "s", serial);
}
std::string NetnsName(absl::string_view prefix, int node, absl::string_view sandbox) {
  return absl::StrCat(prefix, "-", node, "-", sandbox);
}

std::string BlockCidr(int block) { return absl::StrCat(Net24(block, 0), ".0/20"); }
std::string NodeCidr(int block, int node) { return absl::StrCat(Net24(block, node), ".0/24"); }
std::string NodeAddress(int block, int node, int host) {
  return absl::StrCat(Net24(block, node), ".", host);
}

}  // namespace kubetrain::sandbox
