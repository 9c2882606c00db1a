#include "localkube/cluster_dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace kubetrain::localkube {
namespace {

constexpr uint16_t kTypeA = 1, kTypeAaaa = 28, kTypeAny = 255;
constexpr uint16_t kClassIn = 1, kClassAny = 255;
constexpr uint16_t kQr = 0x8000, kOpcode = 0x7800, kAa = 0x0400, kTc = 0x0200, kRd = 0x0100;
enum Rcode : uint16_t { kNoError = 0, kFormErr = 1, kNxDomain = 3, kNotImp = 4, kRefused = 5 };
constexpr uint32_t kTtl = 5;           // seconds, as CoreDNS's kubernetes plugin by default
constexpr size_t kMaxUdpAnswer = 512;  // RFC 1035 §4.2.1; no EDNS here
constexpr size_t kMaxDatagram = 4096;  // a longer one is read cut, its question first
constexpr int kDatagramsPerWake = 64;  // then the stop flag is looked at again

uint16_t Get16(std::span<const uint8_t> b, size_t at) {
  return static_cast<uint16_t>(b[at] << 8 | b[at + 1]);
}
void Put16(std::vector<uint8_t>* out, uint16_t v) {
  out->push_back(static_cast<uint8_t>(v >> 8));
  out->push_back(static_cast<uint8_t>(v));
}
void Set16(std::vector<uint8_t>* out, size_t at, uint16_t v) {
  (*out)[at] = static_cast<uint8_t>(v >> 8);
  (*out)[at + 1] = static_cast<uint8_t>(v);
}

struct Question {
  std::string name;  // lower case, no final dot; "" for the root
  uint16_t type = 0, klass = 0;
  size_t end = 0;  // just past it in the datagram
};

// The one question after the header; none when it is malformed (a compression pointer, which a
// question's name never needs, a label over 63 bytes, a name over 255, or the datagram ends).
std::optional<Question> ParseQuestion(std::span<const uint8_t> q) {
  Question out;
  size_t at = 12, name_bytes = 1;
  for (;;) {
    if (at >= q.size()) return std::nullopt;
    const uint8_t len = q[at++];
    if (len == 0) break;
    if (len > 63 || at + len > q.size() || (name_bytes += len + 1) > 255) return std::nullopt;
    if (!out.name.empty()) out.name += '.';
    out.name.append(reinterpret_cast<const char*>(&q[at]), len);
    at += len;
  }
  if (at + 4 > q.size()) return std::nullopt;
  out.type = Get16(q, at);
  out.klass = Get16(q, at + 2);
  out.end = at + 4;
  absl::AsciiStrToLower(&out.name);
  return out;
}

struct Records {
  bool listed = false;
  std::vector<std::array<uint8_t, 4>> v4;
  std::vector<std::array<uint8_t, 16>> v6;
};

// What hosts(5) text says of `name`: each address of a line that lists it, in file order.
Records Lookup(const std::string& hosts_text, const std::string& name) {
  Records r;
  for (absl::string_view line : absl::StrSplit(hosts_text, '\n')) {
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2) continue;
    bool here = false;
    for (size_t i = 1; i < fields.size() && !here; ++i) {
      here = absl::EqualsIgnoreCase(absl::StripSuffix(fields[i], "."), name);
    }
    if (!here) continue;
    r.listed = true;
    const std::string address(fields[0]);
    std::array<uint8_t, 4> v4;
    std::array<uint8_t, 16> v6;
    if (inet_pton(AF_INET, address.c_str(), v4.data()) == 1) {
      if (std::find(r.v4.begin(), r.v4.end(), v4) == r.v4.end()) r.v4.push_back(v4);
    } else if (inet_pton(AF_INET6, address.c_str(), v6.data()) == 1) {
      if (std::find(r.v6.begin(), r.v6.end(), v6) == r.v6.end()) r.v6.push_back(v6);
    }
  }
  return r;
}

