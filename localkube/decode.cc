#include "localkube/decode.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/pod_validation.h"
#include "localkube/protobuf.h"
#include "operator/api/yaml.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The scheme every built-in kind is registered in, as kube-apiserver names it in errors.
constexpr char kScheme[] = "pkg/api/legacyscheme/scheme.go:30";

// Length of the UTF-8 sequence starting at `s[i]`, or 0 when it is not well formed (overlong
// forms, surrogates and code points past U+10FFFF included).
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// apiserver's summarizeData: the start of the body, as text when it looks like JSON.
std::string Summarize(absl::string_view body) {
  constexpr size_t kMax = 30;
  if (body.empty()) return "<empty>";
  absl::string_view head = body.substr(0, kMax);
  std::string text =
      body[0] == '{' && CheckUtf8(head).ok() ? std::string(head) : absl::BytesToHexString(head);
  return body.size() > kMax ? absl::StrCat(text, " ...") : text;
}

absl::Status Mismatch(const json& v, absl::string_view field, absl::string_view go_type) {
  return absl::InvalidArgumentError(absl::StrCat(
      "json: cannot unmarshal ", GoKind(v), " into Go struct field ", field, " of type ", go_type));
}

// `parent[key]` must decode as `go_type` (checked by `ok`); a null is Go's "leave unset".
template <typename Ok>
absl::Status CheckField(json& parent, const char* key, absl::string_view field,
                        absl::string_view go_type, Ok ok) {
  auto it = parent.find(key);
  if (it == parent.end()) return absl::OkStatus();
  if (it->is_null()) {
    parent.erase(it);
    return absl::OkStatus();
  }
  return ok(*it) ? absl::OkStatus() : Mismatch(*it, field, go_type);
}

absl::Status StringField(json& parent, const char* key, absl::string_view field,
                         absl::string_view go_type = "string") {
  return CheckField(parent, key, field, go_type, [](const json& v) { return v.is_string(); });
}

absl::Status IntField(json& parent, const char* key, absl::string_view field) {
  return CheckField(parent, key, field, "int64",
                    [](const json& v) { return v.is_number_integer(); });
}

absl::Status BoolField(json& parent, const char* key, absl::string_view field) {
  return CheckField(parent, key, field, "bool", [](const json& v) { return v.is_boolean(); });
}

// A map[string]<value_type> whose values arrive as JSON strings; null values decode as "".
absl::Status StringMap(json& parent, const char* key, absl::string_view field,
                       absl::string_view value_type) {
  auto it = parent.find(key);
  if (it == parent.end()) return absl::OkStatus();
  if (it->is_null()) {
    parent.erase(it);
    return absl::OkStatus();
  }
  if (!it->is_object()) return Mismatch(*it, field, absl::StrCat("map[string]", value_type));
  for (auto& [k, v] : it->items()) {
    if (v.is_null()) v = "";
    if (!v.is_string()) return Mismatch(v, field, value_type);
  }
  return absl::OkStatus();
}

absl::Status CheckObjectMeta(const ResourceType& type, json* object) {
  auto it = object->find("metadata");
  if (it == object->end()) return absl::OkStatus();
  if (it->is_null()) {
    object->erase(it);
    return absl::OkStatus();
  }
  if (!it->is_object()) {
    return Mismatch(*it, absl::StrCat(type.kind, ".metadata"), "v1.ObjectMeta");
  }
  json& meta = *it;
  for (const char* f : {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
                        "creationTimestamp", "deletionTimestamp"}) {
    RETURN_IF_ERROR(StringField(meta, f, absl::StrCat("ObjectMeta.metadata.", f)));
  }
  for (const char* f : {"generation", "deletionGracePeriodSeconds"}) {
    RETURN_IF_ERROR(IntField(meta, f, absl::StrCat("ObjectMeta.metadata.", f)));
  }
  for (const char* f : {"labels", "annotations"}) {
    RETURN_IF_ERROR(StringMap(meta, f, absl::StrCat("ObjectMeta.metadata.", f), "string"));
  }
  if (auto f = meta.find("finalizers"); f != meta.end() && !f->is_null()) {
    if (!f->is_array()) return Mismatch(*f, "ObjectMeta.metadata.finalizers", "[]string");
    for (const json& v : *f) {
      if (!v.is_string()) return Mismatch(v, "ObjectMeta.metadata.finalizers", "string");
    }
  }
  if (auto refs = meta.find("ownerReferences"); refs != meta.end() && !refs->is_null()) {
    if (!refs->is_array()) {
      return Mismatch(*refs, "ObjectMeta.metadata.ownerReferences", "[]v1.OwnerReference");
    }
    for (json& ref : *refs) {
      if (!ref.is_object()) {
        return Mismatch(ref, "ObjectMeta.metadata.ownerReferences", "v1.OwnerReference");
      }
      for (const char* f : {"apiVersion", "kind", "name", "uid"}) {
        RETURN_IF_ERROR(
            StringField(ref, f, absl::StrCat("OwnerReference.metadata.ownerReferences.", f)));
      }
      for (const char* f : {"controller", "blockOwnerDeletion"}) {
        RETURN_IF_ERROR(
            BoolField(ref, f, absl::StrCat("OwnerReference.metadata.ownerReferences.", f)));
      }
    }
  } else if (refs != meta.end()) {
    meta.erase(refs);
  }
  return absl::OkStatus();
}

// The Go package of a kind's internal type, as conversion errors print it ("core.ConfigMap").
std::string InternalType(const ResourceType& type) {
  std::string package = type.group.empty() ? "core" : type.group.substr(0, type.group.find('.'));
  return absl::StrCat(package, ".", type.kind);
}

}  // namespace

