#include "operator/local/launcher.h"
#include "common/testing/scoped_env.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process.h"
#include "common/testing/eventually.h"
#include "operator/api/validation.h"

namespace kubetrain::local {
namespace {

using nlohmann::json;

json Replica(int replicas, const std::string& script, const std::string& policy = "") {
  json container = {
      {"name", "kubetrain"}, {"image", "busybox"}, {"command", json::array({"sh", "-c", script})}};
  json spec = {{"replicas", replicas}, {"template", {{"spec", {{"containers", {container}}}}}}};
  if (!policy.empty()) spec["restartPolicy"] = policy;
  return spec;
}

json Job(json replica_specs, json run_policy = json::object()) {
  return {{"apiVersion", "kubetrain.dev/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", "t"}}},
          {"spec", {{"replicaSpecs", replica_specs}, {"runPolicy", run_policy}}}};
}

struct Outcome {
  JobResult result;
  std::string output;
};

Outcome RunJob(const json& doc, const std::atomic<bool>* stop = nullptr,
               std::vector<std::string> gpus = {}, std::atomic<int>* scale = nullptr,
               bool bind_cpus = true) {
  api::FieldErrors errors;
  api::TrainingJob job = api::DecodeAndValidate(doc, &errors);
  EXPECT_TRUE(errors.empty()) << errors.front().ToString();
  LaunchOptions options;
  options.command.base_env = {{"PATH", "/usr/bin:/bin"}};
  options.gpus = std::move(gpus);
  options.grace_period = absl::Seconds(2);
  options.restart_delay = absl::Milliseconds(20);
  options.scale = scale;
  options.bind_cpus = bind_cpus;
  std::ostringstream out;
  std::atomic<bool> never{false};
  LocalJob local(job, options, out);
  absl::StatusOr<JobResult> r = local.Run(stop ? *stop : never);
  EXPECT_TRUE(r.ok()) << r.status();
  return {r.ok() ? *r : JobResult{}, out.str()};
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Waits (at most 30 s) until a task's script has created `path`: it has come that far.
bool WaitForFile(const std::string& path) {
  return kubetrain::testing::Eventually([&] { return std::filesystem::exists(path); },
                                        absl::Seconds(30));
}

TEST(LocalJob, ChiefExitZeroSucceedsAndStopsTheRest) {
  Outcome o = RunJob(Job({{"PS", Replica(1, "sleep 30")},
                          {"Worker", Replica(2,
                                             "echo step=7 epoch=1 loss=0.5 accuracy=0.8; "
                                             "echo '{\"event\":\"training_complete\","
                                             "\"test_accuracy\":0.9}'")}}));
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_EQ(o.result.reason, "Succeeded");
  EXPECT_EQ(o.result.message, "the chief (worker-0) exited 0");
  ASSERT_TRUE(o.result.summary.has_value()) << o.output;
  EXPECT_EQ((*o.result.summary)["test_accuracy"], 0.9);
  EXPECT_TRUE(Contains(o.output, "worker-0  | step=7 epoch=1")) << o.output;
  EXPECT_TRUE(Contains(o.output, "progress step=7 epoch=1 loss=0.5 accuracy=0.8")) << o.output;
  EXPECT_TRUE(Contains(o.output, "ps-0      | ") || Contains(o.output, "Started ps-0")) << o.output;
}

TEST(LocalJob, TasksGetLoopbackTfConfigAndMetricsPort) {
  Outcome o =
      RunJob(Job({{"PS", Replica(1, "sleep 30")},
                  {"Worker", Replica(1,
                                     "echo \"$TF_CONFIG\"; echo port=$KUBETRAIN_METRICS_PORT "
                                     "bind=$KUBETRAIN_BIND_ADDRESS job=$KUBETRAIN_JOB_NAME")}}));
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, R"({"cluster":{"ps":["127.0.0.1:)")) << o.output;
  EXPECT_TRUE(Contains(o.output, R"("task":{"type":"worker","index":0}})")) << o.output;
  EXPECT_TRUE(Contains(o.output, "bind=127.0.0.1 job=t")) << o.output;
  EXPECT_FALSE(Contains(o.output, "port= ")) << o.output;
}

