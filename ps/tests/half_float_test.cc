// ps/half_float.h: round to nearest even, the error bounds over the normal range, subnormals,
// overflow to inf, and NaN and inf kept, for fp16 and bf16; checked against the compiler's own
// _Float16 conversion where it has one.
#include "ps/half_float.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kubetrain::ps {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(HalfFloat, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    ASSERT_EQ(std::isnan(f), nan) << std::hex << h;
    if (nan) {
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

TEST(HalfFloat, EveryBFloat16SurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(f)))) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToBFloat16(f), h) << std::hex << h;
    }
  }
}

// Float bit patterns spread over the whole range, both signs.
std::vector<float> Sweep() {
  std::vector<float> out;
  for (uint64_t x = 0; x <= 0xffffffffu; x += 4093)
    out.push_back(std::bit_cast<float>(uint32_t(x)));
  return out;
}

TEST(HalfFloat, Fp16IsWithinTwoToTheMinus11OverTheNormalRange) {
  int checked = 0;
  for (float f : Sweep()) {
    const float a = std::fabs(f);
    if (!(a >= 0x1p-14f && a <= 65504.0f)) continue;
    const float back = HalfToFloat(FloatToHalf(f));
    ASSERT_LE(std::fabs(double{back} - f) / a, std::ldexp(1.0, -11)) << f;
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(HalfFloat, BFloat16IsWithinTwoToTheMinus8OverTheNormalRange) {
  int checked = 0;
  for (float f : Sweep()) {
    const float a = std::fabs(f);
    if (!(a >= std::numeric_limits<float>::min() && a <= 0x1.fep127f)) continue;
    const float back = BFloat16ToFloat(FloatToBFloat16(f));
    ASSERT_LE(std::fabs(double{back} - f) / a, std::ldexp(1.0, -8)) << f;
    ++checked;
  }
  EXPECT_GT(checked, 100000);
}

#if defined(__FLT16_MAX__)
// GCC's _Float16 conversion (IEEE round to nearest even) is the reference, subnormals and
// overflow included.
TEST(HalfFloat, Fp16MatchesTheCompilersConversionBitForBit) {
  for (float f : Sweep()) {
    if (std::isnan(f)) continue;
    const _Float16 reference = static_cast<_Float16>(f);
    ASSERT_EQ(FloatToHalf(f), std::bit_cast<uint16_t>(reference)) << f;
  }
}
#endif

// The span conversions (F16C instructions where the CPU has them) give the scalar code's bits.
TEST(HalfFloat, SpanConversionsMatchTheScalarOnesBitForBit) {
  std::vector<float> sweep = Sweep();
  for (WireFloat format : {WireFloat::kFloat16, WireFloat::kBFloat16}) {
    std::vector<uint16_t> wire(sweep.size());
    Compress(format, sweep, wire);
    std::vector<float> back(sweep.size()), sum(sweep.size(), 1.0f);
    Decompress(format, wire, back);
    DecompressAdd(format, wire, sum);
    const bool half = format == WireFloat::kFloat16;
    for (size_t i = 0; i < sweep.size(); ++i) {
      if (std::isnan(sweep[i])) {
        ASSERT_TRUE(std::isnan(back[i])) << i;
        continue;
      }
      const uint16_t scalar = half ? FloatToHalf(sweep[i]) : FloatToBFloat16(sweep[i]);
      ASSERT_EQ(wire[i], scalar) << sweep[i];
      const float widened = half ? HalfToFloat(scalar) : BFloat16ToFloat(scalar);
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(widened)) << i;
      ASSERT_EQ(sum[i], 1.0f + widened) << i;
    }
  }
}

TEST(HalfFloat, TiesRoundToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1. 1 + 3 x 2^-11: even is 1 + 2^-9.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
}

TEST(HalfFloat, Fp16SubnormalsKeepTheirStep) {
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);             // the smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);             // halfway to it: even is zero
  EXPECT_EQ(FloatToHalf(0x1.8p-25f), 0x0001);           // above halfway
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);         // 1.5 steps: even is 2
  EXPECT_EQ(FloatToHalf(-5 * 0x1p-24f), 0x8005);        // sign kept
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up to the smallest normal
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  for (uint16_t m = 1; m < 0x400; ++m) {
    const float f = HalfToFloat(m);
    ASSERT_EQ(f, m * 0x1p-24f);
    // Absolute error of anything in the subnormal range: at most half a step.
    const float g = f + 0x1p-26f;
    ASSERT_LE(std::fabs(HalfToFloat(FloatToHalf(g)) - g), 0x1p-25f);
  }
}

