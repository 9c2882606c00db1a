// The protobuf schema of the built-in kinds localkube decodes (protobuf.h): for each message,
// field number -> JSON name, wire type and nested message, as k8s.io/api's and
// k8s.io/apimachinery's generated.proto (v0.33, the served version) and the JSON tags of their
// Go types define them. Adding a kind is adding its messages here and a row to KindSchema's
// table (protobuf_schema_meta.cc). Status messages are left out: a status in a create or
// update body is skipped, as unknown fields are.
#pragma once

#include <cstdint>
#include <span>

#include "absl/strings/string_view.h"

namespace kubetrain::localkube::pb {

enum Type : uint8_t {
  kString,      // length-delimited, UTF-8
  kBytes,       // length-delimited, base64 in JSON
  kInt,         // varint, two's complement (int32 and int64)
  kBool,        // varint
  kMessage,     // length-delimited, `message`
  kStringMap,   // map<string, string>
  kBytesMap,    // map<string, bytes>: base64 values
  kMessageMap,  // map<string, message>
};

enum Flags : uint8_t {
  kRepeated = 1,
  // A pointer in Go: present on the wire only when set, so a zero value is kept. Other zero
  // scalars (proto2 writes them all) are dropped, as `omitempty` drops them from JSON.
  kKeepZero = 2,
  // A Go struct embedded with `json:",inline"`: its fields go into the enclosing object.
  kInline = 4,
};

// Messages whose JSON form is not an object of their fields.
enum class Special : uint8_t {
  kNone,
  kQuantity,     // resource.Quantity {string = 1} -> "1Gi"
  kIntOrString,  // intstr.IntOrString {type = 1, intVal = 2, strVal = 3} -> 1 or "50%"
  kTime,         // meta.v1.Time {seconds = 1, nanos = 2} -> "2006-01-02T15:04:05Z"
  kRawJson,      // FieldsV1 / RawExtension {raw = 1}: JSON text
  kStringList,   // ExtraValue {repeated items = 1} -> ["a", "b"]
};

struct Message;

struct Field {
  int number;
  const char* name;  // the JSON name; "" with kInline
  Type type;
  uint8_t flags = 0;
  const Message* message = nullptr;  // kMessage and kMessageMap
};

struct Message {
  const char* name;
  std::span<const Field> fields;
  Special special = Special::kNone;
};

struct KindRow {
  const char* api_version;
  const char* kind;
  const Message* message;
};

// The message of `kind` in `api_version` ("rbac.authorization.k8s.io/v1", "Role"), or null.
const Message* KindSchema(absl::string_view api_version, absl::string_view kind);

// Every kind with a schema.
std::span<const KindRow> Kinds();

// Every message, for the schema's own checks (fields unique, names set).
std::span<const Message* const> AllMessages();

extern const Message kOwnerReference, kManagedFieldsEntry, kObjectMeta, kNamespaceSpec, kNamespace,
    kConfigMap, kSecret, kObjectReference, kLocalObjectReference, kServiceAccount, kServicePort,
    kClientIPConfig, kSessionAffinityConfig, kServiceSpec, kService,
    kScopedResourceSelectorRequirement, kScopeSelector, kResourceQuotaSpec, kResourceQuota,
    kHostPathVolumeSource, kEmptyDirVolumeSource, kGCEPersistentDiskVolumeSource,
    kAWSElasticBlockStoreVolumeSource, kGitRepoVolumeSource, kKeyToPath, kSecretVolumeSource,
    kNFSVolumeSource, kISCSIVolumeSource, kGlusterfsVolumeSource,
    kPersistentVolumeClaimVolumeSource, kRBDVolumeSource, kFlexVolumeSource, kCinderVolumeSource,
    kCephFSVolumeSource, kFlockerVolumeSource, kObjectFieldSelector, kResourceFieldSelector,
    kDownwardAPIVolumeFile, kDownwardAPIVolumeSource, kFCVolumeSource, kAzureFileVolumeSource,
    kConfigMapVolumeSource, kVsphereVirtualDiskVolumeSource, kQuobyteVolumeSource,
    kAzureDiskVolumeSource, kPhotonPersistentDiskVolumeSource, kSecretProjection,
    kDownwardAPIProjection, kConfigMapProjection, kServiceAccountTokenProjection,
    kLabelSelectorRequirement, kLabelSelector, kClusterTrustBundleProjection, kVolumeProjection,
    kProjectedVolumeSource, kPortworxVolumeSource, kScaleIOVolumeSource, kStorageOSVolumeSource,
    kCSIVolumeSource, kVolumeResourceRequirements, kTypedLocalObjectReference,
    kTypedObjectReference, kPersistentVolumeClaimSpec, kPersistentVolumeClaimTemplate,
    kEphemeralVolumeSource, kImageVolumeSource, kVolumeSource, kVolume, kContainerPort,
    kConfigMapEnvSource, kSecretEnvSource, kEnvFromSource, kConfigMapKeySelector,
    kSecretKeySelector, kEnvVarSource, kEnvVar, kResourceClaim, kResourceRequirements,
    kContainerResizePolicy, kVolumeMount, kVolumeDevice, kExecAction, kHTTPHeader, kHTTPGetAction,
    kTCPSocketAction, kGRPCAction, kProbeHandler, kProbe, kSleepAction, kLifecycleHandler,
    kLifecycle, kCapabilities, kSELinuxOptions, kWindowsSecurityContextOptions, kSeccompProfile,
    kAppArmorProfile, kSecurityContext, kContainer, kEphemeralContainerCommon, kEphemeralContainer,
    kSysctl, kPodSecurityContext, kNodeSelectorRequirement, kNodeSelectorTerm, kNodeSelector,
    kPreferredSchedulingTerm, kNodeAffinity, kPodAffinityTerm, kWeightedPodAffinityTerm,
    kPodAffinity, kPodAntiAffinity, kAffinity, kToleration, kHostAlias, kPodDNSConfigOption,
    kPodDNSConfig, kPodReadinessGate, kTopologySpreadConstraint, kPodOS, kPodSchedulingGate,
    kPodResourceClaim, kPodSpec, kPod, kPodTemplateSpec, kRollingUpdateDeployment,
    kDeploymentStrategy, kDeploymentSpec, kDeployment, kReplicaSetSpec, kReplicaSet,
    kPersistentVolumeClaim, kRollingUpdateStatefulSetStrategy, kStatefulSetUpdateStrategy,
    kStatefulSetPersistentVolumeClaimRetentionPolicy, kStatefulSetOrdinals, kStatefulSetSpec,
    kStatefulSet, kPodFailurePolicyOnExitCodesRequirement, kPodFailurePolicyOnPodConditionsPattern,
    kPodFailurePolicyRule, kPodFailurePolicy, kSuccessPolicyRule, kSuccessPolicy, kJobSpec, kJob,
    kJobTemplateSpec, kCronJobSpec, kCronJob, kPolicyRule, kRole, kAggregationRule, kClusterRole,
    kSubject, kRoleRef, kRoleBinding, kClusterRoleBinding, kPodDisruptionBudgetSpec,
    kPodDisruptionBudget, kPriorityClass, kServiceBackendPort, kIngressServiceBackend,
    kIngressBackend, kIngressTLS, kHTTPIngressPath, kHTTPIngressRuleValue, kIngressRuleValue,
    kIngressRule, kIngressSpec, kIngress, kBoundObjectReference, kTokenRequestSpec, kTokenRequest,
    kPreconditions, kDeleteOptions, kFieldSelectorRequirement, kFieldSelectorAttributes,
    kLabelSelectorAttributes, kResourceAttributes, kNonResourceAttributes,
    kSelfSubjectAccessReviewSpec, kSelfSubjectAccessReview, kSubjectAccessReviewSpec,
    kSubjectAccessReview, kSelfSubjectRulesReviewSpec, kSelfSubjectRulesReview, kSelfSubjectReview;
extern const Message kQuantity, kIntOrString, kTime, kRawJson, kExtraValue;

}  // namespace kubetrain::localkube::pb
