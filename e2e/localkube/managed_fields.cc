#include "e2e/localkube/managed_fields.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "e2e/localkube/patch.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// A field path is its elements ("f:spec", "k:{\"name\":\"c\"}", "v:\"x\"") joined by '\0'; a
// set of fields is an ordered set of paths.
using FieldSet = std::set<std::string>;
constexpr char kSep = '\0';

std::string Join(const std::string& path, const std::string& element) {
  return path.empty() ? element : path + kSep + element;
}

// The schema of one node: a custom resource's structural schema, or the built-in rules (by the
// name of the field a list sits in) where there is none (built-in types, every metadata).
struct Shape {
  const json* schema = nullptr;
  bool custom = false;
  std::string field;

  bool root = false;

  Shape Child(const std::string& key) const {
    Shape child{nullptr, custom, key};
    if (!custom) return child;
    if (root && key == "metadata") {
      child.custom = false;  // ObjectMeta's rules
      return child;
    }
    if (schema == nullptr) return child;
    auto props = schema->find("properties");
    if (props != schema->end() && props->is_object() && props->contains(key)) {
      child.schema = &(*props)[key];
    } else if (auto extra = schema->find("additionalProperties");
               extra != schema->end() && extra->is_object()) {
      child.schema = &*extra;
    }
    // An unknown field of a custom resource keeps the custom rules: its lists are atomic.
    if (child.schema == nullptr) child.schema = &Empty();
    return child;
  }
  Shape Item() const {
    Shape item{nullptr, custom, field};
    if (custom && schema != nullptr) {
      auto items = schema->find("items");
      item.schema = items != schema->end() && items->is_object() ? &*items : &Empty();
    }
    return item;
  }
  static const json& Empty() {
    static const json kEmpty = json::object();
    return kEmpty;
  }
};

// How a list's items are told apart: by map keys (`k:`), by value (`v:`), or not at all.
struct ListRule {
  enum Kind { kAtomic, kMap, kSet } kind = kAtomic;
  std::vector<std::string> keys;
};

ListRule RuleFor(const Shape& shape, const json& list) {
  ListRule rule;
  if (shape.custom) {
    if (shape.schema == nullptr) return rule;
    std::string type = shape.schema->value("x-kubernetes-list-type", "");
    if (type == "set") rule.kind = ListRule::kSet;
    if (type == "map") {
      rule.kind = ListRule::kMap;
      for (const auto& k : shape.schema->value("x-kubernetes-list-map-keys", json::array())) {
        if (k.is_string()) rule.keys.push_back(k);
      }
      if (rule.keys.empty()) rule.kind = ListRule::kAtomic;
    }
    return rule;
  }
  if (shape.field == "finalizers") {
    rule.kind = ListRule::kSet;
    return rule;
  }
  std::string key = MergeKeyFor(shape.field, list);
  if (key.empty()) return rule;
  rule.kind = ListRule::kMap;
  rule.keys = {key};
  if (shape.field == "ports") rule.keys.push_back("protocol");
  return rule;
}

// The path element of each item, or false when the items do not fit the rule (a missing key,
// a duplicate): the list is then compared as one atomic field.
bool ItemElements(const ListRule& rule, const json& list, std::vector<std::string>* out) {
  std::set<std::string> seen;
  for (const json& item : list) {
    std::string element;
    if (rule.kind == ListRule::kSet) {
      if (item.is_object() || item.is_array()) return false;
      element = "v:" + item.dump();
    } else {
      if (!item.is_object()) return false;
      json key = json::object();
      for (const std::string& k : rule.keys) {
        if (item.contains(k)) key[k] = item[k];
      }
      if (!item.contains(rule.keys[0])) return false;
      element = "k:" + key.dump();
    }
    if (!seen.insert(element).second) return false;
    out->push_back(std::move(element));
  }
  return true;
}

// The list's items by path element; false when it is atomic.
bool ListItems(const Shape& shape, const json& list, std::map<std::string, const json*>* items) {
  ListRule rule = RuleFor(shape, list);
  if (rule.kind == ListRule::kAtomic) return false;
  std::vector<std::string> elements;
  if (!ItemElements(rule, list, &elements)) return false;
  for (size_t i = 0; i < elements.size(); ++i) (*items)[elements[i]] = &list[i];
  return true;
}

