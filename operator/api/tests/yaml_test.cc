#include "operator/api/yaml.h"

#include <gtest/gtest.h>

namespace kubetrain::api {
namespace {

using nlohmann::json;

TEST(Yaml, PlainScalarsResolveLikeKubectl) {
  auto docs = ParseYamlDocuments(R"(
int: 42
neg: -1
float: 0.5
exp: 1e3
yes_bool: yes
true_bool: true
off_bool: off
null_value: ~
empty:
quoted_int: "42"
quoted_bool: 'true'
word: hello world
version: 1.2.3
)");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json& d = docs->front();
  EXPECT_EQ(d["int"], 42);
  EXPECT_EQ(d["neg"], -1);
  EXPECT_EQ(d["float"], 0.5);
  EXPECT_EQ(d["exp"], 1000.0);
  EXPECT_EQ(d["yes_bool"], true);
  EXPECT_EQ(d["true_bool"], true);
  EXPECT_EQ(d["off_bool"], false);
  EXPECT_TRUE(d["null_value"].is_null());
  EXPECT_TRUE(d["empty"].is_null());
  EXPECT_EQ(d["quoted_int"], "42");
  EXPECT_EQ(d["quoted_bool"], "true");
  EXPECT_EQ(d["word"], "hello world");
  EXPECT_EQ(d["version"], "1.2.3");
}

TEST(Yaml, MultiDocumentStreamSkipsEmptyDocuments) {
  auto docs = ParseYamlDocuments("---\na: 1\n---\n---\nb: [1, 2]\n...\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1]["b"], json::array({1, 2}));
}

TEST(Yaml, SyntaxErrorNamesLineAndColumn) {
  auto docs = ParseYamlDocuments("a: 1\nb: [1, 2\nc: 3\n");
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(docs.status().message().find("YAML syntax error at line "), absl::string_view::npos)
      << docs.status();
}

TEST(Yaml, EmitsStringsThatLookLikeOtherTypesQuoted) {
  json v = {{"index", "0"},
            {"flag", "true"},
            {"nothing", "null"},
            {"yes", "yes"},
            {"num", 2222},
            {"ratio", 0.1},
            {"on", true},
            {"name", "fmnist"},
            {"empty", ""},
            {"list", json::array()},
            {"obj", json::object()},
            {"multi", "a\nb"},
            {"json", R"({"a":["b"]})"},
            {"colon", "a: b"},
            {"hash", "a #b"}};
  std::string yaml = ToYaml(v);
  auto back = ParseYamlDocuments(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(back->front(), v) << yaml;
}

TEST(Yaml, MissingFileNamesPath) {
  auto text = ReadFileOrStdin("/nonexistent/job.yaml");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            "/nonexistent/job.yaml: cannot open: No such file or directory");
}

}  // namespace
}  // namespace kubetrain::api