absl::Status CheckUtf8(absl::string_view body) {
  for (size_t i = 0; i < body.size();) {
    size_t n = Utf8SequenceLength(body, i);
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("invalid UTF-8 byte 0x%02X at offset %d",
                                                        static_cast<unsigned char>(body[i]), i));
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::Status CheckJsonText(absl::string_view body) {
  RETURN_IF_ERROR(CheckUtf8(body));
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid character '", std::string(1, c), "' exceeded max depth"));
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<json> DecodeJson(absl::string_view body) {
  if (absl::Status st = CheckJsonText(body); !st.ok()) return BadRequestError(st.message());
  try {
    return json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return BadRequestError(absl::StrCat("error decoding request body: ", e.what()));
  }
}

absl::Status CheckFieldTypes(const ResourceType& type, json* object) {
  RETURN_IF_ERROR(CheckObjectMeta(type, object));
  if (!type.group.empty() || type.custom) return absl::OkStatus();
  if (type.kind == "ConfigMap") {
    RETURN_IF_ERROR(StringMap(*object, "data", "ConfigMap.data", "string"));
    RETURN_IF_ERROR(StringMap(*object, "binaryData", "ConfigMap.binaryData", "[]uint8"));
  } else if (type.kind == "Secret") {
    RETURN_IF_ERROR(StringMap(*object, "data", "Secret.data", "[]uint8"));
    RETURN_IF_ERROR(StringMap(*object, "stringData", "Secret.stringData", "string"));
    RETURN_IF_ERROR(StringField(*object, "type", "Secret.type", "v1.SecretType"));
  } else if (type.kind == "Pod") {
    RETURN_IF_ERROR(CheckPodQuantities(object));
  }
  return absl::OkStatus();
}

absl::StatusOr<json> DecodeObject(const ResourceType& type, const Registry& registry,
                                  absl::string_view content_type, const std::string& body) {
  // Undecodable bodies: apiserver's transformDecodeError without a kind to name.
  auto unrecognized = [&](absl::string_view err) {
    return BadRequestError(absl::StrCat("the object provided is unrecognized (must be of type ",
                                        type.kind, "): ", err, " (", Summarize(body), ")"));
  };
  std::string ct = absl::AsciiStrToLower(content_type);
  json object = json::object();
  if (body.empty()) {
    // An empty body decodes as an empty object; admission names what is missing.
  } else if (absl::StrContains(ct, "protobuf")) {
    absl::StatusOr<json> decoded = DecodeK8sProtobuf(body);
    if (!decoded.ok()) return unrecognized(decoded.status().message());
    object = std::move(*decoded);
  } else if (absl::StrContains(ct, "yaml")) {
    if (absl::Status st = CheckUtf8(body); !st.ok()) {
      return unrecognized(absl::StrCat("error converting YAML to JSON: yaml: ", st.message()));
    }
    auto docs = api::ParseYamlDocuments(body);
    if (!docs.ok()) {
      return unrecognized(absl::StrCat("error converting YAML to JSON: ", docs.status().message()));
    }
    if (docs->size() != 1) {
      return unrecognized("error converting YAML to JSON: expected exactly one document");
    }
    object = std::move((*docs)[0]);
  } else {
    if (absl::Status st = CheckJsonText(body); !st.ok()) {
      return unrecognized(
          absl::StrCat("couldn't get version/kind; json parse error: ", st.message()));
    }
    try {
      object = json::parse(body);
    } catch (const json::exception& e) {
      return unrecognized(absl::StrCat("couldn't get version/kind; json parse error: ", e.what()));
    }
  }
  // Whatever a decoder let through must be servable: JSON output is UTF-8 only.
  try {
    (void)object.dump();
  } catch (const json::exception& e) {
    return unrecognized(e.what());
  }
  if (!object.is_object()) {
    return unrecognized(
        absl::StrCat("couldn't get version/kind; json parse error: json: cannot "
                     "unmarshal ",
                     GoKind(object), " into Go value of type struct"));
  }
  for (const char* f : {"apiVersion", "kind"}) {
    auto it = object.find(f);
    if (it != object.end() && !it->is_null() && !it->is_string()) {
      return unrecognized(absl::StrCat("couldn't get version/kind; json parse error: ",
                                       Mismatch(*it, absl::StrCat(".", f), "string").message()));
    }
  }
  // A missing kind or apiVersion is taken from the resource, as the apiserver's default GVK.
  std::string kind =
      object.value("kind", json()).is_string() ? object["kind"].get<std::string>() : "";
  std::string gv =
      object.value("apiVersion", json()).is_string() ? object["apiVersion"].get<std::string>() : "";
  if (kind.empty()) kind = type.kind;
  if (gv.empty()) gv = type.GroupVersion();
  std::string version = gv.substr(gv.rfind('/') + 1);
  auto cannot_handle = [&](absl::string_view err) {
    return BadRequestError(absl::StrCat(kind, " in version \"", version,
                                        "\" cannot be handled as a ", type.kind, ": ", err));
  };
  if (kind != type.kind || gv != type.GroupVersion()) {
    if (!registry.FindByKind(gv, kind)) {
      return cannot_handle(absl::StrCat("no kind \"", kind, "\" is registered for version \"", gv,
                                        "\" in scheme \"", kScheme, "\""));
    }
    if (kind != type.kind) {
      return cannot_handle(absl::StrCat("converting (", version, ".", kind, ") to (",
                                        InternalType(type), "): unknown conversion"));
    }
    return BadRequestError(absl::StrCat("the API version in the data (", gv,
                                        ") does not match the expected API version (",
                                        type.GroupVersion(), ")"));
  }
  if (absl::Status st = CheckFieldTypes(type, &object); !st.ok()) {
    return cannot_handle(st.message());
  }
  return object;
}

}  // namespace kubetrain::localkube
