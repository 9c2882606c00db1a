// A throwaway self-signed certificate for 127.0.0.1/localhost, made at start-up: kubectl and
// helm only send bearer tokens over TLS, so localkube serves HTTPS and hands out the
// certificate as the kubeconfig's certificate-authority-data.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::localkube {

struct TlsFiles {
  std::string cert_path;
  std::string key_path;
  std::string cert_pem;
};

// Writes cert.pem and key.pem (mode 0600) into `dir`; the certificate names 127.0.0.1,
// localhost and `more_ips` (the pod network's node bridges).
absl::StatusOr<TlsFiles> MakeSelfSignedCert(const std::string& dir,
                                            const std::vector<std::string>& more_ips = {});

// Writes `content` to `path` through a temporary file renamed into place, created mode 0600:
// keys and tokens are never readable by others, not even for the moment before a chmod.
absl::Status WritePrivateFile(const std::string& path, const std::string& content);

}  // namespace kubetrain::localkube