TEST(HalfFloat, BFloat16KeepsFloatSubnormalsToItsStep) {
  // bf16's subnormal step is 2^-133 (float32's 2^-149 x 2^16): within half of it.
  const float tiny = std::numeric_limits<float>::denorm_min() * 123456;
  const float back = BFloat16ToFloat(FloatToBFloat16(tiny));
  EXPECT_EQ(back, 0x1p-132f);  // 123456 / 2^16 = 1.88 steps: rounds to 2
  EXPECT_LE(std::fabs(back - tiny), 0x1p-134f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(-0x1p-133f)), -0x1p-133f);
  EXPECT_EQ(FloatToBFloat16(0x1p-135f), 0x0000);  // a quarter step: zero
}

TEST(HalfFloat, Fp16OverflowsToInfinityBeyondItsLargestValue) {
  EXPECT_EQ(HalfToFloat(FloatToHalf(65504.0f)), 65504.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(65519.0f)), 65504.0f);  // below halfway: rounds down
  EXPECT_EQ(HalfToFloat(FloatToHalf(65520.0f)), kInf);      // halfway: even is 2^16, inf
  EXPECT_EQ(HalfToFloat(FloatToHalf(1e10f)), kInf);
  EXPECT_EQ(HalfToFloat(FloatToHalf(-1e10f)), -kInf);
  EXPECT_TRUE(std::isfinite(BFloat16ToFloat(FloatToBFloat16(3.38e38f))));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::max())), kInf);
}

TEST(HalfFloat, InfinityAndNanAreKept) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(),
                        std::bit_cast<float>(0x7f800001u),  // payload only in the low bits
                        std::bit_cast<float>(0xffc00001u)};
  for (float nan : nans) {
    const float h = HalfToFloat(FloatToHalf(nan)), b = BFloat16ToFloat(FloatToBFloat16(nan));
    EXPECT_TRUE(std::isnan(h)) << std::bit_cast<uint32_t>(nan);
    EXPECT_TRUE(std::isnan(b)) << std::bit_cast<uint32_t>(nan);
    EXPECT_EQ(std::signbit(h), std::signbit(nan));
    EXPECT_EQ(std::signbit(b), std::signbit(nan));
  }
  for (float inf : {kInf, -kInf}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(inf)), inf);
    EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(inf)), inf);
  }
}

TEST(HalfFloat, SpansCompressDecompressAndAdd) {
  for (WireFloat format : {WireFloat::kFloat16, WireFloat::kBFloat16}) {
    std::vector<float> in = {1.0f, -2.5f, 0.1f, kInf, std::nanf(""), 0.0f, 1e-3f};
    std::vector<uint16_t> wire(in.size());
    Compress(format, in, wire);
    std::vector<float> out(in.size()), sum(in.size(), 1.0f), rounded = in;
    Decompress(format, wire, out);
    DecompressAdd(format, wire, sum);
    RoundTrip(format, rounded);
    for (size_t i = 0; i < in.size(); ++i) {
      if (std::isnan(in[i])) {
        EXPECT_TRUE(std::isnan(out[i]) && std::isnan(sum[i]) && std::isnan(rounded[i]));
        continue;
      }
      EXPECT_EQ(out[i], rounded[i]);
      EXPECT_EQ(sum[i], 1.0f + out[i]);
      if (std::isfinite(in[i]) && in[i] != 0) {
        EXPECT_LE(std::fabs(out[i] - in[i]) / std::fabs(in[i]),
                  format == WireFloat::kFloat16 ? 0x1p-11f : 0x1p-8f);
      }
    }
  }
}

TEST(HalfFloat, FlagNamesParse) {
  EXPECT_EQ(ParseWireFloat("none"), WireFloat::kFloat32);
  EXPECT_EQ(ParseWireFloat("fp16"), WireFloat::kFloat16);
  EXPECT_EQ(ParseWireFloat("bf16"), WireFloat::kBFloat16);
  EXPECT_EQ(ParseWireFloat("FP16"), std::nullopt);
  EXPECT_STREQ(WireFloatName(WireFloat::kBFloat16), "bf16");
}

}  // namespace
}  // namespace kubetrain::ps
