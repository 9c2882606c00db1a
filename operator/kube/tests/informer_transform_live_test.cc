// The informer's transform (what it caches) and its page-by-page relist, against a live
// localkube, which records managedFields on every write and expires a continue token once the
// revision of the list's first page is compacted away (--compact-every).
//
// The informers talk to localkube through FaultProxy, a loopback HTTP proxy that does what
// localkube cannot be made to do on cue: end the watches in progress and answer the next one 410
// Expired, hold watch events back (as across a long disconnect), and pause a paginated list
// between two pages while the test changes objects and waits for a compaction (the informer's
// pages follow each other at once, and localkube compacts on a timer only). It records the
// query of every list it passes on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "operator/kube/config.h"
#include "operator/kube/informer.h"
#include "operator/kube/testing/localkube.h"

namespace kubetrain::kube::testing {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

constexpr char kLastApplied[] = "kubectl.kubernetes.io/last-applied-configuration";

json ExpiredStatus(const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", "Expired"},
          {"code", 410}};
}

// Forwards GETs to a plain-HTTP localkube. ExpireWatches() ends the watches in progress and
// answers the next one with a 410 ERROR event; while `hold_events` is set, watch events are
// swallowed (the informer misses them, as across a long disconnect); PauseBeforeNextContinue
// runs a function before passing on the next list request that carries a continue token.
class FaultProxy {
 public:
  // One list request passed on: its query and the code of localkube's answer.
  struct ListCall {
    httplib::Params params;
    int code = 0;
  };

  FaultProxy(std::string host, int port) : host_(std::move(host)), port_(port) {
    server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.get_param_value("watch") == "true") {
        Watch(req, res);
      } else {
        List(req, res);
      }
    });
    port_out_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FaultProxy() {
    CutWatches(/*expire_next=*/false, /*stopping=*/true);
    server_.stop();
    thread_.join();
  }

  int port() const { return port_out_; }
  void ExpireWatches() { CutWatches(/*expire_next=*/true, /*stopping=*/false); }
  // Every list request, in order.
  std::vector<ListCall> lists() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lists_;
  }
  void ClearLists() {
    std::lock_guard<std::mutex> lock(mu_);
    lists_.clear();
  }
  // `pause` runs once, on the proxy's thread, before the next list page after the first is
  // passed on: the informer waits for that page meanwhile.
  void PauseBeforeNextContinue(std::function<void()> pause) {
    std::lock_guard<std::mutex> lock(mu_);
    pause_ = std::move(pause);
  }
  bool pause_pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pause_ != nullptr;
  }

  std::atomic<bool> hold_events{false};

 private:
  void List(const httplib::Request& req, httplib::Response& res) {
    std::function<void()> pause;
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!req.get_param_value("continue").empty()) pause = std::exchange(pause_, nullptr);
      index = lists_.size();
      lists_.push_back({req.params, 0});
    }
    if (pause) pause();
    httplib::Client up(host_, port_);
    httplib::Result r = up.Get(req.target.c_str());
    res.status = r ? r->status : 502;
    if (r) res.set_content(r->body, "application/json");
    std::lock_guard<std::mutex> lock(mu_);
    if (index < lists_.size()) lists_[index].code = res.status;
  }

  void Watch(const httplib::Request& req, httplib::Response& res) {
    std::string target = req.target;
    res.set_chunked_content_provider("application/json", [this, target](size_t,
                                                                        httplib::DataSink& sink) {
      httplib::Client up(host_, port_);
      up.set_read_timeout(120, 0);
      int generation;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) {
          sink.done();
          return true;
        }
        if (std::exchange(expire_next_watch_, false)) {
          std::string line =
              json{{"type", "ERROR"}, {"object", ExpiredStatus("too old resource version")}}
                  .dump() +
              "\n";
          sink.write(line.data(), line.size());
          sink.done();
          return true;
        }
        generation = generation_;
        watches_.insert(&up);
      }
      int status = 0;
      std::string pending, error;
      up.Get(
          target.c_str(), httplib::Headers{},
          [&](const httplib::Response& r) {
            status = r.status;
            return true;
          },
          [&](const char* data, size_t len) {
            if (status != 200) {
              error.append(data, len);
              return true;
            }
            pending.append(data, len);
            size_t start = 0;
            for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
              json ev = json::parse(pending.substr(start, nl - start), nullptr, false);
              if (!ev.is_object()) continue;
              if (hold_events.load() && ev.value("type", "") != "ERROR") continue;
              {
                // Cut by CutWatches (stop() misses a connection still being made): nothing
                // more reaches the informer on this watch.
                std::lock_guard<std::mutex> lock(mu_);
                if (generation != generation_) return false;
              }
              std::string line = ev.dump() + "\n";
              if (!sink.write(line.data(), line.size())) return false;
            }
            pending.erase(0, start);
            return true;
          });
      {
        std::lock_guard<std::mutex> lock(mu_);
        watches_.erase(&up);
      }
      if (status != 0 && status != 200) {
        json st = json::parse(error, nullptr, false);
        std::string line = json{{"type", "ERROR"}, {"object", st}}.dump() + "\n";
        sink.write(line.data(), line.size());
      }
      sink.done();
      return true;
    });
  }

  void CutWatches(bool expire_next, bool stopping) {
    std::lock_guard<std::mutex> lock(mu_);
    expire_next_watch_ = expire_next_watch_ || expire_next;
    stopping_ = stopping_ || stopping;
    ++generation_;
    for (httplib::Client* c : watches_) c->stop();
  }

  const std::string host_;
  const int port_;
  httplib::Server server_;
  int port_out_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;  // guards what follows
  bool expire_next_watch_ = false;
  bool stopping_ = false;
  int generation_ = 0;  // of CutWatches calls
  std::set<httplib::Client*> watches_;
  std::vector<ListCall> lists_;
  std::function<void()> pause_;
};

