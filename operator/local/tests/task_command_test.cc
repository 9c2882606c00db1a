#include "operator/local/task_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"

namespace kubetrain::local {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;

TEST(ExpandVars, FollowsKubernetesRules) {
  std::map<std::string, std::string> vars = {{"A", "1"}, {"B", "two"}};
  EXPECT_EQ(ExpandVars("--x=$(A) $(B)", vars), "--x=1 two");
  EXPECT_EQ(ExpandVars("$(MISSING)", vars), "$(MISSING)");
  EXPECT_EQ(ExpandVars("$$(A)", vars), "$(A)");
  EXPECT_EQ(ExpandVars("cost $5 $(A", vars), "cost $5 $(A");
}

TEST(ContainerArgv, CommandAndArgsExpanded) {
  json c = json::parse(R"js({"name":"kubetrain","command":["kubetrain-worker"],
                           "args":["--data-dir=$(DATA)","--x"]})js");
  auto argv = ContainerArgv(c, {{"DATA", "/d"}}, "containers[0]");
  ASSERT_THAT(argv, IsOk());
  EXPECT_EQ(*argv, (std::vector<std::string>{"kubetrain-worker", "--data-dir=/d", "--x"}));
}

TEST(ContainerArgv, KubetrainImagesMapToBinaries) {
  auto argv = ContainerArgv(json::parse(R"js({"image":"kubetrain/ps:0.1.0","args":["-v"]})js"), {},
                            "containers[0]");
  ASSERT_THAT(argv, IsOk());
  EXPECT_EQ(*argv, (std::vector<std::string>{"kubetrain-ps", "-v"}));
}

TEST(ContainerArgv, OtherImagesNeedACommand) {
  auto argv = ContainerArgv(json::parse(R"js({"image":"python:3.12"})js"), {}, "containers[0]");
  ASSERT_FALSE(argv.ok());
  EXPECT_EQ(argv.status().message(),
            "containers[0]: image \"python:3.12\" has no local binary and no command; set command "
            "(local runs map kubetrain/<name> images to kubetrain-<name>)");
}

TEST(ContainerArgv, AWordThatIsNotAStringIsRefusedNamingItsList) {
  auto command = ContainerArgv(json::parse(R"js({"command":["run",1]})js"), {}, "containers[0]");
  ASSERT_FALSE(command.ok());
  EXPECT_EQ(command.status().message(), "containers[0].command: must be a list of strings");
  auto args =
      ContainerArgv(json::parse(R"js({"command":["run"],"args":[true]})js"), {}, "containers[1]");
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.status().message(), "containers[1].args: must be a list of strings");
}

TEST(ProcessForPod, EnvFieldRefsAndBinDirFirstOnPath) {
  json pod = json::parse(R"js({"metadata":{"name":"j-worker-0","namespace":"ns"},"spec":{
    "containers":[{"name":"sidecar","image":"x"},{"name":"kubetrain","command":["run"],
      "args":["$(POD)"],"env":[{"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
      {"name":"IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}},{"name":"V","value":"x$(POD)"}]}]}})js");
  CommandContext ctx{"/opt/kt/bin", {{"PATH", "/usr/bin"}, {"HOME", "/root"}}, "127.0.0.1"};
  auto opts = ProcessForPod(pod, ctx);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(opts->argv, (std::vector<std::string>{"run", "j-worker-0"}));
  EXPECT_EQ(opts->env["IP"], "127.0.0.1");
  EXPECT_EQ(opts->env["V"], "xj-worker-0");
  EXPECT_EQ(opts->env["HOME"], "/root");
  EXPECT_EQ(opts->env["PATH"], "/opt/kt/bin:/usr/bin");
}

TEST(ProcessForPod, WrongTypesAreErrorsNotExceptions) {
  for (
      const char* text : {
          R"js({"spec":{"containers":[{"name":"kubetrain","command":["x",5]}]}})js",
          R"js({"spec":{"containers":[{"name":"kubetrain","command":["x"],"args":[true]}]}})js",
          R"js({"spec":{"containers":[{"name":"kubetrain","command":["x"],"env":[{"name":"A","value":1}]}]}})js",
          R"js({"spec":{"containers":[{"name":"kubetrain","command":["x"],"env":[7]}]}})js",
          R"js({"spec":{"containers":{"name":"kubetrain"}}})js",
          R"js({"spec":5})js",
      }) {
    auto opts = ProcessForPod(json::parse(text), {});
    EXPECT_FALSE(opts.ok()) << text;
  }
  // A fieldRef of the wrong shape and a name of the wrong type read as absent.
  json pod = json::parse(R"js({"metadata":{"name":"p"},"spec":{"containers":[{"name":5},
    {"name":"kubetrain","image":"kubetrain/worker","workingDir":3,
     "env":[{"name":"T","valueFrom":{"fieldRef":{"fieldPath":9}}}]}]}})js");
  auto opts = ProcessForPod(pod, {});
  ASSERT_FALSE(opts.ok());
  EXPECT_NE(opts.status().message().find("fieldPath: \"\" is not available"), std::string::npos)
      << opts.status();
}

TEST(ProcessForPod, SecretRefsAreRejectedWithTheField) {
  json pod = json::parse(R"js({"metadata":{"name":"p"},"spec":{"containers":[{"name":"kubetrain",
    "command":["x"],"env":[{"name":"T","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]}]}})js");
  auto opts = ProcessForPod(pod, {});
  ASSERT_FALSE(opts.ok());
  EXPECT_EQ(opts.status().message(),
            "containers[0].env[0].valueFrom: only fieldRef and the job's own Secret are available "
            "to local runs (no other Secrets or ConfigMaps here); set a plain value");
}

TEST(ProcessForPod, TheJobsOwnSecretIsResolved) {
  json pod = json::parse(R"js({"metadata":{"name":"p"},"spec":{"containers":[{"name":"kubetrain",
    "command":["x"],"env":[{"name":"T","valueFrom":{"secretKeyRef":{"name":"j-job-secret",
    "key":"token"}}}]}]}})js");
  CommandContext ctx;
  ctx.secrets["j-job-secret"]["token"] = "0123456789abcdef";
  auto opts = ProcessForPod(pod, ctx);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(opts->env.at("T"), "0123456789abcdef");
}

}  // namespace
}  // namespace kubetrain::local
