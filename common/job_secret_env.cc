#include "common/job_secret_env.h"

#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kubetrain {

std::string GenerateJobSecret() {
  std::random_device device;  // /dev/urandom on Linux
  std::string bytes(32, '\0');
  for (char& c : bytes) c = static_cast<char>(device() & 0xff);
  return absl::BytesToHexString(bytes);
}

absl::Status ValidateJobSecret(absl::string_view secret) {
  if (secret.empty()) return absl::OkStatus();
  if (secret.size() < 16 || secret.size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat(kJobSecretEnv, " is ", secret.size(),
                     " characters long; it must be 16 to 1024 printable ASCII characters"));
  }
  for (size_t i = 0; i < secret.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(secret[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(kJobSecretEnv, " has a character that is not printable ASCII at offset ", i,
                       "; use letters, digits and punctuation only"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain
