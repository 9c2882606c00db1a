// core/v1 Pod validation for localkube (see pod_validation.h): the decoder's check of a Pod's
// quantities and ValidatePod's field errors. Quantity arithmetic itself is in quantity.cc.
#include "localkube/pod_validation.h"

#include <arpa/inet.h>

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/quote.h"
#include "common/status.h"
#include "localkube/json_fields.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The field.Error constructors: reason (cause type) and ErrorBody.
Cause Required(const std::string& field, absl::string_view detail = "") {
  return {"FieldValueRequired",
          detail.empty() ? "Required value" : absl::StrCat("Required value: ", detail), field};
}
Cause Invalid(const std::string& field, const std::string& value, absl::string_view detail) {
  return {"FieldValueInvalid", absl::StrCat("Invalid value: ", value, ": ", detail), field};
}
Cause Duplicate(const std::string& field, const std::string& value) {
  return {"FieldValueDuplicate", absl::StrCat("Duplicate value: ", value), field};
}
Cause NotSupported(const std::string& field, const std::string& value,
                   const std::vector<std::string>& supported) {
  std::vector<std::string> quoted;
  for (const auto& s : supported) quoted.push_back(GoQuote(s));
  return {"FieldValueNotSupported",
          absl::StrCat("Unsupported value: ", value,
                       ": supported values: ", absl::StrJoin(quoted, ", ")),
          field};
}

std::string RegexError(absl::string_view msg, absl::string_view fmt,
                       const std::vector<std::string>& examples) {
  std::string out(msg);
  out += " (e.g. ";
  for (size_t i = 0; i < examples.size(); ++i) {
    if (i > 0) out += " or ";
    out += absl::StrCat("'", examples[i], "', ");
  }
  return absl::StrCat(out, "regex used for validation is '", fmt, "')");
}

bool IsLabel(absl::string_view v) {
  if (v.empty()) return false;
  auto alnum = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); };
  if (!alnum(v.front()) || !alnum(v.back())) return false;
  return std::all_of(v.begin(), v.end(), [&](char c) { return alnum(c) || c == '-'; });
}

bool IsSubdomain(absl::string_view v) {
  for (absl::string_view part : absl::StrSplit(v, '.')) {
    if (!IsLabel(part)) return false;
  }
  return true;
}

