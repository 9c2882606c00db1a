// Volumes and their sources, PersistentVolumeClaim (core/v1).
// Data only: see protobuf_schema.h.
#include "localkube/protobuf_schema.h"

namespace kubetrain::localkube::pb {

constexpr Field kLocalObjectReferenceFields[] = {
    {1, "name", kString, 0},
};
const Message kLocalObjectReference{"LocalObjectReference", kLocalObjectReferenceFields};
constexpr Field kHostPathVolumeSourceFields[] = {
    {1, "path", kString, 0},
    {2, "type", kString, kKeepZero},
};
const Message kHostPathVolumeSource{"HostPathVolumeSource", kHostPathVolumeSourceFields};
constexpr Field kEmptyDirVolumeSourceFields[] = {
    {1, "medium", kString, 0},
    {2, "sizeLimit", kMessage, kKeepZero, &kQuantity},
};
const Message kEmptyDirVolumeSource{"EmptyDirVolumeSource", kEmptyDirVolumeSourceFields};
constexpr Field kGCEPersistentDiskVolumeSourceFields[] = {
    {1, "pdName", kString, 0},
    {2, "fsType", kString, 0},
    {3, "partition", kInt, 0},
    {4, "readOnly", kBool, 0},
};
const Message kGCEPersistentDiskVolumeSource{"GCEPersistentDiskVolumeSource",
                                             kGCEPersistentDiskVolumeSourceFields};
constexpr Field kAWSElasticBlockStoreVolumeSourceFields[] = {
    {1, "volumeID", kString, 0},
    {2, "fsType", kString, 0},
    {3, "partition", kInt, 0},
    {4, "readOnly", kBool, 0},
};
const Message kAWSElasticBlockStoreVolumeSource{"AWSElasticBlockStoreVolumeSource",
                                                kAWSElasticBlockStoreVolumeSourceFields};
constexpr Field kGitRepoVolumeSourceFields[] = {
    {1, "repository", kString, 0},
    {2, "revision", kString, 0},
    {3, "directory", kString, 0},
};
const Message kGitRepoVolumeSource{"GitRepoVolumeSource", kGitRepoVolumeSourceFields};
constexpr Field kKeyToPathFields[] = {
    {1, "key", kString, 0},
    {2, "path", kString, 0},
    {3, "mode", kInt, kKeepZero},
};
const Message kKeyToPath{"KeyToPath", kKeyToPathFields};
constexpr Field kSecretVolumeSourceFields[] = {
    {1, "secretName", kString, 0},
    {2, "items", kMessage, kRepeated, &kKeyToPath},
    {3, "defaultMode", kInt, kKeepZero},
    {4, "optional", kBool, kKeepZero},
};
const Message kSecretVolumeSource{"SecretVolumeSource", kSecretVolumeSourceFields};
constexpr Field kNFSVolumeSourceFields[] = {
    {1, "server", kString, 0},
    {2, "path", kString, 0},
    {3, "readOnly", kBool, 0},
};
const Message kNFSVolumeSource{"NFSVolumeSource", kNFSVolumeSourceFields};
constexpr Field kISCSIVolumeSourceFields[] = {
    {1, "targetPortal", kString, 0},
    {2, "iqn", kString, 0},
    {3, "lun", kInt, 0},
    {4, "iscsiInterface", kString, 0},
    {5, "fsType", kString, 0},
    {6, "readOnly", kBool, 0},
    {7, "portals", kString, kRepeated},
    {8, "chapAuthDiscovery", kBool, 0},
    {11, "chapAuthSession", kBool, 0},
    {10, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
    {12, "initiatorName", kString, kKeepZero},
};
const Message kISCSIVolumeSource{"ISCSIVolumeSource", kISCSIVolumeSourceFields};
constexpr Field kGlusterfsVolumeSourceFields[] = {
    {1, "endpoints", kString, 0},
    {2, "path", kString, 0},
    {3, "readOnly", kBool, 0},
};
const Message kGlusterfsVolumeSource{"GlusterfsVolumeSource", kGlusterfsVolumeSourceFields};
constexpr Field kPersistentVolumeClaimVolumeSourceFields[] = {
    {1, "claimName", kString, 0},
    {2, "readOnly", kBool, 0},
};
const Message kPersistentVolumeClaimVolumeSource{"PersistentVolumeClaimVolumeSource",
                                                 kPersistentVolumeClaimVolumeSourceFields};
constexpr Field kRBDVolumeSourceFields[] = {
    {1, "monitors", kString, kRepeated},
    {2, "image", kString, 0},
    {3, "fsType", kString, 0},
    {4, "pool", kString, 0},
    {5, "user", kString, 0},
    {6, "keyring", kString, 0},
    {7, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
    {8, "readOnly", kBool, 0},
};
const Message kRBDVolumeSource{"RBDVolumeSource", kRBDVolumeSourceFields};
constexpr Field kFlexVolumeSourceFields[] = {
    {1, "driver", kString, 0},
    {2, "fsType", kString, 0},
    {3, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
    {4, "readOnly", kBool, 0},
    {5, "options", kStringMap, 0},
};
const Message kFlexVolumeSource{"FlexVolumeSource", kFlexVolumeSourceFields};
constexpr Field kCinderVolumeSourceFields[] = {
    {1, "volumeID", kString, 0},
    {2, "fsType", kString, 0},
    {3, "readOnly", kBool, 0},
    {4, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
};
const Message kCinderVolumeSource{"CinderVolumeSource", kCinderVolumeSourceFields};
constexpr Field kCephFSVolumeSourceFields[] = {
    {1, "monitors", kString, kRepeated},
    {2, "path", kString, 0},
    {3, "user", kString, 0},
    {4, "secretFile", kString, 0},
    {5, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
    {6, "readOnly", kBool, 0},
};
const Message kCephFSVolumeSource{"CephFSVolumeSource", kCephFSVolumeSourceFields};
constexpr Field kFlockerVolumeSourceFields[] = {
    {1, "datasetName", kString, 0},
    {2, "datasetUUID", kString, 0},
};
const Message kFlockerVolumeSource{"FlockerVolumeSource", kFlockerVolumeSourceFields};
constexpr Field kObjectFieldSelectorFields[] = {
    {1, "apiVersion", kString, 0},
    {2, "fieldPath", kString, 0},
};
const Message kObjectFieldSelector{"ObjectFieldSelector", kObjectFieldSelectorFields};
constexpr Field kResourceFieldSelectorFields[] = {
    {1, "containerName", kString, 0},
    {2, "resource", kString, 0},
    {3, "divisor", kMessage, 0, &kQuantity},
};
const Message kResourceFieldSelector{"ResourceFieldSelector", kResourceFieldSelectorFields};
constexpr Field kDownwardAPIVolumeFileFields[] = {
    {1, "path", kString, 0},
    {2, "fieldRef", kMessage, kKeepZero, &kObjectFieldSelector},
    {3, "resourceFieldRef", kMessage, kKeepZero, &kResourceFieldSelector},
    {4, "mode", kInt, kKeepZero},
};
const Message kDownwardAPIVolumeFile{"DownwardAPIVolumeFile", kDownwardAPIVolumeFileFields};
constexpr Field kDownwardAPIVolumeSourceFields[] = {
    {1, "items", kMessage, kRepeated, &kDownwardAPIVolumeFile},
    {2, "defaultMode", kInt, kKeepZero},
};
const Message kDownwardAPIVolumeSource{"DownwardAPIVolumeSource", kDownwardAPIVolumeSourceFields};
constexpr Field kFCVolumeSourceFields[] = {
    {1, "targetWWNs", kString, kRepeated},
    {2, "lun", kInt, kKeepZero},
    {3, "fsType", kString, 0},
    {4, "readOnly", kBool, 0},
    {5, "wwids", kString, kRepeated},
};
const Message kFCVolumeSource{"FCVolumeSource", kFCVolumeSourceFields};
constexpr Field kAzureFileVolumeSourceFields[] = {
    {1, "secretName", kString, 0},
    {2, "shareName", kString, 0},
    {3, "readOnly", kBool, 0},
};
const Message kAzureFileVolumeSource{"AzureFileVolumeSource", kAzureFileVolumeSourceFields};
constexpr Field kConfigMapVolumeSourceFields[] = {
    {1, "", kMessage, kInline, &kLocalObjectReference},
    {2, "items", kMessage, kRepeated, &kKeyToPath},
    {3, "defaultMode", kInt, kKeepZero},
    {4, "optional", kBool, kKeepZero},
};
const Message kConfigMapVolumeSource{"ConfigMapVolumeSource", kConfigMapVolumeSourceFields};
constexpr Field kVsphereVirtualDiskVolumeSourceFields[] = {
    {1, "volumePath", kString, 0},
    {2, "fsType", kString, 0},
    {3, "storagePolicyName", kString, 0},
    {4, "storagePolicyID", kString, 0},
};
const Message kVsphereVirtualDiskVolumeSource{"VsphereVirtualDiskVolumeSource",
                                              kVsphereVirtualDiskVolumeSourceFields};
constexpr Field kQuobyteVolumeSourceFields[] = {
    {1, "registry", kString, 0}, {2, "volume", kString, 0}, {3, "readOnly", kBool, 0},
    {4, "user", kString, 0},     {5, "group", kString, 0},  {6, "tenant", kString, 0},
};
const Message kQuobyteVolumeSource{"QuobyteVolumeSource", kQuobyteVolumeSourceFields};
constexpr Field kAzureDiskVolumeSourceFields[] = {
    {1, "diskName", kString, 0},
    {2, "diskURI", kString, 0},
    {3, "cachingMode", kString, kKeepZero},
    {4, "fsType", kString, kKeepZero},
    {5, "readOnly", kBool, kKeepZero},
    {6, "kind", kString, kKeepZero},
};
const Message kAzureDiskVolumeSource{"AzureDiskVolumeSource", kAzureDiskVolumeSourceFields};
constexpr Field kPhotonPersistentDiskVolumeSourceFields[] = {
    {1, "pdID", kString, 0},
    {2, "fsType", kString, 0},
};
const Message kPhotonPersistentDiskVolumeSource{"PhotonPersistentDiskVolumeSource",
                                                kPhotonPersistentDiskVolumeSourceFields};
constexpr Field kSecretProjectionFields[] = {
    {1, "", kMessage, kInline, &kLocalObjectReference},
    {2, "items", kMessage, kRepeated, &kKeyToPath},
    {4, "optional", kBool, kKeepZero},
};
const Message kSecretProjection{"SecretProjection", kSecretProjectionFields};
constexpr Field kDownwardAPIProjectionFields[] = {
    {1, "items", kMessage, kRepeated, &kDownwardAPIVolumeFile},
};
const Message kDownwardAPIProjection{"DownwardAPIProjection", kDownwardAPIProjectionFields};
constexpr Field kConfigMapProjectionFields[] = {
    {1, "", kMessage, kInline, &kLocalObjectReference},
    {2, "items", kMessage, kRepeated, &kKeyToPath},
    {4, "optional", kBool, kKeepZero},
};
const Message kConfigMapProjection{"ConfigMapProjection", kConfigMapProjectionFields};
constexpr Field kServiceAccountTokenProjectionFields[] = {
    {1, "audience", kString, 0},
    {2, "expirationSeconds", kInt, kKeepZero},
    {3, "path", kString, 0},
};
const Message kServiceAccountTokenProjection{"ServiceAccountTokenProjection",
                                             kServiceAccountTokenProjectionFields};
constexpr Field kClusterTrustBundleProjectionFields[] = {
    {1, "name", kString, kKeepZero},
    {2, "signerName", kString, kKeepZero},
    {3, "labelSelector", kMessage, kKeepZero, &kLabelSelector},
    {5, "optional", kBool, kKeepZero},
    {4, "path", kString, 0},
};
const Message kClusterTrustBundleProjection{"ClusterTrustBundleProjection",
                                            kClusterTrustBundleProjectionFields};
constexpr Field kVolumeProjectionFields[] = {
    {1, "secret", kMessage, kKeepZero, &kSecretProjection},
    {2, "downwardAPI", kMessage, kKeepZero, &kDownwardAPIProjection},
    {3, "configMap", kMessage, kKeepZero, &kConfigMapProjection},
    {4, "serviceAccountToken", kMessage, kKeepZero, &kServiceAccountTokenProjection},
    {5, "clusterTrustBundle", kMessage, kKeepZero, &kClusterTrustBundleProjection},
};
const Message kVolumeProjection{"VolumeProjection", kVolumeProjectionFields};
constexpr Field kProjectedVolumeSourceFields[] = {
    {1, "sources", kMessage, kRepeated, &kVolumeProjection},
    {2, "defaultMode", kInt, kKeepZero},
};
const Message kProjectedVolumeSource{"ProjectedVolumeSource", kProjectedVolumeSourceFields};
constexpr Field kPortworxVolumeSourceFields[] = {
    {1, "volumeID", kString, 0},
    {2, "fsType", kString, 0},
    {3, "readOnly", kBool, 0},
};
const Message kPortworxVolumeSource{"PortworxVolumeSource", kPortworxVolumeSourceFields};
constexpr Field kScaleIOVolumeSourceFields[] = {
    {1, "gateway", kString, 0},
    {2, "system", kString, 0},
    {3, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
    {4, "sslEnabled", kBool, 0},
    {5, "protectionDomain", kString, 0},
    {6, "storagePool", kString, 0},
    {7, "storageMode", kString, 0},
    {8, "volumeName", kString, 0},
    {9, "fsType", kString, 0},
    {10, "readOnly", kBool, 0},
};
const Message kScaleIOVolumeSource{"ScaleIOVolumeSource", kScaleIOVolumeSourceFields};
constexpr Field kStorageOSVolumeSourceFields[] = {
    {1, "volumeName", kString, 0},
    {2, "volumeNamespace", kString, 0},
    {3, "fsType", kString, 0},
    {4, "readOnly", kBool, 0},
    {5, "secretRef", kMessage, kKeepZero, &kLocalObjectReference},
};
const Message kStorageOSVolumeSource{"StorageOSVolumeSource", kStorageOSVolumeSourceFields};
constexpr Field kCSIVolumeSourceFields[] = {
    {1, "driver", kString, 0},
    {2, "readOnly", kBool, kKeepZero},
    {3, "fsType", kString, kKeepZero},
    {4, "volumeAttributes", kStringMap, 0},
    {5, "nodePublishSecretRef", kMessage, kKeepZero, &kLocalObjectReference},
};
const Message kCSIVolumeSource{"CSIVolumeSource", kCSIVolumeSourceFields};
constexpr Field kVolumeResourceRequirementsFields[] = {
    {1, "limits", kMessageMap, 0, &kQuantity},
    {2, "requests", kMessageMap, 0, &kQuantity},
};
const Message kVolumeResourceRequirements{"VolumeResourceRequirements",
                                          kVolumeResourceRequirementsFields};
constexpr Field kTypedLocalObjectReferenceFields[] = {
    {1, "apiGroup", kString, kKeepZero},
    {2, "kind", kString, 0},
    {3, "name", kString, 0},
};
const Message kTypedLocalObjectReference{"TypedLocalObjectReference",
                                         kTypedLocalObjectReferenceFields};
constexpr Field kTypedObjectReferenceFields[] = {
    {1, "apiGroup", kString, kKeepZero},
    {2, "kind", kString, 0},
    {3, "name", kString, 0},
    {4, "namespace", kString, kKeepZero},
};
const Message kTypedObjectReference{"TypedObjectReference", kTypedObjectReferenceFields};
constexpr Field kPersistentVolumeClaimSpecFields[] = {
    {1, "accessModes", kString, kRepeated},
    {4, "selector", kMessage, kKeepZero, &kLabelSelector},
    {2, "resources", kMessage, 0, &kVolumeResourceRequirements},
    {3, "volumeName", kString, 0},
    {5, "storageClassName", kString, kKeepZero},
    {6, "volumeMode", kString, kKeepZero},
    {7, "dataSource", kMessage, kKeepZero, &kTypedLocalObjectReference},
    {8, "dataSourceRef", kMessage, kKeepZero, &kTypedObjectReference},
    {9, "volumeAttributesClassName", kString, kKeepZero},
};
const Message kPersistentVolumeClaimSpec{"PersistentVolumeClaimSpec",
                                         kPersistentVolumeClaimSpecFields};
constexpr Field kPersistentVolumeClaimTemplateFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kPersistentVolumeClaimSpec},
};
const Message kPersistentVolumeClaimTemplate{"PersistentVolumeClaimTemplate",
                                             kPersistentVolumeClaimTemplateFields};
constexpr Field kEphemeralVolumeSourceFields[] = {
    {1, "volumeClaimTemplate", kMessage, kKeepZero, &kPersistentVolumeClaimTemplate},
};
const Message kEphemeralVolumeSource{"EphemeralVolumeSource", kEphemeralVolumeSourceFields};
constexpr Field kImageVolumeSourceFields[] = {
    {1, "reference", kString, 0},
    {2, "pullPolicy", kString, 0},
};
const Message kImageVolumeSource{"ImageVolumeSource", kImageVolumeSourceFields};
constexpr Field kVolumeSourceFields[] = {
    {1, "hostPath", kMessage, kKeepZero, &kHostPathVolumeSource},
    {2, "emptyDir", kMessage, kKeepZero, &kEmptyDirVolumeSource},
    {3, "gcePersistentDisk", kMessage, kKeepZero, &kGCEPersistentDiskVolumeSource},
    {4, "awsElasticBlockStore", kMessage, kKeepZero, &kAWSElasticBlockStoreVolumeSource},
    {5, "gitRepo", kMessage, kKeepZero, &kGitRepoVolumeSource},
    {6, "secret", kMessage, kKeepZero, &kSecretVolumeSource},
    {7, "nfs", kMessage, kKeepZero, &kNFSVolumeSource},
    {8, "iscsi", kMessage, kKeepZero, &kISCSIVolumeSource},
    {9, "glusterfs", kMessage, kKeepZero, &kGlusterfsVolumeSource},
    {10, "persistentVolumeClaim", kMessage, kKeepZero, &kPersistentVolumeClaimVolumeSource},
    {11, "rbd", kMessage, kKeepZero, &kRBDVolumeSource},
    {12, "flexVolume", kMessage, kKeepZero, &kFlexVolumeSource},
    {13, "cinder", kMessage, kKeepZero, &kCinderVolumeSource},
    {14, "cephfs", kMessage, kKeepZero, &kCephFSVolumeSource},
    {15, "flocker", kMessage, kKeepZero, &kFlockerVolumeSource},
    {16, "downwardAPI", kMessage, kKeepZero, &kDownwardAPIVolumeSource},
    {17, "fc", kMessage, kKeepZero, &kFCVolumeSource},
    {18, "azureFile", kMessage, kKeepZero, &kAzureFileVolumeSource},
    {19, "configMap", kMessage, kKeepZero, &kConfigMapVolumeSource},
    {20, "vsphereVolume", kMessage, kKeepZero, &kVsphereVirtualDiskVolumeSource},
    {21, "quobyte", kMessage, kKeepZero, &kQuobyteVolumeSource},
    {22, "azureDisk", kMessage, kKeepZero, &kAzureDiskVolumeSource},
    {23, "photonPersistentDisk", kMessage, kKeepZero, &kPhotonPersistentDiskVolumeSource},
    {26, "projected", kMessage, kKeepZero, &kProjectedVolumeSource},
    {24, "portworxVolume", kMessage, kKeepZero, &kPortworxVolumeSource},
    {25, "scaleIO", kMessage, kKeepZero, &kScaleIOVolumeSource},
    {27, "storageos", kMessage, kKeepZero, &kStorageOSVolumeSource},
    {28, "csi", kMessage, kKeepZero, &kCSIVolumeSource},
    {29, "ephemeral", kMessage, kKeepZero, &kEphemeralVolumeSource},
    {30, "image", kMessage, kKeepZero, &kImageVolumeSource},
};
const Message kVolumeSource{"VolumeSource", kVolumeSourceFields};
constexpr Field kVolumeFields[] = {
    {1, "name", kString, 0},
    {2, "", kMessage, kInline, &kVolumeSource},
};
const Message kVolume{"Volume", kVolumeFields};
constexpr Field kPersistentVolumeClaimFields[] = {
    {1, "metadata", kMessage, 0, &kObjectMeta},
    {2, "spec", kMessage, 0, &kPersistentVolumeClaimSpec},
};
const Message kPersistentVolumeClaim{"PersistentVolumeClaim", kPersistentVolumeClaimFields};

}  // namespace kubetrain::localkube::pb
