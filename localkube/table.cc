#include "localkube/table.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "localkube/json_fields.h"
#include "localkube/storage_objects.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

struct Column {
  std::string name, type, format, description;
  int priority = 0;
};

std::string Age(const json& object) {
  std::string ts = object["metadata"].value("creationTimestamp", "");
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, ts, &t, &err)) return "<unknown>";
  return HumanDuration(absl::Now() - t);
}

json PodCells(const json& pod) {
  const json status = pod.value("status", json::object());
  int total =
      static_cast<int>(pod.value("spec", json::object()).value("containers", json::array()).size());
  int ready = 0, restarts = 0;
  for (const auto& cs : status.value("containerStatuses", json::array())) {
    if (cs.value("ready", false)) ++ready;
    restarts += cs.value("restartCount", 0);
  }
  std::string phase = status.value("phase", "Pending");
  for (const auto& cs : status.value("containerStatuses", json::array())) {
    const json state = cs.value("state", json::object());
    if (state.contains("waiting")) phase = state["waiting"].value("reason", phase);
    if (state.contains("terminated") && phase != "Succeeded") {
      phase = state["terminated"].value("reason", phase);
    }
  }
  if (pod["metadata"].contains("deletionTimestamp")) phase = "Terminating";
  return {pod["metadata"]["name"],
          absl::StrCat(ready, "/", total),
          phase,
          restarts,
          Age(pod),
          status.value("podIP", "<none>"),
          pod.value("spec", json::object()).value("nodeName", "<none>")};
}

json DeploymentCells(const json& d) {
  const json status = d.value("status", json::object());
  int want = d.value("spec", json::object()).value("replicas", 1);
  return {d["metadata"]["name"], absl::StrCat(status.value("readyReplicas", 0), "/", want),
          status.value("updatedReplicas", 0), status.value("availableReplicas", 0), Age(d)};
}

json ServiceCells(const json& s) {
  const json spec = s.value("spec", json::object());
  std::vector<std::string> ports;
  for (const auto& p : spec.value("ports", json::array())) {
    ports.push_back(absl::StrCat(p.value("port", 0), "/", p.value("protocol", "TCP")));
  }
  return {s["metadata"]["name"],
          spec.value("type", "ClusterIP"),
          spec.value("clusterIP", "None"),
          "<none>",
          ports.empty() ? "<none>" : absl::StrJoin(ports, ","),
          Age(s)};
}

// kubectl get nodes: Ready/NotReady/Unknown, with SchedulingDisabled when cordoned.
json NodeCells(const json& n) {
  const json status = n.value("status", json::object());
  std::string ready = "Unknown";
  for (const auto& c : status.value("conditions", json::array())) {
    if (c.value("type", "") != "Ready") continue;
    ready = c.value("status", "") == "True" ? "Ready" : "NotReady";
  }
  if (n.value("spec", json::object()).value("unschedulable", false)) {
    ready += ",SchedulingDisabled";
  }
  std::vector<std::string> roles;
  const json labels = n["metadata"].value("labels", json::object());
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (absl::StartsWith(it.key(), "node-role.kubernetes.io/")) {
      roles.push_back(it.key().substr(strlen("node-role.kubernetes.io/")));
    }
  }
  std::string internal = "<none>", external = "<none>";
  for (const auto& a : status.value("addresses", json::array())) {
    if (a.value("type", "") == "InternalIP" && internal == "<none>")
      internal = a.value("address", "");
    if (a.value("type", "") == "ExternalIP" && external == "<none>")
      external = a.value("address", "");
  }
  const json info = status.value("nodeInfo", json::object());
  return {n["metadata"]["name"],
          ready,
          roles.empty() ? "<none>" : absl::StrJoin(roles, ","),
          Age(n),
          info.value("kubeletVersion", ""),
          internal,
          external,
          info.value("osImage", "<unknown>"),
          info.value("kernelVersion", "<unknown>"),
          info.value("containerRuntimeVersion", "<unknown>")};
}