std::string ValueText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// IsValidPortName's messages.
std::vector<std::string> PortNameErrors(const std::string& port) {
  std::vector<std::string> errs;
  if (port.size() > 15) errs.push_back("must be no more than 15 characters");
  if (!std::all_of(port.begin(), port.end(), [](char c) {
        return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
      })) {
    errs.push_back("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
  }
  if (!std::any_of(port.begin(), port.end(), [](char c) { return absl::ascii_islower(c); })) {
    errs.push_back("must contain at least one letter (a-z)");
  }
  if (absl::StrContains(port, "--")) errs.push_back("must not contain consecutive hyphens");
  if (!port.empty() && (port.front() == '-' || port.back() == '-')) {
    errs.push_back("must not begin or end with a hyphen");
  }
  return errs;
}

bool IsHugePages(const std::string& name) { return absl::StartsWith(name, "hugepages-"); }

// helper.IsNativeResource: unprefixed, or in the kubernetes.io domain.
bool IsNative(const std::string& name) {
  return !absl::StrContains(name, "/") || absl::StrContains(name, "kubernetes.io/");
}

bool IsExtended(const std::string& name) {
  if (IsNative(name) || absl::StartsWith(name, "requests.")) return false;
  std::vector<std::string> parts = absl::StrSplit(name, '/');
  if (parts.size() != 2 || parts[1].empty() || parts[1].size() > 63) return false;
  auto alnum = [](char c) { return absl::ascii_isalnum(c); };
  const std::string& n = parts[1];
  if (!alnum(n.front()) || !alnum(n.back())) return false;
  if (!std::all_of(n.begin(), n.end(),
                   [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; })) {
    return false;
  }
  return IsSubdomain(parts[0]);
}

bool OvercommitAllowed(const std::string& name) { return IsNative(name) && !IsHugePages(name); }

void ValidateResourceName(const std::string& name, const std::string& path,
                          std::vector<Cause>* errs) {
  if (!absl::StrContains(name, "/")) {
    if (name != "cpu" && name != "memory" && name != "ephemeral-storage" && !IsHugePages(name)) {
      errs->push_back(Invalid(path, GoQuote(name), "must be a standard resource for containers"));
    }
  } else if (!IsNative(name) && !IsExtended(name)) {
    errs->push_back(Invalid(path, GoQuote(name), "doesn't follow extended resource name standard"));
  }
}

void ValidateQuantityValue(const std::string& name, const Quantity& q, const std::string& path,
                           std::vector<Cause>* errs) {
  if (q.negative && !q.IsZero()) {
    errs->push_back(Invalid(path, GoQuote(q.String()), "must be greater than or equal to 0"));
  }
  if (IsExtended(name) && !q.IsInteger()) {
    errs->push_back(Invalid(path, GoQuote(q.String()), "must be an integer"));
  }
}

// Quantities were checked by the decoder; one that fails here (an object built in-process) is
// taken as zero.
Quantity QuantityOf(const json& v) {
  auto q = ParseQuantity(absl::StripAsciiWhitespace(ValueText(v)));
  return q.ok() ? *q : Quantity{};
}

void ValidateResources(const json& resources, const std::string& path, std::vector<Cause>* errs) {
  if (!resources.is_object()) return;
  const json& limits = Field(resources, "limits");
  const json& requests = Field(resources, "requests");
  std::string lim_path = path + ".limits", req_path = path + ".requests";
  if (limits.is_object()) {
    for (const auto& [name, value] : limits.items()) {
      std::string p = absl::StrCat(lim_path, "[", name, "]");
      ValidateResourceName(name, p, errs);
      ValidateQuantityValue(name, QuantityOf(value), p, errs);
    }
  }
  if (!requests.is_object()) return;
  for (const auto& [name, value] : requests.items()) {
    std::string p = absl::StrCat(req_path, "[", name, "]");
    ValidateResourceName(name, p, errs);
    Quantity q = QuantityOf(value);
    ValidateQuantityValue(name, q, p, errs);
    if (limits.is_object() && limits.contains(name)) {
      Quantity limit = QuantityOf(limits[name]);
      int cmp = CompareQuantities(q, limit);
      if (cmp != 0 && !OvercommitAllowed(name)) {
        errs->push_back(
            Invalid(req_path, GoQuote(q.String()),
                    absl::StrCat("must be equal to ", name, " limit of ", limit.String())));
      } else if (cmp > 0) {
        errs->push_back(Invalid(
            req_path, GoQuote(q.String()),
            absl::StrCat("must be less than or equal to ", name, " limit of ", limit.String())));
      }
    } else if (!OvercommitAllowed(name)) {
      errs->push_back(Required(lim_path, "Limit must be set for non overcommitable resources"));
    }
  }
}

void ValidatePorts(const json& ports, const std::string& path, std::vector<Cause>* errs) {
  if (!ports.is_array()) return;
  std::set<std::string> names;
  for (size_t i = 0; i < ports.size(); ++i) {
    const json& port = ports[i];
    std::string p = absl::StrCat(path, "[", i, "]");
    std::string name = Str(port, "name");
    if (!name.empty()) {
      std::vector<std::string> msgs = PortNameErrors(name);
      for (const auto& m : msgs) errs->push_back(Invalid(p + ".name", GoQuote(name), m));
      if (msgs.empty() && !names.insert(name).second) {
        errs->push_back(Duplicate(p + ".name", GoQuote(name)));
      }
    }
    const json& cp = Field(port, "containerPort");
    int64_t container_port = cp.is_number_integer() ? cp.get<int64_t>() : 0;
    if (container_port == 0) {
      errs->push_back(Required(p + ".containerPort"));
    } else if (container_port < 1 || container_port > 65535) {
      errs->push_back(Invalid(p + ".containerPort", std::to_string(container_port),
                              "must be between 1 and 65535, inclusive"));
    }
    const json& hp = Field(port, "hostPort");
    int64_t host_port = hp.is_number_integer() ? hp.get<int64_t>() : 0;
    if (host_port != 0 && (host_port < 1 || host_port > 65535)) {
      errs->push_back(Invalid(p + ".hostPort", std::to_string(host_port),
                              "must be between 1 and 65535, inclusive"));
    }
    // An absent protocol is defaulted to TCP.
    if (port.is_object() && port.contains("protocol")) {
      std::string protocol = Str(port, "protocol");
      if (protocol.empty()) {
        errs->push_back(Required(p + ".protocol"));
      } else if (protocol != "TCP" && protocol != "UDP" && protocol != "SCTP") {
        errs->push_back(NotSupported(p + ".protocol", GoQuote(protocol), {"SCTP", "TCP", "UDP"}));
      }
    }
  }
}

void ValidateEnv(const json& env, const std::string& path, std::vector<Cause>* errs) {
  if (!env.is_array()) return;
  for (size_t i = 0; i < env.size(); ++i) {
    std::string p = absl::StrCat(path, "[", i, "].name");
    std::string name = Str(env[i], "name");
    if (name.empty()) {
      errs->push_back(Required(p));
      continue;
    }
    bool ok = std::all_of(name.begin(), name.end(), [](char c) {
      auto u = static_cast<unsigned char>(c);
      return u >= 0x20 && u < 0x7f && c != '=';
    });
    if (!ok) {
      errs->push_back(Invalid(p, GoQuote(name),
                              "a valid environment variable name must consist only of printable "
                              "ASCII characters other than '='"));
    }
  }
}

// validateContainerCommon: what every container kind shares.
void ValidateContainer(const json& c, const std::string& path, std::vector<Cause>* errs) {
  std::string name = Str(c, "name");
  if (name.empty()) {
    errs->push_back(Required(path + ".name"));
  } else {
    for (const auto& m : Dns1123LabelErrors(name)) {
      errs->push_back(Invalid(path + ".name", GoQuote(name), m));
    }
  }
  if (Str(c, "image").empty()) errs->push_back(Required(path + ".image"));
  if (c.is_object() && c.contains("terminationMessagePolicy")) {
    std::string policy = Str(c, "terminationMessagePolicy");
    if (policy.empty()) {
      errs->push_back(Required(path + ".terminationMessagePolicy"));
    } else if (policy != "File" && policy != "FallbackToLogsOnError") {
      errs->push_back(NotSupported(path + ".terminationMessagePolicy", GoQuote(policy),
                                   {"File", "FallbackToLogsOnError"}));
    }
  }
  ValidatePorts(Field(c, "ports"), path + ".ports", errs);
  ValidateEnv(Field(c, "env"), path + ".env", errs);
  if (c.is_object() && c.contains("imagePullPolicy")) {
    std::string policy = Str(c, "imagePullPolicy");
    if (policy.empty()) {
      errs->push_back(Required(path + ".imagePullPolicy"));
    } else if (policy != "Always" && policy != "IfNotPresent" && policy != "Never") {
      errs->push_back(NotSupported(path + ".imagePullPolicy", GoQuote(policy),
                                   {"Always", "IfNotPresent", "Never"}));
    }
  }
  ValidateResources(Field(c, "resources"), path + ".resources", errs);
}

// Applies `fn` to each quantity map of the pod: (map, Go field path for type errors).
template <typename Fn>
absl::Status ForEachResourceList(json* pod, Fn fn) {
  auto spec_it = pod->find("spec");
  if (spec_it == pod->end() || !spec_it->is_object()) return absl::OkStatus();
  json& spec = *spec_it;
  for (const char* list : {"containers", "initContainers", "ephemeralContainers"}) {
    auto it = spec.find(list);
    if (it == spec.end() || !it->is_array()) continue;
    std::string go_path = absl::StrCat("spec.", list, ".resources");
    for (json& c : *it) {
      if (!c.is_object()) continue;
      auto r = c.find("resources");
      if (r == c.end() || r->is_null()) continue;
      if (!r->is_object()) {
        return absl::InvalidArgumentError(absl::StrCat("json: cannot unmarshal ", GoKind(*r),
                                                       " into Go struct field Container.", go_path,
                                                       " of type v1.ResourceRequirements"));
      }
      for (const char* kind : {"limits", "requests"}) {
        RETURN_IF_ERROR(fn(*r, kind, absl::StrCat("ResourceRequirements.", go_path, ".", kind)));
      }
    }
  }
  if (auto r = spec.find("resources"); r != spec.end() && r->is_object()) {
    for (const char* kind : {"limits", "requests"}) {
      RETURN_IF_ERROR(fn(*r, kind, absl::StrCat("ResourceRequirements.spec.resources.", kind)));
    }
  }
  return fn(spec, "overhead", "PodSpec.spec.overhead");
}

// Go's %#v of a []string, as field.Invalid prints one.
std::string GoStrings(const json& list) {
  std::vector<std::string> quoted;
  for (const json& v : list) quoted.push_back(GoQuote(ValueText(v)));
  return absl::StrCat("[]string{", absl::StrJoin(quoted, ", "), "}");
}

// validateDNSPolicy and validatePodDNSConfig (pkg/apis/core/validation).
void ValidateDns(const json& spec, std::vector<Cause>* errs) {
  const std::string policy = spec.contains("dnsPolicy") ? Str(spec, "dnsPolicy") : "ClusterFirst";
  if (policy.empty()) {
    errs->push_back(Required("spec.dnsPolicy"));
  } else if (policy != "ClusterFirstWithHostNet" && policy != "ClusterFirst" &&
             policy != "Default" && policy != "None") {
    errs->push_back(NotSupported("spec.dnsPolicy", GoQuote(policy),
                                 {"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"}));
  }
  const json config = spec.value("dnsConfig", json());
  const json none = json::array();
  const json& nameservers =
      config.is_object() && config.contains("nameservers") && config["nameservers"].is_array()
          ? config["nameservers"]
          : none;
  if (policy == "None" && !config.is_object()) {
    errs->push_back(
        Required("spec.dnsConfig", "must provide `dnsConfig` when `dnsPolicy` is None"));
    return;
  }
  if (policy == "None" && nameservers.empty()) {
    errs->push_back(Required("spec.dnsConfig.nameservers",
                             "must provide at least one DNS nameserver when `dnsPolicy` is None"));
    return;
  }
  if (!config.is_object()) return;
  if (nameservers.size() > 3) {
    errs->push_back(Invalid("spec.dnsConfig.nameservers", GoStrings(nameservers),
                            "must not have more than 3 nameservers"));
  }
  for (size_t i = 0; i < nameservers.size(); ++i) {
    const std::string ip = ValueText(nameservers[i]);
    unsigned char address[16];
    if (inet_pton(AF_INET, ip.c_str(), address) != 1 &&
        inet_pton(AF_INET6, ip.c_str(), address) != 1) {
      errs->push_back(Invalid(absl::StrCat("spec.dnsConfig.nameservers[", i, "]"), GoQuote(ip),
                              "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"));
    }
  }
  const json& searches =
      config.contains("searches") && config["searches"].is_array() ? config["searches"] : none;
  std::vector<std::string> search_list;
  for (const json& v : searches) search_list.push_back(ValueText(v));
  if (searches.size() > 32) {
    errs->push_back(Invalid("spec.dnsConfig.searches", GoStrings(searches),
                            "must not have more than 32 search paths"));
  }
  if (absl::StrJoin(search_list, " ").size() > 2048) {
    errs->push_back(Invalid("spec.dnsConfig.searches", GoStrings(searches),
                            "must not have more than 2048 characters (including spaces) in the "
                            "search list"));
  }
  for (size_t i = 0; i < search_list.size(); ++i) {
    const std::string search(absl::StripSuffix(search_list[i], "."));  // a final dot is fine
    for (const std::string& m : Dns1123SubdomainErrors(search)) {
      errs->push_back(
          Invalid(absl::StrCat("spec.dnsConfig.searches[", i, "]"), GoQuote(search), m));
    }
  }
  const json& options =
      config.contains("options") && config["options"].is_array() ? config["options"] : none;
  for (size_t i = 0; i < options.size(); ++i) {
    if (!options[i].is_object() || Str(options[i], "name").empty()) {
      errs->push_back(
          Required(absl::StrCat("spec.dnsConfig.options[", i, "]"), "must not be empty"));
    }
  }
}

}  // namespace