// Every node of `v` (itself included): what a write adds or removes with it.
void AllPaths(const json& v, const std::string& path, const Shape& shape, FieldSet* out) {
  if (!path.empty()) out->insert(path);
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      AllPaths(child, Join(path, "f:" + k), shape.Child(k), out);
    }
  } else if (v.is_array()) {
    std::map<std::string, const json*> items;
    if (!ListItems(shape, v, &items)) return;
    for (const auto& [element, item] : items) {
      AllPaths(*item, Join(path, element), shape.Item(), out);
    }
  }
}

struct Comparison {
  FieldSet added, modified, removed;
};

void Compare(const json* lhs, const json* rhs, const std::string& path, const Shape& shape,
             Comparison* out) {
  if (lhs == nullptr && rhs == nullptr) return;
  if (rhs == nullptr) return AllPaths(*lhs, path, shape, &out->removed);
  if (lhs == nullptr) return AllPaths(*rhs, path, shape, &out->added);
  if (lhs->is_object() && rhs->is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, _] : lhs->items()) keys.insert(k);
    for (const auto& [k, _] : rhs->items()) keys.insert(k);
    for (const std::string& k : keys) {
      auto l = lhs->find(k);
      auto r = rhs->find(k);
      Compare(l == lhs->end() ? nullptr : &*l, r == rhs->end() ? nullptr : &*r,
              Join(path, "f:" + k), shape.Child(k), out);
    }
    return;
  }
  if (lhs->is_array() && rhs->is_array()) {
    std::map<std::string, const json*> l, r;
    if (ListItems(shape, *lhs, &l) && ListItems(shape, *rhs, &r)) {
      std::set<std::string> elements;
      for (const auto& [e, _] : l) elements.insert(e);
      for (const auto& [e, _] : r) elements.insert(e);
      for (const std::string& e : elements) {
        auto li = l.find(e);
        auto ri = r.find(e);
        Compare(li == l.end() ? nullptr : li->second, ri == r.end() ? nullptr : ri->second,
                Join(path, e), shape.Item(), out);
      }
      return;
    }
  }
  if (*lhs != *rhs && !path.empty()) out->modified.insert(path);
}

// The fields an applied configuration sets: its leaves, empty maps, atomic lists, and each item
// of a keyed list (owned as a whole besides its fields).
void ConfigFields(const json& v, const std::string& path, const Shape& shape, FieldSet* out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, child] : v.items()) {
      ConfigFields(child, Join(path, "f:" + k), shape.Child(k), out);
    }
    return;
  }
  std::map<std::string, const json*> items;
  if (v.is_array() && ListItems(shape, v, &items)) {
    for (const auto& [element, item] : items) {
      std::string item_path = Join(path, element);
      out->insert(item_path);
      ConfigFields(*item, item_path, shape.Item(), out);
    }
    return;
  }
  if (!path.empty()) out->insert(path);
}

// What the comparison and the sets cover of an object: the fields the write's scope owns,
// without those the apiserver never tracks.
json Scoped(const ResourceType& type, const json& object, const std::string& subresource) {
  if (!object.is_object()) return json::object();
  if (subresource == "status") {
    json out = json::object();
    if (object.contains("status")) out["status"] = object["status"];
    return out;
  }
  json out = object;
  out.erase("apiVersion");
  out.erase("kind");
  if (type.status_subresource) out.erase("status");
  if (out.contains("metadata") && out["metadata"].is_object()) {
    for (const char* f : {"name", "namespace", "creationTimestamp", "selfLink", "uid",
                          "clusterName", "generation", "managedFields", "resourceVersion"}) {
      out["metadata"].erase(f);
    }
  }
  return out;
}

// What a create compares with: the built-in types' zero value holds metadata, spec and status
// (so they are not added as wholes); a custom resource's is empty.
json ZeroValue(const ResourceType& type, const std::string& subresource) {
  if (type.custom || subresource == "status") return json::object();
  return {{"metadata", json::object()}, {"spec", json::object()}, {"status", json::object()}};
}

FieldSet Without(FieldSet set, const FieldSet& remove) {
  for (const std::string& p : remove) set.erase(p);
  return set;
}

json ToFieldsV1(const FieldSet& set) {
  json root = json::object();
  auto node_of = [&](const std::string& path) {
    json* node = &root;
    for (absl::string_view e : absl::StrSplit(path, kSep)) {
      node = &(*node)[std::string(e)];
      if (!node->is_object()) *node = json::object();
    }
    return node;
  };
  for (const std::string& p : set) node_of(p);
  for (const std::string& p : set) {
    json* node = node_of(p);
    if (!node->empty()) (*node)["."] = json::object();
  }
  return root;
}

