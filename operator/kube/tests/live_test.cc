// The client, informer and leader election against a live localkube API server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "operator/kube/config.h"
#include "operator/kube/informer.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/testing/localkube.h"

namespace kubetrain::kube::testing {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

class LiveTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> args = {}, ClientOptions options = {}) {
    auto lk = Localkube::Start(std::move(args));
    ASSERT_TRUE(lk.ok()) << lk.status();
    server_ = std::move(*lk);
    auto client = server_->NewClient(std::move(options));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  std::unique_ptr<Localkube> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(LiveTest, WrongCaIsATlsVerificationErrorNamingServerAndCa) {
  StartServer();
  auto other = Localkube::Start();
  ASSERT_TRUE(other.ok()) << other.status();
  auto config = LoadKubeconfig(server_->kubeconfig());
  auto other_config = LoadKubeconfig((*other)->kubeconfig());
  ASSERT_THAT(config, IsOk());
  ASSERT_THAT(other_config, IsOk());
  config->ca_pem = other_config->ca_pem;
  auto client = Client::Create(*config);
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->List(kConfigMaps, "default", {});
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(IsTlsVerificationError(got.status())) << got.status();
  std::string message(got.status().message());
  EXPECT_NE(message.find(absl::StrCat("API server https://", config->host, ":", config->port)),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(config->ca_source), std::string::npos) << message;
  // The right CA works, and a refused connection is not a TLS problem.
  EXPECT_THAT(client_->List(kConfigMaps, "default", {}), IsOk());
  config->port = 1;
  auto refused = Client::Create(*config);
  ASSERT_THAT(refused, IsOk());
  auto no_server = (*refused)->List(kConfigMaps, "default", {});
  EXPECT_EQ(no_server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsTlsVerificationError(no_server.status()));
  EXPECT_NE(no_server.status().message().find("cannot reach the API server"), std::string::npos)
      << no_server.status();
}

// A slow answer must not hold up a process that is stopping.
TEST_F(LiveTest, ShutdownCutsCallsInFlight) {
  StartServer({"--latency=5s"}, {.qps = 0});
  absl::Status result;
  std::thread caller([&] { result = client_->List(kConfigMaps, "default", {}).status(); });
  // The call is sent and waiting on the 5 s answer (nothing outside the client shows it).
  absl::SleepFor(absl::Milliseconds(300));
  absl::Time asked = absl::Now();
  client_->Shutdown();
  caller.join();
  // Within the 2 s a stopping process has, not after the server's 5 s answer.
  EXPECT_LT(absl::Now() - asked, absl::Seconds(2));
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(client_->List(kConfigMaps, "default", {}).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(LiveTest, CrudAndErrorCodesByWhatTheCallerShouldDo) {
  StartServer();
  auto created = client_->Create(kConfigMaps, "default", ConfigMap("a", "1"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());

  auto dup = client_->Create(kConfigMaps, "default", ConfigMap("a", "1"));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists) << dup.status();

  json stale = *created;
  json fresh = *created;
  fresh["data"]["v"] = "2";
  ASSERT_THAT(client_->Update(kConfigMaps, "default", fresh), IsOk());
  stale["data"]["v"] = "3";
  auto conflict = client_->Update(kConfigMaps, "default", stale);
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kAborted) << conflict.status();

  auto patched =
      client_->Patch(kConfigMaps, "default", "a", PatchType::kMerge, R"({"data":{"w":"x"}})");
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["data"], json::parse(R"({"v":"2","w":"x"})"));

  auto missing = client_->Get(kConfigMaps, "default", "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("\"nope\" not found"), absl::string_view::npos)
      << missing.status();

