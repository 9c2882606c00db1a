// ObjectMeta, LabelSelector, DeleteOptions (meta/v1), the messages with a JSON form of their own
// (Quantity, IntOrString, Time, FieldsV1), rbac/v1, policy/v1, scheduling/v1, networking/v1,
// authentication/v1; and the table of kinds.
// Data only: see protobuf_schema.h.
#include "localkube/protobuf_schema.h"

namespace kubetrain::localkube::pb {

const Message kQuantity{"Quantity", {}, Special::kQuantity};
const Message kIntOrString{"IntOrString", {}, Special::kIntOrString};
const Message kTime{"Time", {}, Special::kTime};
const Message kRawJson{"FieldsV1", {}, Special::kRawJson};

constexpr Field kOwnerReferenceFields[] = {
    {5, "apiVersion", kString, 0},
    {1, "kind", kString, 0},
    {3, "name", kString, 0},
    {4, "uid", kString, 0},
    {6, "controller", kBool, kKeepZero},
    {7, "blockOwnerDeletion", kBool, kKeepZero},
};
const Message kOwnerReference{"OwnerReference", kOwnerReferenceFields};
constexpr Field kManagedFieldsEntryFields[] = {
    {1, "manager", kString, 0},     {2, "operation", kString, 0},
    {3, "apiVersion", kString, 0},  {4, "time", kMessage, kKeepZero, &kTime},
    {6, "fieldsType", kString, 0},  {7, "fieldsV1", kMessage, kKeepZero, &kRawJson},
    {8, "subresource", kString, 0},
};
const Message kManagedFieldsEntry{"ManagedFieldsEntry", kManagedFieldsEntryFields};
constexpr Field kObjectMetaFields[] = {
    {1, "name", kString, 0},
    {2, "generateName", kString, 0},
    {3, "namespace", kString, 0},
    {4, "selfLink", kString, 0},
    {5, "uid", kString, 0},
    {6, "resourceVersion", kString, 0},
    {7, "generation", kInt, 0},
    {8, "creationTimestamp", kMessage, 0, &kTime},
    {9, "deletionTimestamp", kMessage, kKeepZero, &kTime},
    {10, "deletionGracePeriodSeconds", kInt, kKeepZero},
    {11, "labels", kStringMap, 0},
    {12, "annotations", kStringMap, 0},
    {13, "ownerReferences", kMessage, kRepeated, &kOwnerReference},
    {14, "finalizers", kString, kRepeated},
    {17, "managedFields", kMessage, kRepeated, &kManagedFieldsEntry},
};
const Message kObjectMeta{"ObjectMeta", kObjectMetaFields};
constexpr Field kLabelSelectorRequirementFields[] = {
    {1, "key", kString, 0},
    {2, "operator", kString, 0},
    {3, "values", kString, kRepeated},
};
const Message kLabelSelectorRequirement{"LabelSelectorRequirement",
                                        kLabelSelectorRequirementFields};
constexpr Field kLabelSelectorFields[] = {
    {1, "matchLabels", kStringMap, 0},
    {2, "matchExpressions", kMessage, kRepeated, &kLabelSelectorRequirement},
};
const Message kLabelSelector{"LabelSelector", kLabelSelectorFields};
constexpr Field kPolicyRuleFields[] = {
    {1, "verbs", kString, kRepeated},           {2, "apiGroups", kString, kRepeated},
    {3, "resources", kString, kRepeated},       {4, "resourceNames", kString, kRepeated},
    {5, "nonResourceURLs", kString, kRepeated},
};
const Message kPolicyRule{"PolicyRule", kPolicyRuleFields};
constexpr Field kRoleFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "rules", kMessage, kRepeated, &kPolicyRule},
};
const Message kRole{"Role", kRoleFields};
constexpr Field kAggregationRuleFields[] = {
    {1, "clusterRoleSelectors", kMessage, kRepeated, &kLabelSelector},
};
const Message kAggregationRule{"AggregationRule", kAggregationRuleFields};
constexpr Field kClusterRoleFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "rules", kMessage, kRepeated, &kPolicyRule},
    {3, "aggregationRule", kMessage, kKeepZero, &kAggregationRule},
};
const Message kClusterRole{"ClusterRole", kClusterRoleFields};
constexpr Field kSubjectFields[] = {
    {1, "kind", kString, 0},
    {2, "apiGroup", kString, 0},
    {3, "name", kString, 0},
    {4, "namespace", kString, 0},
};
const Message kSubject{"Subject", kSubjectFields};
constexpr Field kRoleRefFields[] = {
    {1, "apiGroup", kString, 0},
    {2, "kind", kString, 0},
    {3, "name", kString, 0},
};
const Message kRoleRef{"RoleRef", kRoleRefFields};
constexpr Field kRoleBindingFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "subjects", kMessage, kRepeated, &kSubject},
    {3, "roleRef", kMessage, 0, &kRoleRef},
};
const Message kRoleBinding{"RoleBinding", kRoleBindingFields};
constexpr Field kClusterRoleBindingFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "subjects", kMessage, kRepeated, &kSubject},
    {3, "roleRef", kMessage, 0, &kRoleRef},
};
const Message kClusterRoleBinding{"ClusterRoleBinding", kClusterRoleBindingFields};
constexpr Field kPodDisruptionBudgetSpecFields[] = {
    {1, "minAvailable", kMessage, kKeepZero, &kIntOrString},
    {2, "selector", kMessage, kKeepZero, &kLabelSelector},
    {3, "maxUnavailable", kMessage, kKeepZero, &kIntOrString},
    {4, "unhealthyPodEvictionPolicy", kString, kKeepZero},
};
const Message kPodDisruptionBudgetSpec{"PodDisruptionBudgetSpec", kPodDisruptionBudgetSpecFields};
constexpr Field kPodDisruptionBudgetFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kPodDisruptionBudgetSpec},
};
const Message kPodDisruptionBudget{"PodDisruptionBudget", kPodDisruptionBudgetFields};
constexpr Field kPriorityClassFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "value", kInt, 0},
    {3, "globalDefault", kBool, 0},
    {4, "description", kString, 0},
    {5, "preemptionPolicy", kString, kKeepZero},
};
const Message kPriorityClass{"PriorityClass", kPriorityClassFields};
constexpr Field kServiceBackendPortFields[] = {
    {1, "name", kString, 0},
    {2, "number", kInt, 0},
};
const Message kServiceBackendPort{"ServiceBackendPort", kServiceBackendPortFields};
constexpr Field kIngressServiceBackendFields[] = {
    {1, "name", kString, 0},
    {2, "port", kMessage, 0, &kServiceBackendPort},
};
const Message kIngressServiceBackend{"IngressServiceBackend", kIngressServiceBackendFields};
constexpr Field kIngressBackendFields[] = {
    {4, "service", kMessage, kKeepZero, &kIngressServiceBackend},
    {3, "resource", kMessage, kKeepZero, &kTypedLocalObjectReference},
};
const Message kIngressBackend{"IngressBackend", kIngressBackendFields};
constexpr Field kIngressTLSFields[] = {
    {1, "hosts", kString, kRepeated},
    {2, "secretName", kString, 0},
};
const Message kIngressTLS{"IngressTLS", kIngressTLSFields};
constexpr Field kHTTPIngressPathFields[] = {
    {1, "path", kString, 0},
    {3, "pathType", kString, kKeepZero},
    {2, "backend", kMessage, 0, &kIngressBackend},
};
const Message kHTTPIngressPath{"HTTPIngressPath", kHTTPIngressPathFields};
constexpr Field kHTTPIngressRuleValueFields[] = {
    {1, "paths", kMessage, kRepeated, &kHTTPIngressPath},
};
const Message kHTTPIngressRuleValue{"HTTPIngressRuleValue", kHTTPIngressRuleValueFields};
constexpr Field kIngressRuleValueFields[] = {
    {1, "http", kMessage, kKeepZero, &kHTTPIngressRuleValue},
};
const Message kIngressRuleValue{"IngressRuleValue", kIngressRuleValueFields};
constexpr Field kIngressRuleFields[] = {
    {1, "host", kString, 0},
    {2, "", kMessage, kInline, &kIngressRuleValue},
};
const Message kIngressRule{"IngressRule", kIngressRuleFields};
constexpr Field kIngressSpecFields[] = {
    {4, "ingressClassName", kString, kKeepZero},
    {1, "defaultBackend", kMessage, kKeepZero, &kIngressBackend},
    {2, "tls", kMessage, kRepeated, &kIngressTLS},
    {3, "rules", kMessage, kRepeated, &kIngressRule},
};
const Message kIngressSpec{"IngressSpec", kIngressSpecFields};
constexpr Field kIngressFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kIngressSpec},
};
const Message kIngress{"Ingress", kIngressFields};
constexpr Field kBoundObjectReferenceFields[] = {
    {1, "kind", kString, 0},
    {2, "apiVersion", kString, 0},
    {3, "name", kString, 0},
    {4, "uid", kString, 0},
};
const Message kBoundObjectReference{"BoundObjectReference", kBoundObjectReferenceFields};
constexpr Field kTokenRequestSpecFields[] = {
    {1, "audiences", kString, kRepeated},
    {4, "expirationSeconds", kInt, kKeepZero},
    {3, "boundObjectRef", kMessage, kKeepZero, &kBoundObjectReference},
};
const Message kTokenRequestSpec{"TokenRequestSpec", kTokenRequestSpecFields};
constexpr Field kTokenRequestFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kTokenRequestSpec},
};
const Message kTokenRequest{"TokenRequest", kTokenRequestFields};
constexpr Field kPreconditionsFields[] = {
    {1, "uid", kString, kKeepZero},
    {2, "resourceVersion", kString, kKeepZero},
};
const Message kPreconditions{"Preconditions", kPreconditionsFields};
constexpr Field kDeleteOptionsFields[] = {
    {1, "gracePeriodSeconds", kInt, kKeepZero},
    {2, "preconditions", kMessage, kKeepZero, &kPreconditions},
    {3, "orphanDependents", kBool, kKeepZero},
    {4, "propagationPolicy", kString, kKeepZero},
    {5, "dryRun", kString, kRepeated},
    {6, "ignoreStoreReadErrorWithClusterBreakingPotential", kBool, kKeepZero},
};
const Message kDeleteOptions{"DeleteOptions", kDeleteOptionsFields};