// The ConfigMaps these tests make and count, selected by a label: a namespace also holds the
// kube-root-ca.crt ConfigMap, which the API server's publisher keeps there (recreating it when
// deleted), as in a cluster.
constexpr char kMine[] = "made-by=this-test";

json AppliedConfigMap(const std::string& name, const std::string& value) {
  json cm = ConfigMap(name, value, {{"made-by", "this-test"}});
  // As `kubectl apply` leaves it: the applied manifest, as JSON, in an annotation.
  cm["metadata"]["annotations"][kLastApplied] = cm.dump();
  return cm;
}

// Everything an informer recorded from its handlers.
struct Recorder {
  std::mutex mu;
  std::vector<json> objects;  // every object any handler got
  std::vector<std::string> added, updated, deleted;

  EventHandlers Handlers() {
    return {[this](const json& o) { Record(o, &added); },
            [this](const json& old_obj, const json& o) {
              Record(old_obj, nullptr);
              Record(o, &updated);
            },
            [this](const json& o) { Record(o, &deleted); }};
  }
  void Record(const json& o, std::vector<std::string>* names) {
    std::lock_guard<std::mutex> lock(mu);
    objects.push_back(o);
    if (names) names->push_back(o["metadata"]["name"]);
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu);
    objects.clear();
    added.clear();
    updated.clear();
    deleted.clear();
  }
};

bool Stripped(const json& obj) {
  const json& meta = obj["metadata"];
  return !meta.contains("managedFields") &&
         !meta.value("annotations", json::object()).contains(kLastApplied);
}

class InformerTransformTest : public ::testing::Test {
 protected:
  // localkube's flags.
  virtual std::vector<std::string> Flags() const { return {"--insecure-http"}; }