  ASSERT_THAT(client_->Delete(kConfigMaps, "default", "a"), IsOk());
  EXPECT_EQ(client_->Get(kConfigMaps, "default", "a").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LiveTest, ListFollowsContinueTokensAndSelectors) {
  StartServer();
  for (int i = 0; i < 7; ++i) {
    ASSERT_THAT(client_->Create(kConfigMaps, "default",
                                ConfigMap("cm-" + std::to_string(i), "x",
                                          {{"parity", i % 2 ? "odd" : "even"}})),
                IsOk());
  }
  ListOptions o;
  o.limit = 2;
  auto page = client_->List(kConfigMaps, "default", o);
  ASSERT_THAT(page, IsOk());
  EXPECT_EQ((*page)["items"].size(), 2u);
  EXPECT_FALSE((*page)["metadata"].value("continue", "").empty());
  auto all = client_->ListAll(kConfigMaps, "default", o);
  ASSERT_THAT(all, IsOk());
  EXPECT_GE((*all)["items"].size(), 7u);
  o.label_selector = "parity=odd";
  auto odd = client_->ListAll(kConfigMaps, "default", o);
  ASSERT_THAT(odd, IsOk());
  EXPECT_EQ((*odd)["items"].size(), 3u);
}

// deletecollection deletes exactly what the label and field selectors match, in one request,
// and answers with what it deleted.
TEST_F(LiveTest, DeleteCollectionDeletesWhatTheSelectorsMatch) {
  StartServer();
  for (int i = 0; i < 6; ++i) {
    json cm =
        ConfigMap("dc-" + std::to_string(i), i < 3 ? "keep" : "go", {{"job", i % 2 ? "a" : "b"}});
    ASSERT_THAT(client_->Create(kConfigMaps, "default", cm), IsOk());
  }
  ListOptions selectors;
  selectors.label_selector = "job=a";
  selectors.field_selector = "metadata.name!=dc-5";
  absl::StatusOr<std::vector<json>> deleted =
      client_->DeleteCollection(kConfigMaps, "default", selectors);
  ASSERT_THAT(deleted, IsOk());
  std::set<std::string> names;
  for (const json& o : *deleted) names.insert(o["metadata"]["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"dc-1", "dc-3"}));
  for (int i = 0; i < 6; ++i) {
    std::string name = "dc-" + std::to_string(i);
    bool gone = names.count(name) > 0;
    EXPECT_EQ(client_->Get(kConfigMaps, "default", name).status().code(),
              gone ? absl::StatusCode::kNotFound : absl::StatusCode::kOk)
        << name;
  }
  EXPECT_EQ(client_->DeleteCollection(kConfigMaps, "default", selectors, {.precondition_uid = "u"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ListByLabel answers from the informer's index for an indexed label as objects come, change
// their label and go, and by scanning for any other label.
TEST_F(LiveTest, InformerIndexFindsObjectsByLabelAsTheyChange) {
  StartServer();
  ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("ix-a", "1", {{"job", "x"}})),
              IsOk());
  ASSERT_THAT(client_->Create(kConfigMaps, "default",
                              ConfigMap("ix-b", "1", {{"job", "x"}, {"tier", "t"}})),
              IsOk());
  ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("ix-c", "1", {{"job", "y"}})),
              IsOk());
  InformerOptions options{.namespace_ = "default"};
  options.index_labels = {"job"};
  Informer informer(*client_, kConfigMaps, options);
  ASSERT_THAT(StartAndSync({&informer}), IsOk());
  auto names = [&](const std::string& key, const std::string& value) {
    std::set<std::string> out;
    for (const json& o : informer.ListByLabel("default", key, value)) {
      out.insert(o["metadata"]["name"]);
    }
    return out;
  };
  using Names = std::set<std::string>;
  EXPECT_EQ(names("job", "x"), (Names{"ix-a", "ix-b"}));
  EXPECT_EQ(names("tier", "t"), (Names{"ix-b"}));  // not indexed: scanned
  EXPECT_EQ(names("job", "x").size(), 2u);
  ASSERT_THAT(client_->Patch(kConfigMaps, "default", "ix-b", PatchType::kMerge,
                             R"({"metadata":{"labels":{"job":"y"}}})"),
              IsOk());
  EXPECT_TRUE(Eventually([&] { return names("job", "y") == Names{"ix-b", "ix-c"}; }));
  EXPECT_EQ(names("job", "x"), (Names{"ix-a"}));
  ASSERT_THAT(client_->Delete(kConfigMaps, "default", "ix-a"), IsOk());
  EXPECT_TRUE(Eventually([&] { return names("job", "x").empty(); }));
  EXPECT_TRUE(names("job", "z").empty());
  informer.Stop();
}

// The cache keeps objects packed: Get, List, ListByLabel and the handlers' old and new objects
// give back exactly what the server holds, whatever the values (numbers of every kind, text
// outside ASCII, empty strings, lists and maps, null).
TEST_F(LiveTest, InformerGivesBackExactlyWhatTheServerHolds) {
  StartServer();
  const Resource pods{"", "v1", "pods", "Pod", true};
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "exact"},
                {"namespace", "default"},
                {"labels", {{"job", "x"}, {"empty", ""}}},
                {"annotations", {{"note", "modèle ✓ 模型"}, {"blank", ""}}}}},
              {"spec",
               {{"terminationGracePeriodSeconds", 0},
                {"activeDeadlineSeconds", 9007199254740993},
                {"containers", json::array({{{"name", "c"},
                                             {"image", "kubetrain-worker"},
                                             {"args", json::array()},
                                             {"ports", json::array({{{"containerPort", 2222}}})},
                                             {"securityContext", {{"runAsUser", 0}}}}})},
                {"nodeSelector", json::object()}}}};
  ASSERT_THAT(client_->Create(pods, "default", pod), IsOk());
  std::mutex mu;
  std::vector<std::pair<json, json>> updates;
  InformerOptions options{.namespace_ = "default"};
  options.index_labels = {"job"};
  Informer informer(*client_, pods, options);
  informer.AddHandlers({nullptr, [&](const json& old_obj, const json& new_obj) {
                          std::lock_guard<std::mutex> lock(mu);
                          updates.emplace_back(old_obj, new_obj);
                        }});
  ASSERT_THAT(StartAndSync({&informer}), IsOk());
  auto before = client_->Get(pods, "default", "exact");
  ASSERT_THAT(before, IsOk());
  EXPECT_EQ(informer.Get("default/exact"), *before);
  ASSERT_EQ(informer.List().size(), 1u);
  EXPECT_EQ(informer.List()[0], *before);
  ASSERT_EQ(informer.ListByLabel("default", "job", "x").size(), 1u);
  EXPECT_EQ(informer.ListByLabel("default", "job", "x")[0], *before);
  EXPECT_EQ(informer.ListByLabel("default", "empty", "").size(), 1u);  // scanned

  ASSERT_THAT(client_->Patch(pods, "default", "exact", PatchType::kMerge,
                             R"({"metadata":{"annotations":{"step":"-42","ratio":"0.125"}},)"
                             R"("spec":{"activeDeadlineSeconds":4611686018427387904}})"),
              IsOk());
  auto after = client_->Get(pods, "default", "exact");
  ASSERT_THAT(after, IsOk());
  ASSERT_TRUE(Eventually([&] { return informer.Get("default/exact") == *after; }));
  // The store changes before the handlers hear of it (client-go's order): wait for them too.
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !updates.empty();
  }));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].first, *before);
  EXPECT_EQ(updates[0].second, *after);
  informer.Stop();
}

