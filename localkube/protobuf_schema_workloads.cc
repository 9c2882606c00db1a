// Namespace, ConfigMap, Secret, ServiceAccount, Service, ResourceQuota, Pod (core/v1); apps/v1;
// batch/v1. Data only: see protobuf_schema.h.
#include "localkube/protobuf_schema.h"

namespace kubetrain::localkube::pb {

constexpr Field kNamespaceSpecFields[] = {
    {1, "finalizers", kString, kRepeated},
};
const Message kNamespaceSpec{"NamespaceSpec", kNamespaceSpecFields};
constexpr Field kNamespaceFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kNamespaceSpec},
};
const Message kNamespace{"Namespace", kNamespaceFields};
constexpr Field kConfigMapFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {4, "immutable", kBool, kKeepZero},
    {2, "data", kStringMap, 0},
    {3, "binaryData", kBytesMap, 0},
};
const Message kConfigMap{"ConfigMap", kConfigMapFields};
constexpr Field kSecretFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {5, "immutable", kBool, kKeepZero},
    {2, "data", kBytesMap, 0},
    {4, "stringData", kStringMap, 0},
    {3, "type", kString, 0},
};
const Message kSecret{"Secret", kSecretFields};
constexpr Field kObjectReferenceFields[] = {
    {1, "kind", kString, 0},      {2, "namespace", kString, 0},  {3, "name", kString, 0},
    {4, "uid", kString, 0},       {5, "apiVersion", kString, 0}, {6, "resourceVersion", kString, 0},
    {7, "fieldPath", kString, 0},
};
const Message kObjectReference{"ObjectReference", kObjectReferenceFields};
constexpr Field kServiceAccountFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "secrets", kMessage, kRepeated, &kObjectReference},
    {3, "imagePullSecrets", kMessage, kRepeated, &kLocalObjectReference},
    {4, "automountServiceAccountToken", kBool, kKeepZero},
};
const Message kServiceAccount{"ServiceAccount", kServiceAccountFields};
constexpr Field kServicePortFields[] = {
    {1, "name", kString, 0},
    {2, "protocol", kString, 0},
    {6, "appProtocol", kString, kKeepZero},
    {3, "port", kInt, 0},
    {4, "targetPort", kMessage, 0, &kIntOrString},
    {5, "nodePort", kInt, 0},
};
const Message kServicePort{"ServicePort", kServicePortFields};
constexpr Field kClientIPConfigFields[] = {
    {1, "timeoutSeconds", kInt, kKeepZero},
};
const Message kClientIPConfig{"ClientIPConfig", kClientIPConfigFields};
constexpr Field kSessionAffinityConfigFields[] = {
    {1, "clientIP", kMessage, kKeepZero, &kClientIPConfig},
};
const Message kSessionAffinityConfig{"SessionAffinityConfig", kSessionAffinityConfigFields};
constexpr Field kServiceSpecFields[] = {
    {1, "ports", kMessage, kRepeated, &kServicePort},
    {2, "selector", kStringMap, 0},
    {3, "clusterIP", kString, 0},
    {18, "clusterIPs", kString, kRepeated},
    {4, "type", kString, 0},
    {5, "externalIPs", kString, kRepeated},
    {7, "sessionAffinity", kString, 0},
    {8, "loadBalancerIP", kString, 0},
    {9, "loadBalancerSourceRanges", kString, kRepeated},
    {10, "externalName", kString, 0},
    {11, "externalTrafficPolicy", kString, 0},
    {12, "healthCheckNodePort", kInt, 0},
    {13, "publishNotReadyAddresses", kBool, 0},
    {14, "sessionAffinityConfig", kMessage, kKeepZero, &kSessionAffinityConfig},
    {19, "ipFamilies", kString, kRepeated},
    {17, "ipFamilyPolicy", kString, kKeepZero},
    {20, "allocateLoadBalancerNodePorts", kBool, kKeepZero},
    {21, "loadBalancerClass", kString, kKeepZero},
    {22, "internalTrafficPolicy", kString, kKeepZero},
    {23, "trafficDistribution", kString, kKeepZero},
};
const Message kServiceSpec{"ServiceSpec", kServiceSpecFields};
constexpr Field kServiceFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kServiceSpec},
};
const Message kService{"Service", kServiceFields};
constexpr Field kScopedResourceSelectorRequirementFields[] = {
    {1, "scopeName", kString, 0},
    {2, "operator", kString, 0},
    {3, "values", kString, kRepeated},
};
const Message kScopedResourceSelectorRequirement{"ScopedResourceSelectorRequirement",
                                                 kScopedResourceSelectorRequirementFields};