// Another local user made $TMPDIR/kubetrain first (and planted checkpoints under a name of the
// old, predictable form): the run keeps its checkpoints in a private folder of its own user,
// under a name no one could have made first.
TEST(LocalJob, CheckpointsGoToAPrivateFolderOfTheUsersOwn) {
  std::string tmp = ::testing::TempDir() + "/shared-tmp-XXXXXX";
  ASSERT_NE(mkdtemp(tmp.data()), nullptr);
  ASSERT_EQ(mkdir((tmp + "/kubetrain").c_str(), 0755), 0);
  if (geteuid() == 0) {
    ASSERT_EQ(chown((tmp + "/kubetrain").c_str(), 65534, 65534), 0);
  }
  Outcome o;
  {
    ::kubetrain::testing::ScopedEnv env({{"TMPDIR", tmp}});
    o = RunJob(Job({{"Worker", Replica(1,
                                       "echo ckpt=$KUBETRAIN_CHECKPOINT_DIR; "
                                       "stat -c 'mode=%a' \"$(dirname "
                                       "$KUBETRAIN_CHECKPOINT_DIR)\"")}}));
  }
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, absl::StrCat("ckpt=", tmp, "/kubetrain-", geteuid(), "/t-")))
      << o.output;
  EXPECT_TRUE(Contains(o.output, "mode=700")) << o.output;
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
}

// spec.checkpoint's claim is a folder of the run: the manifest made for a cluster runs here, and
// the chief is not told its checkpoints are lost with a pod.
TEST(LocalJob, TheCheckpointClaimIsAFolderOfTheRun) {
  json doc = Job({{"Worker", Replica(2,
                                     "echo ckpt-$KUBETRAIN_REPLICA_INDEX=$KUBETRAIN_CHECKPOINT_DIR "
                                     "durable=${KUBETRAIN_CHECKPOINT_DURABLE--}")}});
  doc["spec"]["checkpoint"] = {
      {"volumeClaimTemplate", {{"spec", {{"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}}};
  Outcome o = RunJob(doc);
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, "/t-checkpoint/t durable=-")) << o.output;
  EXPECT_FALSE(Contains(o.output, "/var/lib/kubetrain")) << o.output;
  Outcome plain =
      RunJob(Job({{"Worker", Replica(1, "echo durable=${KUBETRAIN_CHECKPOINT_DURABLE--}")}}));
  EXPECT_TRUE(Contains(plain.output, "durable=-")) << plain.output;
}

// What a worker prints of its GPU: the variables kubetrain run sets, or "-" when unset.
const char kPrintGpu[] =
    "echo \"gpu $KUBETRAIN_REPLICA_TYPE-$KUBETRAIN_REPLICA_INDEX "
    "visible=${CUDA_VISIBLE_DEVICES--} device=${KUBETRAIN_CUDA_DEVICE--}\"";

TEST(LocalJob, EveryWorkerTaskGetsAGpuOfItsOwnRoundRobin) {
  json worker = Replica(3, std::string(kPrintGpu) + "; sleep 1");
  json chief = Replica(1, std::string(kPrintGpu) + "; sleep 1");
  Outcome o = RunJob(Job({{"Chief", chief},
                          {"PS", Replica(1, std::string(kPrintGpu) + "; sleep 30")},
                          {"Worker", worker}}),
                     nullptr, {"2", "5"});
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, "gpu chief-0 visible=2 device=0")) << o.output;
  EXPECT_TRUE(Contains(o.output, "gpu worker-0 visible=5 device=0")) << o.output;
  EXPECT_TRUE(Contains(o.output, "gpu worker-1 visible=2 device=0")) << o.output;
  EXPECT_TRUE(Contains(o.output, "gpu ps-0 visible=- device=-")) << o.output;
  EXPECT_TRUE(Contains(o.output, "gpu=5")) << o.output;  // on the Started line
  EXPECT_TRUE(Contains(o.output, "4 tasks share 2 GPU(s) round-robin")) << o.output;
}

TEST(LocalJob, NoGpusSetsNothingAndTheContainerWins) {
  json worker = Replica(1, kPrintGpu);
  Outcome none = RunJob(Job({{"Worker", worker}}));
  EXPECT_TRUE(Contains(none.output, "gpu worker-0 visible=- device=-")) << none.output;
  EXPECT_FALSE(Contains(none.output, "gpu=")) << none.output;

  worker["template"]["spec"]["containers"][0]["env"] = {
      {{"name", "CUDA_VISIBLE_DEVICES"}, {"value", "7"}}};
  Outcome own = RunJob(Job({{"Worker", worker}}), nullptr, {"0", "1"});
  EXPECT_TRUE(Contains(own.output, "gpu worker-0 visible=7 device=-")) << own.output;
}

// What a task prints of the CPUs it may run on (the kernel's list, ranges such as "0-3").
const char kPrintCpus[] =
    "echo \"cpus $KUBETRAIN_REPLICA_TYPE-$KUBETRAIN_REPLICA_INDEX "
    "$(grep Cpus_allowed_list /proc/self/status | cut -f2)\"";

// `cpus` (increasing) as the kernel lists them: runs of consecutive CPUs as "a-b".
std::string KernelList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out +=
        j == i ? std::to_string(cpus[i]) : std::to_string(cpus[i]) + "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

// Two workers that wait on each other each step would otherwise share one CPU while another
// idles: each keeps to its half, and the ps (which serves both) may run on any CPU.
TEST(LocalJob, TrainingTasksKeepToSharesOfTheCpusAndThePsRunsAnywhere) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "binding two workers needs two CPUs";
  const size_t half = cpus.size() / 2;
  const std::vector<int> first(cpus.begin(), cpus.begin() + half);
  const std::vector<int> second(cpus.begin() + half, cpus.end());
  json job = Job({{"PS", Replica(1, std::string(kPrintCpus) + "; sleep 30")},
                  {"Worker", Replica(2, std::string(kPrintCpus) + "; sleep 1")}});
  Outcome o = RunJob(job);
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, "cpus worker-0 " + KernelList(first) + "\n")) << o.output;
  EXPECT_TRUE(Contains(o.output, "cpus worker-1 " + KernelList(second) + "\n")) << o.output;
  EXPECT_TRUE(Contains(o.output, "cpus ps-0 " + KernelList(cpus) + "\n")) << o.output;
  EXPECT_TRUE(Contains(o.output, "cpus=" + absl::StrJoin(first, ","))) << o.output;  // Started

  Outcome unbound = RunJob(job, nullptr, {}, nullptr, /*bind_cpus=*/false);
  EXPECT_TRUE(Contains(unbound.output, "cpus worker-0 " + KernelList(cpus) + "\n"))
      << unbound.output;
  EXPECT_FALSE(Contains(unbound.output, "cpus=")) << unbound.output;
}

