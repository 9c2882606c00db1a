// ServiceAccount tokens (see service_accounts.h): signing, the TokenRequest API, authentication,
// and the protobuf TokenRequest body.
#include "localkube/service_accounts.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <functional>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/quote.h"
#include "common/status.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"
#include "localkube/protobuf.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The TokenRequest validation bounds (pkg/apis/authentication/validation).
constexpr int64_t kMinTokenSeconds = 10 * 60;
constexpr int64_t kMaxTokenSeconds = int64_t{1} << 32;
constexpr int64_t kDefaultTokenSeconds = 3600;
// A token longer than this is not one of ours: refused before any decoding.
constexpr size_t kMaxTokenBytes = 16 << 10;

std::string B64(absl::string_view s) { return absl::WebSafeBase64Escape(s); }

// A 401 carrying the authenticator's reason in the log only: the apiserver answers every failed
// authentication with the same `Unauthorized` Status.
absl::Status Unauthenticated(absl::string_view why) { return absl::UnauthenticatedError(why); }

}  // namespace

ServiceAccountTokens::ServiceAccountTokens(const Store* store) : store_(store) {
  unsigned char key[32];
  if (RAND_bytes(key, sizeof(key)) != 1) {
    for (unsigned char& k : key) k = static_cast<unsigned char>(std::random_device{}());
  }
  key_.assign(reinterpret_cast<const char*>(key), sizeof(key));
}

std::string ServiceAccountTokens::Sign(absl::string_view signing_input) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(), mac,
       &mac_len);
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

absl::StatusOr<std::string> ServiceAccountTokens::IssueToken(const std::string& ns,
                                                             const std::string& name,
                                                             const std::string& audience,
                                                             int64_t expiration_seconds) const {
  std::vector<std::string> audiences = {audience.empty() ? kServiceAccountIssuer : audience};
  return IssueTokenAt(ns, name, audiences, expiration_seconds, absl::Now(), /*for_pod=*/true);
}

absl::StatusOr<std::string> ServiceAccountTokens::IssueTokenAt(
    const std::string& ns, const std::string& name, const std::vector<std::string>& audiences,
    int64_t expiration_seconds, absl::Time issued_at, bool for_pod) const {
  if (expiration_seconds <= 0) {
    return absl::InvalidArgumentError("expiration_seconds must be positive");
  }
  auto sa = store_->Get(kServiceAccountsKey, ns, name);
  if (!sa || IsDeleting(*sa)) return NotFoundError("serviceaccounts", name);
  int64_t iat = absl::ToUnixSeconds(issued_at);
  json identity = {{"namespace", ns}, {"serviceaccount", {{"name", name}, {"uid", UidOf(*sa)}}}};
  // pkg/registry/core/serviceaccount/storage/token.go: the extension of admission-made tokens.
  if (for_pod && expiration_seconds == kWarnOnlyTokenSeconds &&
      audiences == std::vector<std::string>{kServiceAccountIssuer}) {
    identity["warnafter"] = iat + expiration_seconds;
    expiration_seconds = kExtendedTokenSeconds;
  }
  json claims = {{"aud", audiences}, {"exp", iat + expiration_seconds},
                 {"iat", iat},       {"iss", kServiceAccountIssuer},
                 {"jti", NewUid()},  {"kubernetes.io", identity},
                 {"nbf", iat},       {"sub", absl::StrCat(kServiceAccountPrefix, ns, ":", name)}};
  std::string input = absl::StrCat(B64(R"({"alg":"HS256","typ":"JWT"})"), ".", B64(claims.dump()));
  return absl::StrCat(input, ".", B64(Sign(input)));
}

absl::StatusOr<json> ServiceAccountTokens::CreateTokenRequest(const std::string& ns,
                                                              const std::string& name,
                                                              const json& body) const {
  // pkg/registry/core/serviceaccount/storage/token.go: the ServiceAccount first (its storage's
  // 404), then the request's name and namespace, then validation.
  auto sa = store_->Get(kServiceAccountsKey, ns, name);
  if (!sa) return NotFoundError("serviceaccounts", name);
  if (!body.is_null() && !body.is_object()) {
    return BadRequestError("the body of the request must be an object");
  }
  const json& meta = Meta(body);
  const char* kKind = "TokenRequest.authentication.k8s.io";
  if (meta.contains("name") && meta["name"].is_string() && meta["name"] != "" &&
      meta["name"] != name) {
    return InvalidError(kKind, name,
                        {{"FieldValueInvalid",
                          absl::StrCat("Invalid value: ", GoQuote(meta["name"].get<std::string>()),
                                       ": must match the service account name if specified"),
                          "metadata.name"}});
  }
  if (meta.contains("namespace") && meta["namespace"].is_string() && meta["namespace"] != "" &&
      meta["namespace"] != ns) {
    return InvalidError(
        kKind, name,
        {{"FieldValueInvalid",
          absl::StrCat("Invalid value: ", GoQuote(meta["namespace"].get<std::string>()),
                       ": must match the service account namespace if specified"),
          "metadata.namespace"}});
  }
  const json& spec = Field(body, "spec");
  std::vector<std::string> audiences;
  const json& aud = Field(spec, "audiences");
  if (aud.is_array()) {
    for (const json& a : aud) {
      if (!a.is_string()) return BadRequestError("spec.audiences must be a list of strings");
      audiences.push_back(a.get<std::string>());
    }
  } else if (!aud.is_null()) {
    return BadRequestError("spec.audiences must be a list of strings");
  }
  if (audiences.empty()) audiences.push_back(kServiceAccountIssuer);
  int64_t seconds = kDefaultTokenSeconds;
  const json& exp = Field(spec, "expirationSeconds");
  if (exp.is_number_integer()) {
    seconds = exp.get<int64_t>();
  } else if (!exp.is_null()) {
    return BadRequestError("spec.expirationSeconds must be an integer");
  }
  std::vector<Cause> causes;
  if (seconds < kMinTokenSeconds) {
    causes.push_back({"FieldValueInvalid",
                      absl::StrCat("Invalid value: ", seconds,
                                   ": may not specify a duration less than 10 minutes"),
                      "spec.expirationSeconds"});
  }
  if (seconds > kMaxTokenSeconds) {
    causes.push_back({"FieldValueInvalid",
                      absl::StrCat("Invalid value: ", seconds,
                                   ": may not specify a duration larger than 2^32 seconds"),
                      "spec.expirationSeconds"});
  }
  if (!causes.empty()) return InvalidError(kKind, name, causes);
  absl::Time now = absl::Now();
  ASSIGN_OR_RETURN(std::string token, IssueTokenAt(ns, name, audiences, seconds, now));
  json bound = Field(spec, "boundObjectRef");
  return json{{"kind", "TokenRequest"},
              {"apiVersion", "authentication.k8s.io/v1"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"creationTimestamp", nullptr}}},
              {"spec",
               {{"audiences", audiences},
                {"expirationSeconds", seconds},
                {"boundObjectRef", bound.is_object() ? bound : json(nullptr)}}},
              {"status",
               {{"token", token},
                {"expirationTimestamp",
                 KubeTime(absl::FromUnixSeconds(absl::ToUnixSeconds(now) + seconds))}}}};
}