// Since an RFC 3339 time, as kubectl prints it; "<unknown>" when there is none.
std::string Since(const json& object, const char* field) {
  auto it = object.find(field);
  absl::Time t;
  std::string err;
  if (it == object.end() || !it->is_string() ||
      !absl::ParseTime(absl::RFC3339_full, it->get<std::string>(), &t, &err)) {
    return "<unknown>";
  }
  return HumanDuration(absl::Now() - t);
}

// kubectl get events (the API server's event printer): every column, the wide ones with
// priority 1; read from a core/v1 Event or its events.k8s.io/v1 form.
json EventCells(const json& e) {
  const bool v1 = e.contains("regarding") || e.contains("note");
  std::string first = Since(e, v1 ? "deprecatedFirstTimestamp" : "firstTimestamp");
  if (first == "<unknown>") first = Since(e, "eventTime");
  std::string last = Since(e, v1 ? "deprecatedLastTimestamp" : "lastTimestamp");
  if (last == "<unknown>") last = first;
  auto integer = [](const json& o, const char* field) -> int64_t {
    auto it = o.find(field);
    return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  int64_t count = integer(e, v1 ? "deprecatedCount" : "count");
  if (auto series = e.find("series"); series != e.end() && series->is_object()) {
    last = Since(*series, "lastObservedTime");
    count = integer(*series, "count");
  } else if (count == 0) {
    count = 1;  // a singleton event of the new API carries no count
  }
  auto field = e.find(v1 ? "regarding" : "involvedObject");
  const json object = field != e.end() ? *field : json::object();
  std::string target = absl::AsciiStrToLower(Str(object, "kind"));
  if (!Str(object, "name").empty()) absl::StrAppend(&target, "/", Str(object, "name"));
  field = e.find(v1 ? "deprecatedSource" : "source");
  const json source = field != e.end() ? *field : json::object();
  std::string component = Str(source, "component");
  if (component.empty()) component = Str(e, "reportingController");
  if (component.empty()) component = Str(e, "reportingComponent");
  std::string instance = Str(source, "host");
  if (instance.empty()) instance = Str(e, "reportingInstance");
  return {last,
          Str(e, "type"),
          Str(e, "reason"),
          target,
          Str(object, "fieldPath"),
          instance.empty() ? component : absl::StrCat(component, ", ", instance),
          std::string(absl::StripAsciiWhitespace(Str(e, v1 ? "note" : "message"))),
          first,
          count,
          Str(e["metadata"], "name")};
}

std::vector<Column> BuiltinColumns(const ResourceType& type) {
  const std::string name_desc = "Name must be unique within a namespace.";
  if (auto storage = StorageTableColumns(type)) {
    std::vector<Column> columns;
    for (const PrinterColumn& c : *storage) {
      columns.push_back({c.name, c.type, c.format, c.description, c.priority});
    }
    return columns;
  }
  if (type.kind == "Pod") {
    return {{"Name", "string", "name", name_desc},
            {"Ready", "string", "", ""},
            {"Status", "string", "", ""},
            {"Restarts", "integer", "", ""},
            {"Age", "string", "", ""},
            {"IP", "string", "", "", 1},
            {"Node", "string", "", "", 1}};
  }
  if (type.kind == "Deployment") {
    return {{"Name", "string", "name", name_desc},
            {"Ready", "string", "", ""},
            {"Up-to-date", "integer", "", ""},
            {"Available", "integer", "", ""},
            {"Age", "string", "", ""}};
  }
  if (type.kind == "Service") {
    return {{"Name", "string", "name", name_desc}, {"Type", "string", "", ""},
            {"Cluster-IP", "string", "", ""},      {"External-IP", "string", "", ""},
            {"Port(s)", "string", "", ""},         {"Age", "string", "", ""}};
  }
  if (type.kind == "Namespace") {
    return {{"Name", "string", "name", name_desc},
            {"Status", "string", "", ""},
            {"Age", "string", "", ""}};
  }
  if (type.kind == "Event") {
    return {
        {"Last Seen", "string", "",
         "The time at which the most recent occurrence of this event was recorded."},
        {"Type", "string", "", "Type of this event (Normal, Warning)."},
        {"Reason", "string", "",
         "A short, machine understandable string that gives the reason for the transition "
         "into the object's current status."},
        {"Object", "string", "", "The object that this event is about."},
        {"Subobject", "string", "", "The piece of the object the event is about, if any.", 1},
        {"Source", "string", "", "The component reporting this event.", 1},
        {"Message", "string", "", "A human-readable description of the status of this operation."},
        {"First Seen", "string", "", "The time at which the event was first recorded.", 1},
        {"Count", "string", "", "The number of times this event has occurred.", 1},
        {"Name", "string", "name", name_desc, 1}};
  }
  if (type.kind == "Node") {
    return {
        {"Name", "string", "name", name_desc},
        {"Status", "string", "", "The status of the node"},
        {"Roles", "string", "", "The roles of the node"},
        {"Age", "string", "", ""},
        {"Version", "string", "", "Kubelet Version reported by the node."},
        {"Internal-IP", "string", "", "List of internal IPs (if any).", 1},
        {"External-IP", "string", "", "List of external IPs (if any).", 1},
        {"OS-Image", "string", "", "OS Image reported by the node.", 1},
        {"Kernel-Version", "string", "", "Kernel Version reported by the node.", 1},
        {"Container-Runtime", "string", "", "Container Runtime Version reported by the node.", 1}};
  }
  return {{"Name", "string", "name", name_desc}, {"Age", "string", "", ""}};
}

json BuiltinCells(const ResourceType& type, const json& o) {
  if (json cells = StorageTableCells(type, o, Age(o)); !cells.is_null()) return cells;
  if (type.kind == "Pod") return PodCells(o);
  if (type.kind == "Deployment") return DeploymentCells(o);
  if (type.kind == "Service") return ServiceCells(o);
  if (type.kind == "Node") return NodeCells(o);
  if (type.kind == "Event") return EventCells(o);
  if (type.kind == "Namespace") {
    return {o["metadata"]["name"], o.value("status", json::object()).value("phase", "Active"),
            Age(o)};
  }
  return {o["metadata"]["name"], Age(o)};
}

json CustomCell(const PrinterColumn& col, const json& object) {
  std::vector<json> values = EvalJsonPath(object, col.json_path);
  if (values.empty()) return nullptr;
  if (col.type == "date" && values[0].is_string()) {
    absl::Time t;
    std::string err;
    if (absl::ParseTime(absl::RFC3339_full, values[0].get<std::string>(), &t, &err)) {
      return HumanDuration(absl::Now() - t);
    }
  }
  if (values.size() == 1) return values[0];
  std::vector<std::string> parts;
  for (const auto& v : values) parts.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  return absl::StrJoin(parts, ",");
}

// Applies one "[...]" subscript to each current node.
std::vector<const json*> Subscript(const std::vector<const json*>& nodes, absl::string_view sub) {
  std::vector<const json*> out;
  for (const json* n : nodes) {
    if (!n->is_array()) continue;
    int64_t size = static_cast<int64_t>(n->size());
    if (sub == "*") {
      for (const auto& e : *n) out.push_back(&e);
      continue;
    }
    size_t colon = sub.find(':');
    int64_t start = 0, end = size;
    if (colon == absl::string_view::npos) {
      if (!absl::SimpleAtoi(sub, &start)) continue;
      if (start < 0) start += size;
      end = start + 1;
    } else {
      absl::string_view a = sub.substr(0, colon), b = sub.substr(colon + 1);
      if (!a.empty() && !absl::SimpleAtoi(a, &start)) continue;
      if (!b.empty() && !absl::SimpleAtoi(b, &end)) continue;
      if (start < 0) start += size;
      if (end < 0) end += size;
    }
    start = std::max<int64_t>(start, 0);
    end = std::min<int64_t>(end, size);
    for (int64_t i = start; i < end; ++i) out.push_back(&(*n)[i]);
  }
  return out;
}

}  // namespace

