#include "operator/api/yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/status_matchers.h"

namespace kubetrain::api {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using nlohmann::json;
using ::testing::HasSubstr;

// The message ParseYamlDocuments refuses `text` with, or "<parsed>" where it takes it.
std::string RefusalOf(absl::string_view text) {
  auto docs = ParseYamlDocuments(text);
  return docs.ok() ? "<parsed>" : std::string(docs.status().message());
}

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
  EXPECT_THAT(
      docs, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("YAML syntax error at line ")));
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

TEST(Yaml, LongNumbersResolveWithoutRecursion) {
  // A regex matcher recursed once per character here and overflowed the stack.
  std::string digits(30000, '9');
  auto docs = ParseYamlDocuments("float: 1." + digits + "\nbig: 18446744073709551615\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json& d = docs->front();
  EXPECT_DOUBLE_EQ(d["float"].get<double>(), 2.0);
  EXPECT_EQ(d["big"].get<uint64_t>(), 18446744073709551615u);
}

// A number no double holds would read as text where a shorter one is a number: a field that
// wants a string took 400 digits while it refused 20. Refused, naming the line and the field;
// quoted, it is the text, and it is written back quoted.
TEST(Yaml, NumbersBeyondADoubleAreRefusedUnlessQuoted) {
  std::string digits(400, '9');
  for (const std::string& v :
       {digits, "-" + digits + "e5", std::string("1e999"), std::string(30000, '7')}) {
    auto docs = ParseYamlDocuments("metadata:\n  name: " + v + "\n");
    ASSERT_FALSE(docs.ok()) << v.substr(0, 20);
    std::string m(docs.status().message());
    EXPECT_TRUE(absl::StrContains(m, "line 2")) << m;
    EXPECT_TRUE(absl::StrContains(m, "metadata.name")) << m;
    EXPECT_TRUE(absl::StrContains(m, "beyond any number JSON can hold")) << m;
    EXPECT_TRUE(absl::StrContains(m, "quote it")) << m;
  }
  auto tagged = ParseYamlDocuments("name: !!str " + digits + "\n");
  ASSERT_TRUE(tagged.ok()) << tagged.status();
  EXPECT_EQ(tagged->front()["name"], digits);
  auto quoted = ParseYamlDocuments("name: \"" + digits + "\"\n");
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  EXPECT_EQ(quoted->front()["name"], digits);
  std::string written = ToYaml(quoted->front());
  EXPECT_TRUE(absl::StrContains(written, "\"" + digits + "\"")) << written;
  auto again = ParseYamlDocuments(written);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->front(), quoted->front());
}

TEST(Yaml, NumberGrammarMatchesKubectl) {
  auto docs = ParseYamlDocuments(R"(
underscores: 1_000
hex: 0x1F
plus: +7
zero: 0
leading_zero: 012
dot: .5
exp_neg: 2.5e-3
trailing_dot: 3.
bare_sign: '-'
ip: 10.0.0.1
e_only: 1e
quoted_inf: ".inf"
)");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json& d = docs->front();
  EXPECT_EQ(d["underscores"], 1000);
  EXPECT_EQ(d["hex"], 31);
  EXPECT_EQ(d["plus"], 7);
  EXPECT_EQ(d["zero"], 0);
  EXPECT_EQ(d["leading_zero"], 12.0);
  EXPECT_EQ(d["dot"], 0.5);
  EXPECT_EQ(d["exp_neg"], 0.0025);
  EXPECT_EQ(d["trailing_dot"], 3.0);
  EXPECT_EQ(d["bare_sign"], "-");
  EXPECT_EQ(d["ip"], "10.0.0.1");
  EXPECT_EQ(d["e_only"], "1e");
  EXPECT_EQ(d["quoted_inf"], ".inf");
}