TEST(LocalJob, ExitCodePolicyFailsOnProgramError) {
  Outcome o = RunJob(Job({{"Worker", Replica(2,
                                             "if [ $KUBETRAIN_REPLICA_INDEX = 1 ]; then exit 3; "
                                             "fi; sleep 30")}}));
  EXPECT_FALSE(o.result.succeeded);
  EXPECT_EQ(o.result.reason, "Failed");
  EXPECT_EQ(o.result.message,
            "worker-1 exited with code 3, which restartPolicy ExitCode does not retry");
}

TEST(LocalJob, KilledTaskIsRestartedAndTheJobStillSucceeds) {
  std::string marker = ::testing::TempDir() + "/kt_restart_marker";
  std::remove(marker.c_str());
  Outcome o =
      RunJob(Job({{"Worker", Replica(1, "if [ -f " + marker + " ]; then exit 0; fi; touch " +
                                            marker + "; kill -9 $$$$")}}));
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_EQ(o.result.restarts, 1);
  EXPECT_TRUE(Contains(o.output, "worker-0 exited with code 137 (SIGKILL)")) << o.output;
  EXPECT_TRUE(Contains(o.output, "Restarting worker-0 in")) << o.output;
}

TEST(LocalJob, BackoffLimitEndsRestarts) {
  Outcome o = RunJob(Job({{"Worker", Replica(1, "exit 1", "OnFailure")}}, {{"backoffLimit", 2}}));
  EXPECT_FALSE(o.result.succeeded);
  EXPECT_EQ(o.result.reason, "BackoffLimitExceeded");
  EXPECT_EQ(o.result.restarts, 2);
  EXPECT_EQ(o.result.message, "worker-0 exited with code 1 after 2 restarts; backoffLimit is 2");
}

TEST(LocalJob, RestartScopeJobRestartsEveryTask) {
  std::string marker = ::testing::TempDir() + "/kt_scope_marker";
  std::string ps_up = ::testing::TempDir() + "/kt_scope_ps_up";
  std::remove(marker.c_str());
  std::remove(ps_up.c_str());
  // The worker fails only once the first ps has said it is up (at most 5 s), so that line is
  // printed before the restart stops it.
  Outcome o = RunJob(Job(
      {{"PS", Replica(1, "echo ps-up; touch " + ps_up + "; sleep 30")},
       {"Worker", Replica(1,
                          "if [ -f " + marker +
                              " ]; then exit 0; fi; for i in $(seq 100); "
                              "do [ -f " +
                              ps_up + " ] && break; sleep 0.05; done; touch " + marker + "; exit 2",
                          "OnFailure")}},
      {{"restartScope", "Job"}}));
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, "Restarting every task (restartScope Job)")) << o.output;
  size_t first = o.output.find("ps-0      | ps-up");
  ASSERT_NE(first, std::string::npos) << o.output;
  EXPECT_NE(o.output.find("ps-0      | ps-up", first + 1), std::string::npos) << o.output;
}

