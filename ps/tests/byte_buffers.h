// Test helpers for the tensor codings' tests: gRPC byte buffers to and from flat bytes, and a
// parsed gradient's values.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ps/gradient_bytes.h"

namespace kubetrain::ps::testing {

// The bytes of `buffer`, its slices joined.
inline std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as gRPC might deliver them: cut into slices of `chunk` bytes, so fields and floats
// straddle slice boundaries.
inline grpc::ByteBuffer Chunked(const std::string& bytes, size_t chunk) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    slices.emplace_back(bytes.data() + at, std::min(chunk, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// `bytes` in one slice.
inline grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// A parsed gradient's values, as float32.
inline std::vector<float> Floats(const GradientBytes& values) {
  std::vector<float> out(values.size());
  values.CopyTo(out);
  return out;
}

}  // namespace kubetrain::ps::testing