TEST_F(LiveTest, InformerResumesAfterDroppedWatchesWithoutLosingEvents) {
  StartServer({"--drop-watches-every=300ms"});
  Informer informer(*client_, kConfigMaps,
                    {.namespace_ = "default", .initial_backoff = absl::Milliseconds(50)});
  std::mutex mu;
  std::set<std::string> added;
  informer.AddHandlers({[&](const json& o) {
                          std::lock_guard<std::mutex> lock(mu);
                          added.insert(o["metadata"]["name"]);
                        },
                        nullptr, nullptr});
  ASSERT_THAT(StartAndSync({&informer}), IsOk());
  for (int i = 0; i < 30; ++i) {
    ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("w" + std::to_string(i), "x")),
                IsOk());
    absl::SleepFor(absl::Milliseconds(40));  // spread over several of the server's watch cuts
  }
  // The 30 and kube-root-ca.crt, which every namespace has, as on a real cluster.
  EXPECT_TRUE(Eventually([&] { return informer.List().size() >= 31; }));
  // The watch was cut and resumed (the server cuts every 300 ms; under a sanitizer the 30
  // creates can outpace its cuts, so they are waited for)...
  EXPECT_TRUE(Eventually([&] { return informer.watches() > 2; })) << informer.watches();
  EXPECT_EQ(informer.relists(), 1);  // ...from its resourceVersion, not by listing again
  std::lock_guard<std::mutex> lock(mu);
  added.erase("kube-root-ca.crt");
  EXPECT_EQ(added.size(), 30u);
  informer.Stop();
}

