// PodSpec and what it holds (core/v1): containers, probes, security contexts, affinity.
// Data only: see protobuf_schema.h.
#include "localkube/protobuf_schema.h"

namespace kubetrain::localkube::pb {

constexpr Field kContainerPortFields[] = {
    {1, "name", kString, 0},     {2, "hostPort", kInt, 0},  {3, "containerPort", kInt, 0},
    {4, "protocol", kString, 0}, {5, "hostIP", kString, 0},
};
const Message kContainerPort{"ContainerPort", kContainerPortFields};
constexpr Field kConfigMapEnvSourceFields[] = {
    {1, "", kMessage, kInline, &kLocalObjectReference},
    {2, "optional", kBool, kKeepZero},
};
const Message kConfigMapEnvSource{"ConfigMapEnvSource", kConfigMapEnvSourceFields};
// SecretEnvSource and SecretKeySelector have the fields of their ConfigMap twins.
const Message kSecretEnvSource{"SecretEnvSource", kConfigMapEnvSourceFields};
constexpr Field kEnvFromSourceFields[] = {
    {1, "prefix", kString, 0},
    {2, "configMapRef", kMessage, kKeepZero, &kConfigMapEnvSource},
    {3, "secretRef", kMessage, kKeepZero, &kSecretEnvSource},
};
const Message kEnvFromSource{"EnvFromSource", kEnvFromSourceFields};
constexpr Field kConfigMapKeySelectorFields[] = {
    {1, "", kMessage, kInline, &kLocalObjectReference},
    {2, "key", kString, 0},
    {3, "optional", kBool, kKeepZero},
};
const Message kConfigMapKeySelector{"ConfigMapKeySelector", kConfigMapKeySelectorFields};
const Message kSecretKeySelector{"SecretKeySelector", kConfigMapKeySelectorFields};
constexpr Field kEnvVarSourceFields[] = {
    {1, "fieldRef", kMessage, kKeepZero, &kObjectFieldSelector},
    {2, "resourceFieldRef", kMessage, kKeepZero, &kResourceFieldSelector},
    {3, "configMapKeyRef", kMessage, kKeepZero, &kConfigMapKeySelector},
    {4, "secretKeyRef", kMessage, kKeepZero, &kSecretKeySelector},
};
const Message kEnvVarSource{"EnvVarSource", kEnvVarSourceFields};
constexpr Field kEnvVarFields[] = {
    {1, "name", kString, 0},
    {2, "value", kString, 0},
    {3, "valueFrom", kMessage, kKeepZero, &kEnvVarSource},
};
const Message kEnvVar{"EnvVar", kEnvVarFields};
constexpr Field kResourceClaimFields[] = {
    {1, "name", kString, 0},
    {2, "request", kString, 0},
};
const Message kResourceClaim{"ResourceClaim", kResourceClaimFields};
constexpr Field kResourceRequirementsFields[] = {
    {1, "limits", kMessageMap, 0, &kQuantity},
    {2, "requests", kMessageMap, 0, &kQuantity},
    {3, "claims", kMessage, kRepeated, &kResourceClaim},
};
const Message kResourceRequirements{"ResourceRequirements", kResourceRequirementsFields};
constexpr Field kContainerResizePolicyFields[] = {
    {1, "resourceName", kString, 0},
    {2, "restartPolicy", kString, 0},
};
const Message kContainerResizePolicy{"ContainerResizePolicy", kContainerResizePolicyFields};
constexpr Field kVolumeMountFields[] = {
    {1, "name", kString, 0},
    {2, "readOnly", kBool, 0},
    {7, "recursiveReadOnly", kString, kKeepZero},
    {3, "mountPath", kString, 0},
    {4, "subPath", kString, 0},
    {5, "mountPropagation", kString, kKeepZero},
    {6, "subPathExpr", kString, 0},
};
const Message kVolumeMount{"VolumeMount", kVolumeMountFields};
constexpr Field kVolumeDeviceFields[] = {
    {1, "name", kString, 0},
    {2, "devicePath", kString, 0},
};
const Message kVolumeDevice{"VolumeDevice", kVolumeDeviceFields};
constexpr Field kExecActionFields[] = {
    {1, "command", kString, kRepeated},
};
const Message kExecAction{"ExecAction", kExecActionFields};
constexpr Field kHTTPHeaderFields[] = {
    {1, "name", kString, 0},
    {2, "value", kString, 0},
};
const Message kHTTPHeader{"HTTPHeader", kHTTPHeaderFields};
constexpr Field kHTTPGetActionFields[] = {
    {1, "path", kString, 0},
    {2, "port", kMessage, 0, &kIntOrString},
    {3, "host", kString, 0},
    {4, "scheme", kString, 0},
    {5, "httpHeaders", kMessage, kRepeated, &kHTTPHeader},
};
const Message kHTTPGetAction{"HTTPGetAction", kHTTPGetActionFields};
constexpr Field kTCPSocketActionFields[] = {
    {1, "port", kMessage, 0, &kIntOrString},
    {2, "host", kString, 0},
};
const Message kTCPSocketAction{"TCPSocketAction", kTCPSocketActionFields};
constexpr Field kGRPCActionFields[] = {
    {1, "port", kInt, 0},
    {2, "service", kString, kKeepZero},
};
const Message kGRPCAction{"GRPCAction", kGRPCActionFields};
constexpr Field kProbeHandlerFields[] = {
    {1, "exec", kMessage, kKeepZero, &kExecAction},
    {2, "httpGet", kMessage, kKeepZero, &kHTTPGetAction},
    {3, "tcpSocket", kMessage, kKeepZero, &kTCPSocketAction},
    {4, "grpc", kMessage, kKeepZero, &kGRPCAction},
};
const Message kProbeHandler{"ProbeHandler", kProbeHandlerFields};
constexpr Field kProbeFields[] = {
    {1, "", kMessage, kInline, &kProbeHandler},
    {2, "initialDelaySeconds", kInt, 0},
    {3, "timeoutSeconds", kInt, 0},
    {4, "periodSeconds", kInt, 0},
    {5, "successThreshold", kInt, 0},
    {6, "failureThreshold", kInt, 0},
    {7, "terminationGracePeriodSeconds", kInt, kKeepZero},
};
const Message kProbe{"Probe", kProbeFields};
constexpr Field kSleepActionFields[] = {
    {1, "seconds", kInt, 0},
};
const Message kSleepAction{"SleepAction", kSleepActionFields};
constexpr Field kLifecycleHandlerFields[] = {
    {1, "exec", kMessage, kKeepZero, &kExecAction},
    {2, "httpGet", kMessage, kKeepZero, &kHTTPGetAction},
    {3, "tcpSocket", kMessage, kKeepZero, &kTCPSocketAction},
    {4, "sleep", kMessage, kKeepZero, &kSleepAction},
};
const Message kLifecycleHandler{"LifecycleHandler", kLifecycleHandlerFields};
constexpr Field kLifecycleFields[] = {
    {1, "postStart", kMessage, kKeepZero, &kLifecycleHandler},
    {2, "preStop", kMessage, kKeepZero, &kLifecycleHandler},
    {3, "stopSignal", kString, kKeepZero},
};
const Message kLifecycle{"Lifecycle", kLifecycleFields};
constexpr Field kCapabilitiesFields[] = {
    {1, "add", kString, kRepeated},
    {2, "drop", kString, kRepeated},
};
const Message kCapabilities{"Capabilities", kCapabilitiesFields};
constexpr Field kSELinuxOptionsFields[] = {
    {1, "user", kString, 0},
    {2, "role", kString, 0},
    {3, "type", kString, 0},
    {4, "level", kString, 0},
};
const Message kSELinuxOptions{"SELinuxOptions", kSELinuxOptionsFields};
constexpr Field kWindowsSecurityContextOptionsFields[] = {
    {1, "gmsaCredentialSpecName", kString, kKeepZero},
    {2, "gmsaCredentialSpec", kString, kKeepZero},
    {3, "runAsUserName", kString, kKeepZero},
    {4, "hostProcess", kBool, kKeepZero},
};
const Message kWindowsSecurityContextOptions{"WindowsSecurityContextOptions",
                                             kWindowsSecurityContextOptionsFields};
constexpr Field kSeccompProfileFields[] = {
    {1, "type", kString, 0},
    {2, "localhostProfile", kString, kKeepZero},
};
const Message kSeccompProfile{"SeccompProfile", kSeccompProfileFields};
constexpr Field kAppArmorProfileFields[] = {
    {1, "type", kString, 0},
    {2, "localhostProfile", kString, kKeepZero},
};
const Message kAppArmorProfile{"AppArmorProfile", kAppArmorProfileFields};
constexpr Field kSecurityContextFields[] = {
    {1, "capabilities", kMessage, kKeepZero, &kCapabilities},
    {2, "privileged", kBool, kKeepZero},
    {3, "seLinuxOptions", kMessage, kKeepZero, &kSELinuxOptions},
    {10, "windowsOptions", kMessage, kKeepZero, &kWindowsSecurityContextOptions},
    {4, "runAsUser", kInt, kKeepZero},
    {8, "runAsGroup", kInt, kKeepZero},
    {5, "runAsNonRoot", kBool, kKeepZero},
    {6, "readOnlyRootFilesystem", kBool, kKeepZero},
    {7, "allowPrivilegeEscalation", kBool, kKeepZero},
    {9, "procMount", kString, kKeepZero},
    {11, "seccompProfile", kMessage, kKeepZero, &kSeccompProfile},
    {12, "appArmorProfile", kMessage, kKeepZero, &kAppArmorProfile},
};
const Message kSecurityContext{"SecurityContext", kSecurityContextFields};
constexpr Field kContainerFields[] = {
    {1, "name", kString, 0},
    {2, "image", kString, 0},
    {3, "command", kString, kRepeated},
    {4, "args", kString, kRepeated},
    {5, "workingDir", kString, 0},
    {6, "ports", kMessage, kRepeated, &kContainerPort},
    {19, "envFrom", kMessage, kRepeated, &kEnvFromSource},
    {7, "env", kMessage, kRepeated, &kEnvVar},
    {8, "resources", kMessage, 0, &kResourceRequirements},
    {23, "resizePolicy", kMessage, kRepeated, &kContainerResizePolicy},
    {24, "restartPolicy", kString, kKeepZero},
    {9, "volumeMounts", kMessage, kRepeated, &kVolumeMount},
    {21, "volumeDevices", kMessage, kRepeated, &kVolumeDevice},
    {10, "livenessProbe", kMessage, kKeepZero, &kProbe},
    {11, "readinessProbe", kMessage, kKeepZero, &kProbe},
    {22, "startupProbe", kMessage, kKeepZero, &kProbe},
    {12, "lifecycle", kMessage, kKeepZero, &kLifecycle},
    {13, "terminationMessagePath", kString, 0},
    {20, "terminationMessagePolicy", kString, 0},
    {14, "imagePullPolicy", kString, 0},
    {15, "securityContext", kMessage, kKeepZero, &kSecurityContext},
    {16, "stdin", kBool, 0},
    {17, "stdinOnce", kBool, 0},
    {18, "tty", kBool, 0},
};
const Message kContainer{"Container", kContainerFields};
// Kubernetes' EphemeralContainerCommon carries Container's fields under Container's numbers.
const Message kEphemeralContainerCommon{"EphemeralContainerCommon", kContainerFields};
constexpr Field kEphemeralContainerFields[] = {
    {1, "", kMessage, kInline, &kEphemeralContainerCommon},
    {2, "targetContainerName", kString, 0},
};
const Message kEphemeralContainer{"EphemeralContainer", kEphemeralContainerFields};
constexpr Field kSysctlFields[] = {
    {1, "name", kString, 0},
    {2, "value", kString, 0},
};
const Message kSysctl{"Sysctl", kSysctlFields};
constexpr Field kPodSecurityContextFields[] = {
    {1, "seLinuxOptions", kMessage, kKeepZero, &kSELinuxOptions},
    {8, "windowsOptions", kMessage, kKeepZero, &kWindowsSecurityContextOptions},
    {2, "runAsUser", kInt, kKeepZero},
    {6, "runAsGroup", kInt, kKeepZero},
    {3, "runAsNonRoot", kBool, kKeepZero},
    {4, "supplementalGroups", kInt, kRepeated},
    {12, "supplementalGroupsPolicy", kString, kKeepZero},
    {5, "fsGroup", kInt, kKeepZero},
    {7, "sysctls", kMessage, kRepeated, &kSysctl},
    {9, "fsGroupChangePolicy", kString, kKeepZero},
    {10, "seccompProfile", kMessage, kKeepZero, &kSeccompProfile},
    {11, "appArmorProfile", kMessage, kKeepZero, &kAppArmorProfile},
    {13, "seLinuxChangePolicy", kString, kKeepZero},
};
const Message kPodSecurityContext{"PodSecurityContext", kPodSecurityContextFields};
constexpr Field kNodeSelectorRequirementFields[] = {
    {1, "key", kString, 0},
    {2, "operator", kString, 0},
    {3, "values", kString, kRepeated},
};
const Message kNodeSelectorRequirement{"NodeSelectorRequirement", kNodeSelectorRequirementFields};
constexpr Field kNodeSelectorTermFields[] = {
    {1, "matchExpressions", kMessage, kRepeated, &kNodeSelectorRequirement},
    {2, "matchFields", kMessage, kRepeated, &kNodeSelectorRequirement},
};
const Message kNodeSelectorTerm{"NodeSelectorTerm", kNodeSelectorTermFields};
constexpr Field kNodeSelectorFields[] = {
    {1, "nodeSelectorTerms", kMessage, kRepeated, &kNodeSelectorTerm},
};
const Message kNodeSelector{"NodeSelector", kNodeSelectorFields};
constexpr Field kPreferredSchedulingTermFields[] = {
    {1, "weight", kInt, 0},
    {2, "preference", kMessage, 0, &kNodeSelectorTerm},
};
const Message kPreferredSchedulingTerm{"PreferredSchedulingTerm", kPreferredSchedulingTermFields};
constexpr Field kNodeAffinityFields[] = {
    {1, "requiredDuringSchedulingIgnoredDuringExecution", kMessage, kKeepZero, &kNodeSelector},
    {2, "preferredDuringSchedulingIgnoredDuringExecution", kMessage, kRepeated,
     &kPreferredSchedulingTerm},
};
const Message kNodeAffinity{"NodeAffinity", kNodeAffinityFields};
constexpr Field kPodAffinityTermFields[] = {
    {1, "labelSelector", kMessage, kKeepZero, &kLabelSelector},
    {2, "namespaces", kString, kRepeated},
    {3, "topologyKey", kString, 0},
    {4, "namespaceSelector", kMessage, kKeepZero, &kLabelSelector},
    {5, "matchLabelKeys", kString, kRepeated},
    {6, "mismatchLabelKeys", kString, kRepeated},
};
const Message kPodAffinityTerm{"PodAffinityTerm", kPodAffinityTermFields};
constexpr Field kWeightedPodAffinityTermFields[] = {
    {1, "weight", kInt, 0},
    {2, "podAffinityTerm", kMessage, 0, &kPodAffinityTerm},
};
const Message kWeightedPodAffinityTerm{"WeightedPodAffinityTerm", kWeightedPodAffinityTermFields};
constexpr Field kPodAffinityFields[] = {
    {1, "requiredDuringSchedulingIgnoredDuringExecution", kMessage, kRepeated, &kPodAffinityTerm},
    {2, "preferredDuringSchedulingIgnoredDuringExecution", kMessage, kRepeated,
     &kWeightedPodAffinityTerm},
};
const Message kPodAffinity{"PodAffinity", kPodAffinityFields};
constexpr Field kPodAntiAffinityFields[] = {
    {1, "requiredDuringSchedulingIgnoredDuringExecution", kMessage, kRepeated, &kPodAffinityTerm},
    {2, "preferredDuringSchedulingIgnoredDuringExecution", kMessage, kRepeated,
     &kWeightedPodAffinityTerm},
};
const Message kPodAntiAffinity{"PodAntiAffinity", kPodAntiAffinityFields};
constexpr Field kAffinityFields[] = {
    {1, "nodeAffinity", kMessage, kKeepZero, &kNodeAffinity},
    {2, "podAffinity", kMessage, kKeepZero, &kPodAffinity},
    {3, "podAntiAffinity", kMessage, kKeepZero, &kPodAntiAffinity},
};
const Message kAffinity{"Affinity", kAffinityFields};
constexpr Field kTolerationFields[] = {
    {1, "key", kString, 0},
    {2, "operator", kString, 0},
    {3, "value", kString, 0},
    {4, "effect", kString, 0},
    {5, "tolerationSeconds", kInt, kKeepZero},
};
const Message kToleration{"Toleration", kTolerationFields};
constexpr Field kHostAliasFields[] = {
    {1, "ip", kString, 0},
    {2, "hostnames", kString, kRepeated},
};
const Message kHostAlias{"HostAlias", kHostAliasFields};
constexpr Field kPodDNSConfigOptionFields[] = {
    {1, "name", kString, 0},
    {2, "value", kString, kKeepZero},
};
const Message kPodDNSConfigOption{"PodDNSConfigOption", kPodDNSConfigOptionFields};
constexpr Field kPodDNSConfigFields[] = {
    {1, "nameservers", kString, kRepeated},
    {2, "searches", kString, kRepeated},
    {3, "options", kMessage, kRepeated, &kPodDNSConfigOption},
};
const Message kPodDNSConfig{"PodDNSConfig", kPodDNSConfigFields};
constexpr Field kPodReadinessGateFields[] = {
    {1, "conditionType", kString, 0},
};
const Message kPodReadinessGate{"PodReadinessGate", kPodReadinessGateFields};
constexpr Field kTopologySpreadConstraintFields[] = {
    {1, "maxSkew", kInt, 0},
    {2, "topologyKey", kString, 0},
    {3, "whenUnsatisfiable", kString, 0},
    {4, "labelSelector", kMessage, kKeepZero, &kLabelSelector},
    {5, "minDomains", kInt, kKeepZero},
    {6, "nodeAffinityPolicy", kString, kKeepZero},
    {7, "nodeTaintsPolicy", kString, kKeepZero},
    {8, "matchLabelKeys", kString, kRepeated},
};
const Message kTopologySpreadConstraint{"TopologySpreadConstraint",
                                        kTopologySpreadConstraintFields};
constexpr Field kPodOSFields[] = {
    {1, "name", kString, 0},
};
const Message kPodOS{"PodOS", kPodOSFields};
constexpr Field kPodSchedulingGateFields[] = {
    {1, "name", kString, 0},
};
const Message kPodSchedulingGate{"PodSchedulingGate", kPodSchedulingGateFields};
constexpr Field kPodResourceClaimFields[] = {
    {1, "name", kString, 0},
    {3, "resourceClaimName", kString, kKeepZero},
    {4, "resourceClaimTemplateName", kString, kKeepZero},
};
const Message kPodResourceClaim{"PodResourceClaim", kPodResourceClaimFields};
constexpr Field kPodSpecFields[] = {
    {1, "volumes", kMessage, kRepeated, &kVolume},
    {20, "initContainers", kMessage, kRepeated, &kContainer},
    {2, "containers", kMessage, kRepeated, &kContainer},
    {34, "ephemeralContainers", kMessage, kRepeated, &kEphemeralContainer},
    {3, "restartPolicy", kString, 0},
    {4, "terminationGracePeriodSeconds", kInt, kKeepZero},
    {5, "activeDeadlineSeconds", kInt, kKeepZero},
    {6, "dnsPolicy", kString, 0},
    {7, "nodeSelector", kStringMap, 0},
    {8, "serviceAccountName", kString, 0},
    {9, "serviceAccount", kString, 0},
    {21, "automountServiceAccountToken", kBool, kKeepZero},
    {10, "nodeName", kString, 0},
    {11, "hostNetwork", kBool, 0},
    {12, "hostPID", kBool, 0},
    {13, "hostIPC", kBool, 0},
    {27, "shareProcessNamespace", kBool, kKeepZero},
    {14, "securityContext", kMessage, kKeepZero, &kPodSecurityContext},
    {15, "imagePullSecrets", kMessage, kRepeated, &kLocalObjectReference},
    {16, "hostname", kString, 0},
    {17, "subdomain", kString, 0},
    {18, "affinity", kMessage, kKeepZero, &kAffinity},
    {19, "schedulerName", kString, 0},
    {22, "tolerations", kMessage, kRepeated, &kToleration},
    {23, "hostAliases", kMessage, kRepeated, &kHostAlias},
    {24, "priorityClassName", kString, 0},
    {25, "priority", kInt, kKeepZero},
    {26, "dnsConfig", kMessage, kKeepZero, &kPodDNSConfig},
    {28, "readinessGates", kMessage, kRepeated, &kPodReadinessGate},
    {29, "runtimeClassName", kString, kKeepZero},
    {30, "enableServiceLinks", kBool, kKeepZero},
    {31, "preemptionPolicy", kString, kKeepZero},
    {32, "overhead", kMessageMap, 0, &kQuantity},
    {33, "topologySpreadConstraints", kMessage, kRepeated, &kTopologySpreadConstraint},
    {35, "setHostnameAsFQDN", kBool, kKeepZero},
    {36, "os", kMessage, kKeepZero, &kPodOS},
    {37, "hostUsers", kBool, kKeepZero},
    {38, "schedulingGates", kMessage, kRepeated, &kPodSchedulingGate},
    {39, "resourceClaims", kMessage, kRepeated, &kPodResourceClaim},
    {40, "resources", kMessage, kKeepZero, &kResourceRequirements},
};
const Message kPodSpec{"PodSpec", kPodSpecFields};

}  // namespace kubetrain::localkube::pb