std::vector<json> EvalJsonPath(const json& object, absl::string_view path) {
  path = absl::StripSuffix(absl::StripPrefix(path, "{"), "}");
  std::vector<const json*> nodes = {&object};
  size_t i = 0;
  while (i < path.size() && !nodes.empty()) {
    if (path[i] == '.') {
      ++i;
      size_t end = path.find_first_of(".[", i);
      std::string key(path.substr(i, end == absl::string_view::npos ? path.size() - i : end - i));
      i = end == absl::string_view::npos ? path.size() : end;
      if (key.empty()) continue;
      std::vector<const json*> next;
      for (const json* n : nodes) {
        if (n->is_object() && n->contains(key)) next.push_back(&(*n)[key]);
      }
      nodes = std::move(next);
    } else if (path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == absl::string_view::npos) return {};
      nodes = Subscript(nodes, path.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      return {};
    }
  }
  std::vector<json> out;
  for (const json* n : nodes) out.push_back(*n);
  return out;
}

std::string HumanDuration(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 0) s = 0;
  if (s < 120) return absl::StrCat(s, "s");
  int64_t m = s / 60;
  if (m < 10) return s % 60 ? absl::StrCat(m, "m", s % 60, "s") : absl::StrCat(m, "m");
  if (m < 180) return absl::StrCat(m, "m");
  int64_t h = m / 60;
  if (h < 8) return m % 60 ? absl::StrCat(h, "h", m % 60, "m") : absl::StrCat(h, "h");
  if (h < 48) return absl::StrCat(h, "h");
  int64_t days = h / 24;
  if (days < 8) return h % 24 ? absl::StrCat(days, "d", h % 24, "h") : absl::StrCat(days, "d");
  if (days < 365 * 2) return absl::StrCat(days, "d");
  return absl::StrCat(days / 365, "y");
}