namespace {

constexpr KindRow kKinds[] = {
    {"v1", "Namespace", &kNamespace},
    {"v1", "ConfigMap", &kConfigMap},
    {"v1", "Secret", &kSecret},
    {"v1", "ServiceAccount", &kServiceAccount},
    {"v1", "Service", &kService},
    {"v1", "ResourceQuota", &kResourceQuota},
    {"v1", "Pod", &kPod},
    {"v1", "PersistentVolumeClaim", &kPersistentVolumeClaim},
    {"apps/v1", "Deployment", &kDeployment},
    {"apps/v1", "ReplicaSet", &kReplicaSet},
    {"apps/v1", "StatefulSet", &kStatefulSet},
    {"batch/v1", "Job", &kJob},
    {"batch/v1", "CronJob", &kCronJob},
    {"rbac.authorization.k8s.io/v1", "Role", &kRole},
    {"rbac.authorization.k8s.io/v1", "ClusterRole", &kClusterRole},
    {"rbac.authorization.k8s.io/v1", "RoleBinding", &kRoleBinding},
    {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", &kClusterRoleBinding},
    {"policy/v1", "PodDisruptionBudget", &kPodDisruptionBudget},
    {"scheduling.k8s.io/v1", "PriorityClass", &kPriorityClass},
    {"networking.k8s.io/v1", "Ingress", &kIngress},
    {"authentication.k8s.io/v1", "TokenRequest", &kTokenRequest},
    {"authentication.k8s.io/v1", "SelfSubjectReview", &kSelfSubjectReview},
    {"authorization.k8s.io/v1", "SelfSubjectAccessReview", &kSelfSubjectAccessReview},
    {"authorization.k8s.io/v1", "SubjectAccessReview", &kSubjectAccessReview},
    {"authorization.k8s.io/v1", "SelfSubjectRulesReview", &kSelfSubjectRulesReview},
    // client-go writes DeleteOptions with either version.
    {"v1", "DeleteOptions", &kDeleteOptions},
    {"meta.k8s.io/v1", "DeleteOptions", &kDeleteOptions},
};

constexpr const Message* kAll[] = {
    &kQuantity,
    &kIntOrString,
    &kTime,
    &kRawJson,
    &kOwnerReference,
    &kManagedFieldsEntry,
    &kObjectMeta,
    &kNamespaceSpec,
    &kNamespace,
    &kConfigMap,
    &kSecret,
    &kObjectReference,
    &kLocalObjectReference,
    &kServiceAccount,
    &kServicePort,
    &kClientIPConfig,
    &kSessionAffinityConfig,
    &kServiceSpec,
    &kService,
    &kScopedResourceSelectorRequirement,
    &kScopeSelector,
    &kResourceQuotaSpec,
    &kResourceQuota,
    &kHostPathVolumeSource,
    &kEmptyDirVolumeSource,
    &kGCEPersistentDiskVolumeSource,
    &kAWSElasticBlockStoreVolumeSource,
    &kGitRepoVolumeSource,
    &kKeyToPath,
    &kSecretVolumeSource,
    &kNFSVolumeSource,
    &kISCSIVolumeSource,
    &kGlusterfsVolumeSource,
    &kPersistentVolumeClaimVolumeSource,
    &kRBDVolumeSource,
    &kFlexVolumeSource,
    &kCinderVolumeSource,
    &kCephFSVolumeSource,
    &kFlockerVolumeSource,
    &kObjectFieldSelector,
    &kResourceFieldSelector,
    &kDownwardAPIVolumeFile,
    &kDownwardAPIVolumeSource,
    &kFCVolumeSource,
    &kAzureFileVolumeSource,
    &kConfigMapVolumeSource,
    &kVsphereVirtualDiskVolumeSource,
    &kQuobyteVolumeSource,
    &kAzureDiskVolumeSource,
    &kPhotonPersistentDiskVolumeSource,
    &kSecretProjection,
    &kDownwardAPIProjection,
    &kConfigMapProjection,
    &kServiceAccountTokenProjection,
    &kLabelSelectorRequirement,
    &kLabelSelector,
    &kClusterTrustBundleProjection,
    &kVolumeProjection,
    &kProjectedVolumeSource,
    &kPortworxVolumeSource,
    &kScaleIOVolumeSource,
    &kStorageOSVolumeSource,
    &kCSIVolumeSource,
    &kVolumeResourceRequirements,
    &kTypedLocalObjectReference,
    &kTypedObjectReference,
    &kPersistentVolumeClaimSpec,
    &kPersistentVolumeClaimTemplate,
    &kEphemeralVolumeSource,
    &kImageVolumeSource,
    &kVolumeSource,
    &kVolume,
    &kContainerPort,
    &kConfigMapEnvSource,
    &kSecretEnvSource,
    &kEnvFromSource,
    &kConfigMapKeySelector,
    &kSecretKeySelector,
    &kEnvVarSource,
    &kEnvVar,
    &kResourceClaim,
    &kResourceRequirements,
    &kContainerResizePolicy,
    &kVolumeMount,
    &kVolumeDevice,
    &kExecAction,
    &kHTTPHeader,
    &kHTTPGetAction,
    &kTCPSocketAction,
    &kGRPCAction,
    &kProbeHandler,
    &kProbe,
    &kSleepAction,
    &kLifecycleHandler,
    &kLifecycle,
    &kCapabilities,
    &kSELinuxOptions,
    &kWindowsSecurityContextOptions,
    &kSeccompProfile,
    &kAppArmorProfile,
    &kSecurityContext,
    &kContainer,
    &kEphemeralContainerCommon,
    &kEphemeralContainer,
    &kSysctl,
    &kPodSecurityContext,
    &kNodeSelectorRequirement,
    &kNodeSelectorTerm,
    &kNodeSelector,
    &kPreferredSchedulingTerm,
    &kNodeAffinity,
    &kPodAffinityTerm,
    &kWeightedPodAffinityTerm,
    &kPodAffinity,
    &kPodAntiAffinity,
    &kAffinity,
    &kToleration,
    &kHostAlias,
    &kPodDNSConfigOption,
    &kPodDNSConfig,
    &kPodReadinessGate,
    &kTopologySpreadConstraint,
    &kPodOS,
    &kPodSchedulingGate,
    &kPodResourceClaim,
    &kPodSpec,
    &kPod,
    &kPodTemplateSpec,
    &kRollingUpdateDeployment,
    &kDeploymentStrategy,
    &kDeploymentSpec,
    &kDeployment,
    &kReplicaSetSpec,
    &kReplicaSet,
    &kPersistentVolumeClaim,
    &kRollingUpdateStatefulSetStrategy,
    &kStatefulSetUpdateStrategy,
    &kStatefulSetPersistentVolumeClaimRetentionPolicy,
    &kStatefulSetOrdinals,
    &kStatefulSetSpec,
    &kStatefulSet,
    &kPodFailurePolicyOnExitCodesRequirement,
    &kPodFailurePolicyOnPodConditionsPattern,
    &kPodFailurePolicyRule,
    &kPodFailurePolicy,
    &kSuccessPolicyRule,
    &kSuccessPolicy,
    &kJobSpec,
    &kJob,
    &kJobTemplateSpec,
    &kCronJobSpec,
    &kCronJob,
    &kPolicyRule,
    &kRole,
    &kAggregationRule,
    &kClusterRole,
    &kSubject,
    &kRoleRef,
    &kRoleBinding,
    &kClusterRoleBinding,
    &kPodDisruptionBudgetSpec,
    &kPodDisruptionBudget,
    &kPriorityClass,
    &kServiceBackendPort,
    &kIngressServiceBackend,
    &kIngressBackend,
    &kIngressTLS,
    &kHTTPIngressPath,
    &kHTTPIngressRuleValue,
    &kIngressRuleValue,
    &kIngressRule,
    &kIngressSpec,
    &kIngress,
    &kBoundObjectReference,
    &kTokenRequestSpec,
    &kTokenRequest,
    &kPreconditions,
    &kDeleteOptions,
    &kExtraValue,
    &kFieldSelectorRequirement,
    &kFieldSelectorAttributes,
    &kLabelSelectorAttributes,
    &kResourceAttributes,
    &kNonResourceAttributes,
    &kSelfSubjectAccessReviewSpec,
    &kSelfSubjectAccessReview,
    &kSubjectAccessReviewSpec,
    &kSubjectAccessReview,
    &kSelfSubjectRulesReviewSpec,
    &kSelfSubjectRulesReview,
    &kSelfSubjectReview,
};

}  // namespace

const Message* KindSchema(absl::string_view api_version, absl::string_view kind) {
  for (const KindRow& row : kKinds) {
    if (row.api_version == api_version && row.kind == kind) return row.message;
  }
  return nullptr;
}

std::span<const Message* const> AllMessages() { return kAll; }

std::span<const KindRow> Kinds() { return kKinds; }

}  // namespace kubetrain::localkube::pb
