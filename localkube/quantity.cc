// resource.Quantity (see quantity.h): apimachinery's ParseQuantity scanner, rounding up to nano
// units, comparison, and the canonical String() form, on decimal digit strings.
#include "localkube/quantity.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::localkube {
namespace {

constexpr char kFormatWrong[] =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
constexpr char kSuffixWrong[] = "unable to parse quantity's suffix";

std::string StripLeadingZeros(std::string digits) {
  size_t first = digits.find_first_not_of('0');
  return first == std::string::npos ? "0" : digits.substr(first);
}

// Moves trailing zeros of q's digits into its exponent.
Quantity Normalized(Quantity q) {
  if (q.digits == "0") {
    q.exponent = 0;
    return q;
  }
  size_t last = q.digits.find_last_not_of('0');
  q.exponent += static_cast<int>(q.digits.size() - last - 1);
  q.digits.resize(last + 1);
  return q;
}

// digits * m, for a small m.
std::string MultiplySmall(const std::string& digits, int m) {
  std::string out;
  int carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    int v = (*it - '0') * m + carry;
    out.push_back(static_cast<char>('0' + v % 10));
    carry = v / 10;
  }
  while (carry > 0) {
    out.push_back(static_cast<char>('0' + carry % 10));
    carry /= 10;
  }
  std::reverse(out.begin(), out.end());
  return StripLeadingZeros(out);
}

// digits / d when it divides exactly; false otherwise.
bool DivideExact(const std::string& digits, int d, std::string* quotient) {
  std::string q;
  int64_t rem = 0;
  for (char c : digits) {
    rem = rem * 10 + (c - '0');
    q.push_back(static_cast<char>('0' + rem / d));
    rem %= d;
  }
  if (rem != 0) return false;
  *quotient = StripLeadingZeros(q);
  return true;
}

int FloorDiv3(int e) { return e >= 0 ? e / 3 : -((-e + 2) / 3); }

}  // namespace

