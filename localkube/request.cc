// Request parsing and replies shared by the server's handlers (see request.h).
#include "localkube/request.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "localkube/decode.h"
#include "localkube/errors.h"
#include "localkube/protobuf.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

bool ParseBool(const std::string& v) {
  return v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True";
}

std::string Param(const httplib::Request& req, const char* name) {
  return req.has_param(name) ? req.get_param_value(name) : "";
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), kJson);
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  json body = StatusBody(status);
  Reply(res, body.value("code", 500), body);
}

bool WantsTable(const httplib::Request& req) {
  return absl::StrContains(req.get_header_value("Accept"), "as=Table");
}

ParsedPath SplitApiPath(const std::string& path) {
  ParsedPath p;
  std::vector<std::string> segs = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (segs.size() >= 2 && segs[0] == "api") {
    p.version = segs[1];
    p.rest.assign(segs.begin() + 2, segs.end());
    p.ok = true;
  } else if (segs.size() >= 3 && segs[0] == "apis") {
    p.group = segs[1];
    p.version = segs[2];
    p.rest.assign(segs.begin() + 3, segs.end());
    p.ok = true;
  }
  return p;
}

absl::StatusOr<int64_t> IntParam(const httplib::Request& req, const char* name, int64_t absent) {
  const std::string v = Param(req, name);
  if (v.empty()) return absent;
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) {
    return BadRequestError(absl::StrCat("invalid query parameter ", name, ": strconv.ParseInt: ",
                                        "parsing \"", absl::CHexEscape(v), "\": invalid syntax"));
  }
  return n;
}

WriteOptions WriteOptionsOf(const httplib::Request& req) {
  WriteOptions o;
  o.dry_run = req.has_param("dryRun");
  o.field_manager = Param(req, "fieldManager");
  o.user_agent = req.get_header_value("User-Agent");  // the manager when fieldManager is absent
  o.force = ParseBool(Param(req, "force"));
  std::string v = Param(req, "fieldValidation");
  o.field_validation = v.empty() ? "Warn" : v;
  return o;
}

// The apiserver's versioner: strconv.ParseUint on anything but "" and "0".
absl::StatusOr<int64_t> ParseResourceVersion(const std::string& rv) {
  if (rv.empty() || rv == "0") return 0;
  auto invalid = [&](absl::string_view why) {
    std::string quoted = absl::StrCat("\"", absl::CHexEscape(rv), "\"");
    return BadRequestError(
        absl::StrCat("invalid resource version: resourceVersion: Invalid value: ", quoted,
                     ": strconv.ParseUint: parsing ", quoted, ": ", why));
  };
  if (!std::all_of(rv.begin(), rv.end(), absl::ascii_isdigit)) return invalid("invalid syntax");
  uint64_t v = 0;
  if (!absl::SimpleAtoi(rv, &v)) return invalid("value out of range");
  return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
}

absl::StatusOr<ListOptions> ListOptionsOf(const httplib::Request& req) {
  ListOptions o;
  ASSIGN_OR_RETURN(o.resource_version, ParseResourceVersion(Param(req, "resourceVersion")));
  ASSIGN_OR_RETURN(o.labels, LabelSelector::Parse(Param(req, "labelSelector")));
  ASSIGN_OR_RETURN(o.fields, FieldSelector::Parse(Param(req, "fieldSelector")));
  ASSIGN_OR_RETURN(o.limit, IntParam(req, "limit", 0));
  o.continue_token = Param(req, "continue");
  return o;
}

absl::StatusOr<DeleteOptions> DeleteOptionsOf(const httplib::Request& req) {
  DeleteOptions o;
  json body = json::object();
  if (!req.body.empty() && absl::StrContains(req.get_header_value("Content-Type"), "protobuf")) {
    ASSIGN_OR_RETURN(body, DecodeK8sProtobuf(req.body));
  } else if (!req.body.empty()) {
    ASSIGN_OR_RETURN(body, DecodeJson(req.body));
  }
  o.propagation = body.value("propagationPolicy", Param(req, "propagationPolicy"));
  if (body.value("orphanDependents", false) || ParseBool(Param(req, "orphanDependents"))) {
    o.propagation = "Orphan";
  }
  if (!o.propagation.empty() && o.propagation != "Background" && o.propagation != "Foreground" &&
      o.propagation != "Orphan") {
    return InvalidError("DeleteOptions.meta.k8s.io", "",
                        {{"FieldValueNotSupported",
                          absl::StrCat("Unsupported value: \"", o.propagation,
                                       "\": supported values: \"Foreground\", \"Background\", "
                                       "\"Orphan\""),
                          "propagationPolicy"}});
  }
  if (body.contains("gracePeriodSeconds") && body["gracePeriodSeconds"].is_number()) {
    o.grace_seconds = body["gracePeriodSeconds"].get<int64_t>();
  } else if (!Param(req, "gracePeriodSeconds").empty()) {
    ASSIGN_OR_RETURN(o.grace_seconds, IntParam(req, "gracePeriodSeconds", 0));
  }
  o.dry_run = req.has_param("dryRun") || body.contains("dryRun");
  if (body.contains("preconditions")) {
    o.precondition_uid = body["preconditions"].value("uid", "");
    o.precondition_rv = body["preconditions"].value("resourceVersion", "");
  }
  return o;
}

}  // namespace kubetrain::localkube