json ToTable(const ResourceType& type, const std::vector<json>& objects,
             const std::string& resource_version, const std::string& include_object) {
  json defs = json::array();
  std::vector<Column> columns;
  if (type.custom) {
    columns.push_back({"Name", "string", "name", "Name must be unique within a namespace."});
    std::vector<PrinterColumn> printer = type.columns;
    if (printer.empty()) printer.push_back({"Age", "date", "", "", ".metadata.creationTimestamp"});
    for (const auto& c : printer) {
      columns.push_back(
          {c.name, c.type, c.format,
           c.description.empty()
               ? "Custom resource definition column (in JSONPath format): " + c.json_path
               : c.description,
           c.priority});
    }
  } else {
    columns = BuiltinColumns(type);
  }
  for (const Column& c : columns) {
    defs.push_back({{"name", c.name},
                    {"type", c.type},
                    {"format", c.format},
                    {"description", c.description},
                    {"priority", c.priority}});
  }
  json rows = json::array();
  for (const json& o : objects) {
    json cells;
    if (type.custom) {
      cells = json::array({o["metadata"]["name"]});
      std::vector<PrinterColumn> printer = type.columns;
      if (printer.empty())
        printer.push_back({"Age", "date", "", "", ".metadata.creationTimestamp"});
      for (const auto& c : printer) cells.push_back(CustomCell(c, o));
    } else {
      cells = BuiltinCells(type, o);
    }
    json row = {{"cells", cells}};
    if (include_object == "Object") {
      row["object"] = o;
    } else if (include_object != "None") {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", o["metadata"]}};
    }
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", resource_version}}},
          {"columnDefinitions", defs},
          {"rows", rows}};
}

}  // namespace kubetrain::localkube
