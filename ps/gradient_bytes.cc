// GradientBytes: a pushed gradient read in runs from the fragments it arrived in (see
// gradient_bytes.h).
#include "ps/gradient_bytes.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

namespace kubetrain::ps {
namespace {

// Reads the fragments' bytes in order.
class Cursor {
 public:
  explicit Cursor(std::span<const absl::string_view> fragments) : fragments_(fragments) {
    SkipEmpty();
  }

  // The bytes left in the current fragment (empty at the end).
  absl::string_view here() const {
    return fragment_ < fragments_.size() ? fragments_[fragment_].substr(offset_)
                                         : absl::string_view();
  }

  void Advance(size_t n) {
    offset_ += n;
    SkipEmpty();
  }

  // Copies the next `n` bytes, which the caller knows are there, into `out`.
  void CopyTo(char* out, size_t n) {
    while (n > 0) {
      const absl::string_view h = here();
      const size_t take = std::min(n, h.size());
      std::memcpy(out, h.data(), take);
      out += take;
      n -= take;
      Advance(take);
    }
  }

 private:
  void SkipEmpty() {
    while (fragment_ < fragments_.size() && offset_ >= fragments_[fragment_].size()) {
      offset_ = 0;
      ++fragment_;
    }
  }

  std::span<const absl::string_view> fragments_;
  size_t fragment_ = 0;
  size_t offset_ = 0;
};

}  // namespace

GradientBytes::GradientBytes(absl::string_view bytes, WireFloat encoding) : encoding_(encoding) {
  Append(bytes);
}

void GradientBytes::Append(absl::string_view fragment) {
  if (fragment.empty()) return;
  fragments_.push_back(fragment);
  wire_bytes_ += fragment.size();
}

void GradientBytes::ForEachRun(
    absl::FunctionRef<void(size_t first, std::span<const float> values)> run) const {
  const size_t total = size();
  Cursor in(fragments_);
  alignas(64) float buffer[kRunValues];
  size_t done = 0;
  if (encoding_ != WireFloat::kFloat32) {
    alignas(64) uint16_t narrow[kRunValues];
    while (done < total) {
      const size_t n = std::min(kRunValues, total - done);
      in.CopyTo(reinterpret_cast<char*>(narrow), n * sizeof(uint16_t));
      Decompress(encoding_, {narrow, n}, {buffer, n});
      run(done, {buffer, n});
      done += n;
    }
    return;
  }
  while (done < total) {
    const absl::string_view here = in.here();
    if (here.size() >= sizeof(float) &&
        reinterpret_cast<uintptr_t>(here.data()) % alignof(float) == 0) {
      const size_t n = std::min(here.size() / sizeof(float), total - done);
      run(done, {reinterpret_cast<const float*>(here.data()), n});
      in.Advance(n * sizeof(float));
      done += n;
      continue;
    }
    // Unaligned, or a value split between two fragments: gather a run. Received slices start at
    // whatever offset the HTTP/2 framing left, so this is the common path for pushes over TCP.
    const size_t n = std::min(kRunValues, total - done);
    in.CopyTo(reinterpret_cast<char*>(buffer), n * sizeof(float));
    run(done, {buffer, n});
    done += n;
  }
}

void GradientBytes::CopyTo(std::span<float> out) const {
  if (encoding_ == WireFloat::kFloat32) {
    Cursor(fragments_).CopyTo(reinterpret_cast<char*>(out.data()), size() * sizeof(float));
    return;
  }
  ForEachRun([&](size_t first, std::span<const float> values) {
    std::memcpy(out.data() + first, values.data(), values.size_bytes());
  });
}

int64_t FirstNonFinite(std::span<const float> values) {
  // A branch-free OR over the exponent bits lets the common all-finite case vectorise; the index
  // is only searched for once a bad value is known to be there.
  constexpr uint32_t kExponent = 0x7f800000u;
  const float* data = values.data();
  uint32_t any = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    any |= static_cast<uint32_t>((std::bit_cast<uint32_t>(data[i]) & kExponent) == kExponent);
  }
  if (any == 0) return -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if ((std::bit_cast<uint32_t>(data[i]) & kExponent) == kExponent) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t FirstNonFinite(const GradientBytes& values, float* value) {
  int64_t found = -1;
  values.ForEachRun([&](size_t first, std::span<const float> run) {
    if (found >= 0) return;
    if (const int64_t bad = FirstNonFinite(run); bad >= 0) {
      found = static_cast<int64_t>(first) + bad;
      if (value != nullptr) *value = run[static_cast<size_t>(bad)];
    }
  });
  return found;
}

}  // namespace kubetrain::ps