absl::StatusOr<UserInfo> ServiceAccountTokens::Authenticate(absl::string_view token) const {
  if (token.size() > kMaxTokenBytes) return Unauthenticated("token too long");
  std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) return Unauthenticated("not a JWT");
  std::string header_text, payload_text, signature;
  if (!absl::WebSafeBase64Unescape(parts[0], &header_text) ||
      !absl::WebSafeBase64Unescape(parts[1], &payload_text) ||
      !absl::WebSafeBase64Unescape(parts[2], &signature)) {
    return Unauthenticated("malformed JWT");
  }
  json header = json::parse(header_text, nullptr, false);
  if (!header.is_object() || Field(header, "alg") != "HS256") {
    return Unauthenticated("unexpected signing algorithm");
  }
  std::string expected =
      Sign(token.substr(0, static_cast<size_t>(parts[2].data() - token.data() - 1)));
  if (signature.size() != expected.size() ||
      CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) != 0) {
    return Unauthenticated("invalid signature");
  }
  json claims = json::parse(payload_text, nullptr, false);
  if (!claims.is_object() || Field(claims, "iss") != kServiceAccountIssuer) {
    return Unauthenticated("unexpected issuer");
  }
  bool audience_ok = false;
  const json& aud = Field(claims, "aud");
  if (aud.is_string()) audience_ok = aud == kServiceAccountIssuer;
  if (aud.is_array()) {
    for (const json& a : aud) audience_ok = audience_ok || a == kServiceAccountIssuer;
  }
  if (!audience_ok) return Unauthenticated("token audiences do not include the API audience");
  const json& exp = Field(claims, "exp");
  const json& nbf = Field(claims, "nbf");
  int64_t now = absl::ToUnixSeconds(absl::Now());
  if (!exp.is_number_integer() || now >= exp.get<int64_t>()) {
    return Unauthenticated("token is expired");
  }
  if (nbf.is_number_integer() && now < nbf.get<int64_t>()) {
    return Unauthenticated("token is not valid yet");
  }
  const json& k8s = Field(claims, "kubernetes.io");
  const json& ns = Field(k8s, "namespace");
  const json& sa = Field(k8s, "serviceaccount");
  const json& sa_name = Field(sa, "name");
  const json& sa_uid = Field(sa, "uid");
  if (!ns.is_string() || !sa_name.is_string() || !sa_uid.is_string()) {
    return Unauthenticated("missing kubernetes.io claims");
  }
  std::string user =
      absl::StrCat(kServiceAccountPrefix, ns.get<std::string>(), ":", sa_name.get<std::string>());
  if (Field(claims, "sub") != user) return Unauthenticated("subject does not match");
  // The legacy claims validator: the ServiceAccount must still exist, be the same object and not
  // be being deleted.
  auto live = store_->Get(kServiceAccountsKey, ns.get<std::string>(), sa_name.get<std::string>());
  if (!live || UidOf(*live) != sa_uid.get<std::string>() || IsDeleting(*live)) {
    return Unauthenticated("service account has been deleted");
  }
  return MakeUser(user, {});
}

absl::StatusOr<json> DecodeTokenRequestProtobuf(absl::string_view body) {
  absl::StatusOr<ProtobufType> type = PeekK8sProtobuf(body);
  if (!type.ok() || type->api_version != "authentication.k8s.io/v1" ||
      type->kind != "TokenRequest") {
    return absl::InvalidArgumentError("not an authentication.k8s.io/v1 TokenRequest");
  }
  ASSIGN_OR_RETURN(json object, DecodeK8sProtobuf(body));
  if (!object["spec"].is_object()) object["spec"] = json::object();
  return object;
}

bool LooksLikeJwt(absl::string_view token) {
  if (token.size() > kMaxTokenBytes) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  return parts.size() == 3 && !parts[0].empty() && !parts[1].empty();
}

}  // namespace kubetrain::localkube