TEST_F(LiveTest, WatchFromACompactedResourceVersionIs410OutOfRange) {
  StartServer({"--compact-every=100ms"});
  auto first = client_->Create(kConfigMaps, "default", ConfigMap("old", "x"));
  ASSERT_THAT(first, IsOk());
  std::string old_rv = (*first)["metadata"]["resourceVersion"];
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("n" + std::to_string(i), "x")),
                IsOk());
  }
  // Once a compaction (every 100 ms) has passed old_rv, a watch from it is refused; before, the
  // first of the later creates comes at once and ends the watch.
  absl::Status s;
  EXPECT_TRUE(Eventually([&] {
    s = client_->Watch(kConfigMaps, "default", {.resource_version = old_rv, .timeout_seconds = 5},
                       [](const WatchEvent&) { return false; });
    return s.code() == absl::StatusCode::kOutOfRange;
  })) << s;
}

TEST_F(LiveTest, InformerRelistsAfter410Expired) {
  StartServer({"--compact-every=150ms", "--drop-watches-every=400ms"});
  // Without bookmarks the informer resumes from its last event, which compaction leaves behind
  // while other objects move the server's resourceVersion on.
  Informer informer(*client_, kConfigMaps,
                    {.namespace_ = "default",
                     .initial_backoff = absl::Milliseconds(50),
                     .allow_bookmarks = false});
  ASSERT_THAT(StartAndSync({&informer}), IsOk());
  for (int i = 0; i < 5; ++i) {
    ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("e" + std::to_string(i), "x")),
                IsOk());
  }
  const Resource secrets{"", "v1", "secrets", "Secret", true};
  for (int i = 0; i < 20; ++i) {
    json secret = {{"apiVersion", "v1"},
                   {"kind", "Secret"},
                   {"metadata", {{"name", "s" + std::to_string(i)}, {"namespace", "default"}}}};
    ASSERT_THAT(client_->Create(secrets, "default", secret), IsOk());
    absl::SleepFor(absl::Milliseconds(50));  // writes spread over compactions and watch drops
  }
  ASSERT_THAT(client_->Delete(kConfigMaps, "default", "e3"), IsOk());
  EXPECT_TRUE(Eventually([&] { return informer.relists() > 1; })) << informer.relists();
  EXPECT_TRUE(Eventually([&] {
    return informer.Get("default/e0").has_value() && informer.Get("default/e4").has_value() &&
           !informer.Get("default/e3").has_value();
  })) <<
      [&] {
        std::string keys;
        for (const json& o : informer.List()) keys += ObjectKey(o) + " ";
        return keys;
      }();
  informer.Stop();
}

