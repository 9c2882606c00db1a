// ServiceAccount tokens as kube-apiserver issues and checks them: signed JWTs (HS256 under a key
// made at start-up) with the claims the apiserver's issuer writes (iss, sub
// system:serviceaccount:<ns>:<name>, aud, exp, iat, nbf, jti and the kubernetes.io
// namespace/serviceaccount claims), issued through the TokenRequest API
// (`POST .../serviceaccounts/<name>/token`) and to the kubelet, and accepted as bearer tokens while
// they verify, are unexpired, name the API audience and their ServiceAccount (same uid) still
// exists.
//
// The ServiceAccount admission plugin for pods is service_account_admission.h; every namespace's
// `default` ServiceAccount and `kube-root-ca.crt` ConfigMap, namespace_companions.h.
//
// ServiceAccountTokens is thread-safe (its key is immutable; it only reads the Store).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "localkube/rbac.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

inline constexpr char kServiceAccountsKey[] = "/serviceaccounts";
inline constexpr char kDefaultServiceAccount[] = "default";
// The issuer, and the API audience tokens must name to authenticate (kube-apiserver's default
// --service-account-issuer / --api-audiences on kubeadm and kind clusters).
inline constexpr char kServiceAccountIssuer[] = "https://kubernetes.default.svc.cluster.local";
// Where the admission plugin mounts the token volume.
inline constexpr char kServiceAccountMountPath[] = "/var/run/secrets/kubernetes.io/serviceaccount";
// The expirationSeconds of the admission plugin's kube-api-access token. kube-apiserver's
// --service-account-extend-token-expiration (on by default) makes a pod's token asked for exactly
// this long, for the API audience, valid for kExtendedTokenSeconds (a year) instead, with the
// claim `kubernetes.io.warnafter` at the hour: a client that never rereads its token file keeps
// working, as it does on a real cluster.
inline constexpr int64_t kWarnOnlyTokenSeconds = 3607;
inline constexpr int64_t kExtendedTokenSeconds = 365 * 24 * 60 * 60;

class ServiceAccountTokens {
 public:
  // Signs with a fresh random 256-bit key: tokens of one localkube verify only there.
  explicit ServiceAccountTokens(const Store* store);

  // A token for ServiceAccount `ns`/`name` for `audience` ("" = the API audience) valid for
  // `expiration_seconds` (> 0). NotFound (the apiserver's 404 Status) when the ServiceAccount
  // does not exist. What the kubelet calls for projected serviceAccountToken volumes: the token
  // is bound to a pod, so the admission plugin's 3607 s for the API audience is extended (see
  // kExtendedTokenSeconds).
  absl::StatusOr<std::string> IssueToken(const std::string& ns, const std::string& name,
                                         const std::string& audience,
                                         int64_t expiration_seconds) const;
  // The same with every audience and the issue time given (tests make expired tokens with it).
  // `for_pod`: a pod's token (the kubelet's request), which the extension applies to.
  absl::StatusOr<std::string> IssueTokenAt(const std::string& ns, const std::string& name,
                                           const std::vector<std::string>& audiences,
                                           int64_t expiration_seconds, absl::Time issued_at,
                                           bool for_pod = false) const;

  // The TokenRequest subresource: `body` is the request's authentication.k8s.io/v1
  // TokenRequest (may be empty); answers the TokenRequest with status.token and
  // status.expirationTimestamp, or the apiserver's 404/422/400 Status.
  absl::StatusOr<nlohmann::json> CreateTokenRequest(const std::string& ns, const std::string& name,
                                                    const nlohmann::json& body) const;

  // The ServiceAccount user of a bearer token, or the reason it does not authenticate.
  absl::StatusOr<UserInfo> Authenticate(absl::string_view token) const;

 private:
  std::string Sign(absl::string_view signing_input) const;

  const Store* store_;
  std::string key_;
};

// A protobuf request body ("k8s\0" + runtime.Unknown) holding an authentication.k8s.io/v1
// TokenRequest, as `kubectl create token` sends it, decoded to its JSON form (spec.audiences,
// expirationSeconds, boundObjectRef). InvalidArgument for anything else.
absl::StatusOr<nlohmann::json> DecodeTokenRequestProtobuf(absl::string_view body);

// Whether `token` has a JWT's shape (three base64url segments): the authenticator's
// ServiceAccount token check applies to it.
bool LooksLikeJwt(absl::string_view token);

}  // namespace kubetrain::localkube
