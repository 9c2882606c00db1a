// bfloat16 ("bf16"): float32's sign, exponent and top 7 mantissa bits. One definition of the
// conversion for the gradient compression on the wire (ps/half_float.h) and the worker's bf16
// mixed precision on both backends (docs/decisions/0011-bf16-mixed-precision.md), so that a CPU
// and a GPU round every value alike.
//
// float32 -> bf16 rounds to nearest, ties to even; relative error <= 2^-8; subnormals round like
// any other value; only values within half an ulp of FLT_MAX round up to inf. Inf stays inf;
// NaN stays NaN (quiet, sign kept), never becoming inf or a number. bf16 -> float32 is exact.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace kubetrain {

KT_HOST_DEVICE inline uint16_t FloatToBf16Bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

KT_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t h) {
  const uint32_t x = uint32_t{h} << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

// `f` rounded to the nearest bf16 value, as a float32.
KT_HOST_DEVICE inline float RoundToBf16(float f) { return Bf16BitsToFloat(FloatToBf16Bits(f)); }

}  // namespace kubetrain