TEST_F(LiveTest, RetryAfterIsHonouredAndErrorsStayUnavailable) {
  std::mutex mu;
  std::map<int, int> codes;
  ClientOptions o;
  o.max_retries = 3;
  o.on_request = [&](const std::string&, int code) {
    std::lock_guard<std::mutex> lock(mu);
    ++codes[code];
  };
  StartServer({"--error-rate=0.4"}, o);
  int ok = 0;
  for (int i = 0; i < 15; ++i) {
    auto r = client_->List(kConfigMaps, "default", {});
    if (r.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    }
  }
  EXPECT_GT(ok, 0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GT(codes[200], ok - 1);
}

TEST_F(LiveTest, ClientSideRateLimit) {
  ClientOptions o;
  o.qps = 10;
  o.burst = 2;
  StartServer({}, o);
  absl::Time start = absl::Now();
  for (int i = 0; i < 12; ++i) ASSERT_THAT(client_->List(kConfigMaps, "default", {}), IsOk());
  // 2 from the burst, 10 more at 10/s (the fixture's own discovery request took one token).
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
}

TEST_F(LiveTest, LeaderElectionHandsOverWhenTheLeaderStops) {
  StartServer();
  auto client_b = server_->NewClient();
  ASSERT_THAT(client_b, IsOk());
  LeaderElectionOptions base{.namespace_ = "default",
                             .name = "kt-lock",
                             .lease_duration = absl::Seconds(2),
                             .renew_deadline = absl::Milliseconds(1500),
                             .retry_period = absl::Milliseconds(100)};
  LeaderElectionOptions a = base, b = base;
  a.identity = "a";
  b.identity = "b";
  b.release_on_stop = false;
  std::atomic<bool> stop_a{false}, stop_b{false};
  LeaderElector ea(client_->config(), a, {});
  LeaderElector eb((*client_b)->config(), b, {});
  std::thread ta([&] { EXPECT_THAT(ea.Run(stop_a), IsOk()); });
  ASSERT_TRUE(Eventually([&] { return ea.IsLeader(); }));
  std::thread tb([&] { EXPECT_THAT(eb.Run(stop_b), IsOk()); });
  absl::SleepFor(absl::Milliseconds(800));  // several of b's tries (retry_period 100 ms)
  EXPECT_FALSE(eb.IsLeader());              // a renews; b waits
  stop_a = true;                            // a releases the lease on the way out
  ta.join();
  EXPECT_TRUE(Eventually([&] { return eb.IsLeader(); }, absl::Seconds(5)));
  auto lease = client_->Get(Resource::Leases(), "default", "kt-lock");
  ASSERT_THAT(lease, IsOk());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  stop_b = true;
  tb.join();
}

TEST_F(LiveTest, CrashedLeaderIsReplacedAfterTheLeaseExpires) {
  StartServer();
  LeaderElectionOptions o{.namespace_ = "default",
                          .name = "kt-lock2",
                          .lease_duration = absl::Seconds(1),
                          .renew_deadline = absl::Milliseconds(800),
                          .retry_period = absl::Milliseconds(100)};
  o.identity = "crashed";
  o.release_on_stop = false;  // a crash releases nothing
  {
    std::atomic<bool> stop{false};
    LeaderElector gone(client_->config(), o, {});
    std::thread t([&] { EXPECT_THAT(gone.Run(stop), IsOk()); });
    ASSERT_TRUE(Eventually([&] { return gone.IsLeader(); }));
    stop = true;
    t.join();
  }
  o.identity = "successor";
  std::atomic<bool> stop{false};
  LeaderElector next(client_->config(), o, {});
  absl::Time start = absl::Now();
  std::thread t([&] { EXPECT_THAT(next.Run(stop), IsOk()); });
  ASSERT_TRUE(Eventually([&] { return next.IsLeader(); }, absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));  // waited out the old lease
  stop = true;
  t.join();
}

}  // namespace
}  // namespace kubetrain::kube::testing