std::vector<std::string> Dns1123SubdomainErrors(const std::string& value) {
  std::vector<std::string> errs;
  if (value.size() > 253) errs.push_back("must be no more than 253 characters");
  if (!IsSubdomain(value)) {
    errs.push_back(RegexError(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character",
        "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", {"example.com"}));
  }
  return errs;
}

std::vector<std::string> Dns1123LabelErrors(const std::string& value) {
  std::vector<std::string> errs;
  if (value.size() > 63) errs.push_back("must be no more than 63 characters");
  if (!IsLabel(value)) {
    if (IsSubdomain(value)) {
      errs.push_back("must not contain dots");
    } else {
      errs.push_back(RegexError(
          "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
          "and must start and end with an alphanumeric character",
          "[a-z0-9]([-a-z0-9]*[a-z0-9])?", {"my-name", "123-abc"}));
    }
  }
  return errs;
}

absl::Status CheckPodQuantities(json* pod) {
  return ForEachResourceList(
      pod, [](json& parent, const char* key, const std::string& go_field) -> absl::Status {
        auto it = parent.find(key);
        if (it == parent.end() || it->is_null()) return absl::OkStatus();
        if (!it->is_object()) {
          return absl::InvalidArgumentError(absl::StrCat("json: cannot unmarshal ", GoKind(*it),
                                                         " into Go struct field ", go_field,
                                                         " of type v1.ResourceList"));
        }
        for (auto& [name, value] : it->items()) {
          if (value.is_null()) {
            value = "0";
            continue;
          }
          ASSIGN_OR_RETURN(Quantity q, ParseQuantity(absl::StripAsciiWhitespace(ValueText(value))));
          value = q.String();
        }
        return absl::OkStatus();
      });
}