// As the operator does (operator/api/outcome.h): a whole-job restart runs a worker that had
// already finished again, because the restarted chief needs every peer back.
TEST(LocalJob, RestartScopeJobRunsAFinishedWorkerAgain) {
  std::string runs = ::testing::TempDir() + "/kt_finished_worker_runs";
  std::remove(runs.c_str());
  Outcome o = RunJob(
      Job({{"Worker", Replica(2,
                              "if [ $KUBETRAIN_REPLICA_INDEX = 1 ]; then echo run >> " + runs +
                                  "; exit 0; fi; sleep 0.5; "
                                  "if [ $(wc -l < " +
                                  runs + ") -lt 2 ]; then kill -9 $$$$; fi",
                              "OnFailure")}},
          {{"restartScope", "Job"}}));
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_EQ(o.result.restarts, 1) << o.output;
  EXPECT_TRUE(Contains(o.output,
                       "Restarting every task (restartScope Job): worker-0 exited with "
                       "code 137 (SIGKILL)"))
      << o.output;
}

// A task that leaves a background process behind (which keeps its output pipe open) still ends:
// the launcher reads what is there and goes on instead of waiting for the pipe to close.
TEST(LocalJob, ATaskWhoseChildOutlivesItStillEnds) {
  absl::Time start = absl::Now();
  Outcome o = RunJob(Job({{"Worker", Replica(1, "sleep 20 & echo done; exit 0")}}));
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, "worker-0  | done")) << o.output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(LocalJob, ActiveDeadlineFailsTheJob) {
  absl::Time start = absl::Now();
  Outcome o = RunJob(Job({{"Worker", Replica(1, "sleep 30")}}, {{"activeDeadlineSeconds", 1}}));
  EXPECT_FALSE(o.result.succeeded);
  EXPECT_EQ(o.result.reason, "DeadlineExceeded");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(LocalJob, AllWorkersPolicyWaitsForEveryWorker) {
  Outcome o = RunJob(Job({{"Worker", Replica(3, "sleep 0.$KUBETRAIN_REPLICA_INDEX")}}));
  EXPECT_TRUE(o.result.succeeded);
  json doc = Job({{"Worker", Replica(3, "sleep 0.$((KUBETRAIN_REPLICA_INDEX * 3))")}});
  doc["spec"]["successPolicy"] = "AllWorkers";
  Outcome all = RunJob(doc);
  EXPECT_TRUE(all.result.succeeded);
  EXPECT_EQ(all.result.message, "every worker exited 0");
  EXPECT_TRUE(Contains(all.output, "worker-2 exited with code 0")) << all.output;
}

TEST(LocalJob, StopFlagInterruptsAndLeavesNoChildren) {
  const std::string ps_up = ::testing::TempDir() + "/kt_stop_ps_up";
  const std::string worker_up = ::testing::TempDir() + "/kt_stop_worker_up";
  std::remove(ps_up.c_str());
  std::remove(worker_up.c_str());
  std::atomic<bool> stop{false};
  // The stop comes once the ps has said its pid and the worker has set its trap.
  std::thread stopper([&] {
    WaitForFile(ps_up);
    WaitForFile(worker_up);
    stop = true;
  });
  Outcome o = RunJob(Job({{"PS", Replica(1, "echo pid=$$$$; touch " + ps_up + "; sleep 30")},
                          {"Worker", Replica(1, "trap 'echo got-term; exit 143' TERM; touch " +
                                                    worker_up + "; sleep 30 & wait")}}),
                     &stop);
  stopper.join();
  std::remove(ps_up.c_str());
  std::remove(worker_up.c_str());
  EXPECT_FALSE(o.result.succeeded);
  EXPECT_EQ(o.result.reason, "Interrupted");
  EXPECT_TRUE(Contains(o.output, "got-term")) << o.output;
  size_t at = o.output.find("pid=");
  ASSERT_NE(at, std::string::npos);
  pid_t pid = std::stoi(o.output.substr(at + 4));
  EXPECT_NE(kill(pid, 0), 0) << "ps process " << pid << " still alive";
}

// kubetrain run's scale control (SIGUSR1/SIGUSR2 in main): new workers start with the TF_CONFIG
// of the job's new size, the last ones are stopped like deleted pods, nothing else restarts,
// and the count stays within spec.elastic.
TEST(LocalJob, ElasticJobGrowsAndShrinksOnScaleRequestsWithinItsBounds) {
  // Each worker touches up-<index> once its trap is set; the chief succeeds once `done` exists
  // (at most 30 s).
  const std::string dir = ::testing::TempDir() + "/kt_elastic_scale";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  json doc =
      Job({{"PS", Replica(1, "sleep 30")},
           {"Chief", Replica(1, "for i in $(seq 600); do [ -e " + dir +
                                    "/done ] && break; sleep 0.05; done")},
           {"Worker", Replica(1,
                              "echo \"$TF_CONFIG\"; trap 'echo left-$KUBETRAIN_REPLICA_INDEX; "
                              "exit 143' TERM; touch " +
                                  dir + "/up-$KUBETRAIN_REPLICA_INDEX; sleep 30 & wait")}});
  doc["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 3}};
  std::atomic<int> scale{0};
  // The run loop takes a request (and sets the count back to 0) before it applies it.
  auto taken = [&] {
    return kubetrain::testing::Eventually([&] { return scale.load() == 0; }, absl::Seconds(30));
  };
  std::thread scaler([&] {
    WaitForFile(dir + "/up-0");
    scale += 2;  // 1 -> 3
    WaitForFile(dir + "/up-2");
    scale -= 1;  // 3 -> 2
    taken();
    scale += 5;  // clamped to 3
    taken();
    std::ofstream(dir + "/done").put('\n');
  });
  Outcome o = RunJob(doc, nullptr, {}, &scale);
  scaler.join();
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_EQ(o.result.restarts, 0) << o.output;
  EXPECT_TRUE(Contains(o.output, "Elastic job: kill -USR1 ")) << o.output;
  EXPECT_TRUE(Contains(o.output, "Scaling Worker replicas 1 -> 3")) << o.output;
  EXPECT_TRUE(Contains(o.output, "Started worker-2")) << o.output;
  // worker-2 was created when the job had three workers; worker-0 keeps the TF_CONFIG it had.
  EXPECT_TRUE(Contains(o.output, R"("task":{"type":"worker","index":2}})")) << o.output;
  EXPECT_TRUE(Contains(o.output, "Scaling Worker replicas 3 -> 2")) << o.output;
  EXPECT_TRUE(Contains(o.output, "left-2")) << o.output;
  EXPECT_TRUE(Contains(o.output, "Removed worker-2")) << o.output;
  EXPECT_TRUE(Contains(o.output, "asked for 7, scaling to 3")) << o.output;
  // worker-0 ran through every change: it is stopped only once the chief has succeeded.
  ASSERT_TRUE(Contains(o.output, "left-0")) << o.output;
  EXPECT_GT(o.output.find("left-0"), o.output.find("chief-0 exited with code 0")) << o.output;
}

TEST(LocalJob, ScaleRequestOfAFixedSizeJobIsRefusedAndSaysWhy) {
  std::atomic<int> scale{1};
  Outcome o = RunJob(Job({{"Worker", Replica(1, "sleep 0.5")}}), nullptr, {}, &scale);
  EXPECT_TRUE(o.result.succeeded) << o.output;
  EXPECT_TRUE(Contains(o.output, "Ignoring a scale request: TrainingJob t has no spec.elastic"))
      << o.output;
  EXPECT_FALSE(Contains(o.output, "Started worker-1")) << o.output;
}

TEST(LocalJob, UnmappableImageIsAnErrorNamingTheField) {
  json doc = Job({{"Worker", Replica(1, "true")}});
  doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase("command");
  doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "python:3";
  api::FieldErrors errors;
  api::TrainingJob job = api::DecodeAndValidate(doc, &errors);
  std::ostringstream out;
  std::atomic<bool> stop{false};
  LocalJob local(job, {}, out);
  absl::StatusOr<JobResult> r = local.Run(stop);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "spec.replicaSpecs.Worker.template.spec.containers[0]: image \"python:3\" has no local "
            "binary and no command; set command (local runs map kubetrain/<name> images to "
            "kubetrain-<name>)");
}

}  // namespace
}  // namespace kubetrain::local
