// Bit-level conversions; see ps/half_float.h for the rounding and special-value rules. Built at
// -O3 with the rest of ps/ (ps/CMakeLists.txt). Span conversions of fp16 use the F16C
// instructions where the CPU has them (~0.2 ns a value where the scalar code takes ~2), bf16 a
// loop GCC vectorises: far below a 1 Gbit/s link's 16 ns for a 16-bit value.
#include "ps/half_float.h"

#include <algorithm>
#include <bit>
#include <cmath>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "common/bfloat16.h"
#include "common/enum_names.h"

namespace kubetrain::ps {

namespace {
constexpr EnumName<WireFloat> kWireFloats[] = {
    {WireFloat::kFloat32, "none"},
    {WireFloat::kFloat16, "fp16"},
    {WireFloat::kBFloat16, "bf16"},
};
}  // namespace

const char* WireFloatName(WireFloat f) { return NameOf(kWireFloats, f, "none"); }

std::optional<WireFloat> ParseWireFloat(std::string_view name) {
  return ValueNamed(kWireFloats, name);
}

std::string WireFloatNames() { return NamesOf(kWireFloats); }

uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, with the top of its payload
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 (0x477ff000) is halfway between 65504 and 2^16: ties-to-even rounds it up, to inf.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs >= 0x38800000u) {  // >= 2^-14: a normal fp16
    // Re-bias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry
    // out of the mantissa correctly bumps the exponent.
    const uint32_t rounded = abs - 0x38000000u + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal or zero: adding 0.5 leaves the value in units of 2^-24 (fp16's subnormal step) in
  // the low bits of the sum's mantissa, rounded to nearest even by the FPU. 0x400 (rounded up to
  // 2^-14) is exactly the smallest normal's encoding.
  const float scaled = std::bit_cast<float>(abs) + 0.5f;
  return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(scaled) - 0x3f000000u));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // subnormal: mantissa x 2^-24, exact in float32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16(float f) { return FloatToBf16Bits(f); }

float BFloat16ToFloat(uint16_t h) { return Bf16BitsToFloat(h); }

namespace {

#if defined(__x86_64__)
// IEEE fp16 through the F16C instructions (every x86-64 CPU since 2012), 8 values at a time:
// the same round to nearest even, subnormals, inf and NaN as the code above, ~10x faster.
// Chosen at run time, so the build needs no -mf16c.
__attribute__((target("avx,f16c"))) void CompressHalfF16c(const float* in, uint16_t* out,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

template <bool kAdd>
__attribute__((target("avx,f16c"))) void DecompressHalfF16c(const uint16_t* in, float* out,
                                                            size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    if constexpr (kAdd) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i) out[i] = kAdd ? out[i] + HalfToFloat(in[i]) : HalfToFloat(in[i]);
}

bool HaveF16c() {
  // F16C from CPUID leaf 1 (clang's __builtin_cpu_supports has no "f16c"); "avx" also says
  // the operating system saves the AVX registers.
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0 &&
           __builtin_cpu_supports("avx");
  }();
  return have;
}
#else
bool HaveF16c() { return false; }
void CompressHalfF16c(const float*, uint16_t*, size_t) {}
template <bool kAdd>
void DecompressHalfF16c(const uint16_t*, float*, size_t) {}
#endif

}  // namespace

void Compress(WireFloat format, std::span<const float> in, std::span<uint16_t> out) {
  if (format == WireFloat::kBFloat16) {
    for (size_t i = 0; i < in.size(); ++i) out[i] = FloatToBFloat16(in[i]);
  } else if (HaveF16c()) {
    CompressHalfF16c(in.data(), out.data(), in.size());
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] = FloatToHalf(in[i]);
  }
}

void Decompress(WireFloat format, std::span<const uint16_t> in, std::span<float> out) {
  if (format == WireFloat::kBFloat16) {
    for (size_t i = 0; i < in.size(); ++i) out[i] = BFloat16ToFloat(in[i]);
  } else if (HaveF16c()) {
    DecompressHalfF16c<false>(in.data(), out.data(), in.size());
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] = HalfToFloat(in[i]);
  }
}

void DecompressAdd(WireFloat format, std::span<const uint16_t> in, std::span<float> out) {
  if (format == WireFloat::kBFloat16) {
    for (size_t i = 0; i < in.size(); ++i) out[i] += BFloat16ToFloat(in[i]);
  } else if (HaveF16c()) {
    DecompressHalfF16c<true>(in.data(), out.data(), in.size());
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] += HalfToFloat(in[i]);
  }
}

void RoundTrip(WireFloat format, std::span<float> data) {
  if (format == WireFloat::kBFloat16) {
    for (float& v : data) v = BFloat16ToFloat(FloatToBFloat16(v));
    return;
  }
  uint16_t chunk[256];
  for (size_t i = 0; i < data.size(); i += 256) {
    const size_t n = std::min<size_t>(256, data.size() - i);
    Compress(format, data.subspan(i, n), {chunk, n});
    Decompress(format, {chunk, n}, data.subspan(i, n));
  }
}

int64_t FirstOverflow(WireFloat format, std::span<const float> values) {
  if (format == WireFloat::kFloat32) return -1;
  // Where rounding to nearest even reaches inf: 65520 for fp16, FLT_MAX's last half ulp for bf16.
  const float limit = format == WireFloat::kFloat16 ? 65520.0f : 0x1.ffp127f;
  bool any = false;
  for (float v : values) any |= std::fabs(v) >= limit && std::isfinite(v);
  if (!any) return -1;  // the common case: one branch-free pass
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::fabs(values[i]) >= limit && std::isfinite(values[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace kubetrain::ps