absl::StatusOr<Quantity> ParseQuantity(absl::string_view str) {
  const absl::Status format_wrong = absl::InvalidArgumentError(kFormatWrong);
  if (str.empty()) return format_wrong;
  Quantity q;
  if (str == "0") return q;
  // The scanner of apimachinery's parseQuantityString.
  size_t pos = 0, end = str.size();
  if (str[0] == '-') {
    q.negative = true;
    ++pos;
  } else if (str[0] == '+') {
    ++pos;
  }
  while (pos < end && str[pos] == '0') ++pos;
  if (pos >= end) {
    q.negative = false;
    return q;
  }
  size_t i = pos;
  while (i < end && absl::ascii_isdigit(str[i])) ++i;
  std::string num(str.substr(pos, i - pos)), denom;
  pos = i;
  absl::string_view suffix;
  if (pos < end && str[pos] == '.') {
    ++pos;
    i = pos;
    while (i < end && absl::ascii_isdigit(str[i])) ++i;
    denom = std::string(str.substr(pos, i - pos));
    pos = i;
  }
  if (pos < end) {
    size_t suffix_start = pos;
    i = pos;
    while (i < end && absl::StrContains("eEinumkKMGTP", str[i])) ++i;
    if (i < end) {
      pos = i;
      if (str[pos] == '-' || str[pos] == '+') ++pos;
      i = pos;
      while (i < end && absl::ascii_isdigit(str[i])) ++i;
      if (i < end) return format_wrong;
    }
    suffix = str.substr(suffix_start);
  }
  // Suffix: decimal SI, binary SI, or a decimal exponent.
  static const std::pair<const char*, int> kDecimal[] = {{"", 0},   {"n", -9}, {"u", -6}, {"m", -3},
                                                         {"k", 3},  {"M", 6},  {"G", 9},  {"T", 12},
                                                         {"P", 15}, {"E", 18}};
  static const std::pair<const char*, int> kBinary[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30},
                                                        {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  int base = 0, exponent = 0;
  for (const auto& [s, e] : kDecimal) {
    if (suffix == s) base = 10, exponent = e, q.format = Quantity::Format::kDecimalSI;
  }
  for (const auto& [s, e] : kBinary) {
    if (suffix == s) base = 2, exponent = e, q.format = Quantity::Format::kBinarySI;
  }
  if (base == 0) {
    int64_t e = 0;
    if (suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E') &&
        absl::SimpleAtoi(suffix.substr(1), &e) && e > -1000000 && e < 1000000) {
      base = 10, exponent = static_cast<int>(e), q.format = Quantity::Format::kDecimalExponent;
    } else {
      return absl::InvalidArgumentError(kSuffixWrong);
    }
  }
  q.digits = StripLeadingZeros(num + denom);
  q.exponent = -static_cast<int>(denom.size());
  if (base == 10) {
    q.exponent += exponent;
  } else {
    for (int k = 0; k < exponent; ++k) q.digits = MultiplySmall(q.digits, 2);
  }
  // Rounded up (away from zero) to nano units.
  if (q.exponent < -9 && q.digits != "0") {
    size_t drop = static_cast<size_t>(-9 - q.exponent);
    bool inexact = false;
    if (drop >= q.digits.size()) {
      q.digits = "1";
    } else {
      inexact = q.digits.find_first_not_of('0', q.digits.size() - drop) != std::string::npos;
      q.digits.resize(q.digits.size() - drop);
      q.digits = StripLeadingZeros(q.digits);
      if (inexact) {
        // +1 on the decimal string.
        std::string d = q.digits;
        int k = static_cast<int>(d.size()) - 1;
        while (k >= 0 && d[k] == '9') d[k--] = '0';
        if (k < 0) {
          d.insert(d.begin(), '1');
        } else {
          ++d[k];
        }
        q.digits = d;
      }
    }
    q.exponent = -9;
  }
  if (q.digits == "0") q.negative = false;
  return Normalized(q);
}

bool Quantity::IsInteger() const { return IsZero() || Normalized(*this).exponent >= 0; }

int CompareQuantities(const Quantity& a, const Quantity& b) {
  int sa = a.IsZero() ? 0 : (a.negative ? -1 : 1);
  int sb = b.IsZero() ? 0 : (b.negative ? -1 : 1);
  if (sa != sb) return sa < sb ? -1 : 1;
  if (sa == 0) return 0;
  Quantity x = Normalized(a), y = Normalized(b);
  int64_t mx = static_cast<int64_t>(x.digits.size()) + x.exponent;
  int64_t my = static_cast<int64_t>(y.digits.size()) + y.exponent;
  int magnitude = 0;
  if (mx != my) {
    magnitude = mx < my ? -1 : 1;
  } else {
    std::string dx = x.digits, dy = y.digits;
    size_t n = std::max(dx.size(), dy.size());
    dx.resize(n, '0');
    dy.resize(n, '0');
    magnitude = dx < dy ? -1 : (dx > dy ? 1 : 0);
  }
  return sa > 0 ? magnitude : -magnitude;
}

std::string Quantity::String() const {
  if (IsZero()) return "0";
  Quantity q = Normalized(*this);
  std::string sign = q.negative ? "-" : "";
  if (q.format == Format::kBinarySI && q.exponent >= 0) {
    Quantity k1024;
    k1024.digits = "1024";
    Quantity magnitude = q;
    magnitude.negative = false;
    if (CompareQuantities(magnitude, k1024) >= 0) {
      std::string n = q.digits + std::string(q.exponent, '0');
      static const char* kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
      int k = 0;
      std::string next;
      while (k < 6 && DivideExact(n, 1024, &next)) {
        n = next;
        ++k;
      }
      return absl::StrCat(sign, n, kSuffixes[k]);
    }
  }
  int e3 = FloorDiv3(q.exponent) * 3;
  if (q.format == Format::kDecimalExponent) {
    std::string mantissa = q.digits + std::string(q.exponent - e3, '0');
    return absl::StrCat(sign, mantissa, e3 == 0 ? "" : absl::StrCat("e", e3));
  }
  e3 = std::min(e3, 18);
  std::string mantissa = q.digits + std::string(q.exponent - e3, '0');
  static const std::pair<int, const char*> kSuffixes[] = {
      {-9, "n"}, {-6, "u"}, {-3, "m"}, {0, ""},   {3, "k"},
      {6, "M"},  {9, "G"},  {12, "T"}, {15, "P"}, {18, "E"}};
  for (const auto& [e, s] : kSuffixes) {
    if (e == e3) return absl::StrCat(sign, mantissa, s);
  }
  return absl::StrCat(sign, mantissa);
}

}  // namespace kubetrain::localkube
