#include "worker/collective/shm_layout.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kubetrain::worker {
namespace {

static_assert(std::is_trivially_copyable_v<ShmHeader>);
static_assert(kShmDataOffset % kShmAlign == 0 && kShmDataOffset < kShmMaxBytes);

bool LowerHex(absl::string_view s, size_t digits) {
  return s.size() == digits && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// What a header field holds, printable whatever its bytes.
std::string Shown(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

absl::Status FieldDiffers(absl::string_view field, absl::string_view value,
                          absl::string_view expected) {
  return absl::DataLossError(absl::StrCat(
      "the shared-memory segment's header field ", field, " is ", value, ", expected ", expected,
      " (agreed at the rendezvous): another process wrote into the segment, or a rank of another "
      "kubetrain version made it"));
}

}  // namespace

absl::StatusOr<ShmLayout> ShmLayoutFor(int size, uint64_t chunk_bytes) {
  if (size < 1 || size > kShmMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory segment for ", size, " ranks: it serves 1 to ", kShmMaxRanks));
  }
  const uint64_t slots = 2 * static_cast<uint64_t>(size) + 1;
  const uint64_t most = (kShmMaxBytes - kShmDataOffset) / slots / kShmAlign * kShmAlign;
  // Rounded up without overflow: anything past `most` is `most`.
  const uint64_t rounded =
      chunk_bytes >= most ? most : (chunk_bytes + kShmAlign - 1) / kShmAlign * kShmAlign;
  ShmLayout layout;
  layout.size = size;
  layout.chunk_bytes = std::max<uint64_t>(kShmAlign, rounded);
  layout.segment_bytes = kShmDataOffset + slots * layout.chunk_bytes;
  return layout;
}

std::string FormatShmRendezvous(const ShmRendezvous& said) {
  return absl::StrCat(said.name, " ", said.nonce, " ", said.layout.chunk_bytes);
}

absl::StatusOr<ShmRendezvous> ParseShmRendezvous(absl::string_view value, int size) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank 0's shared-memory rendezvous value ", Shown(value.substr(0, 200)), ": ",
                     what, " (expected \"/", kShmNamePrefix, "<", kShmNameDigits, " hex digits> <",
                     kShmNonceDigits, " hex digits> <chunk bytes>\")"));
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(value, ' ');
  if (parts.size() != 3) return bad(absl::StrCat(parts.size(), " fields, expected 3"));
  const absl::string_view name = parts[0];
  if (!absl::StartsWith(name, absl::StrCat("/", kShmNamePrefix)) ||
      !LowerHex(name.substr(1 + kShmNamePrefix.size()), kShmNameDigits)) {
    return bad("the segment name is not one rank 0 makes");
  }
  if (!LowerHex(parts[1], kShmNonceDigits)) return bad("the nonce is not hex digits");
  uint64_t chunk = 0;
  if (!absl::SimpleAtoi(parts[2], &chunk) || parts[2].empty() || parts[2][0] == '+') {
    return bad("the chunk size is not a number");
  }
  absl::StatusOr<ShmLayout> layout = ShmLayoutFor(size, chunk);
  if (!layout.ok()) return bad(layout.status().message());
  if (layout->chunk_bytes != chunk) {
    return bad(absl::StrCat("chunk size ", chunk, " is not a whole number of ", kShmAlign,
                            "-byte lines that fits ", kShmMaxBytes, " bytes for ", size, " ranks"));
  }
  return ShmRendezvous{std::string(name), std::string(parts[1]), *layout};
}

ShmHeader MakeShmHeader(const ShmLayout& agreed, absl::string_view nonce) {
  ShmHeader h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kShmMagic;
  std::memcpy(h.nonce, nonce.data(), std::min(nonce.size(), sizeof(h.nonce) - 1));
  h.size = static_cast<uint32_t>(agreed.size);
  h.chunk_bytes = agreed.chunk_bytes;
  h.segment_bytes = agreed.segment_bytes;
  return h;
}

absl::Status CheckShmHeader(absl::string_view bytes, const ShmLayout& agreed,
                            absl::string_view nonce) {
  if (bytes.size() < sizeof(ShmHeader)) {
    return absl::DataLossError(absl::StrCat("the shared-memory segment holds ", bytes.size(),
                                            " bytes, less than its ", sizeof(ShmHeader),
                                            "-byte header"));
  }
  // A copy: another process may write the segment while the fields are compared.
  ShmHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kShmMagic) {
    return FieldDiffers("magic", absl::StrFormat("0x%016x", h.magic),
                        absl::StrFormat("0x%016x", kShmMagic));
  }
  const absl::string_view said(h.nonce, strnlen(h.nonce, sizeof(h.nonce)));
  if (said != nonce || said.size() == sizeof(h.nonce)) {
    return FieldDiffers("nonce", Shown(said), Shown(nonce));
  }
  if (h.size != static_cast<uint32_t>(agreed.size) || agreed.size < 1) {
    return FieldDiffers("size", absl::StrCat(h.size), absl::StrCat(agreed.size, " ranks"));
  }
  if (h.chunk_bytes != agreed.chunk_bytes) {
    return FieldDiffers("chunk_bytes", absl::StrCat(h.chunk_bytes),
                        absl::StrCat(agreed.chunk_bytes));
  }
  if (h.segment_bytes != agreed.segment_bytes) {
    return FieldDiffers("segment_bytes", absl::StrCat(h.segment_bytes),
                        absl::StrCat(agreed.segment_bytes));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::worker
