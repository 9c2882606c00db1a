// User impersonation, as kube-apiserver's impersonation filter does it: the `Impersonate-User`,
// `Impersonate-Group` (repeatable), `Impersonate-Uid` and `Impersonate-Extra-<key>` headers
// (kubectl --as, --as-group, --as-uid) make the request run as that user, once the requester
// is authorized to `impersonate` each of them: users, groups or serviceaccounts (core group, by
// name; a `system:serviceaccount:<ns>:<name>` user is the ServiceAccount in <ns>), and uids and
// userextras/<key> (authentication.k8s.io).
//
// The impersonated user's groups are those asked for; without Impersonate-Group a ServiceAccount
// gets system:serviceaccounts and system:serviceaccounts:<ns>. system:authenticated is added
// unless system:authenticated or system:unauthenticated was asked for (system:anonymous gets
// system:unauthenticated instead).
//
// Stateless; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "localkube/rbac.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// The user a request runs as. `headers` are all of the request's (name, value) pairs, names in
// any case. `rbac_store` authorizes the impersonation with RBAC; null allows every one (no
// authorization configured). The requester itself when no impersonation header is set; a 400
// BadRequest for groups, extras or a uid without a user; the 403 Forbidden of the first thing the
// requester may not impersonate.
absl::StatusOr<UserInfo> Impersonate(
    const Store* rbac_store, const UserInfo& requester,
    const std::vector<std::pair<std::string, std::string>>& headers);

}  // namespace kubetrain::localkube