  void SetUp() override {
    auto lk = Localkube::Start(Flags());
    ASSERT_TRUE(lk.ok()) << lk.status();
    server_ = std::move(*lk);
    auto client = server_->NewClient({.qps = 0});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    auto config = LoadKubeconfig(server_->kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_EQ(config->scheme, "http");
    proxy_ = std::make_unique<FaultProxy>(config->host, config->port);
    ASSERT_GT(proxy_->port(), 0);
    config->port = proxy_->port();
    auto proxied = Client::Create(*config, {.qps = 0});
    ASSERT_TRUE(proxied.ok()) << proxied.status();
    proxied_ = std::move(*proxied);
  }
  void TearDown() override {
    proxied_.reset();
    proxy_.reset();
  }

  void CreateConfigMaps(int n, const std::string& prefix = "cm-") {
    for (int i = 0; i < n; ++i) {
      auto created = client_->Create(kConfigMaps, "default",
                                     AppliedConfigMap(prefix + std::to_string(i), "x"));
      ASSERT_TRUE(created.ok()) << created.status();
    }
  }

  // Changes data.v of the ConfigMap `name` on the server: read, changed, updated.
  absl::Status SetValue(const std::string& name, const std::string& value) {
    auto current = client_->Get(kConfigMaps, "default", name);
    if (!current.ok()) return current.status();
    (*current)["data"]["v"] = value;
    return client_->Update(kConfigMaps, "default", *current).status();
  }

  // What the server holds, stripped, by name: what the cache must converge to.
  std::map<std::string, json> ServerState() {
    std::map<std::string, json> out;
    auto list = client_->ListAll(kConfigMaps, "default", {.label_selector = kMine});
    EXPECT_TRUE(list.ok()) << list.status();
    if (!list.ok()) return out;
    for (json item : (*list)["items"]) {
      item["kind"] = "ConfigMap";
      item["apiVersion"] = "v1";
      StripForCache(item);
      out[item["metadata"]["name"]] = item;
    }
    return out;
  }

  // This test's ConfigMaps, stripped (StripForCache), read `page_size` a page; a watch ends
  // after a second at the most, and a failed one is retried at once.
  static InformerOptions Options(int page_size) {
    return {.namespace_ = "default",
            .label_selector = kMine,
            .min_watch_timeout = absl::Seconds(1),
            .initial_backoff = absl::Milliseconds(50),
            .transform = StripForCache,
            .page_size = page_size};
  }

  static std::map<std::string, json> CacheState(const Informer& informer) {
    std::map<std::string, json> out;
    for (const json& o : informer.List()) out[o["metadata"]["name"]] = o;
    return out;
  }

  std::unique_ptr<Localkube> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<Client> proxied_;  // through proxy_
};

TEST(StripForCacheTest, RemovesOnlyManagedFieldsAndLastAppliedConfiguration) {
  json obj = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "p"},
                {"namespace", "default"},
                {"uid", "u1"},
                {"resourceVersion", "7"},
                {"deletionTimestamp", "2026-01-01T00:00:00Z"},
                {"labels", {{"kubetrain.dev/job-name", "j"}}},
                {"annotations", {{kLastApplied, "{}"}, {"prometheus.io/port", "9090"}}},
                {"ownerReferences", json::array({{{"uid", "owner"}, {"controller", true}}})},
                {"managedFields", json::array({{{"manager", "kubectl"}}})}}},
              {"spec", {{"containers", json::array({{{"name", "c"}, {"env", json::array()}}})}}},
              {"status", {{"phase", "Running"}}}};
  json want = obj;
  want["metadata"].erase("managedFields");
  want["metadata"]["annotations"].erase(kLastApplied);
  StripForCache(obj);
  EXPECT_EQ(obj, want);

  // The annotations map goes when nothing else is in it, as the API server omits an empty one.
  json only = {{"metadata", {{"name", "a"}, {"annotations", {{kLastApplied, "{}"}}}}}};
  StripForCache(only);
  EXPECT_EQ(only, json({{"metadata", {{"name", "a"}}}}));

  json malformed = {{"metadata", "x"}};
  StripForCache(malformed);
  EXPECT_EQ(malformed, json({{"metadata", "x"}}));
}

