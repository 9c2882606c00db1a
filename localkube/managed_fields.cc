#include "localkube/managed_fields.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "localkube/patch.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// A set of field paths as a tree, as structured-merge-diff's fieldpath.Set is: each node is one
// path element ("f:spec", "k:{\"name\":\"c\"}", "v:\"x\""), marked when the path ending there is
// in the set. A tree keeps the set of a deeply nested object linear in its size; whole paths as
// strings would repeat every prefix (10000 levels: 200 MB for a 40 KB request).
// Kept pruned: no node is both unmarked and childless, so empty() and == compare sets.
struct FieldSet {
  bool member = false;
  std::map<std::string, FieldSet> children;

  bool empty() const { return !member && children.empty(); }
  bool operator==(const FieldSet&) const = default;

  FieldSet* Child(const std::string& element) { return &children[element]; }
  void Prune() {
    for (auto it = children.begin(); it != children.end();) {
      it->second.Prune();
      it = it->second.empty() ? children.erase(it) : std::next(it);
    }
  }
  // Adds every path of `other`.
  void Insert(const FieldSet& other) {
    member = member || other.member;
    for (const auto& [e, child] : other.children) children[e].Insert(child);
  }
  // Removes every path of `other`.
  void Remove(const FieldSet& other) {
    if (other.member) member = false;
    for (const auto& [e, child] : other.children) {
      auto it = children.find(e);
      if (it == children.end()) continue;
      it->second.Remove(child);
      if (it->second.empty()) children.erase(it);
    }
  }
  // Removes the one-element path `element`, keeping the paths below it.
  void RemoveTop(const std::string& element) {
    auto it = children.find(element);
    if (it == children.end()) return;
    it->second.member = false;
    if (it->second.empty()) children.erase(it);
  }
};

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

// Every node of `v` (itself included unless it is the root) into `node`, the set's node at v.
void AllPaths(const json& v, FieldSet* node, bool root, const Shape& shape) {
  if (!root) node->member = true;
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      AllPaths(child, node->Child("f:" + k), false, shape.Child(k));
    }
  } else if (v.is_array()) {
    std::map<std::string, const json*> items;
    if (!ListItems(shape, v, &items)) return;
    for (const auto& [element, item] : items) {
      AllPaths(*item, node->Child(element), false, shape.Item());
    }
  }
}

struct Comparison {
  FieldSet added, modified, removed;
};

// The three sets' nodes at one path of a comparison.
struct CompareAt {
  FieldSet *added, *modified, *removed;
  CompareAt Child(const std::string& element) const {
    return {added->Child(element), modified->Child(element), removed->Child(element)};
  }
};

// Compares below one path; `root` marks the document itself, which is never a member. The nodes
// it walks through are created on the way down: the caller prunes the sets once.
void Compare(const json* lhs, const json* rhs, const CompareAt& at, bool root, const Shape& shape) {
  if (lhs == nullptr && rhs == nullptr) return;
  if (rhs == nullptr) return AllPaths(*lhs, at.removed, root, shape);
  if (lhs == nullptr) return AllPaths(*rhs, at.added, root, shape);
  if (lhs->is_object() && rhs->is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, _] : lhs->items()) keys.insert(k);
    for (const auto& [k, _] : rhs->items()) keys.insert(k);
    for (const std::string& k : keys) {
      auto l = lhs->find(k);
      auto r = rhs->find(k);
      Compare(l == lhs->end() ? nullptr : &*l, r == rhs->end() ? nullptr : &*r, at.Child("f:" + k),
              false, shape.Child(k));
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
                at.Child(e), false, shape.Item());
      }
      return;
    }
  }
  if (*lhs != *rhs && !root) at.modified->member = true;
}

// The fields an applied configuration sets: its leaves, empty maps, atomic lists, and each item
// of a keyed list (owned as a whole besides its fields).
void ConfigFields(const json& v, FieldSet* node, bool root, const Shape& shape) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, child] : v.items()) {
      ConfigFields(child, node->Child("f:" + k), false, shape.Child(k));
    }
    return;
  }
  std::map<std::string, const json*> items;
  if (v.is_array() && ListItems(shape, v, &items)) {
    for (const auto& [element, item] : items) {
      FieldSet* item_node = node->Child(element);
      item_node->member = true;
      ConfigFields(*item, item_node, false, shape.Item());
    }
    return;
  }
  if (!root) node->member = true;
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

json ToFieldsV1(const FieldSet& set) {
  json out = json::object();
  for (const auto& [element, child] : set.children) {
    json node = ToFieldsV1(child);
    if (child.member && !child.children.empty()) node["."] = json::object();
    out[element] = std::move(node);
  }
  return out;
}

void FromFieldsV1(const json& node, FieldSet* out, bool root) {
  if (!node.is_object()) return;
  for (const auto& [k, child] : node.items()) {
    if (k == ".") {
      if (!root) out->member = true;
    } else if (child.is_object() && !child.empty()) {
      FromFieldsV1(child, out->Child(k), false);
    } else {
      out->Child(k)->member = true;
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
    FromFieldsV1(e.value("fieldsV1", json::object()), &entry.fields, true);
    entry.fields.Prune();
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
  Compare(&before, &after, {&diff.added, &diff.modified, &diff.removed}, true, root);
  // metadata itself is never owned, only what is inside it.
  for (FieldSet* s : {&diff.added, &diff.modified, &diff.removed}) {
    s->Prune();
    s->RemoveTop("f:metadata");
  }
  FieldSet changed = diff.added;
  changed.Insert(diff.modified);

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
    ConfigFields(Scoped(type, *write.applied, write.subresource), &writer.fields, true, root);
    writer.fields.Prune();
    writer.fields.RemoveTop("f:metadata");
  } else {
    writer.fields = previous;
    writer.fields.Remove(diff.removed);
    writer.fields.Insert(changed);
  }
  for (Entry& e : entries) {
    e.fields.Remove(changed);
    e.fields.Remove(diff.removed);
  }
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
