// Watch serving: Server::ServeWatch streams a collection's events (initial list or resume,
// selector transitions, bookmarks, 410 after compaction, injected drops) and
// Server::WaitForRevision holds reads at a resourceVersion the store has not reached.
#include <httplib.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "localkube/errors.h"
#include "localkube/request.h"
#include "localkube/server.h"
#include "localkube/table.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// Applies the selector transition rules of the watch cache: entering the selection is ADDED,
// leaving it is DELETED (with the previous state and the new revision).
std::optional<json> WatchEventFor(const StoreEvent& e, const Target& target,
                                  const ListOptions& filter) {
  auto matches = [&](const json& o) {
    if (o.is_null()) return false;
    if (!target.ns.empty() && o["metadata"].value("namespace", "") != target.ns) return false;
    return filter.labels.Matches(o["metadata"].value("labels", json())) && filter.fields.Matches(o);
  };
  bool now = e.type != "DELETED" && matches(e.object);
  bool before = e.type == "DELETED" ? matches(e.object) : matches(e.previous);
  json object = e.object;
  std::string type;
  if (now && before) {
    type = "MODIFIED";
  } else if (now) {
    type = "ADDED";
  } else if (before) {
    type = "DELETED";
    if (e.type != "DELETED") {
      object = e.previous;
      object["metadata"]["resourceVersion"] = std::to_string(e.revision);
    }
  } else {
    return std::nullopt;
  }
  object["apiVersion"] = target.type->GroupVersion();
  return json{{"type", type}, {"object", object}};
}

}  // namespace

bool Server::WaitForRevision(int64_t revision) {
  Store* store = api_->store();
  absl::Time deadline = absl::Now() + options_.too_large_rv_wait;
  while (!stopping_ && store->Revision() < revision && absl::Now() < deadline) {
    store->WaitForChange(revision - 1, deadline);
  }
  return store->Revision() >= revision;
}

void Server::ServeWatch(const Target& target, const httplib::Request& req, httplib::Response& res) {
  if (req.has_param("sendInitialEvents")) {
    // Without a real WatchList implementation the only safe answer is the one a server with the
    // feature gate off gives: client-go then falls back to LIST + WATCH.
    return ReplyError(res, InvalidError("ListOptions.meta.k8s.io", "",
                                        {{"FieldValueForbidden",
                                          "Forbidden: sendInitialEvents is forbidden for watch "
                                          "unless the WatchList feature gate is enabled",
                                          "sendInitialEvents"}}));
  }
  auto filter = ListOptionsOf(req);
  if (!filter.ok()) return ReplyError(res, filter.status());
  absl::StatusOr<int64_t> timeout_seconds = IntParam(req, "timeoutSeconds", 0);
  if (!timeout_seconds.ok()) return ReplyError(res, timeout_seconds.status());
  const int64_t timeout = *timeout_seconds > 0 ? *timeout_seconds : 1800;
  const bool initial_list = filter->resource_version == 0;
  bool bookmarks = ParseBool(Param(req, "allowWatchBookmarks"));
  bool table = WantsTable(req);
  std::string include_object = Param(req, "includeObject");
  absl::Time deadline = absl::Now() + absl::Seconds(timeout);
  bool drop = false;
  if (options_.drop_watches_every > absl::ZeroDuration() &&
      absl::Now() + options_.drop_watches_every < deadline) {
    deadline = absl::Now() + options_.drop_watches_every;
    drop = true;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      kJson, [this, target, filter = *filter, initial_list, bookmarks, table, include_object,
              deadline, drop](size_t, httplib::DataSink& sink) {
        Store* store = api_->store();
        const std::string key = target.type->StorageKey();
        auto emit = [&](json event) {
          if (table && event["type"] != "ERROR" && event["type"] != "BOOKMARK") {
            event["object"] =
                ToTable(*target.type, {event["object"]},
                        event["object"]["metadata"].value("resourceVersion", ""), include_object);
          }
          std::string line = event.dump() + "\n";
          log::Debug("Sent watch event", {{"type", event.value("type", "")},
                                          {"resource", target.type->plural},
                                          {"bytes", line.size()}});
          return sink.write(line.data(), line.size());
        };
        int64_t cursor = 0;
        if (initial_list) {
          std::vector<json> objects = store->List(key, target.ns, &cursor);
          for (json& o : objects) {
            StoreEvent e{cursor, "ADDED", key, std::move(o), nullptr};
            if (auto ev = WatchEventFor(e, target, filter)) {
              if (!emit(*ev)) return false;
            }
          }
        } else if (!WaitForRevision(filter.resource_version)) {
          // Past the answer's start, errors travel as an ERROR event (the apiserver's
          // errWatcher); client-go relists on this cause.
          if (stopping_) return false;
          emit({{"type", "ERROR"},
                {"object", StatusBody(TooLargeResourceVersionError(filter.resource_version,
                                                                   store->Revision()))}});
          sink.done();
          return true;
        } else {
          cursor = filter.resource_version;
        }
        absl::Time next_bookmark = absl::Now() + options_.bookmark_every;
        while (!stopping_ && sink.is_writable()) {
          std::vector<StoreEvent> events;
          int64_t scanned = cursor;
          absl::Status st = store->EventsAfter(key, cursor, &events, &scanned);
          if (!st.ok()) {
            json status = StatusBody(GoneError(st.message()));
            status["code"] = 410;
            emit({{"type", "ERROR"}, {"object", status}});
            break;
          }
          for (const StoreEvent& e : events) {
            if (auto ev = WatchEventFor(e, target, filter)) {
              if (!emit(*ev)) return false;
            }
          }
          cursor = scanned;
          absl::Time now = absl::Now();
          if (now >= deadline) break;
          if (bookmarks && now >= next_bookmark) {
            json obj = {{"kind", target.type->kind},
                        {"apiVersion", target.type->GroupVersion()},
                        {"metadata", {{"resourceVersion", std::to_string(cursor)}}}};
            if (!emit({{"type", "BOOKMARK"}, {"object", obj}})) return false;
            next_bookmark = now + options_.bookmark_every;
          }
          store->WaitForChange(cursor, std::min(deadline, next_bookmark));
        }
        // An injected drop ends the stream without the final chunk, like a lost connection.
        if (drop && absl::Now() >= deadline) return false;
        sink.done();
        return true;
      });
}

}  // namespace kubetrain::localkube
