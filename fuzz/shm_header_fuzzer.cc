// The checks of what a shared-memory all-reduce rank reads from outside (worker/collective/
// shm_layout.h): a segment's header against the layout the ranks agreed on, and rank 0's
// rendezvous value.
//
// Input: a mode byte (bit 0: the rendezvous value rather than a header), a byte for the number
// of ranks (any value, so sizes outside 1..64 are tried too), 8 bytes of the chunk size asked for
// (little-endian), then the header bytes (of any length) or the rendezvous value. The nonce the
// header must hold is kNonce.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "worker/collective/shm_layout.h"

namespace {

using kubetrain::fuzz::Fail;
namespace worker = kubetrain::worker;

constexpr absl::string_view kNonce = "0123456789abcdef";

// What every layout the functions return keeps to.
void CheckLayout(const worker::ShmLayout& l, int size) {
  if (l.size != size || l.chunk_bytes < worker::kShmAlign ||
      l.chunk_bytes % worker::kShmAlign != 0 ||
      l.segment_bytes != worker::kShmDataOffset + (2 * uint64_t(size) + 1) * l.chunk_bytes ||
      l.segment_bytes > worker::kShmMaxBytes) {
    Fail(absl::StrCat("layout for ", size, " ranks: chunk ", l.chunk_bytes, ", segment ",
                      l.segment_bytes));
  }
}

void FuzzHeader(int size, uint64_t chunk, absl::string_view bytes) {
  absl::StatusOr<worker::ShmLayout> layout = worker::ShmLayoutFor(size, chunk);
  if (!layout.ok()) {
    if (size >= 1 && size <= worker::kShmMaxRanks) Fail(absl::StrCat(size, " ranks refused"));
    return;
  }
  CheckLayout(*layout, size);
  // What rank 0 writes passes.
  const worker::ShmHeader made = worker::MakeShmHeader(*layout, kNonce);
  const absl::string_view made_bytes(reinterpret_cast<const char*>(&made), sizeof(made));
  if (!worker::CheckShmHeader(made_bytes, *layout, kNonce).ok()) Fail("rank 0's header refused");
  const absl::Status s = worker::CheckShmHeader(bytes, *layout, kNonce);
  if (s.ok()) {
    // Accepted: every field is the agreed one.
    worker::ShmHeader h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    if (h.magic != made.magic || h.size != made.size || h.chunk_bytes != made.chunk_bytes ||
        h.segment_bytes != made.segment_bytes ||
        std::memcmp(h.nonce, made.nonce, kNonce.size() + 1) != 0) {
      Fail("a header other than agreed accepted");
    }
  } else if (s.code() != absl::StatusCode::kDataLoss || s.message().empty()) {
    Fail(absl::StrCat("refused without a clear error: ", s.ToString()));
  }
}

void FuzzRendezvous(int size, absl::string_view value) {
  absl::StatusOr<worker::ShmRendezvous> said = worker::ParseShmRendezvous(value, size);
  if (!said.ok()) {
    if (said.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail(absl::StrCat("refused without a clear error: ", said.status().ToString()));
    }
    return;
  }
  CheckLayout(said->layout, size);
  // What was accepted says the same again.
  absl::StatusOr<worker::ShmRendezvous> again =
      worker::ParseShmRendezvous(worker::FormatShmRendezvous(*said), size);
  if (!again.ok() || again->name != said->name || again->nonce != said->nonce ||
      again->layout.chunk_bytes != said->layout.chunk_bytes) {
    Fail("an accepted rendezvous value does not read back the same");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 10) return 0;
  const uint8_t mode = data[0];
  const int ranks = data[1];
  uint64_t chunk = 0;
  for (int i = 0; i < 8; ++i) chunk |= uint64_t{data[2 + i]} << (8 * i);
  const absl::string_view rest(reinterpret_cast<const char*>(data + 10), size - 10);
  if (mode & 1) {
    FuzzRendezvous(ranks, rest);
  } else {
    FuzzHeader(ranks, chunk, rest);
  }
  return 0;
}