constexpr Field kScopeSelectorFields[] = {
    {1, "matchExpressions", kMessage, kRepeated, &kScopedResourceSelectorRequirement},
};
const Message kScopeSelector{"ScopeSelector", kScopeSelectorFields};
constexpr Field kResourceQuotaSpecFields[] = {
    {1, "hard", kMessageMap, 0, &kQuantity},
    {2, "scopes", kString, kRepeated},
    {3, "scopeSelector", kMessage, kKeepZero, &kScopeSelector},
};
const Message kResourceQuotaSpec{"ResourceQuotaSpec", kResourceQuotaSpecFields};
constexpr Field kResourceQuotaFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kResourceQuotaSpec},
};
const Message kResourceQuota{"ResourceQuota", kResourceQuotaFields};
constexpr Field kPodFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kPodSpec},
};
const Message kPod{"Pod", kPodFields};
constexpr Field kPodTemplateSpecFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kPodSpec},
};
const Message kPodTemplateSpec{"PodTemplateSpec", kPodTemplateSpecFields};
constexpr Field kRollingUpdateDeploymentFields[] = {
    {1, "maxUnavailable", kMessage, kKeepZero, &kIntOrString},
    {2, "maxSurge", kMessage, kKeepZero, &kIntOrString},
};
const Message kRollingUpdateDeployment{"RollingUpdateDeployment", kRollingUpdateDeploymentFields};
constexpr Field kDeploymentStrategyFields[] = {
    {1, "type", kString, 0},
    {2, "rollingUpdate", kMessage, kKeepZero, &kRollingUpdateDeployment},
};
const Message kDeploymentStrategy{"DeploymentStrategy", kDeploymentStrategyFields};
constexpr Field kDeploymentSpecFields[] = {
    {1, "replicas", kInt, kKeepZero},
    {2, "selector", kMessage, kKeepZero, &kLabelSelector},
    {3, "template", kMessage, 0, &kPodTemplateSpec},
    {4, "strategy", kMessage, 0, &kDeploymentStrategy},
    {5, "minReadySeconds", kInt, 0},
    {6, "revisionHistoryLimit", kInt, kKeepZero},
    {7, "paused", kBool, 0},
    {9, "progressDeadlineSeconds", kInt, kKeepZero},
};
const Message kDeploymentSpec{"DeploymentSpec", kDeploymentSpecFields};
constexpr Field kDeploymentFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kDeploymentSpec},
};
const Message kDeployment{"Deployment", kDeploymentFields};
constexpr Field kReplicaSetSpecFields[] = {
    {1, "replicas", kInt, kKeepZero},
    {4, "minReadySeconds", kInt, 0},
    {2, "selector", kMessage, kKeepZero, &kLabelSelector},
    {3, "template", kMessage, 0, &kPodTemplateSpec},
};
const Message kReplicaSetSpec{"ReplicaSetSpec", kReplicaSetSpecFields};
constexpr Field kReplicaSetFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kReplicaSetSpec},
};
const Message kReplicaSet{"ReplicaSet", kReplicaSetFields};
constexpr Field kRollingUpdateStatefulSetStrategyFields[] = {
    {1, "partition", kInt, kKeepZero},
    {2, "maxUnavailable", kMessage, kKeepZero, &kIntOrString},
};
const Message kRollingUpdateStatefulSetStrategy{"RollingUpdateStatefulSetStrategy",
                                                kRollingUpdateStatefulSetStrategyFields};
constexpr Field kStatefulSetUpdateStrategyFields[] = {
    {1, "type", kString, 0},
    {2, "rollingUpdate", kMessage, kKeepZero, &kRollingUpdateStatefulSetStrategy},
};
const Message kStatefulSetUpdateStrategy{"StatefulSetUpdateStrategy",
                                         kStatefulSetUpdateStrategyFields};
constexpr Field kStatefulSetPersistentVolumeClaimRetentionPolicyFields[] = {
    {1, "whenDeleted", kString, 0},
    {2, "whenScaled", kString, 0},
};
const Message kStatefulSetPersistentVolumeClaimRetentionPolicy{
    "StatefulSetPersistentVolumeClaimRetentionPolicy",
    kStatefulSetPersistentVolumeClaimRetentionPolicyFields};