// A reply to `query` with `rcode`, echoing its question up to `question_end` (0: none).
std::vector<uint8_t> Header(std::span<const uint8_t> query, uint16_t rcode, size_t question_end) {
  std::vector<uint8_t> out(
      query.begin(), query.begin() + static_cast<ptrdiff_t>(std::max<size_t>(12, question_end)));
  const uint16_t flags = Get16(query, 2);
  Set16(&out, 2, static_cast<uint16_t>(kQr | (flags & (kOpcode | kRd)) | kAa | rcode));
  Set16(&out, 4, question_end > 0 ? 1 : 0);
  for (size_t at : {6, 8, 10}) Set16(&out, at, 0);
  return out;
}

template <size_t N>
bool PutRecord(std::vector<uint8_t>* out, uint16_t type, const std::array<uint8_t, N>& address) {
  if (out->size() + 12 + N > kMaxUdpAnswer) return false;
  Put16(out, 0xC00C);  // the question's name
  Put16(out, type);
  Put16(out, kClassIn);
  Put16(out, static_cast<uint16_t>(kTtl >> 16));
  Put16(out, static_cast<uint16_t>(kTtl));
  Put16(out, N);
  out->insert(out->end(), address.begin(), address.end());
  return true;
}

}  // namespace

std::vector<uint8_t> AnswerDnsQuery(std::span<const uint8_t> query, const std::string& hosts_text) {
  if (query.size() < 12 || (Get16(query, 2) & kQr)) return {};  // no query to answer
  if ((Get16(query, 2) & kOpcode) != 0) return Header(query, kNotImp, 0);
  std::optional<Question> q = Get16(query, 4) == 1 ? ParseQuestion(query) : std::nullopt;
  if (!q) return Header(query, kFormErr, 0);
  if (q->klass != kClassIn && q->klass != kClassAny) return Header(query, kRefused, q->end);
  const Records records = Lookup(hosts_text, q->name);
  if (!records.listed) return Header(query, kNxDomain, q->end);
  std::vector<uint8_t> out = Header(query, kNoError, q->end);
  uint16_t answers = 0;
  bool whole = true;
  auto put = [&](uint16_t type, const auto& address) {
    if (whole && PutRecord(&out, type, address)) {
      ++answers;
    } else {
      whole = false;
    }
  };
  if (q->type == kTypeA || q->type == kTypeAny) {
    for (const auto& a : records.v4) put(kTypeA, a);
  }
  if (q->type == kTypeAaaa || q->type == kTypeAny) {
    for (const auto& a : records.v6) put(kTypeAaaa, a);
  }
  Set16(&out, 6, answers);
  if (!whole) Set16(&out, 2, Get16(out, 2) | kTc);  // the rest would need TCP, not served here
  return out;
}

std::string PodResolvConf(const nlohmann::json& spec, const std::string& ns,
                          const std::string& nameserver, const std::string& node_resolv_conf) {
  std::vector<std::string> nameservers, searches;
  std::vector<std::pair<std::string, std::string>> options;  // name, ":value" or ""
  auto add = [](std::vector<std::string>* list, const std::string& v) {
    if (!v.empty() && std::find(list->begin(), list->end(), v) == list->end()) list->push_back(v);
  };
  auto set_option = [&](const std::string& name, const std::string& value) {
    auto it = std::find_if(options.begin(), options.end(),
                           [&](const auto& o) { return o.first == name; });
    if (it == options.end()) {
      options.emplace_back(name, value);
    } else {
      it->second = value;
    }
  };
  const std::string policy =
      spec.is_object() && spec.contains("dnsPolicy") && spec["dnsPolicy"].is_string()
          ? spec["dnsPolicy"].get<std::string>()
          : "ClusterFirst";
  if (policy == "Default") {
    for (absl::string_view line : absl::StrSplit(node_resolv_conf, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line.substr(0, line.find_first_of("#;")),
                                                  absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (f.size() < 2) continue;
      for (size_t i = 1; i < f.size(); ++i) {
        if (f[0] == "nameserver" && i == 1) add(&nameservers, f[i]);
        if (f[0] == "search") add(&searches, f[i]);
        if (f[0] == "options") {
          const size_t colon = f[i].find(':');
          set_option(f[i].substr(0, colon), colon == std::string::npos ? "" : f[i].substr(colon));
        }
      }
    }
  } else if (policy != "None") {
    add(&nameservers, nameserver);
    add(&searches, ns + ".svc.cluster.local");
    add(&searches, "svc.cluster.local");
    add(&searches, "cluster.local");
    set_option("ndots", ":5");
  }
  const nlohmann::json config =
      spec.is_object() ? spec.value("dnsConfig", nlohmann::json()) : nlohmann::json();
  if (config.is_object()) {
    auto append = [&](const char* field, std::vector<std::string>* list) {
      const nlohmann::json values = config.value(field, nlohmann::json::array());
      for (const nlohmann::json& v : values.is_array() ? values : nlohmann::json::array()) {
        if (v.is_string()) add(list, v.get<std::string>());
      }
    };
    append("nameservers", &nameservers);
    append("searches", &searches);
    const nlohmann::json list = config.value("options", nlohmann::json::array());
    for (const nlohmann::json& o : list.is_array() ? list : nlohmann::json::array()) {
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) continue;
      const bool valued = o.contains("value") && o["value"].is_string();
      set_option(o["name"].get<std::string>(),
                 valued ? ":" + o["value"].get<std::string>() : std::string());
    }
  }
  if (nameservers.size() > 3) nameservers.resize(3);
  if (searches.size() > 32) searches.resize(32);
  std::string text;
  if (!searches.empty()) text += absl::StrCat("search ", absl::StrJoin(searches, " "), "\n");
  for (const std::string& s : nameservers) text += absl::StrCat("nameserver ", s, "\n");
  if (!options.empty()) {
    text += "options";
    for (const auto& [name, value] : options) text += absl::StrCat(" ", name, value);
    text += "\n";
  }
  return text;
}

