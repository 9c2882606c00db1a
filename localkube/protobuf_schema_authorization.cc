// authorization.k8s.io/v1 SelfSubjectAccessReview, SubjectAccessReview and SelfSubjectRulesReview,
// and authentication.k8s.io/v1 SelfSubjectReview: the bodies `kubectl auth can-i` and
// `kubectl auth whoami` write (access_reviews.h). Statuses are left out (protobuf_schema.h).
// Data only: see protobuf_schema.h.
#include "localkube/protobuf_schema.h"

namespace kubetrain::localkube::pb {

const Message kExtraValue{"ExtraValue", {}, Special::kStringList};

constexpr Field kFieldSelectorRequirementFields[] = {
    {1, "key", kString, 0},
    {2, "operator", kString, 0},
    {3, "values", kString, kRepeated},
};
const Message kFieldSelectorRequirement{"FieldSelectorRequirement",
                                        kFieldSelectorRequirementFields};
constexpr Field kFieldSelectorAttributesFields[] = {
    {1, "rawSelector", kString, 0},
    {2, "requirements", kMessage, kRepeated, &kFieldSelectorRequirement},
};
const Message kFieldSelectorAttributes{"FieldSelectorAttributes", kFieldSelectorAttributesFields};
constexpr Field kLabelSelectorAttributesFields[] = {
    {1, "rawSelector", kString, 0},
    {2, "requirements", kMessage, kRepeated, &kLabelSelectorRequirement},
};
const Message kLabelSelectorAttributes{"LabelSelectorAttributes", kLabelSelectorAttributesFields};
constexpr Field kResourceAttributesFields[] = {
    {1, "namespace", kString, 0},
    {2, "verb", kString, 0},
    {3, "group", kString, 0},
    {4, "version", kString, 0},
    {5, "resource", kString, 0},
    {6, "subresource", kString, 0},
    {7, "name", kString, 0},
    {8, "fieldSelector", kMessage, kKeepZero, &kFieldSelectorAttributes},
    {9, "labelSelector", kMessage, kKeepZero, &kLabelSelectorAttributes},
};
const Message kResourceAttributes{"ResourceAttributes", kResourceAttributesFields};
constexpr Field kNonResourceAttributesFields[] = {
    {1, "path", kString, 0},
    {2, "verb", kString, 0},
};
const Message kNonResourceAttributes{"NonResourceAttributes", kNonResourceAttributesFields};
constexpr Field kSelfSubjectAccessReviewSpecFields[] = {
    {1, "resourceAttributes", kMessage, kKeepZero, &kResourceAttributes},
    {2, "nonResourceAttributes", kMessage, kKeepZero, &kNonResourceAttributes},
};
const Message kSelfSubjectAccessReviewSpec{"SelfSubjectAccessReviewSpec",
                                           kSelfSubjectAccessReviewSpecFields};
constexpr Field kSelfSubjectAccessReviewFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kSelfSubjectAccessReviewSpec},
};
const Message kSelfSubjectAccessReview{"SelfSubjectAccessReview", kSelfSubjectAccessReviewFields};
constexpr Field kSubjectAccessReviewSpecFields[] = {
    {1, "resourceAttributes", kMessage, kKeepZero, &kResourceAttributes},
    {2, "nonResourceAttributes", kMessage, kKeepZero, &kNonResourceAttributes},
    {3, "user", kString, 0},
    {4, "groups", kString, kRepeated},
    {5, "extra", kMessageMap, 0, &kExtraValue},
    {6, "uid", kString, 0},
};
const Message kSubjectAccessReviewSpec{"SubjectAccessReviewSpec", kSubjectAccessReviewSpecFields};
constexpr Field kSubjectAccessReviewFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kSubjectAccessReviewSpec},
};
const Message kSubjectAccessReview{"SubjectAccessReview", kSubjectAccessReviewFields};
constexpr Field kSelfSubjectRulesReviewSpecFields[] = {
    {1, "namespace", kString, 0},
};
const Message kSelfSubjectRulesReviewSpec{"SelfSubjectRulesReviewSpec",
                                          kSelfSubjectRulesReviewSpecFields};
constexpr Field kSelfSubjectRulesReviewFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kSelfSubjectRulesReviewSpec},
};
const Message kSelfSubjectRulesReview{"SelfSubjectRulesReview", kSelfSubjectRulesReviewFields};
constexpr Field kSelfSubjectReviewFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
};
const Message kSelfSubjectReview{"SelfSubjectReview", kSelfSubjectReviewFields};

}  // namespace kubetrain::localkube::pb