void FromFieldsV1(const json& node, const std::string& path, FieldSet* out) {
  if (!node.is_object()) return;
  for (const auto& [k, child] : node.items()) {
    if (k == ".") {
      if (!path.empty()) out->insert(path);
    } else if (child.is_object() && !child.empty()) {
      FromFieldsV1(child, Join(path, k), out);
    } else {
      out->insert(Join(path, k));
    }
  }
}

struct Entry {
  std::string manager, operation, api_version, subresource, time;
  FieldSet fields;

  // Apply entries are one per manager whatever the version; Update entries one per version.
  bool SameOwner(const Entry& o) const {
    return manager == o.manager && operation == o.operation && subresource == o.subresource &&
           (operation == "Apply" || api_version == o.api_version);
  }
  json ToJson() const {
    json e = {{"operation", operation},
              {"apiVersion", api_version},
              {"time", time},
              {"fieldsType", "FieldsV1"},
              {"fieldsV1", ToFieldsV1(fields)}};
    if (!manager.empty()) e["manager"] = manager;
    if (!subresource.empty()) e["subresource"] = subresource;
    return e;
  }
};

std::vector<Entry> EntriesOf(const json* object) {
  std::vector<Entry> out;
  if (object == nullptr || !object->contains("metadata")) return out;
  const json& meta = (*object)["metadata"];
  if (!meta.is_object() || !meta.contains("managedFields")) return out;
  for (const json& e : meta["managedFields"]) {
    if (!e.is_object()) continue;
    Entry entry{e.value("manager", ""), e.value("operation", ""), e.value("apiVersion", ""),
                e.value("subresource", ""), e.value("time", "")};
    FromFieldsV1(e.value("fieldsV1", json::object()), "", &entry.fields);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

std::string ManagerName(const std::string& field_manager, const std::string& user_agent) {
  if (!field_manager.empty()) return field_manager;
  std::string out;
  for (unsigned char c : user_agent.substr(0, user_agent.find('/'))) {
    if (out.size() >= 128) break;
    if (c < 0x20 || c == 0x7f) continue;
    out.push_back(static_cast<char>(c));
  }
  return out;
}

void RecordManagedFields(const ResourceType& type, const json* live, json* object,
                         const FieldWrite& write) {
  const Shape root{type.custom && type.schema.is_object() ? &type.schema : nullptr, type.custom, "",
                   true};
  json before = live ? Scoped(type, *live, write.subresource) : ZeroValue(type, write.subresource);
  json after = Scoped(type, *object, write.subresource);
  Comparison diff;
  Compare(&before, &after, "", root, &diff);
  // metadata itself is never owned, only what is inside it.
  for (FieldSet* s : {&diff.added, &diff.modified, &diff.removed}) s->erase("f:metadata");
  FieldSet changed = diff.added;
  changed.insert(diff.modified.begin(), diff.modified.end());

  std::vector<Entry> entries = EntriesOf(live);
  Entry writer{write.manager, write.operation, write.api_version, write.subresource, write.time};
  auto mine = std::find_if(entries.begin(), entries.end(),
                           [&](const Entry& e) { return e.SameOwner(writer); });
  FieldSet previous;
  std::string previous_time, previous_version;
  if (mine != entries.end()) {
    previous = std::move(mine->fields);
    previous_time = mine->time;
    previous_version = mine->api_version;
    entries.erase(mine);
  }
  if (write.applied != nullptr) {
    ConfigFields(Scoped(type, *write.applied, write.subresource), "", root, &writer.fields);
    writer.fields.erase("f:metadata");
  } else {
    writer.fields = Without(previous, diff.removed);
    writer.fields.insert(changed.begin(), changed.end());
  }
  for (Entry& e : entries) e.fields = Without(Without(std::move(e.fields), changed), diff.removed);
  bool unchanged = changed.empty() && diff.removed.empty() && writer.fields == previous &&
                   previous_version == writer.api_version && !previous_time.empty();
  if (unchanged) writer.time = previous_time;
  entries.push_back(std::move(writer));
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const Entry& e) { return e.fields.empty(); }),
                entries.end());
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.operation, a.time, a.manager, a.api_version, a.subresource) <
           std::tie(b.operation, b.time, b.manager, b.api_version, b.subresource);
  });
  json& meta = (*object)["metadata"];
  if (entries.empty()) {
    meta.erase("managedFields");
    return;
  }
  json out = json::array();
  for (const Entry& e : entries) out.push_back(e.ToJson());
  meta["managedFields"] = std::move(out);
}

}  // namespace kubetrain::localkube
