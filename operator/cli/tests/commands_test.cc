#include "operator/cli/commands.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

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

TEST(ValidateCommand, NoFilesIsAUsageError) {
  Result r = RunCli({"validate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no files given"), std::string::npos);
}

TEST(RenderCommand, PrintsServiceThenPodsAsYaml) {
  Result r = RunCli({"render", "--namespace=team-a", Src("deploy/examples/fashion-mnist.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto docs = api::ParseYamlDocuments(r.out);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 4u);  // Service, ps-0, worker-0, worker-1
  EXPECT_EQ((*docs)[0]["kind"], "Service");
  EXPECT_EQ((*docs)[0]["metadata"]["namespace"], "team-a");
  EXPECT_EQ((*docs)[1]["metadata"]["name"], "fashion-mnist-ps-0");
  EXPECT_EQ((*docs)[3]["metadata"]["name"], "fashion-mnist-worker-1");
  // Label values that look like numbers stay strings.
  EXPECT_EQ((*docs)[3]["metadata"]["labels"]["kubetrain.dev/replica-index"], "1");
}

TEST(RenderCommand, JsonOutputIsAList) {
  Result r = RunCli({"render", "--output=json", Src("deploy/examples/fashion-mnist.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto list = nlohmann::json::parse(r.out);
  EXPECT_EQ(list["kind"], "List");
  EXPECT_EQ(list["items"].size(), 4u);
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

}  // namespace
}  // namespace kubetrain::cli
