#include "operator/cli/commands.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "operator/api/yaml.h"

namespace kubetrain::cli {
namespace {

std::string Src(const std::string& rel) { return std::string(KUBETRAIN_SOURCE_DIR) + "/" + rel; }

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunCli(std::vector<std::string> args) {
  std::ostringstream out, err;
  std::atomic<bool> stop{false};
  int code = Main(args, out, err, stop);
  return {code, out.str(), err.str()};
}

TEST(ValidateCommand, ExampleIsValid) {
  Result r = RunCli({"validate", Src("deploy/examples/fashion-mnist.yaml")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(TrainingJob fashion-mnist): valid"), std::string::npos) << r.out;
}

TEST(ValidateCommand, InvalidFileExitsOneWithEveryProblem) {
  Result r = RunCli({"validate", Src("operator/api/testdata/invalid/many-problems.yaml")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is invalid (4 problems):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  spec.replicaSpecs.Worker.replicas: must be >= 1, got -1"),
            std::string::npos)
      << r.err;
}

TEST(ValidateCommand, MultiDocumentFileReportsEachDocument) {
  std::string path = ::testing::TempDir() + "/multi.yaml";
  {
    std::ofstream f(path);
    f << "apiVersion: kubetrain.dev/v1\nkind: TrainingJob\nmetadata: {name: a}\nspec:\n"
         "  replicaSpecs:\n    Worker:\n      template: {spec: {containers: [{image: x}]}}\n"
         "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n";
  }
  Result r = RunCli({"validate", path});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(path + ": document 1 (TrainingJob a): valid"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find(path + ": document 2 (ConfigMap b) is invalid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kind: must be TrainingJob, got \"ConfigMap\""), std::string::npos);
}

TEST(ValidateCommand, MissingFileAndSyntaxErrorsAreReported) {
  Result missing = RunCli({"validate", "/nonexistent.yaml"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("/nonexistent.yaml: cannot open"), std::string::npos) << missing.err;
  std::string path = ::testing::TempDir() + "/broken.yaml";
  std::ofstream(path) << "spec: [unclosed\n";
  Result broken = RunCli({"validate", path});
  EXPECT_EQ(broken.code, 1);
  EXPECT_NE(broken.err.find("YAML syntax error at line"), std::string::npos) << broken.err;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string Example() {
  std::ifstream in(Src("deploy/examples/fashion-mnist.yaml"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(ValidateCommand, HostileManifestsGetClearErrorsNotCrashes) {
  struct Case {
    std::string name;
    std::string text;
    std::string expected;
  };
  std::string laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    laughs += std::string(1, c) + ": &" + std::string(1, c) + " [";
    for (int i = 0; i < 9; ++i) laughs += (i ? ", *" : "*") + std::string(1, c - 1);
    laughs += "]\n";
  }
  std::vector<Case> cases = {
      {"long-int.yaml", Replace(Example(), "replicas: 2", "replicas: " + std::string(30000, '9')),
       "line 30: spec.replicaSpecs.Worker.replicas: a number of 30000 characters is beyond any "
       "number JSON can hold (the API server's format); quote it if you mean the text"},
      {"long-float.yaml",
       Replace(Example(), "replicas: 2", "replicas: 1." + std::string(30000, '5')),
       "spec.replicaSpecs.Worker.replicas: must be an integer, got 1.5555555555555556"},
      {"laughs.yaml", laughs, "line 6: alias *e would expand the document"},
      {"deep.yaml", "a: " + std::string(100000, '[') + "\n",
       "line 1: nesting deeper than 100 levels of maps and lists"},
      {"dup.yaml", Replace(Example(), "  name: fashion-mnist\n", "  name: a\n  name: b\n"),
       "line 9: key \"name\" already set in metadata at line 8; remove one of them"},
      {"binary.yaml",
       std::string("\x7f"
                   "ELF\0\x02\x01\x01zzz",
                   11),
       "not YAML text: contains a NUL byte at offset 4 (line 1, column 5)"},
      {"utf8.yaml", Replace(Example(), "--seed=1", "--seed=\xff"),
       "line 53: spec.replicaSpecs.Worker.template.spec.containers[0].args[6]: invalid UTF-8"},
      {"label.yaml",
       Replace(Example(), "  name: fashion-mnist\n",
               "  name: fashion-mnist\n  labels: {team: \"caf\xe9\"}\n"),
       "line 9: metadata.labels.team: invalid UTF-8 (byte 0xe9 at offset 3 of the value)"},
      {"kind.yaml", Replace(Example(), "kind: TrainingJob", "kind: [5]"),
       "kind: must be a string, got [5]"},
      {"env.yaml",
       Replace(Example(), "command: [\"kubetrain-ps\"]",
               "command: [\"kubetrain-ps\"]\n              env: [{name: 5, value: x}]"),
       "spec.replicaSpecs.PS.template.spec.containers[0].env[0].name: must be a string, got 5"},
  };
  for (const Case& c : cases) {
    std::string path = WriteFile(c.name, c.text);
    for (const char* command : {"validate", "render"}) {
      Result r = RunCli({command, "--output=json", path});
      if (std::string(command) == "validate") r = RunCli({command, path});
      EXPECT_EQ(r.code, 1) << c.name << " " << command << "\n" << r.err;
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.name << " " << command << "\n"
                                                           << r.err;
      EXPECT_LT(r.err.size(), 2000u) << c.name;
      EXPECT_EQ(r.out, "") << c.name;
    }
  }
}

TEST(ValidateCommand, NoFilesIsAUsageError) {
  Result r = RunCli({"validate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no files given"), std::string::npos);
}

TEST(RenderCommand, PrintsSecretServiceClaimThenPodsAsYaml) {
  Result r = RunCli({"render", "--namespace=team-a", Src("deploy/examples/fashion-mnist.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto docs = api::ParseYamlDocuments(r.out);
  ASSERT_TRUE(docs.ok()) << docs.status();
  // Secret, Service, the checkpoint claim (spec.checkpoint), ps-0, worker-0, worker-1
  ASSERT_EQ(docs->size(), 6u);
  EXPECT_EQ((*docs)[0]["kind"], "Secret");
  EXPECT_EQ((*docs)[0]["metadata"]["name"], "fashion-mnist-job-secret");
  EXPECT_EQ((*docs)[1]["kind"], "Service");
  EXPECT_EQ((*docs)[1]["metadata"]["namespace"], "team-a");
  EXPECT_EQ((*docs)[2]["kind"], "PersistentVolumeClaim");
  EXPECT_EQ((*docs)[2]["metadata"]["name"], "fashion-mnist-checkpoint");
  EXPECT_EQ((*docs)[2]["metadata"]["namespace"], "team-a");
  EXPECT_EQ((*docs)[3]["metadata"]["name"], "fashion-mnist-ps-0");
  EXPECT_EQ((*docs)[5]["metadata"]["name"], "fashion-mnist-worker-1");
  // Label values that look like numbers stay strings.
  EXPECT_EQ((*docs)[5]["metadata"]["labels"]["kubetrain.dev/replica-index"], "1");
  // Each render makes its own secret.
  Result again =
      RunCli({"render", "--namespace=team-a", Src("deploy/examples/fashion-mnist.yaml")});
  auto docs2 = api::ParseYamlDocuments(again.out);
  ASSERT_TRUE(docs2.ok()) << docs2.status();
  EXPECT_NE((*docs)[0]["data"]["token"], (*docs2)[0]["data"]["token"]);
}

TEST(RenderCommand, JsonOutputIsAList) {
  Result r = RunCli({"render", "--output=json", Src("deploy/examples/fashion-mnist.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto list = nlohmann::json::parse(r.out);
  EXPECT_EQ(list["kind"], "List");
  EXPECT_EQ(list["items"].size(), 6u);  // the job's Secret, the Service, its claim and 3 pods
}

TEST(RenderCommand, InvalidJobIsNotRendered) {
  Result r = RunCli({"render", Src("operator/api/testdata/invalid/two-chiefs.yaml")});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("at most one Chief"), std::string::npos);
}

std::string WriteJob(const std::string& name, const std::string& worker_script) {
  std::string path = ::testing::TempDir() + "/" + name + ".yaml";
  std::ofstream(path) << "apiVersion: kubetrain.dev/v1\nkind: TrainingJob\nmetadata: {name: "
                      << name << "}\nspec:\n  replicaSpecs:\n    Worker:\n      replicas: 1\n"
                      << "      template: {spec: {containers: [{name: kubetrain, image: busybox, "
                      << "command: [sh, -c, '" << worker_script << "']}]}}\n";
  return path;
}

// Runs `args` on a thread, sets the stop flag (as SIGTERM does) after `delay`, and returns the
// exit code and how long the command took to return after the flag was set.
std::pair<int, absl::Duration> StopAfter(std::vector<std::string> args, absl::Duration delay) {
  std::atomic<bool> stop{false};
  std::promise<void> done;
  int code = -1;
  std::ostringstream out, err;
  std::thread command([&] {
    code = Main(args, out, err, stop);
    done.set_value();
  });
  absl::SleepFor(delay);  // the signal comes while the command is at work, as a user's Ctrl-C does
  stop = true;
  absl::Time stopped = absl::Now();
  // Bounded: a command that ignores the flag fails the test instead of hanging it.
  done.get_future().wait_for(std::chrono::seconds(30));
  absl::Duration took = absl::Now() - stopped;
  command.join();
  EXPECT_EQ(code, 130) << err.str().substr(0, 2000);
  return {code, took};
}

std::string LargeJob(const std::string& name, int workers) {
  // sh -c takes the example's args as positional parameters and ignores them.
  std::string text = Replace(Example(), "replicas: 2", "replicas: " + std::to_string(workers));
  text = Replace(text, "command: [\"kubetrain-worker\"]", "command: [sh, -c, \"sleep 30\", sh]");
  text = Replace(text, "command: [\"kubetrain-ps\"]", "command: [sh, -c, \"sleep 30\"]");
  return WriteFile(name + ".yaml", text);
}

TEST(RenderCommand, StopsSoonAfterTheSignal) {
  // 1000 pods, each with 1000 addresses in TF_CONFIG: seconds of output.
  std::string path = LargeJob("render-big", 1000);
  for (const char* output : {"--output=yaml", "--output=json"}) {
    auto [code, took] = StopAfter({"render", output, path}, absl::Milliseconds(300));
    EXPECT_EQ(code, 130) << output;
    EXPECT_LT(took, absl::Seconds(2)) << output;
  }
}

TEST(RenderCommand, JsonIsExactlyTheDumpOfOneList) {
  std::string path = Src("deploy/examples/chief-evaluator.yaml");
  Result r = RunCli({"render", "--output=json", path});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json list = nlohmann::json::parse(r.out);
  EXPECT_EQ(r.out, list.dump(2) + "\n");
  // The job's Secret, the Service, its checkpoint claim and 5 pods.
  EXPECT_EQ(list["items"].size(), 8u);
}

TEST(RunCommand, StopsSoonAfterTheSignalWhileStartingALargeJob) {
  std::string path = LargeJob("run-big", 1000);
  auto [code, took] = StopAfter({"run", "--grace-period=1s", path}, absl::Milliseconds(300));
  EXPECT_EQ(code, 130);
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(RunCommand, SucceedsWithExitZeroAndPrintsTheFinalStatus) {
  Result r = RunCli({"run", "--grace-period=1s", WriteJob("ok", "echo step=3 accuracy=0.9")});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("worker-0  | step=3 accuracy=0.9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kubetrain | TrainingJob ok Succeeded in "), std::string::npos) << r.out;
}

TEST(RunCommand, FailedJobExitsOne) {
  Result r = RunCli({"run", "--grace-period=1s", WriteJob("bad", "exit 4")});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("TrainingJob bad Failed in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worker-0 exited with code 4, which restartPolicy ExitCode does not retry"),
            std::string::npos)
      << r.out;
}

TEST(RunCommand, InvalidManifestExitsTwo) {
  Result r = RunCli({"run", Src("operator/api/testdata/invalid/two-chiefs.yaml")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("at most one Chief"), std::string::npos) << r.err;
}

TEST(Cli, UnknownCommandAndHelp) {
  EXPECT_EQ(RunCli({"frobnicate"}).code, 2);
  Result help = RunCli({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("validate FILE..."), std::string::npos);
  Result sub = RunCli({"render", "--outptu=json"});
  EXPECT_EQ(sub.code, 2);
  EXPECT_NE(sub.err.find("did you mean --output?"), std::string::npos) << sub.err;
}

// Kubeflow TFJobs: validated as the TrainingJob they convert to, and converted by `convert`.
TEST(ConvertCommand, KubeflowTfJobsValidateAndConvertToValidTrainingJobs) {
  for (const char* file : {"ps-workers.yaml", "master-workers.yaml"}) {
    const std::string path = Src(std::string("operator/api/testdata/tfjob/") + file);
    Result valid = RunCli({"validate", path});
    EXPECT_EQ(valid.code, 0) << valid.err;
    EXPECT_NE(valid.out.find(": valid (as the TrainingJob `kubetrain convert` writes)"),
              std::string::npos)
        << valid.out;
    Result converted = RunCli({"convert", path});
    ASSERT_EQ(converted.code, 0) << converted.err;
    EXPECT_NE(converted.out.find("apiVersion: kubetrain.dev/v1"), std::string::npos);
    EXPECT_NE(converted.out.find("kind: TrainingJob"), std::string::npos);
    Result again = RunCli({"validate", WriteFile(std::string("converted-") + file, converted.out)});
    EXPECT_EQ(again.code, 0) << again.err << converted.out;
  }
  Result notes = RunCli({"convert", Src("operator/api/testdata/tfjob/ps-workers.yaml")});
  EXPECT_NE(notes.err.find("(TFJob dist-mnist): note: spec.runPolicy.backoffLimit: unset"),
            std::string::npos)
      << notes.err;
  Result master =
      RunCli({"convert", "--output=json", Src("operator/api/testdata/tfjob/master-workers.yaml")});
  ASSERT_EQ(master.code, 0) << master.err;
  nlohmann::json job = nlohmann::json::parse(master.out);
  EXPECT_EQ(job["spec"]["replicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["name"],
            "kubetrain");
  EXPECT_NE(master.err.find("spec.tfReplicaSpecs.Master: becomes the Chief"), std::string::npos);
}

TEST(ConvertCommand, ProblemsNameTheTfJobsFieldsAndOtherKindsAreRefused) {
  std::string text =
      Replace(Replace(Example(), "apiVersion: kubetrain.dev/v1", "apiVersion: kubeflow.org/v1"),
              "kind: TrainingJob", "kind: TFJob");
  text = Replace(text, "replicaSpecs:", "tfReplicaSpecs:");
  // The example names its container "kubetrain"; a TFJob's is "tensorflow".
  Result r = RunCli({"validate", WriteFile("tfjob-kubetrain-container.yaml", text)});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("spec.tfReplicaSpecs.PS.template.spec.containers: a container named "
                       "\"kubetrain\" clashes"),
            std::string::npos)
      << r.err;
  Result replicas =
      RunCli({"validate", WriteFile("tfjob-replicas.yaml",
                                    Replace(Replace(ReadText(Src("operator/api/testdata/tfjob/"
                                                                 "master-workers.yaml")),
                                                    "replicas: 2", "replicas: -2"),
                                            "name: strategy", "name: strategy"))});
  EXPECT_EQ(replicas.code, 1);
  EXPECT_NE(replicas.err.find("spec.tfReplicaSpecs.Worker.replicas: "), std::string::npos)
      << replicas.err;
  Result not_tfjob = RunCli({"convert", Src("deploy/examples/fashion-mnist.yaml")});
  EXPECT_EQ(not_tfjob.code, 1);
  EXPECT_NE(not_tfjob.err.find("not a Kubeflow TFJob"), std::string::npos);
}

// kubetrain run takes a TFJob as the TrainingJob it converts to: its Master is the chief that
// decides, the notes come first, and the final line names the TFJob.
TEST(RunCommand, ATfJobRunsAsItsTrainingJob) {
  const std::string tfjob = R"yaml(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tf-local
spec:
  tfReplicaSpecs:
    Master:
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: tensorflow
              image: example/tf:1
              command: ["sh", "-c", "echo task=$(echo $TF_CONFIG | grep -o chief)"]
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: tensorflow
              image: example/tf:1
              command: ["sh", "-c", "sleep 30"]
)yaml";
  Result r = RunCli({"run", "--grace-period=1s", WriteFile("tf-local.yaml", tfjob)});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("chief-0   | task=chief"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kubetrain | TFJob tf-local Succeeded in "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("(TFJob tf-local): note: spec.runPolicy.backoffLimit: unset"),
            std::string::npos)
      << r.err;
}

// render prints what the operator creates for a TFJob: the job's Secret, a Service per replica,
// then the pods, with Kubeflow's TF_CONFIG.
TEST(RenderCommand, ATfJobRendersAsKubeflowsObjects) {
  Result r = RunCli({"render", "--output=json", "--cluster-domain=cluster.local",
                     Src("operator/api/testdata/tfjob/ps-workers.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json list = nlohmann::json::parse(r.out);
  ASSERT_EQ(list["items"].size(), 13u);  // the Secret, 6 Services, 6 pods
  EXPECT_EQ(list["items"][0]["kind"], "Secret");
  EXPECT_EQ(list["items"][0]["metadata"]["name"], "dist-mnist-job-secret");
  EXPECT_EQ(list["items"][0]["metadata"]["namespace"], "kubeflow");
  EXPECT_EQ(list["items"][1]["kind"], "Service");
  const nlohmann::json& pod = list["items"][12];
  EXPECT_EQ(pod["metadata"]["name"], "dist-mnist-worker-3");
  EXPECT_EQ(pod["metadata"]["namespace"], "kubeflow");
  EXPECT_EQ(pod["spec"]["containers"][0]["env"][0]["value"],
            R"({"cluster":{"ps":["dist-mnist-ps-0.kubeflow.svc.cluster.local:2222",)"
            R"("dist-mnist-ps-1.kubeflow.svc.cluster.local:2222"],)"
            R"("worker":["dist-mnist-worker-0.kubeflow.svc.cluster.local:2222",)"
            R"("dist-mnist-worker-1.kubeflow.svc.cluster.local:2222",)"
            R"("dist-mnist-worker-2.kubeflow.svc.cluster.local:2222",)"
            R"("dist-mnist-worker-3.kubeflow.svc.cluster.local:2222"]},)"
            R"("task":{"type":"worker","index":3},"environment":"cloud"})");
}

}  // namespace
}  // namespace kubetrain::cli