constexpr Field kStatefulSetOrdinalsFields[] = {
    {1, "start", kInt, 0},
};
const Message kStatefulSetOrdinals{"StatefulSetOrdinals", kStatefulSetOrdinalsFields};
constexpr Field kStatefulSetSpecFields[] = {
    {1, "replicas", kInt, kKeepZero},
    {2, "selector", kMessage, kKeepZero, &kLabelSelector},
    {3, "template", kMessage, 0, &kPodTemplateSpec},
    {4, "volumeClaimTemplates", kMessage, kRepeated, &kPersistentVolumeClaim},
    {5, "serviceName", kString, 0},
    {6, "podManagementPolicy", kString, 0},
    {7, "updateStrategy", kMessage, 0, &kStatefulSetUpdateStrategy},
    {8, "revisionHistoryLimit", kInt, kKeepZero},
    {9, "minReadySeconds", kInt, 0},
    {10, "persistentVolumeClaimRetentionPolicy", kMessage, kKeepZero,
     &kStatefulSetPersistentVolumeClaimRetentionPolicy},
    {11, "ordinals", kMessage, kKeepZero, &kStatefulSetOrdinals},
};
const Message kStatefulSetSpec{"StatefulSetSpec", kStatefulSetSpecFields};
constexpr Field kStatefulSetFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kStatefulSetSpec},
};
const Message kStatefulSet{"StatefulSet", kStatefulSetFields};
constexpr Field kPodFailurePolicyOnExitCodesRequirementFields[] = {
    {1, "containerName", kString, kKeepZero},
    {2, "operator", kString, 0},
    {3, "values", kInt, kRepeated},
};
const Message kPodFailurePolicyOnExitCodesRequirement{
    "PodFailurePolicyOnExitCodesRequirement", kPodFailurePolicyOnExitCodesRequirementFields};
constexpr Field kPodFailurePolicyOnPodConditionsPatternFields[] = {
    {1, "type", kString, 0},
    {2, "status", kString, 0},
};
const Message kPodFailurePolicyOnPodConditionsPattern{
    "PodFailurePolicyOnPodConditionsPattern", kPodFailurePolicyOnPodConditionsPatternFields};
constexpr Field kPodFailurePolicyRuleFields[] = {
    {1, "action", kString, 0},
    {2, "onExitCodes", kMessage, kKeepZero, &kPodFailurePolicyOnExitCodesRequirement},
    {3, "onPodConditions", kMessage, kRepeated, &kPodFailurePolicyOnPodConditionsPattern},
};
const Message kPodFailurePolicyRule{"PodFailurePolicyRule", kPodFailurePolicyRuleFields};
constexpr Field kPodFailurePolicyFields[] = {
    {1, "rules", kMessage, kRepeated, &kPodFailurePolicyRule},
};
const Message kPodFailurePolicy{"PodFailurePolicy", kPodFailurePolicyFields};
constexpr Field kSuccessPolicyRuleFields[] = {
    {1, "succeededIndexes", kString, kKeepZero},
    {2, "succeededCount", kInt, kKeepZero},
};
const Message kSuccessPolicyRule{"SuccessPolicyRule", kSuccessPolicyRuleFields};
constexpr Field kSuccessPolicyFields[] = {
    {1, "rules", kMessage, kRepeated, &kSuccessPolicyRule},
};
const Message kSuccessPolicy{"SuccessPolicy", kSuccessPolicyFields};
constexpr Field kJobSpecFields[] = {
    {1, "parallelism", kInt, kKeepZero},
    {2, "completions", kInt, kKeepZero},
    {3, "activeDeadlineSeconds", kInt, kKeepZero},
    {11, "podFailurePolicy", kMessage, kKeepZero, &kPodFailurePolicy},
    {16, "successPolicy", kMessage, kKeepZero, &kSuccessPolicy},
    {7, "backoffLimit", kInt, kKeepZero},
    {12, "backoffLimitPerIndex", kInt, kKeepZero},
    {13, "maxFailedIndexes", kInt, kKeepZero},
    {4, "selector", kMessage, kKeepZero, &kLabelSelector},
    {5, "manualSelector", kBool, kKeepZero},
    {6, "template", kMessage, 0, &kPodTemplateSpec},
    {8, "ttlSecondsAfterFinished", kInt, kKeepZero},
    {9, "completionMode", kString, kKeepZero},
    {10, "suspend", kBool, kKeepZero},
    {14, "podReplacementPolicy", kString, kKeepZero},
    {15, "managedBy", kString, kKeepZero},
};
const Message kJobSpec{"JobSpec", kJobSpecFields};
constexpr Field kJobFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kJobSpec},
};
const Message kJob{"Job", kJobFields};
constexpr Field kJobTemplateSpecFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kJobSpec},
};
const Message kJobTemplateSpec{"JobTemplateSpec", kJobTemplateSpecFields};
constexpr Field kCronJobSpecFields[] = {
    {1, "schedule", kString, 0},
    {8, "timeZone", kString, kKeepZero},
    {2, "startingDeadlineSeconds", kInt, kKeepZero},
    {3, "concurrencyPolicy", kString, 0},
    {4, "suspend", kBool, kKeepZero},
    {5, "jobTemplate", kMessage, 0, &kJobTemplateSpec},
    {6, "successfulJobsHistoryLimit", kInt, kKeepZero},
    {7, "failedJobsHistoryLimit", kInt, kKeepZero},
};
const Message kCronJobSpec{"CronJobSpec", kCronJobSpecFields};
constexpr Field kCronJobFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kCronJobSpec},
};
const Message kCronJob{"CronJob", kCronJobFields};

}  // namespace kubetrain::localkube::pb
