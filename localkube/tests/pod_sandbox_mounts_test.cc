// Volumes of sandboxed pods (pod_sandbox.h, pod_init/) at mountPaths that do not exist on the
// host: the mount points are made in each container's own mount namespace only, so the containers
// of a pod share the volume there while the host gains nothing. Needs root.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/tests/sandbox_kubelet_fixture.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

class PodSandboxMounts : public testing::SandboxKubeletTest {
 protected:
  PodSandboxMounts() : SandboxKubeletTest("pod_sandbox_mounts_test", {}) {}
  std::string Waiting(const std::string& pod) {
    auto p = api_->Get(Of("pods", pod));
    if (!p.ok()) return "";
    for (const json& s : (*p)["status"].value("containerStatuses", json::array())) {
      if (s.contains("state") && s["state"].contains("waiting")) {
        return s["state"]["waiting"].value("reason", "") + ": " +
               s["state"]["waiting"].value("message", "");
      }
    }
    return "";
  }
  static json Python(const std::string& name, const std::string& program, const json& mounts) {
    return {{"name", name},
            {"image", "python"},
            {"command", {"/usr/bin/python3", "-c", program}},
            {"volumeMounts", mounts}};
  }
};

TEST_F(PodSandboxMounts, VolumesMountWhereTheHostHasNoDirectoryAndTheHostStaysUnchanged) {
  const std::string deep_root = "/var/lib/kubetrain-test-" + tag_;  // below an existing dir
  const std::string top = "/kubetrain-test-" + tag_;                // directly below /
  const std::string deep = deep_root + "/ckpt";
  ASSERT_FALSE(std::filesystem::exists(deep_root));
  ASSERT_FALSE(std::filesystem::exists(top));
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "cfg"}, {"namespace", "default"}}},
             {"data", {{"settings", "lr=0.1\n"}}}};
  ASSERT_THAT(api_->Create(Of("configmaps"), cm, WriteOptions{}), IsOk());
  const std::string writer =
      absl::StrCat("import os\n",                                                    //
                   "open('", deep, "/w.txt', 'w').write('deep')\n",                  //
                   "os.makedirs('", top, "/data/sub', exist_ok=True)\n",             //
                   "open('", top, "/data/sub/s.txt', 'w').write('sub')\n",           //
                   "with open('", top, "/data/w.tmp', 'w') as f: f.write('top')\n",  //
                   "os.rename('", top, "/data/w.tmp', '", top, "/data/w.txt')\n",    //
                   "print('written', flush=True)\n");
  // Waits for the writer's last file (renamed into place whole), then reports what it sees.
  const std::string reader = absl::StrCat(
      "import os, time\n",                                                                  //
      "while not os.path.exists('", top, "/data/w.txt'): time.sleep(0.05)\n",               //
      "print('deep', open('", deep, "/w.txt').read())\n",                                   //
      "print('top', open('", top, "/data/w.txt').read())\n",                                //
      "print('subpath', open('", top, "/sub/s.txt').read())\n",                             //
      "print('file', open('", deep_root, "/conf/settings.txt').read().strip())\n",          //
      "try:\n  open('", top, "/ro/x', 'w')\n  print('ro writable')\n",                      //
      "except OSError as e:\n  print('ro refused', e.errno)\n",                             //
      "print('etc', os.path.exists('/etc/hosts'), os.path.exists('/proc/self/status'))\n",  //
      "print('done', flush=True)\n");
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "mounts"}, {"namespace", "default"}}},
              {"spec",
               {{"restartPolicy", "Never"},
                {"automountServiceAccountToken", false},
                {"volumes",
                 {{{"name", "ckpt"}, {"emptyDir", json::object()}},
                  {{"name", "data"}, {"emptyDir", json::object()}},
                  {{"name", "cfg"}, {"configMap", {{"name", "cfg"}}}}}},
                {"containers",
                 {Python("writer", writer,
                         {{{"name", "ckpt"}, {"mountPath", deep}},
                          {{"name", "data"}, {"mountPath", top + "/data"}}}),
                  Python("reader", reader,
                         {{{"name", "ckpt"}, {"mountPath", deep}},
                          {{"name", "data"}, {"mountPath", top + "/data"}},
                          {{"name", "data"}, {"mountPath", top + "/sub"}, {"subPath", "sub"}},
                          {{"name", "data"}, {"mountPath", top + "/ro"}, {"readOnly", true}},
                          {{"name", "cfg"},
                           {"mountPath", deep_root + "/conf/settings.txt"},
                           {"subPath", "settings"}}})}}}}};
  ASSERT_THAT(api_->Create(Of("pods"), pod, WriteOptions{}), IsOk());
  std::string log;
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(log = Log("mounts", "reader"), "done"); },
                         absl::Seconds(20)))
      << log << Log("mounts", "writer") << Waiting("mounts");
  EXPECT_TRUE(absl::StrContains(log, "deep deep\n")) << log;
  EXPECT_TRUE(absl::StrContains(log, "top top\n")) << log;
  EXPECT_TRUE(absl::StrContains(log, "subpath sub\n")) << log;
  EXPECT_TRUE(absl::StrContains(log, "file lr=0.1\n")) << log;
  EXPECT_TRUE(absl::StrContains(log, "ro refused 30\n")) << log;  // EROFS
  EXPECT_TRUE(absl::StrContains(log, "etc True True\n")) << log;  // the host's entries stay
  EXPECT_TRUE(absl::StrContains(Log("mounts", "writer"), "written")) << Log("mounts", "writer");
  // Nothing on the host, neither while the pod is there nor after.
  EXPECT_FALSE(std::filesystem::exists(deep_root));
  EXPECT_FALSE(std::filesystem::exists(top));
  DeleteOptions del;
  del.grace_seconds = 0;
  ASSERT_THAT(api_->Delete(Of("pods", "mounts"), del), IsOk());
  ASSERT_TRUE(Eventually([&] { return !api_->Get(Of("pods", "mounts")).ok(); }, absl::Seconds(10)));
  EXPECT_FALSE(std::filesystem::exists(deep_root));
  EXPECT_FALSE(std::filesystem::exists(top));
}

TEST_F(PodSandboxMounts, MountPathBelowAHostFileIsCreateContainerConfigError) {
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "badpath"}, {"namespace", "default"}}},
      {"spec",
       {{"restartPolicy", "Never"},
        {"automountServiceAccountToken", false},
        {"volumes", {{{"name", "v"}, {"emptyDir", json::object()}}}},
        {"containers",
         {Python("c", "print('ran')", {{{"name", "v"}, {"mountPath", "/etc/passwd/data"}}})}}}}};
  ASSERT_THAT(api_->Create(Of("pods"), pod, WriteOptions{}), IsOk());
  std::string waiting;
  ASSERT_TRUE(Eventually(
      [&] { return absl::StartsWith(waiting = Waiting("badpath"), "CreateContainerConfigError"); },
      absl::Seconds(10)))
      << waiting;
  EXPECT_TRUE(absl::StrContains(waiting, "/etc/passwd is a file on this host")) << waiting;
}

}  // namespace
}  // namespace kubetrain::localkube
