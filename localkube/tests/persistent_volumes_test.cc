// StorageClasses, PersistentVolumes and claims: the default class, the local-path provisioner
// and binder (persistent_volumes.h), the scheduler's volume plug-ins (volume_binding.h), the
// kubectl columns of the three kinds, and the kubelet mounting a claim.
#include "localkube/persistent_volumes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/errors.h"
#include "localkube/kubelet.h"
#include "localkube/storage_objects.h"
#include "localkube/table.h"
#include "localkube/tests/host.h"
#include "localkube/volume_binding.h"
#include "localkube/volumes.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::ReadFile;
namespace fs = std::filesystem;

json Claim(const std::string& name, json extra_spec = json::object(),
           const std::string& mode = "ReadWriteOnce") {
  json claim = {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolumeClaim"},
      {"metadata", {{"name", name}}},
      {"spec", {{"accessModes", {mode}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
  claim["spec"].update(extra_spec);
  return claim;
}

json PodUsing(const std::string& name, const std::string& claim, const std::string& node = "",
              json command = json::array({"sleep", "30"})) {
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"restartPolicy", "Never"},
        {"automountServiceAccountToken", false},
        {"containers",
         {{{"name", "c"},
           {"image", "busybox"},
           {"command", command},
           {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}}}}},
        {"volumes", {{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", claim}}}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

json Node(const std::string& name) {
  return {{"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}}};
}

class PersistentVolumes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir("pv_test");
    controller_ = std::make_unique<PersistentVolumeController>(
        &api_, PersistentVolumeOptions{dir_ + "/data", "node-1"});
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
    fs::remove_all(dir_);
  }

  ResourceTypePtr Type(const std::string& group, const std::string& plural) {
    return registry_.Find(group, "v1", plural);
  }
  absl::StatusOr<json> Create(const std::string& plural, json body, const std::string& group = "") {
    auto type = Type(group, plural);
    return api_.Create(Target{type, type->namespaced ? "default" : "", "", ""}, std::move(body),
                       WriteOptions{});
  }
  absl::StatusOr<json> Delete(const std::string& plural, const std::string& name) {
    auto type = Type("", plural);
    return api_.Delete(Target{type, type->namespaced ? "default" : "", name, ""}, DeleteOptions{});
  }
  std::optional<json> ClaimNow(const std::string& name) {
    return store_.Get(kPvcKey, "default", name);
  }
  std::string Phase(const std::string& name) {
    auto claim = ClaimNow(name);
    return claim ? (*claim)["status"].value("phase", "") : "<gone>";
  }
  // The reasons of the Events about object `name`.
  std::vector<std::string> EventReasons(const std::string& name) {
    std::vector<std::string> out;
    int64_t rv = 0;
    for (const json& e : store_.List("/events", "", &rv)) {
      if (e["involvedObject"].value("name", "") == name) out.push_back(e.value("reason", ""));
    }
    return out;
  }
  void SelectNode(const std::string& claim, const std::string& node) {
    ASSERT_THAT(api_.Mutate(kPvcKey, "default", claim,
                            [&](json& live) {
                              live["metadata"]["annotations"][kSelectedNodeAnnotation] = node;
                              return true;
                            }),
                IsOk());
  }

  Registry registry_;
  Store store_;
  Api api_{&registry_, &store_};
  std::string dir_;
  std::unique_ptr<PersistentVolumeController> controller_;
};

TEST_F(PersistentVolumes, ClaimWithoutClassGetsTheDefaultClass) {
  ASSERT_THAT(controller_->Start(), IsOk());
  auto sc = store_.Get(kStorageClassKey, "", "local-path");
  ASSERT_TRUE(sc.has_value());
  EXPECT_EQ((*sc)["volumeBindingMode"], "WaitForFirstConsumer");
  EXPECT_EQ((*sc)["reclaimPolicy"], "Delete");
  EXPECT_EQ((*sc)["metadata"]["annotations"][kDefaultClassAnnotation], "true");

  auto defaulted = Create("persistentvolumeclaims", Claim("a"));
  ASSERT_THAT(defaulted, IsOk());
  EXPECT_EQ((*defaulted)["spec"]["storageClassName"], "local-path");
  EXPECT_EQ((*defaulted)["metadata"]["finalizers"], json({kPvcProtectionFinalizer}));
  EXPECT_EQ((*defaulted)["status"]["phase"], "Pending");
  // "" asks for no class: left as written.
  auto none = Create("persistentvolumeclaims", Claim("b", {{"storageClassName", ""}}));
  ASSERT_THAT(none, IsOk());
  EXPECT_EQ((*none)["spec"]["storageClassName"], "");
  // The required fields, as the API server words them.
  json bad = Claim("c");
  bad["spec"].erase("accessModes");
  auto refused = Create("persistentvolumeclaims", bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(HttpCode(refused.status()), 422);
  EXPECT_THAT(refused.status().message(), HasSubstr("spec.accessModes"));
}

TEST_F(PersistentVolumes, ClaimWaitsForItsFirstConsumerThenIsProvisionedOnTheSelectedNode) {
  ASSERT_THAT(controller_->Start(), IsOk());
  auto created = Create("persistentvolumeclaims", Claim("data"));
  ASSERT_THAT(created, IsOk());
  const std::string uid = (*created)["metadata"]["uid"];
  ASSERT_TRUE(Eventually([&] {
    auto reasons = EventReasons("data");
    return std::count(reasons.begin(), reasons.end(), "WaitForFirstConsumer") == 1;
  }));
  EXPECT_EQ(Phase("data"), "Pending");
  int64_t rv = 0;
  EXPECT_TRUE(store_.List(kPvKey, "", &rv).empty());

  SelectNode("data", "node-2");  // as the scheduler's VolumeBinding pre-bind does
  ASSERT_TRUE(Eventually([&] { return Phase("data") == "Bound"; }));
  const std::string pv_name = "pvc-" + uid;
  json claim = *ClaimNow("data");
  EXPECT_EQ(claim["spec"]["volumeName"], pv_name);
  EXPECT_EQ(claim["status"]["capacity"]["storage"], "1Gi");
  EXPECT_EQ(claim["status"]["accessModes"], json({"ReadWriteOnce"}));
  const json& annotations = claim["metadata"]["annotations"];
  EXPECT_EQ(annotations["pv.kubernetes.io/bind-completed"], "yes");
  EXPECT_EQ(annotations["pv.kubernetes.io/bound-by-controller"], "yes");
  EXPECT_EQ(annotations["volume.kubernetes.io/storage-provisioner"], kLocalPathProvisioner);

  auto pv = store_.Get(kPvKey, "", pv_name);
  ASSERT_TRUE(pv.has_value());
  EXPECT_EQ((*pv)["status"]["phase"], "Bound");
  EXPECT_EQ((*pv)["spec"]["capacity"]["storage"], "1Gi");
  EXPECT_EQ((*pv)["spec"]["persistentVolumeReclaimPolicy"], "Delete");
  EXPECT_EQ((*pv)["spec"]["storageClassName"], "local-path");
  EXPECT_EQ((*pv)["spec"]["claimRef"]["uid"], uid);
  EXPECT_EQ((*pv)["spec"]["hostPath"]["path"], dir_ + "/data/node-2/" + pv_name);
  EXPECT_TRUE(fs::is_directory(dir_ + "/data/node-2/" + pv_name));
  EXPECT_TRUE(VolumeNodeAffinityMatches(*pv, Node("node-2")));
  EXPECT_FALSE(VolumeNodeAffinityMatches(*pv, Node("node-1")));
  auto reasons = EventReasons("data");
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "ProvisioningSucceeded"), 1);
}

// shared-path: network storage every node reaches, so a claim's data outlives the node its pod
// ran on (a checkpoint the chief's replacement on another node resumes from).
TEST_F(PersistentVolumes, SharedPathClaimIsBoundAtOnceAndEveryNodeMountsIt) {
  ASSERT_THAT(controller_->Start(), IsOk());
  auto sc = store_.Get(kStorageClassKey, "", "shared-path");
  ASSERT_TRUE(sc.has_value());
  EXPECT_EQ((*sc)["provisioner"], kSharedPathProvisioner);
  EXPECT_EQ((*sc)["volumeBindingMode"], "Immediate");
  EXPECT_EQ((*sc)["reclaimPolicy"], "Delete");
  EXPECT_FALSE((*sc)["metadata"].contains("annotations")) << "not the default class";

  // Bound with no pod and no selected node; either access mode.
  auto many = Create("persistentvolumeclaims",
                     Claim("ckpt", {{"storageClassName", "shared-path"}}, "ReadWriteMany"));
  auto once = Create("persistentvolumeclaims", Claim("one", {{"storageClassName", "shared-path"}}));
  ASSERT_THAT(many, IsOk());
  ASSERT_THAT(once, IsOk());
  ASSERT_TRUE(Eventually([&] { return Phase("ckpt") == "Bound" && Phase("one") == "Bound"; }));
  const std::string pv_name = "pvc-" + (*many)["metadata"]["uid"].get<std::string>();
  const std::string path = dir_ + "/data/shared/" + pv_name;
  json claim = *ClaimNow("ckpt");
  EXPECT_EQ(claim["status"]["accessModes"], json({"ReadWriteMany"}));
  EXPECT_EQ(claim["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"],
            kSharedPathProvisioner);
  EXPECT_EQ((*ClaimNow("one"))["status"]["accessModes"], json({"ReadWriteOnce"}));
  auto pv = store_.Get(kPvKey, "", pv_name);
  ASSERT_TRUE(pv.has_value());
  EXPECT_EQ((*pv)["spec"]["hostPath"]["path"], path);
  EXPECT_FALSE((*pv)["spec"].contains("nodeAffinity"));
  EXPECT_EQ((*pv)["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
            kSharedPathProvisioner);
  EXPECT_TRUE(fs::is_directory(path));
  auto reasons = EventReasons("ckpt");
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "ProvisioningSucceeded"), 1);

  // Every node fits the claim's pods and mounts the same directory.
  SchedulerFilter filter = VolumeBindingFilter(&store_);
  VolumeContext context{&store_, nullptr, ""};
  std::ofstream(path + "/checkpoint") << "step 42";
  for (const std::string node : {"node-1", "node-2", "node-3"}) {
    EXPECT_EQ(filter(PodUsing("p", "ckpt"), Node(node)), "") << node;
    auto volumes = SetUpVolumes(PodUsing("p", "ckpt", node), dir_ + "/" + node, context);
    ASSERT_THAT(volumes, IsOk()) << node;
    EXPECT_EQ((*volumes)["data"].host_path, path) << node;
  }
  EXPECT_EQ(ReadFile(path + "/checkpoint"), "step 42");

  // Reclaimed as local-path's are: the claim gone, its volume and directory go.
  ASSERT_THAT(Delete("persistentvolumeclaims", "ckpt"), IsOk());
  ASSERT_TRUE(Eventually([&] { return !store_.Get(kPvKey, "", pv_name).has_value(); }));
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(PersistentVolumes, PreBindSelectsTheNodeAndBindsBeforeReturning) {
  ASSERT_THAT(controller_->Start(), IsOk());
  controller_->Stop();  // only the pre-bind acts
  ASSERT_THAT(Create("persistentvolumeclaims", Claim("data")), IsOk());
  ASSERT_THAT(VolumeBindingPreBind(controller_.get())(PodUsing("p", "data"), "node-3"), IsOk());
  json claim = *ClaimNow("data");
  EXPECT_EQ(claim["metadata"]["annotations"][kSelectedNodeAnnotation], "node-3");
  EXPECT_EQ(claim["status"]["phase"], "Bound");
  auto pv = store_.Get(kPvKey, "", claim["spec"]["volumeName"]);
  ASSERT_TRUE(pv.has_value());
  EXPECT_TRUE(VolumeNodeAffinityMatches(*pv, Node("node-3")));
  // A missing claim leaves the pod Pending.
  EXPECT_FALSE(VolumeBindingPreBind(controller_.get())(PodUsing("q", "nope"), "node-1").ok());
}

TEST_F(PersistentVolumes, FilterKeepsPodsOnTheirVolumesNode) {
  ASSERT_THAT(controller_->Start(), IsOk());
  controller_->Stop();
  SchedulerFilter filter = VolumeBindingFilter(&store_);
  EXPECT_EQ(filter(PodUsing("p", "missing"), Node("node-1")),
            "persistentvolumeclaim \"missing\" not found");

  ASSERT_THAT(Create("persistentvolumeclaims", Claim("data")), IsOk());
  // Unbound WaitForFirstConsumer: any node until one is selected.
  EXPECT_EQ(filter(PodUsing("p", "data"), Node("node-1")), "");
  EXPECT_EQ(filter(PodUsing("p", "data"), Node("node-2")), "");
  ASSERT_THAT(controller_->Provision("default", "data", "node-2"), IsOk());
  EXPECT_EQ(filter(PodUsing("p", "data"), Node("node-1")),
            "node(s) had volume node affinity conflict");
  EXPECT_EQ(filter(PodUsing("p", "data"), Node("node-2")), "");

  // Selected but not yet provisioned: only the selected node.
  ASSERT_THAT(Create("persistentvolumeclaims", Claim("other")), IsOk());
  SelectNode("other", "node-2");
  EXPECT_EQ(filter(PodUsing("p", "other"), Node("node-1")),
            "node(s) didn't find available persistent volumes to bind");

  // An Immediate class's claim must already be bound.
  ASSERT_THAT(Create("storageclasses",
                     {{"apiVersion", "storage.k8s.io/v1"},
                      {"kind", "StorageClass"},
                      {"metadata", {{"name", "elsewhere"}}},
                      {"provisioner", "example.com/remote"}},
                     "storage.k8s.io"),
              IsOk());
  ASSERT_THAT(
      Create("persistentvolumeclaims", Claim("remote", {{"storageClassName", "elsewhere"}})),
      IsOk());
  EXPECT_EQ(filter(PodUsing("p", "remote"), Node("node-1")),
            "pod has unbound immediate PersistentVolumeClaims");

  // A claim being deleted (held by its pvc-protection finalizer while a pod uses it).
  ASSERT_THAT(Create("pods", PodUsing("user", "data", "node-2")), IsOk());
  ASSERT_THAT(Delete("persistentvolumeclaims", "data"), IsOk());
  EXPECT_EQ(filter(PodUsing("p", "data"), Node("node-2")),
            "persistentvolumeclaim \"data\" is being deleted");
}

TEST_F(PersistentVolumes, ReadWriteOncePodClaimFitsNoSecondPod) {
  ASSERT_THAT(controller_->Start(), IsOk());
  controller_->Stop();
  SchedulerFilter filter = VolumeRestrictionsFilter(&store_);
  ASSERT_THAT(Create("persistentvolumeclaims", Claim("solo", json::object(), "ReadWriteOncePod")),
              IsOk());
  ASSERT_THAT(Create("persistentvolumeclaims", Claim("shared", json::object(), "ReadWriteMany")),
              IsOk());
  EXPECT_EQ(filter(PodUsing("a", "solo"), Node("node-1")), "");
  ASSERT_THAT(Create("pods", PodUsing("a", "solo", "node-1")), IsOk());
  ASSERT_THAT(Create("pods", PodUsing("b", "shared", "node-1")), IsOk());
  EXPECT_EQ(filter(PodUsing("c", "solo"), Node("node-1")),
            "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod "
            "access mode");
  EXPECT_EQ(filter(PodUsing("d", "shared"), Node("node-2")), "");
}

TEST_F(PersistentVolumes, UsedClaimIsKeptThenDeletingItReclaimsTheDirectory) {
  ASSERT_THAT(controller_->Start(), IsOk());
  auto created = Create("persistentvolumeclaims", Claim("data"));
  ASSERT_THAT(created, IsOk());
  ASSERT_THAT(controller_->Provision("default", "data", "node-1"), IsOk());
  const std::string pv_name = "pvc-" + (*created)["metadata"]["uid"].get<std::string>();
  const std::string path = dir_ + "/data/node-1/" + pv_name;
  std::ofstream(path + "/file") << "kept";
  ASSERT_THAT(Create("pods", PodUsing("user", "data", "node-1")), IsOk());

  ASSERT_THAT(Delete("persistentvolumeclaims", "data"), IsOk());
  controller_->SyncOnce();
  ASSERT_TRUE(ClaimNow("data").has_value()) << "a claim in use is kept";
  EXPECT_TRUE((*ClaimNow("data"))["metadata"].contains("deletionTimestamp"));
  EXPECT_TRUE(fs::exists(path + "/file"));

  ASSERT_THAT(Delete("pods", "user"), IsOk());
  ASSERT_TRUE(Eventually([&] { return !ClaimNow("data").has_value(); }));
  ASSERT_TRUE(Eventually([&] { return !store_.Get(kPvKey, "", pv_name).has_value(); }));
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(PersistentVolumes, RetainKeepsTheReleasedVolumeAndItsData) {
  ASSERT_THAT(Create("storageclasses",
                     {{"apiVersion", "storage.k8s.io/v1"},
                      {"kind", "StorageClass"},
                      {"metadata", {{"name", "keep"}}},
                      {"provisioner", kLocalPathProvisioner},
                      {"reclaimPolicy", "Retain"},
                      {"volumeBindingMode", "WaitForFirstConsumer"}},
                     "storage.k8s.io"),
              IsOk());
  ASSERT_THAT(controller_->Start(), IsOk());
  auto created = Create("persistentvolumeclaims", Claim("data", {{"storageClassName", "keep"}}));
  ASSERT_THAT(created, IsOk());
  SelectNode("data", "node-1");
  ASSERT_TRUE(Eventually([&] { return Phase("data") == "Bound"; }));
  const std::string pv_name = "pvc-" + (*created)["metadata"]["uid"].get<std::string>();
  ASSERT_THAT(Delete("persistentvolumeclaims", "data"), IsOk());
  ASSERT_TRUE(Eventually([&] {
    auto pv = store_.Get(kPvKey, "", pv_name);
    return pv && (*pv)["status"].value("phase", "") == "Released";
  }));
  EXPECT_TRUE(fs::is_directory(dir_ + "/data/node-1/" + pv_name));
}

TEST_F(PersistentVolumes, KubectlColumnsOfClassesVolumesAndClaims) {
  ASSERT_THAT(controller_->Start(), IsOk());
  ASSERT_THAT(Create("persistentvolumeclaims", Claim("data")), IsOk());
  ASSERT_THAT(controller_->Provision("default", "data", "node-1"), IsOk());
  auto names = [](const json& table) {
    std::vector<std::string> out;
    for (const json& c : table["columnDefinitions"]) {
      if (c["priority"] == 0) out.push_back(c["name"]);
    }
    return out;
  };
  int64_t rv = 0;
  json sc = ToTable(*Type("storage.k8s.io", "storageclasses"),
                    store_.List(kStorageClassKey, "", &rv), "1", "None");
  EXPECT_EQ(names(sc),
            (std::vector<std::string>{"Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode",
                                      "AllowVolumeExpansion", "Age"}));
  json sc_row = sc["rows"][0]["cells"];
  EXPECT_EQ(sc_row[0], "local-path (default)");
  EXPECT_EQ(sc_row[1], kLocalPathProvisioner);
  EXPECT_EQ(sc_row[3], "WaitForFirstConsumer");
  EXPECT_EQ(sc_row[4], "false");

  json claim = *ClaimNow("data");
  json pvc = ToTable(*Type("", "persistentvolumeclaims"), {claim}, "1", "None");
  EXPECT_EQ(names(pvc),
            (std::vector<std::string>{"Name", "Status", "Volume", "Capacity", "Access Modes",
                                      "StorageClass", "VolumeAttributesClass", "Age"}));
  json pvc_row = pvc["rows"][0]["cells"];
  EXPECT_EQ(pvc_row[1], "Bound");
  EXPECT_EQ(pvc_row[2], claim["spec"]["volumeName"]);
  EXPECT_EQ(pvc_row[3], "1Gi");
  EXPECT_EQ(pvc_row[4], "RWO");
  EXPECT_EQ(pvc_row[5], "local-path");
  EXPECT_EQ(pvc_row[6], "<unset>");

  json pv = ToTable(*Type("", "persistentvolumes"), store_.List(kPvKey, "", &rv), "1", "None");
  EXPECT_EQ(names(pv), (std::vector<std::string>{
                           "Name", "Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim",
                           "StorageClass", "VolumeAttributesClass", "Reason", "Age"}));
  json pv_row = pv["rows"][0]["cells"];
  EXPECT_EQ(pv_row[1], "1Gi");
  EXPECT_EQ(pv_row[2], "RWO");
  EXPECT_EQ(pv_row[3], "Delete");
  EXPECT_EQ(pv_row[4], "Bound");
  EXPECT_EQ(pv_row[5], "default/data");
}

// The kubelet side: a pod of an unbound claim waits in ContainerCreating (FailedMount), then
// runs once the claim is bound; what it wrote stays with the claim after the pod is gone (its
// emptyDir does not), and the next pod of the claim finds it.
TEST_F(PersistentVolumes, DataWrittenByOnePodIsReadByTheNext) {
  ASSERT_THAT(controller_->Start(), IsOk());
  KubeletOptions options;
  options.log_dir = dir_ + "/logs";
  options.hosts_file = dir_ + "/hosts";
  Kubelet kubelet(options, &api_);
  api_.EnableGracefulPodDeletion();
  kubelet.Start();
  auto created = Create("persistentvolumeclaims", Claim("data"));
  ASSERT_THAT(created, IsOk());
  const std::string path =
      dir_ + "/data/node-1/pvc-" + (*created)["metadata"]["uid"].get<std::string>();
  // The process runtime mounts nothing: the command is told the claim's directory.
  json writer = PodUsing("writer", "data", "node-1",
                         {"sh", "-c", absl::StrCat("echo from-writer > ", path, "/f")});
  writer["spec"]["volumes"].push_back({{"name", "scratch"}, {"emptyDir", json::object()}});
  auto pod = Create("pods", writer);
  ASSERT_THAT(pod, IsOk());
  ASSERT_TRUE(Eventually([&] {
    auto reasons = EventReasons("writer");
    return std::count(reasons.begin(), reasons.end(), "FailedMount") >= 1;
  }));
  // The event and the status are written apart (as by the kubelet's event recorder and its
  // status manager): the status may land after the event.
  EXPECT_TRUE(Eventually([&] {
    auto waiting = store_.Get("/pods", "default", "writer");
    return waiting.has_value() &&
           (*waiting)["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] ==
               "ContainerCreating";
  })) << "the pod of an unbound claim waits in ContainerCreating";

  SelectNode("data", "node-1");
  auto phase = [&](const std::string& name) {
    auto p = store_.Get("/pods", "default", name);
    return p ? (*p)["status"].value("phase", "") : "<gone>";
  };
  ASSERT_TRUE(Eventually([&] { return phase("writer") == "Succeeded"; }));
  const std::string pod_dir =
      absl::StrCat(dir_, "/logs/default_writer_", (*pod)["metadata"]["uid"].get<std::string>());
  EXPECT_TRUE(fs::is_directory(pod_dir + "/volumes/kubernetes.io~empty-dir/scratch"));
  ASSERT_THAT(Delete("pods", "writer"), IsOk());
  ASSERT_TRUE(Eventually([&] { return phase("writer") == "<gone>"; }));
  ASSERT_TRUE(Eventually([&] { return !fs::exists(pod_dir + "/volumes"); }))
      << "the emptyDir goes with its pod";
  EXPECT_EQ(ReadFile(path + "/f"), "from-writer\n");

  // The next pod resolves the claim to the same directory and reads the file.
  VolumeContext context{&store_, nullptr, ""};
  auto volumes = SetUpVolumes(PodUsing("reader", "data", "node-1"), dir_ + "/reader", context);
  ASSERT_THAT(volumes, IsOk());
  EXPECT_EQ((*volumes)["data"].host_path, path);
  ASSERT_THAT(
      Create("pods", PodUsing("reader", "data", "node-1",
                              {"sh", "-c", absl::StrCat("grep -q from-writer ", path, "/f")})),
      IsOk());
  ASSERT_TRUE(Eventually([&] { return phase("reader") == "Succeeded"; }));
  // A pod on another node cannot use the node-1 volume.
  auto elsewhere = SetUpVolumes(PodUsing("far", "data", "node-2"), dir_ + "/far", context);
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_THAT(elsewhere.status().message(),
              HasSubstr("MountVolume.NodeAffinity check failed for volume"));
  kubelet.Stop();
}

}  // namespace
}  // namespace kubetrain::localkube
