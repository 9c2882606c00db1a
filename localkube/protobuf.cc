#include "localkube/protobuf.h"

#include <cstdint>
#include <functional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// Walks the fields of one message, calling `on_field(number, wire_type, varint, bytes)`.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}

  bool Next(int* field, int* wire, uint64_t* varint, absl::string_view* bytes) {
    if (pos_ >= data_.size()) return false;
    uint64_t tag;
    if (!Varint(&tag)) return false;
    *field = static_cast<int>(tag >> 3);
    *wire = static_cast<int>(tag & 7);
    switch (*wire) {
      case 0:
        return Varint(varint);
      case 1:
        return Skip(8);
      case 2: {
        uint64_t len;
        if (!Varint(&len) || pos_ + len > data_.size()) return false;
        *bytes = data_.substr(pos_, len);
        pos_ += len;
        return true;
      }
      case 5:
        return Skip(4);
      default:
        return false;
    }
  }

 private:
  bool Varint(uint64_t* out) {
    *out = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool Skip(size_t n) {
    if (pos_ + n > data_.size()) return false;
    pos_ += n;
    return true;
  }

  absl::string_view data_;
  size_t pos_ = 0;
};

using Handler = std::function<void(int field, uint64_t varint, absl::string_view bytes)>;

bool Walk(absl::string_view message, const Handler& handle) {
  Reader r(message);
  int field, wire;
  uint64_t varint = 0;
  absl::string_view bytes;
  while (r.Next(&field, &wire, &varint, &bytes)) handle(field, varint, bytes);
  return true;
}

// map<string, string|bytes> entry: key = 1, value = 2.
void MapEntry(absl::string_view entry, json* map, bool base64) {
  std::string key, value;
  Walk(entry, [&](int f, uint64_t, absl::string_view b) {
    if (f == 1) key = std::string(b);
    if (f == 2) value = std::string(b);
  });
  (*map)[key] = base64 ? absl::Base64Escape(value) : value;
}

json ObjectMeta(absl::string_view message) {
  json meta = json::object();
  Walk(message, [&](int f, uint64_t, absl::string_view b) {
    switch (f) {
      case 1:
      case 2:
      case 3:
        // proto2 writes empty strings too; JSON omits them, and so do we.
        if (!b.empty())
          meta[f == 1 ? "name" : f == 2 ? "generateName" : "namespace"] = std::string(b);
        break;
      case 11:
        MapEntry(b, &meta["labels"], false);
        break;
      case 12:
        MapEntry(b, &meta["annotations"], false);
        break;
      case 14:
        meta["finalizers"].push_back(std::string(b));
        break;
      default:
        break;
    }
  });
  return meta;
}

}  // namespace

absl::StatusOr<json> DecodeK8sProtobuf(absl::string_view body) {
  static constexpr absl::string_view kMagic("k8s\0", 4);
  if (body.substr(0, 4) != kMagic) return absl::InvalidArgumentError("not a protobuf body");
  std::string api_version, kind;
  absl::string_view raw;
  Walk(body.substr(4), [&](int f, uint64_t, absl::string_view b) {
    if (f == 1) {
      Walk(b, [&](int tf, uint64_t, absl::string_view tb) {
        if (tf == 1) api_version = std::string(tb);
        if (tf == 2) kind = std::string(tb);
      });
    }
    if (f == 2) raw = b;
  });
  json object = {{"apiVersion", api_version}, {"kind", kind}};
  if (kind == "DeleteOptions") {
    Walk(raw, [&](int f, uint64_t varint, absl::string_view b) {
      if (f == 1) object["gracePeriodSeconds"] = static_cast<int64_t>(varint);
      if (f == 3) object["orphanDependents"] = varint != 0;
      if (f == 4) object["propagationPolicy"] = std::string(b);
      if (f == 5) object["dryRun"].push_back(std::string(b));
    });
    return object;
  }
  bool known =
      kind == "Namespace" || kind == "ConfigMap" || kind == "Secret" || kind == "ServiceAccount";
  if (api_version != "v1" || !known) {
    return absl::UnimplementedError(absl::StrCat("protobuf body for ", kind, " not supported"));
  }
  Walk(raw, [&](int f, uint64_t varint, absl::string_view b) {
    if (f == 1) {
      object["metadata"] = ObjectMeta(b);
    } else if (kind == "ConfigMap" && f == 2) {
      MapEntry(b, &object["data"], false);
    } else if (kind == "ConfigMap" && f == 3) {
      MapEntry(b, &object["binaryData"], true);
    } else if (kind == "Secret" && f == 2) {
      MapEntry(b, &object["data"], true);
    } else if (kind == "Secret" && f == 3) {
      object["type"] = std::string(b);
    } else if ((kind == "Secret" && f == 5) || (kind == "ConfigMap" && f == 4)) {
      object["immutable"] = varint != 0;
    }
  });
  return object;
}

}  // namespace kubetrain::localkube
