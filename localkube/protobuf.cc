#include "localkube/protobuf.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "localkube/decode.h"
#include "localkube/protobuf_schema.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;
using pb::Field;
using pb::Message;

constexpr absl::string_view kMagic("k8s\0", 4);
// metav1.Time's JSON range (RFC 3339 years 0001-9999); the first second is Go's zero time,
// which JSON writes as null.
constexpr int64_t kMinSeconds = -62135596800;
constexpr int64_t kMaxSeconds = 253402300799;

// One field as read off the wire: a varint (wire type 0) or length-delimited bytes (2). Fixed
// 32/64-bit values are skipped (no Kubernetes field uses them).
struct WireField {
  int number;
  int wire;
  uint64_t varint = 0;
  absl::string_view bytes;
};

const char* WireName(int wire) {
  switch (wire) {
    case 0:
      return "varint";
    case 1:
      return "fixed64";
    case 2:
      return "length-delimited";
    case 5:
      return "fixed32";
    default:
      return "group";
  }
}

bool ReadVarint(absl::string_view data, size_t* pos, uint64_t* out) {
  *out = 0;
  for (int shift = 0; shift < 64 && *pos < data.size(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(data[(*pos)++]);
    *out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Reads every field of one message in order; the first fault ends it with its description.
// `fault` words the reader's own errors (where the caller is).
absl::Status ForEachField(absl::string_view data,
                          absl::FunctionRef<absl::Status(const WireField&)> visit,
                          absl::FunctionRef<absl::Status(absl::string_view)> fault) {
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t start = pos;
    uint64_t tag;
    if (!ReadVarint(data, &pos, &tag)) {
      return fault(absl::StrCat("truncated field tag at byte ", start));
    }
    WireField f{static_cast<int>(tag >> 3), static_cast<int>(tag & 7)};
    if (tag >> 3 == 0 || tag >> 3 > 536870911) {
      return fault(absl::StrCat("invalid field number ", tag >> 3, " at byte ", start));
    }
    const auto truncated = [&](absl::string_view what) {
      return fault(absl::StrCat("field ", f.number, ": truncated ", what, " at byte ", start));
    };
    switch (f.wire) {
      case 0:
        if (!ReadVarint(data, &pos, &f.varint)) return truncated("varint");
        break;
      case 1:
      case 5: {
        const size_t n = f.wire == 1 ? 8 : 4;
        if (data.size() - pos < n) return truncated(WireName(f.wire));
        pos += n;
        break;
      }
      case 2: {
        uint64_t len;
        if (!ReadVarint(data, &pos, &len)) return truncated("length");
        if (len > data.size() - pos) {
          return fault(absl::StrCat("field ", f.number, ": length ", len, " at byte ", start,
                                    " runs past the end of the message (", data.size() - pos,
                                    " left)"));
        }
        f.bytes = data.substr(pos, len);
        pos += len;
        break;
      }
      default:
        return fault(absl::StrCat("field ", f.number, ": wire type ", f.wire, " at byte ", start,
                                  " is not supported"));
    }
    if (absl::Status st = visit(f); !st.ok()) return st;
  }
  return absl::OkStatus();
}

bool IsZero(const json& v) {
  return (v.is_string() && v.get_ref<const std::string&>().empty()) ||
         (v.is_number() && v.get<int64_t>() == 0) || (v.is_boolean() && !v.get<bool>());
}

// Decodes messages by the schema into JSON, tracking the field path for its errors.
class Decoder {
 public:
  absl::Status Object(const Message& m, absl::string_view data, int depth, json* out) {
    if (depth > kMaxProtobufDepth) {
      return Fault(absl::StrCat("nested deeper than ", kMaxProtobufDepth));
    }
    return Fields(data, [&](const WireField& w) -> absl::Status {
      for (const Field& f : m.fields) {
        if (f.number == w.number) return OneField(f, w, depth, out);
      }
      return absl::OkStatus();  // unknown: skipped
    });
  }

 private:
  absl::Status Fault(absl::string_view what) const {
    return absl::InvalidArgumentError(path_.empty() ? std::string(what)
                                                    : absl::StrCat(path_, ": ", what));
  }
  // Reads the fields of one message at the current path.
  absl::Status Fields(absl::string_view data,
                      absl::FunctionRef<absl::Status(const WireField&)> visit) const {
    return ForEachField(data, visit, [this](absl::string_view what) { return Fault(what); });
  }
  absl::Status Count() {
    if (++values_ > kMaxProtobufValues) {
      return Fault(absl::StrCat("more than ", kMaxProtobufValues, " values in one body"));
    }
    return absl::OkStatus();
  }

  // Appends `.name` or `[i]` to the path for the life of the object.
  class Step {
   public:
    Step(std::string* path, absl::string_view part) : path_(path), size_(path->size()) {
      if (part.empty()) return;
      if (!path->empty() && part[0] != '[') path->push_back('.');
      path->append(part.data(), part.size());
    }
    ~Step() { path_->resize(size_); }

   private:
    std::string* path_;
    size_t size_;
  };

  absl::Status OneField(const Field& f, const WireField& w, int depth, json* out) {
    Step step(&path_, f.name);
    const bool length_delimited = f.type != pb::kInt && f.type != pb::kBool;
    const bool packed = !length_delimited && (f.flags & pb::kRepeated) && w.wire == 2;
    if (w.wire != (length_delimited ? 2 : 0) && !packed) {
      return Fault(absl::StrCat("field ", f.number, " has wire type ", WireName(w.wire), ", want ",
                                length_delimited ? "length-delimited" : "varint"));
    }
    if (f.flags & pb::kInline) return Object(*f.message, w.bytes, depth + 1, out);
    if (f.type == pb::kStringMap || f.type == pb::kBytesMap || f.type == pb::kMessageMap) {
      json& map = (*out)[f.name];
      if (!map.is_object()) map = json::object();
      return MapEntry(f, w.bytes, depth, &map);
    }
    if (packed) {
      size_t pos = 0;
      while (pos < w.bytes.size()) {
        uint64_t v;
        if (!ReadVarint(w.bytes, &pos, &v)) return Fault("truncated packed varint");
        RETURN_IF_ERROR(Append(f, Scalar(f, v), out));
      }
      return absl::OkStatus();
    }
    json value;
    if (f.type == pb::kMessage) {
      if (f.message->special != pb::Special::kNone) {
        RETURN_IF_ERROR(SpecialValue(*f.message, w.bytes, &value));
        if (value.is_null()) return absl::OkStatus();  // a zero Time: JSON null, left out
      } else if (f.flags & pb::kRepeated) {
        (*out)[f.name].push_back(json::object());
        Step index(&path_, absl::StrCat("[", (*out)[f.name].size() - 1, "]"));
        RETURN_IF_ERROR(Count());
        return Object(*f.message, w.bytes, depth + 1, &(*out)[f.name].back());
      } else {
        // A message seen twice merges, as proto merges it.
        json& slot = (*out)[f.name];
        if (!slot.is_object()) slot = json::object();
        RETURN_IF_ERROR(Count());
        return Object(*f.message, w.bytes, depth + 1, &slot);
      }
    } else if (f.type == pb::kString) {
      RETURN_IF_ERROR(Utf8(w.bytes));
      value = std::string(w.bytes);
    } else if (f.type == pb::kBytes) {
      value = absl::Base64Escape(w.bytes);
    } else {
      value = Scalar(f, w.varint);
    }
    if (f.flags & pb::kRepeated) return Append(f, std::move(value), out);
    if (IsZero(value) && !(f.flags & pb::kKeepZero)) {
      out->erase(f.name);  // the last value wins, and a zero one is left out
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(Count());
    (*out)[f.name] = std::move(value);
    return absl::OkStatus();
  }

  static json Scalar(const Field& f, uint64_t v) {
    if (f.type == pb::kBool) return v != 0;
    return static_cast<int64_t>(v);
  }

  absl::Status Append(const Field& f, json value, json* out) {
    RETURN_IF_ERROR(Count());
    (*out)[f.name].push_back(std::move(value));
    return absl::OkStatus();
  }

  absl::Status Utf8(absl::string_view s) const {
    if (absl::Status st = CheckUtf8(s); !st.ok()) return Fault(st.message());
    return absl::OkStatus();
  }

  // One map entry (key = 1, value = 2) into `map`.
  absl::Status MapEntry(const Field& f, absl::string_view entry, int depth, json* map) {
    absl::string_view key, value;
    bool has_value = false;
    RETURN_IF_ERROR(Fields(entry, [&](const WireField& w) -> absl::Status {
      if (w.number != 1 && w.number != 2) return absl::OkStatus();
      if (w.wire != 2) {
        return Fault(absl::StrCat("map entry field ", w.number, " has wire type ", WireName(w.wire),
                                  ", want length-delimited"));
      }
      (w.number == 1 ? key : value) = w.bytes;
      has_value |= w.number == 2;
      return absl::OkStatus();
    }));
    RETURN_IF_ERROR(Utf8(key));
    Step step(&path_, absl::StrCat("[", key.substr(0, 64), "]"));
    RETURN_IF_ERROR(Count());
    json& slot = (*map)[std::string(key)];
    if (f.type == pb::kStringMap) {
      RETURN_IF_ERROR(Utf8(value));
      slot = std::string(value);
    } else if (f.type == pb::kBytesMap) {
      slot = absl::Base64Escape(value);
    } else if (f.message->special != pb::Special::kNone) {
      RETURN_IF_ERROR(SpecialValue(*f.message, value, &slot));
    } else {
      slot = json::object();
      if (has_value) return Object(*f.message, value, depth + 1, &slot);
    }
    return absl::OkStatus();
  }

  // The messages that are a string, a number or a timestamp in JSON.
  absl::Status SpecialValue(const Message& m, absl::string_view data, json* out) {
    int64_t number[4] = {0, 0, 0, 0};
    absl::string_view text[4];
    std::vector<absl::string_view> items;  // kStringList
    RETURN_IF_ERROR(Fields(data, [&](const WireField& w) -> absl::Status {
      if (w.number > 3) return absl::OkStatus();
      const bool is_text = (m.special == pb::Special::kQuantity && w.number == 1) ||
                           (m.special == pb::Special::kIntOrString && w.number == 3) ||
                           m.special == pb::Special::kRawJson ||
                           m.special == pb::Special::kStringList;
      if (w.wire != (is_text ? 2 : 0)) {
        return Fault(absl::StrCat(m.name, " field ", w.number, " has wire type ", WireName(w.wire),
                                  ", want ", is_text ? "length-delimited" : "varint"));
      }
      number[w.number] = static_cast<int64_t>(w.varint);
      text[w.number] = w.bytes;
      if (m.special == pb::Special::kStringList && w.number == 1) {
        RETURN_IF_ERROR(Count());
        items.push_back(w.bytes);
      }
      return absl::OkStatus();
    }));
    RETURN_IF_ERROR(Count());
    switch (m.special) {
      case pb::Special::kQuantity:
        RETURN_IF_ERROR(Utf8(text[1]));
        *out = text[1].empty() ? "0" : std::string(text[1]);
        break;
      case pb::Special::kIntOrString:
        if (number[1] == 0) {
          *out = static_cast<int32_t>(number[2]);
        } else if (number[1] == 1) {
          RETURN_IF_ERROR(Utf8(text[3]));
          *out = std::string(text[3]);
        } else {
          return Fault(
              absl::StrCat("IntOrString type ", number[1], ": want 0 (int) or 1 (string)"));
        }
        break;
      case pb::Special::kTime:
        if (data.empty() || number[1] == kMinSeconds) {
          *out = nullptr;
        } else if (number[1] < kMinSeconds || number[1] > kMaxSeconds) {
          return Fault(
              absl::StrCat("Time seconds ", number[1], " is outside years 0001-9999 (RFC 3339)"));
        } else {
          *out = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(number[1]),
                                  absl::UTCTimeZone());
        }
        break;
      case pb::Special::kRawJson: {
        if (text[1].empty()) {
          *out = nullptr;
          break;
        }
        if (absl::Status st = CheckJsonText(text[1]); !st.ok()) return Fault(st.message());
        *out = json::parse(text[1], nullptr, /*allow_exceptions=*/false);
        if (out->is_discarded()) return Fault("raw JSON does not parse");
        break;
      }
      case pb::Special::kStringList:
        *out = json::array();
        for (absl::string_view item : items) {
          RETURN_IF_ERROR(Utf8(item));
          out->push_back(std::string(item));
        }
        break;
      case pb::Special::kNone:
        break;
    }
    return absl::OkStatus();
  }

  std::string path_;
  size_t values_ = 0;
};

// runtime.Unknown: typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2.
absl::Status ReadEnvelope(absl::string_view body, ProtobufType* type, absl::string_view* raw) {
  if (!absl::ConsumePrefix(&body, kMagic)) {
    return absl::InvalidArgumentError(
        "the body does not start with the Kubernetes protobuf magic \"k8s\\x00\"");
  }
  const auto fault = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("envelope (runtime.Unknown): ", what));
  };
  RETURN_IF_ERROR(ForEachField(
      body,
      [&](const WireField& w) -> absl::Status {
        if (w.number == 2 && w.wire == 2) *raw = w.bytes;
        if (w.number != 1 || w.wire != 2) return absl::OkStatus();
        return ForEachField(
            w.bytes,
            [&](const WireField& t) -> absl::Status {
              if ((t.number == 1 || t.number == 2) && t.wire == 2) {
                if (absl::Status st = CheckUtf8(t.bytes); !st.ok()) return fault(st.message());
                (t.number == 1 ? type->api_version : type->kind) = std::string(t.bytes);
              }
              return absl::OkStatus();
            },
            fault);
      },
      fault));
  if (type->api_version.empty() || type->kind.empty()) {
    return fault("no apiVersion and kind (typeMeta, field 1)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProtobufType> PeekK8sProtobuf(absl::string_view body) {
  ProtobufType type;
  absl::string_view raw;
  RETURN_IF_ERROR(ReadEnvelope(body, &type, &raw));
  return type;
}

bool K8sProtobufDecodable(absl::string_view body) {
  absl::StatusOr<ProtobufType> type = PeekK8sProtobuf(body);
  return !type.ok() || pb::KindSchema(type->api_version, type->kind) != nullptr;
}

absl::StatusOr<json> DecodeK8sProtobuf(absl::string_view body) {
  ProtobufType type;
  absl::string_view raw;
  RETURN_IF_ERROR(ReadEnvelope(body, &type, &raw));
  const Message* schema = pb::KindSchema(type.api_version, type.kind);
  if (schema == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("protobuf body for ", type.api_version, " ", type.kind, " is not supported"));
  }
  json object = json::object();
  Decoder decoder;
  if (absl::Status st = decoder.Object(*schema, raw, 0, &object); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(type.kind, " ", st.message()));
  }
  object["apiVersion"] = type.api_version;
  object["kind"] = type.kind;
  return object;
}

}  // namespace kubetrain::localkube