std::vector<Cause> ValidatePod(const json& pod) {
  std::vector<Cause> errs;
  std::string name = Str(Field(pod, "metadata"), "name");
  if (name.empty()) {
    errs.push_back(Required("metadata.name", "name or generateName is required"));
  } else {
    for (const auto& m : Dns1123SubdomainErrors(name)) {
      errs.push_back(Invalid("metadata.name", GoQuote(name), m));
    }
  }
  const json& spec = Field(pod, "spec");
  const json& containers = Field(spec, "containers");
  std::set<std::string> names;
  if (!containers.is_array() || containers.empty()) {
    errs.push_back(Required("spec.containers"));
  } else {
    for (size_t i = 0; i < containers.size(); ++i) {
      std::string path = absl::StrCat("spec.containers[", i, "]");
      ValidateContainer(containers[i], path, &errs);
      std::string cname = Str(containers[i], "name");
      if (!names.insert(cname).second) errs.push_back(Duplicate(path + ".name", GoQuote(cname)));
    }
  }
  const json& init = Field(spec, "initContainers");
  if (init.is_array()) {
    // Names must be unique across regular and init containers.
    std::set<std::string> all;
    if (containers.is_array()) {
      for (const json& c : containers) all.insert(Str(c, "name"));
    }
    for (size_t i = 0; i < init.size(); ++i) {
      std::string path = absl::StrCat("spec.initContainers[", i, "]");
      ValidateContainer(init[i], path, &errs);
      std::string cname = Str(init[i], "name");
      if (all.count(cname)) {
        errs.push_back(Duplicate(path + ".name", GoQuote(cname)));
      } else if (!cname.empty()) {
        all.insert(cname);
      }
    }
  }
  std::string restart = Str(spec, "restartPolicy");
  if (restart.empty()) {
    errs.push_back(Required("spec.restartPolicy"));
  } else if (restart != "Always" && restart != "OnFailure" && restart != "Never") {
    errs.push_back(
        NotSupported("spec.restartPolicy", GoQuote(restart), {"Always", "OnFailure", "Never"}));
  }
  if (spec.is_object()) ValidateDns(spec, &errs);
  for (const char* f : {"hostname", "subdomain"}) {
    std::string v = Str(spec, f);
    if (v.empty()) continue;
    for (const auto& m : Dns1123LabelErrors(v)) {
      errs.push_back(Invalid(absl::StrCat("spec.", f), GoQuote(v), m));
    }
  }
  return errs;
}

}  // namespace kubetrain::localkube