// JSON, the format manifests travel in, has no infinity or NaN: kubectl fails on them too.
TEST(Yaml, InfinityAndNanAreRefusedNamingLineAndField) {
  for (const char* v : {".inf", "-.Inf", "+.INF", ".nan", ".NaN"}) {
    auto docs = ParseYamlDocuments(
        absl::StrCat("spec:\n  replicaSpecs:\n    PS:\n      replicas: ", v, "\n"));
    ASSERT_FALSE(docs.ok()) << v;
    std::string m(docs.status().message());
    EXPECT_TRUE(absl::StrContains(m, "line 4")) << m;
    EXPECT_TRUE(absl::StrContains(m, "spec.replicaSpecs.PS.replicas")) << m;
    EXPECT_TRUE(absl::StrContains(m, "quote it")) << m;
  }
}

TEST(Yaml, AliasesWithinBudgetExpand) {
  auto docs = ParseYamlDocuments(
      "base: &c {image: x, args: [a, b]}\nother: *c\nname: &n job\n"
      "copy: *n\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ((*docs)[0]["other"], (*docs)[0]["base"]);
  EXPECT_EQ((*docs)[0]["copy"], "job");
}

TEST(Yaml, BillionLaughsIsRefusedQuickly) {
  // 9 levels of 9 aliases each: 387,420,489 strings from a file of under 600 bytes.
  std::string text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  std::string prev = "a";
  for (char c = 'b'; c <= 'i'; ++c) {
    std::string name(1, c);
    text += name + ": &" + name + " [";
    for (int i = 0; i < 9; ++i) text += (i ? ", *" : "*") + prev;
    text += "]\n";
    prev = name;
  }
  ASSERT_LT(text.size(), 600u);
  absl::Time start = absl::Now();
  const std::string refusal = RefusalOf(text);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(refusal,
            "line 6: alias *e would expand the document to more than 100000 nodes copied "
            "through aliases (a \"billion laughs\" file?); repeat less through aliases");
}

TEST(Yaml, DeepNestingIsRefusedWithTheLimitAndLine) {
  std::string maps;
  for (int i = 0; i < 100000; ++i) maps += "{b: ";
  for (const std::string& text :
       {"a: " + std::string(100000, '[') + std::string(100000, ']') + "\n", "a: " + maps + "\n",
        std::string("[") + std::string(3000, '[') + "1" + std::string(3001, ']')}) {
    EXPECT_EQ(RefusalOf(text),
              "line 1: nesting deeper than 100 levels of maps and lists; flatten the manifest");
  }
  std::string block;
  for (int i = 0; i < 600; ++i) block += std::string(2 * i, ' ') + "k" + std::to_string(i) + ":\n";
  EXPECT_EQ(RefusalOf(block),
            "line 101: nesting deeper than 100 levels of maps and lists; flatten the manifest");
  // An alias cannot smuggle depth past the limit either.
  std::string deep = "a: &d " + std::string(60, '[') + std::string(60, ']') +
                     "\nb: " + std::string(60, '[') + "*d" + std::string(60, ']') + "\n";
  EXPECT_THAT(RefusalOf(deep), HasSubstr("line 2: alias *d nests deeper than 100"));
  std::string ok = "a: " + std::string(99, '[') + std::string(99, ']') + "\n";
  EXPECT_THAT(ParseYamlDocuments(ok), IsOk());
}

TEST(Yaml, DuplicateKeysAreRefusedWithBothLines) {
  EXPECT_EQ(RefusalOf("metadata:\n  name: a\n  labels: {x: y}\n  name: b\n"),
            "line 4: key \"name\" already set in metadata at line 2; remove one of them");
  EXPECT_EQ(RefusalOf("spec:\n  replicaSpecs: {}\n  replicaSpecs: {}\n"),
            "line 3: key \"replicaSpecs\" already set in spec at line 2; remove one of them");
  // JSON input, all on one line: columns tell the keys apart.
  EXPECT_EQ(RefusalOf(R"({"kind":"TrainingJob","kind":"Pod"})"),
            "line 1, column 23: key \"kind\" already set in map at line 1, column 2; remove one "
            "of them");
  // The same key in different maps, or in different documents, is fine.
  EXPECT_THAT(ParseYamlDocuments("a: {name: x}\nb: {name: y}\n---\na: 1\n"), IsOk());
}

TEST(Yaml, InvalidUtf8IsRefusedWithTheFieldPath) {
  EXPECT_EQ(
      RefusalOf(
          "spec:\n  containers:\n  - args: [ok, \"bad\xff\"]\nmetadata:\n  labels: {app: x}\n"),
      "line 3: spec.containers[0].args[1]: invalid UTF-8 (byte 0xff at offset 3 of the "
      "value); manifests must be UTF-8 text");
  EXPECT_EQ(RefusalOf("metadata:\n  labels:\n    \xc3\x28: x\n"),
            "line 3: metadata.labels: invalid UTF-8 (byte 0xc3 at offset 0 of the key); "
            "manifests must be UTF-8 text");
  EXPECT_EQ(RefusalOf("# caf\xe9\na: 1\n"),
            "not UTF-8 text: byte 0xe9 at line 1, column 6 is not valid UTF-8; save the file as "
            "UTF-8");
  auto docs = ParseYamlDocuments("name: \"caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x98\x80\"\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
}

TEST(Yaml, Utf8Checker) {
  EXPECT_EQ(InvalidUtf8Offset("plain ascii"), absl::string_view::npos);
  EXPECT_EQ(InvalidUtf8Offset("\xc3\xa9\xe2\x82\xac\xf4\x8f\xbf\xbf"), absl::string_view::npos);
  EXPECT_EQ(InvalidUtf8Offset("ab\x80"), 2u);            // stray continuation byte
  EXPECT_EQ(InvalidUtf8Offset("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(InvalidUtf8Offset("x\xed\xa0\x80"), 1u);     // UTF-16 surrogate
  EXPECT_EQ(InvalidUtf8Offset("\xf4\x90\x80\x80"), 0u);  // beyond U+10FFFF
  EXPECT_EQ(InvalidUtf8Offset("ok\xe2\x82"), 2u);        // truncated
}

// yaml-cpp emits nodes without end for this input (found by fuzzing): the document node budget
// ends it quickly with an error instead of a hang that eats memory.
TEST(Yaml, InputThatMakesTheParserLoopIsRefusedQuickly) {
  const std::string text =
      "# expect: apiV       spec:\n          containers:\n  , miniisVersquiredSt7|-s:\n"
      "          - n";
  absl::Time start = absl::Now();
  auto docs = ParseYamlDocuments(text);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(docs, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Yaml, Utf16IsRefusedWithTheFix) {
  for (std::string bom : {std::string("\xFF\xFE", 2), std::string("\xFE\xFF", 2)}) {
    EXPECT_THAT(RefusalOf(bom + std::string("k\0:\0 \0v\0", 8)),
                HasSubstr("save the manifest as UTF-8"));
  }
}

// Found by fuzzing: an implicit YAML key ends within 1024 characters, so a longer key (a
// misplaced line pasted as one) must be written as an explicit "? key" to read back.
TEST(Yaml, LongKeysRoundTrip) {
  for (size_t n : {255, 256, 257, 1023, 1024, 3000}) {
    nlohmann::json doc = {{"spec", {{std::string(n, 'k'), 1}, {"short", "x"}}}};
    auto back = ParseYamlDocuments(ToYaml(doc));
    ASSERT_TRUE(back.ok()) << n << ": " << back.status();
    ASSERT_EQ(back->size(), 1u);
    EXPECT_EQ((*back)[0], doc) << n;
  }
}

// Found by fuzzing: strings that start like a document marker, or hold a carriage return, were
// written plain and read back as something else.
TEST(Yaml, StringsThatLookLikeDocumentMarkersRoundTrip) {
  for (const std::string value :
       {"---      -", "--- x", "...", "... y", "2 t - n\r", "a\rb", " lead", "trail\t"}) {
    nlohmann::json doc = {{"args", {value}}, {"top", value}};
    auto back = ParseYamlDocuments(ToYaml(doc));
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << ToYaml(doc);
    ASSERT_EQ(back->size(), 1u) << ToYaml(doc);
    EXPECT_EQ((*back)[0], doc) << ToYaml(doc);
    auto scalar = ParseYamlDocuments(ToYaml(value));
    ASSERT_TRUE(scalar.ok()) << scalar.status();
    ASSERT_EQ(scalar->size(), 1u) << ToYaml(value);
    EXPECT_EQ((*scalar)[0], value);
  }
}

// Found by fuzzing: the quoted text ".inf" was written plain, which reads back as infinity and
// is refused.
TEST(Yaml, TextsThatSpellSpecialFloatsRoundTrip) {
  for (const std::string value : {".inf", "-.Inf", "+.INF", ".nan", ".NaN", "-.NAN"}) {
    nlohmann::json doc = {{"args", {value}}, {"top", value}};
    const std::string yaml = ToYaml(doc);
    auto back = ParseYamlDocuments(yaml);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
    ASSERT_EQ(back->size(), 1u) << yaml;
    EXPECT_EQ((*back)[0], doc) << yaml;
    auto scalar = ParseYamlDocuments(ToYaml(value));
    ASSERT_TRUE(scalar.ok()) << scalar.status();
    ASSERT_EQ(scalar->size(), 1u);
    EXPECT_EQ((*scalar)[0], value);
  }
}

TEST(Yaml, BinaryInputIsNamedAsSuch) {
  EXPECT_EQ(RefusalOf(std::string("apiVersion: v1\n\0\x01zzz\x7f", 22)),
            "not YAML text: contains a NUL byte at offset 15 (line 2, column 1); is it a binary "
            "file (or UTF-16 without a byte-order mark)?");
  EXPECT_EQ(RefusalOf("a: \x1b[31mred\n"),
            "not YAML text: contains control character 0x1b at offset 3 (line 1, column 4); YAML "
            "allows only tab, newline and carriage return");
}

TEST(Yaml, NonStringKeysAreRefusedOrKeptAsText) {
  EXPECT_NE(ParseYamlDocuments("a: [[[1\n").status().message().find("YAML syntax error"),
            absl::string_view::npos);
  EXPECT_EQ(RefusalOf("? [a, b]\n: x\n"),
            "line 1: a map or list used as a map key; keys must be strings");
  auto docs = ParseYamlDocuments("1: one\ntrue: yes\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ((*docs)[0]["1"], "one");
  EXPECT_EQ((*docs)[0]["true"], true);
}

TEST(Yaml, OversizedFileIsRefused) {
  std::string path = ::testing::TempDir() + "/big.yaml";
  {
    std::ofstream out(path);
    std::string line(1023, 'x');
    for (int i = 0; i < 17 * 1024; ++i) out << line << "\n";
  }
  auto text = ReadFileOrStdin(path);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            path +
                ": larger than 16 MiB; a manifest is at most that big (the API server takes "
                "at most 3 MiB)");
}

TEST(Yaml, JsonShapeCheckNamesThePath) {
  json v = {{"spec", {{"args", json::array({"ok", "bad\xff"})}}}};
  EXPECT_EQ(CheckJsonShape(v).message(),
            "spec.args[1]: invalid UTF-8 (byte 0xff at offset 3 of the value); strings must be "
            "UTF-8");
  json doc = json::object();
  json* cur = &doc["spec"];
  for (int i = 0; i < 100000; ++i) {
    *cur = json::array({nullptr});
    cur = &(*cur)[0];
  }
  absl::Status s = CheckJsonShape(doc);
  EXPECT_EQ(s.message().substr(0, 9), "spec[0][0");
  EXPECT_NE(s.message().find(": nesting deeper than 100 levels of objects and arrays"),
            absl::string_view::npos);
  EXPECT_THAT(CheckJsonShape(json{{"a", {{"b", json::array({1, "x"})}}}}), IsOk());
}

}  // namespace
}  // namespace kubetrain::api