// The cache and every handler hold transformed objects, from the LIST and from each kind of
// watch event, while the other annotations, labels and owner references stay.
TEST_F(InformerTransformTest, CacheAndHandlersHoldOnlyTransformedObjects) {
  auto owner = client_->Create(kConfigMaps, "default", AppliedConfigMap("owner", "x"));
  ASSERT_TRUE(owner.ok()) << owner.status();
  json a = AppliedConfigMap("a", "1");
  a["metadata"]["labels"]["team"] = "ml";
  a["metadata"]["annotations"]["team.example.com/contact"] = "ml@example.com";
  a["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "v1"},
                                                   {"kind", "ConfigMap"},
                                                   {"name", "owner"},
                                                   {"uid", (*owner)["metadata"]["uid"]},
                                                   {"controller", true}}});
  ASSERT_THAT(client_->Create(kConfigMaps, "default", a), IsOk());

  // Without a transform the informer caches what the server sends: localkube's managedFields
  // and kubectl's annotation are really there to strip.
  Informer raw(*proxied_, kConfigMaps, {.namespace_ = "default", .label_selector = kMine});
  ASSERT_THAT(StartAndSync({&raw}), IsOk());
  auto raw_a = raw.Get("default/a");
  ASSERT_TRUE(raw_a.has_value());
  EXPECT_TRUE((*raw_a)["metadata"].contains("managedFields"));
  EXPECT_TRUE((*raw_a)["metadata"]["annotations"].contains(kLastApplied));
  raw.Stop();

  Recorder seen;
  InformerOptions options = Options(/*page_size=*/2);
  // The default watch length and retry: every event here comes on the first watch.
  options.min_watch_timeout = InformerOptions().min_watch_timeout;
  options.initial_backoff = InformerOptions().initial_backoff;
  Informer informer(*proxied_, kConfigMaps, options);
  informer.AddHandlers(seen.Handlers());
  ASSERT_THAT(StartAndSync({&informer}), IsOk());
  auto cached = informer.Get("default/a");
  ASSERT_TRUE(cached.has_value());
  const json& meta = (*cached)["metadata"];
  EXPECT_FALSE(meta.contains("managedFields")) << cached->dump();
  EXPECT_EQ(meta["annotations"], json({{"team.example.com/contact", "ml@example.com"}}));
  EXPECT_EQ(meta["labels"], json({{"made-by", "this-test"}, {"team", "ml"}}));
  EXPECT_EQ(meta["ownerReferences"], a["metadata"]["ownerReferences"]);
  EXPECT_EQ((*cached)["data"], json({{"v", "1"}}));
  EXPECT_FALSE(meta.value("uid", "").empty());
  EXPECT_FALSE(meta.value("resourceVersion", "").empty());
  auto cached_owner = informer.Get("default/owner");
  ASSERT_TRUE(cached_owner.has_value());
  EXPECT_FALSE((*cached_owner)["metadata"].contains("annotations")) << cached_owner->dump();

  // ADDED, MODIFIED and DELETED events.
  ASSERT_THAT(client_->Create(kConfigMaps, "default", AppliedConfigMap("b", "1")), IsOk());
  ASSERT_THAT(SetValue("a", "2"), IsOk());
  ASSERT_THAT(client_->Delete(kConfigMaps, "default", "b"), IsOk());
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(seen.mu);
    return seen.deleted.size() == 1 && !seen.updated.empty();
  }));
  EXPECT_EQ(informer.Get("default/a").value()["data"]["v"], "2");
  std::lock_guard<std::mutex> lock(seen.mu);
  EXPECT_EQ(seen.added, std::vector<std::string>({"a", "owner", "b"}));
  EXPECT_EQ(seen.updated, std::vector<std::string>({"a"}));
  EXPECT_EQ(seen.deleted, std::vector<std::string>({"b"}));
  for (const json& o : seen.objects) EXPECT_TRUE(Stripped(o)) << o.dump();
  informer.Stop();
}

// A relist reads page by page (limit = page_size, following continue tokens), ends with the
// same cache when nothing changed and reports no events for it; changes the watch missed come
// out as adds, updates and deletes relative to the old cache.
TEST_F(InformerTransformTest, PagedRelistKeepsTheCacheAndReportsOnlyWhatChanged) {
  CreateConfigMaps(20);
  Recorder seen;
  Informer informer(*proxied_, kConfigMaps, Options(/*page_size=*/3));
  informer.AddHandlers(seen.Handlers());
  ASSERT_THAT(StartAndSync({&informer}), IsOk());
  std::vector<FaultProxy::ListCall> lists = proxy_->lists();
  ASSERT_EQ(lists.size(), 7u);  // 20 objects, 3 a page
  for (size_t i = 0; i < lists.size(); ++i) {
    EXPECT_EQ(lists[i].params.find("limit")->second, "3");
    EXPECT_EQ(lists[i].params.count("continue"), i == 0 ? 0u : 1u);
    EXPECT_EQ(lists[i].code, 200);
  }
  std::map<std::string, json> before = CacheState(informer);
  ASSERT_EQ(before.size(), 20u);
  EXPECT_EQ(before, ServerState());
  seen.Clear();
  proxy_->ClearLists();

  proxy_->ExpireWatches();
  ASSERT_TRUE(Eventually([&] { return informer.relists() == 2; })) << informer.relists();
  EXPECT_EQ(proxy_->lists().size(), 7u);
  EXPECT_EQ(CacheState(informer), before);
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    EXPECT_TRUE(seen.objects.empty()) << seen.objects.size() << " handler calls";
  }

  // Changes the informer does not hear of until it relists.
  proxy_->hold_events = true;
  ASSERT_THAT(client_->Create(kConfigMaps, "default", AppliedConfigMap("new", "x")), IsOk());
  ASSERT_THAT(SetValue("cm-5", "changed"), IsOk());
  ASSERT_THAT(client_->Delete(kConfigMaps, "default", "cm-12"), IsOk());
  absl::SleepFor(absl::Milliseconds(200));  // the held events do not reach the cache meanwhile
  EXPECT_EQ(CacheState(informer), before);
  // The next watch is refused before events flow again, so only the relist can tell.
  proxy_->ExpireWatches();
  proxy_->hold_events = false;
  ASSERT_TRUE(Eventually([&] { return informer.relists() == 3; })) << informer.relists();
  EXPECT_EQ(CacheState(informer), ServerState());
  std::lock_guard<std::mutex> lock(seen.mu);
  EXPECT_EQ(seen.added, std::vector<std::string>({"new"}));
  EXPECT_EQ(seen.updated, std::vector<std::string>({"cm-5"}));
  EXPECT_EQ(seen.deleted, std::vector<std::string>({"cm-12"}));
  for (const json& o : seen.objects) EXPECT_TRUE(Stripped(o)) << o.dump();
  informer.Stop();
}

