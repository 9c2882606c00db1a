// 16-bit floats for gradient compression (--gradient-compression): IEEE binary16 ("fp16") and
// bfloat16 ("bf16"), converted from and to float32 on the CPU. The workers send gradients (and
// ps-mode parameters) in them; every sum and every optimizer update stays in float32.
//
// float32 -> 16 bits rounds to nearest, ties to even, for every input (subnormals included):
//   fp16: relative error <= 2^-11 over the normal range [2^-14, 65504]; below 2^-14 the
//         subnormals keep an absolute error <= 2^-25, and values under 2^-25 become (signed)
//         zero. A finite value that rounds past 65504 becomes +-inf, as IEEE 754 does, not
//         65504: saturating would clip a gradient without a word. The exchanges look for such
//         values first (FirstOverflow) and stop with an error that names the fix (bf16).
//   bf16: float32's exponent range, relative error <= 2^-8; float32 subnormals round like any
//         other value; only values within half an ulp of FLT_MAX round up to inf.
// Inf stays inf (its sign kept); NaN stays NaN (quiet, sign kept), never becoming inf or a
// number, so the checks that refuse a non-finite gradient (the ps's, the checkpoint's) still
// fire. 16 bits -> float32 is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kubetrain::ps {

// What a tensor's values are on the wire. The numbers are ps.proto's Partition.encoding.
enum class WireFloat : uint32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Bytes per value on the wire.
constexpr size_t WireFloatBytes(WireFloat f) { return f == WireFloat::kFloat32 ? 4 : 2; }

// The flag value: "none", "fp16" or "bf16".
const char* WireFloatName(WireFloat f);
// Parses a flag value ("none", "fp16", "bf16"); nullopt for anything else.
std::optional<WireFloat> ParseWireFloat(std::string_view name);
// The flag's values for an error's "allowed: ...": "none, fp16, bf16".
std::string WireFloatNames();

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t h);

// Element-wise over spans of equal length; `format` must not be kFloat32.
void Compress(WireFloat format, std::span<const float> in, std::span<uint16_t> out);
void Decompress(WireFloat format, std::span<const uint16_t> in, std::span<float> out);
// out[i] += Decompress(in[i]).
void DecompressAdd(WireFloat format, std::span<const uint16_t> in, std::span<float> out);
// data[i] = Decompress(Compress(data[i])): what a peer decoding the compressed values holds.
void RoundTrip(WireFloat format, std::span<float> data);

// The index of the first finite value of `values` that `format` turns into inf (fp16: beyond
// 65504 once rounded), or -1. Float32 and bf16 hold every finite float32 but the last half ulp.
int64_t FirstOverflow(WireFloat format, std::span<const float> values);

}  // namespace kubetrain::ps
