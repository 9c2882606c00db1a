// The layout of the shared-memory all-reduce segment (worker/collective/shm_communicator.h) and
// the checks of what the ranks read about it from outside: the segment's header, which any
// process of the job's user can write, and rank 0's rendezvous value, which comes over the
// network. Both checks are pure functions over bytes and the sizes the ranks agreed on, so the
// communicator and fuzz/shm_header_fuzzer.cc run the same code.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::worker {

inline constexpr uint64_t kShmMagic = 0x6b74'7368'6d30'0002;  // "ktshm0", version 2
inline constexpr size_t kShmAlign = 64;                       // a cache line: slots never share one
inline constexpr int kShmMaxRanks = 64;
// Each rank's two slots plus the result, together: /dev/shm is often small (64 MiB in a
// container).
inline constexpr uint64_t kShmMaxBytes = uint64_t{64} << 20;
// Segment names: this prefix and 16 lowercase hex digits; nothing else is opened or swept.
inline constexpr absl::string_view kShmNamePrefix = "kubetrain-";
inline constexpr size_t kShmNameDigits = 16;
inline constexpr size_t kShmNonceDigits = 16;

// The first bytes of the segment, written once by rank 0 before any other rank opens it.
struct ShmHeader {
  uint64_t magic;
  char nonce[kShmNonceDigits + 1];  // NUL-terminated
  uint32_t size;                    // ranks
  uint64_t chunk_bytes;
  uint64_t segment_bytes;  // the whole segment, header and data
};

// The whole shared layout before the data. Atomics of 32 and 64 bits are lock-free and
// address-free, so they work across processes mapping the segment at different addresses; the
// futex words are 32-bit.
struct ShmSegment {
  struct alignas(kShmAlign) Rank {
    std::atomic<uint32_t> left;  // 1 once the rank stopped taking part
  };
  // A fault in a rank's contribution that the rank reducing it found: every rank reports it
  // alike, rather than each blaming the peer that left over it (written once).
  struct alignas(kShmAlign) Failure {
    std::atomic<uint32_t> state;  // 0 none, 1 being written, 2 written
    uint32_t culprit;             // whose data
    uint64_t element;             // where in the buffer the collective was given
    uint32_t value_bits;          // the value found there
    uint32_t found_by;            // the rank that found it
  };
  ShmHeader header;
  alignas(kShmAlign) std::atomic<uint32_t> arrivals;
  alignas(kShmAlign) std::atomic<uint32_t> epoch;  // bumped by the last rank to arrive
  Failure failure;
  Rank ranks[kShmMaxRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

inline constexpr size_t kShmDataOffset =
    (sizeof(ShmSegment) + kShmAlign - 1) / kShmAlign * kShmAlign;

// What the ranks agree on at the rendezvous: rank 0 says the chunk size with the segment's name;
// the rest follows from it and the number of ranks.
struct ShmLayout {
  int size = 0;
  uint64_t chunk_bytes = 0;    // a whole number of cache lines
  uint64_t segment_bytes = 0;  // kShmDataOffset + (2 * size + 1) * chunk_bytes <= kShmMaxBytes
};

// The layout for `size` ranks with chunks of at most `chunk_bytes`: rounded up to a cache line,
// then down to what fits kShmMaxBytes. INVALID_ARGUMENT for a size outside [1, kShmMaxRanks].
absl::StatusOr<ShmLayout> ShmLayoutFor(int size, uint64_t chunk_bytes);

// What rank 0 says at the rendezvous: "NAME NONCE CHUNK_BYTES" (or "" when it made none).
struct ShmRendezvous {
  std::string name;  // "/kubetrain-" and kShmNameDigits hex digits
  std::string nonce;
  ShmLayout layout;
};
std::string FormatShmRendezvous(const ShmRendezvous& said);
// INVALID_ARGUMENT naming what is wrong when `value` is not what a rank 0 of `size` ranks says:
// the store's values come over the network.
absl::StatusOr<ShmRendezvous> ParseShmRendezvous(absl::string_view value, int size);

// Checks the first bytes of a segment against what the ranks agreed on. DATA_LOSS naming the
// field, its value and the agreed one when any differs (another process wrote into the
// segment, or a rank of another version made it); `bytes` may be of any length.
absl::Status CheckShmHeader(absl::string_view bytes, const ShmLayout& agreed,
                            absl::string_view nonce);

// The header rank 0 writes for `agreed`.
ShmHeader MakeShmHeader(const ShmLayout& agreed, absl::string_view nonce);

}  // namespace kubetrain::worker