// localkube compacting its history every 100 ms: a continue token expires once a write and a
// compaction come between two pages.
class InformerContinueExpiryTest : public InformerTransformTest {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--insecure-http", "--compact-every=100ms"};
  }

  // Runs `changes`, writes a ConfigMap outside the informer's namespace (so that something is
  // written even when `changes` writes nothing) and waits until localkube has compacted past
  // it: a watch from just before that write is refused 410 Expired. A list whose first page
  // came before all this can then not go on.
  void ChangeAndWaitForCompaction(const std::function<void()>& changes) {
    changes();
    json tick = AppliedConfigMap("tick-" + std::to_string(ticks_++), "x");
    tick["metadata"]["namespace"] = "kube-system";
    auto written = client_->Create(kConfigMaps, "kube-system", tick);
    ASSERT_TRUE(written.ok()) << written.status();
    int64_t rv = std::stoll((*written)["metadata"]["resourceVersion"].get<std::string>());
    bool compacted = Eventually([&] {
      WatchOptions o;
      o.resource_version = std::to_string(rv - 1);
      o.timeout_seconds = 5;
      // Not compacted yet: the tick's own event comes at once and ends the watch.
      absl::Status watched =
          client_->Watch(kConfigMaps, "kube-system", o, [](const WatchEvent&) { return false; });
      return absl::IsOutOfRange(watched);
    });
    ASSERT_TRUE(compacted) << "localkube did not compact within 15 s";
  }

  int ticks_ = 0;
};

// A continue token localkube refuses with 410 Expired (a write and a compaction came between
// two pages) starts the list again as client-go's pager does, with one unpaginated request, and
// the informer still converges on the server's state, on the first sync and on a later relist.
TEST_F(InformerContinueExpiryTest, ExpiredContinueTokenRestartsTheListInFull) {
  CreateConfigMaps(9);
  proxy_->PauseBeforeNextContinue([this] { ChangeAndWaitForCompaction([] {}); });
  Recorder seen;
  Informer informer(*proxied_, kConfigMaps, Options(/*page_size=*/2));
  informer.AddHandlers(seen.Handlers());
  ASSERT_THAT(StartAndSync({&informer}, absl::Seconds(20)), IsOk());
  EXPECT_EQ(informer.relists(), 1);
  EXPECT_FALSE(proxy_->pause_pending());
  std::vector<FaultProxy::ListCall> lists = proxy_->lists();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[0].params.count("continue"), 0u);
  EXPECT_EQ(lists[1].params.count("continue"), 1u);
  EXPECT_EQ(lists[1].code, 410);  // localkube's own answer
  EXPECT_EQ(lists[2].params.count("continue"), 0u);
  EXPECT_EQ(lists[2].params.count("limit"), 0u);  // everything at once
  EXPECT_EQ(lists[2].code, 200);
  EXPECT_EQ(CacheState(informer), ServerState());
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    EXPECT_EQ(seen.added.size(), 9u);  // once each: the objects of the refused pass are dropped
  }

  // A later relist whose token expires after changes no watch saw: they are made while the
  // informer is between two pages of the relist.
  seen.Clear();
  proxy_->ClearLists();
  proxy_->PauseBeforeNextContinue([this] {
    ChangeAndWaitForCompaction([this] {
      ASSERT_THAT(client_->Delete(kConfigMaps, "default", "cm-7"), IsOk());
      CreateConfigMaps(3, "late-");
    });
  });
  proxy_->ExpireWatches();
  ASSERT_TRUE(Eventually([&] { return informer.relists() == 2; }, absl::Seconds(20)))
      << informer.relists();
  EXPECT_FALSE(proxy_->pause_pending());
  lists = proxy_->lists();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[1].code, 410);
  EXPECT_EQ(lists[2].params.count("limit"), 0u);
  EXPECT_EQ(CacheState(informer), ServerState());
  std::lock_guard<std::mutex> lock(seen.mu);
  EXPECT_EQ(seen.added, std::vector<std::string>({"late-0", "late-1", "late-2"}));
  EXPECT_EQ(seen.deleted, std::vector<std::string>({"cm-7"}));
  EXPECT_TRUE(seen.updated.empty());
  informer.Stop();
}

}  // namespace
}  // namespace kubetrain::kube::testing