absl::StatusOr<std::unique_ptr<ClusterDns>> ClusterDns::Start(
    const std::vector<std::string>& addresses, int port) {
  std::unique_ptr<ClusterDns> dns(new ClusterDns());
  for (const std::string& address : addresses) {
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, address.c_str(), &at.sin_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("cluster DNS: ", address, " is no IPv4"));
    }
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("cluster DNS: socket: ", strerror(errno)));
    dns->sockets_.push_back(fd);
    socklen_t len = sizeof(at);
    if (bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&at), &len) != 0) {
      return absl::UnavailableError(absl::StrCat("cluster DNS cannot listen on ", address, ":",
                                                 port, "/udp: ", strerror(errno)));
    }
    dns->ports_.push_back(ntohs(at.sin_port));
  }
  dns->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (dns->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("cluster DNS: eventfd: ", strerror(errno)));
  }
  dns->thread_ = std::thread([d = dns.get()] { d->Serve(); });
  return dns;
}

ClusterDns::~ClusterDns() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int fd : sockets_) close(fd);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void ClusterDns::SetHosts(std::map<std::string, std::string> by_ip, std::string others) {
  std::lock_guard<std::mutex> lock(mu_);
  by_ip_ = std::move(by_ip);
  others_ = std::move(others);
}

std::string ClusterDns::HostsFor(const std::string& ip) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_ip_.find(ip);
  return it != by_ip_.end() ? it->second : others_;
}

void ClusterDns::Serve() {
  std::vector<pollfd> fds;
  for (int fd : sockets_) fds.push_back({fd, POLLIN, 0});
  fds.push_back({wake_fd_, POLLIN, 0});
  std::vector<uint8_t> datagram(kMaxDatagram);
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
      log::Warn("Cluster DNS stopped", {{"error", strerror(errno)}});
      return;
    }
    if (fds.back().revents) return;
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      for (int n = 0; n < kDatagramsPerWake; ++n) {
        sockaddr_in from{};
        socklen_t from_len = sizeof(from);
        const ssize_t got = recvfrom(fds[i].fd, datagram.data(), datagram.size(), 0,
                                     reinterpret_cast<sockaddr*>(&from), &from_len);
        if (got < 0) break;  // EAGAIN: read them all
        char ip[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
        std::vector<uint8_t> answer = AnswerDnsQuery(
            std::span<const uint8_t>(datagram.data(), static_cast<size_t>(got)), HostsFor(ip));
        if (answer.empty()) continue;
        (void)sendto(fds[i].fd, answer.data(), answer.size(), MSG_DONTWAIT,
                     reinterpret_cast<sockaddr*>(&from), from_len);
      }
    }
  }
}

}  // namespace kubetrain::localkube
