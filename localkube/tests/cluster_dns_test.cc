// The cluster DNS (cluster_dns.h): answers as a pod's resolver needs them, from that pod's hosts
// file, over UDP.
#include "localkube/cluster_dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;

constexpr char kDnsHosts[] =
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "198.18.0.2\tjob-worker-0.job.default.svc.cluster.local\tjob-worker-0\n"
    "198.18.0.3 job-ps-0.job.default.svc job-ps-0.job.default.svc.cluster.local job\n"
    "198.18.1.2 job-worker-1.job.default.svc job\n";

// A query for `name` of `type` (RFC 1035 §4.1), id 0x1234, recursion desired.
std::vector<uint8_t> DnsQuery(const std::string& name, uint16_t type, uint16_t klass = 1) {
  std::vector<uint8_t> q = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size() && !name.empty()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<uint8_t>(dot - start));
    q.insert(q.end(), name.begin() + static_cast<ptrdiff_t>(start),
             name.begin() + static_cast<ptrdiff_t>(dot));
    start = dot + 1;
  }
  q.push_back(0);
  for (uint16_t v : {type, klass}) {
    q.push_back(static_cast<uint8_t>(v >> 8));
    q.push_back(static_cast<uint8_t>(v));
  }
  return q;
}

struct DnsReply {
  int rcode = -1;
  bool authoritative = false, truncated = false, is_reply = false;
  int questions = 0;
  std::vector<std::string> addresses;  // each answer's, as text
};

DnsReply ParseDnsReply(const std::vector<uint8_t>& r, size_t question_size) {
  DnsReply out;
  if (r.size() < 12) return out;
  EXPECT_EQ(r[0], 0x12);
  EXPECT_EQ(r[1], 0x34);
  out.is_reply = r[2] & 0x80;
  out.authoritative = r[2] & 0x04;
  out.truncated = r[2] & 0x02;
  out.rcode = r[3] & 0x0F;
  out.questions = r[4] << 8 | r[5];
  const int answers = r[6] << 8 | r[7];
  size_t at = 12 + (out.questions ? question_size - 12 : 0);
  for (int i = 0; i < answers && at + 12 <= r.size(); ++i) {
    EXPECT_EQ(r[at], 0xC0);  // the question's name
    const int type = r[at + 2] << 8 | r[at + 3], len = r[at + 10] << 8 | r[at + 11];
    char text[INET6_ADDRSTRLEN] = "";
    inet_ntop(type == 28 ? AF_INET6 : AF_INET, &r[at + 12], text, sizeof(text));
    out.addresses.push_back(text);
    at += 12 + static_cast<size_t>(len);
  }
  EXPECT_EQ(at, r.size());
  return out;
}

DnsReply AskDns(const std::string& name, uint16_t type, const std::string& hosts = kDnsHosts) {
  std::vector<uint8_t> q = DnsQuery(name, type);
  return ParseDnsReply(AnswerDnsQuery(q, hosts), q.size());
}

TEST(ClusterDnsAnswer, NamesInTheHostsFileGetTheirAddresses) {
  DnsReply r = AskDns("job-ps-0.job.default.svc", 1);
  EXPECT_TRUE(r.is_reply);
  EXPECT_TRUE(r.authoritative);
  EXPECT_EQ(r.rcode, 0);
  EXPECT_EQ(r.questions, 1);
  EXPECT_EQ(r.addresses, std::vector<std::string>{"198.18.0.3"});
  // In any case; a name on several lines gets each address.
  EXPECT_EQ(AskDns("JOB-Worker-0.job.default.svc.cluster.local", 1).addresses,
            std::vector<std::string>{"198.18.0.2"});
  EXPECT_EQ(AskDns("job", 1).addresses, (std::vector<std::string>{"198.18.0.3", "198.18.1.2"}));
  EXPECT_EQ(AskDns("localhost", 28).addresses, std::vector<std::string>{"::1"});
}

TEST(ClusterDnsAnswer, AListedNameWithoutSuchRecordsHasNoneAndOtherNamesDoNotExist) {
  // What c-ares asks after finding the A record in /etc/hosts: answered at once, with nothing.
  DnsReply aaaa = AskDns("job-ps-0.job.default.svc", 28);
  EXPECT_EQ(aaaa.rcode, 0);
  EXPECT_TRUE(aaaa.addresses.empty());
  EXPECT_EQ(AskDns("job-ps-0.job.default.svc", 16).rcode, 0);  // TXT
  // A search-list candidate and a name outside the cluster: NXDOMAIN.
  EXPECT_EQ(AskDns("job-ps-0.job.default.svc.default.svc.cluster.local", 28).rcode, 3);
  EXPECT_EQ(AskDns("example.com", 1).rcode, 3);
  EXPECT_EQ(AskDns("", 1).rcode, 3);  // the root
  // Another pod's hosts file says other things.
  EXPECT_EQ(AskDns("job-worker-0", 1, "198.18.0.9 other\n").rcode, 3);
}

TEST(ClusterDnsAnswer, MalformedQueriesGetAnErrorOrNothing) {
  std::vector<uint8_t> q = DnsQuery("job", 1);
  // Too short to be a message, or a reply: dropped.
  EXPECT_TRUE(AnswerDnsQuery(std::vector<uint8_t>(q.begin(), q.begin() + 11), kDnsHosts).empty());
  std::vector<uint8_t> reply = q;
  reply[2] |= 0x80;
  EXPECT_TRUE(AnswerDnsQuery(reply, kDnsHosts).empty());
  // A question cut short, a compression pointer, two questions: FORMERR without a question.
  std::vector<uint8_t> cut(q.begin(), q.end() - 1), pointer = q, two = q;
  pointer[12] = 0xC0;
  two[5] = 2;
  for (const std::vector<uint8_t>& bad : {cut, pointer, two}) {
    DnsReply r = ParseDnsReply(AnswerDnsQuery(bad, kDnsHosts), 0);
    EXPECT_EQ(r.rcode, 1);
    EXPECT_EQ(r.questions, 0);
  }
  // A label over 63 bytes.
  EXPECT_EQ(AskDns(std::string(64, 'a'), 1).rcode, 1);
  // Another opcode (a status request): not implemented; another class: refused.
  std::vector<uint8_t> status = q;
  status[2] |= 2 << 3;
  EXPECT_EQ(ParseDnsReply(AnswerDnsQuery(status, kDnsHosts), 0).rcode, 4);
  std::vector<uint8_t> chaos = DnsQuery("job", 1, 3);
  EXPECT_EQ(ParseDnsReply(AnswerDnsQuery(chaos, kDnsHosts), chaos.size()).rcode, 5);
}

TEST(ClusterDnsAnswer, AnswersBeyondTheUdpLimitAreCutAndMarkedTruncated) {
  std::string hosts;
  for (int i = 1; i <= 60; ++i) hosts += "198.18.0." + std::to_string(i) + " many\n";
  std::vector<uint8_t> q = DnsQuery("many", 1);
  std::vector<uint8_t> answer = AnswerDnsQuery(q, hosts);
  EXPECT_LE(answer.size(), 512u);
  DnsReply r = ParseDnsReply(answer, q.size());
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.addresses.size(), (512 - q.size()) / 16);
  EXPECT_EQ(r.addresses.front(), "198.18.0.1");
}

TEST(PodResolvConf, ClusterFirstNamesTheClusterDnsAndTheNamespaceFirst) {
  const std::string node = "nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n";
  EXPECT_EQ(PodResolvConf(nlohmann::json::object(), "team", "198.18.0.1", node),
            "search team.svc.cluster.local svc.cluster.local cluster.local\n"
            "nameserver 198.18.0.1\n"
            "options ndots:5\n");
  // dnsConfig adds to it; its options replace those of the same name.
  auto spec = nlohmann::json::parse(R"({"dnsPolicy":"ClusterFirst","dnsConfig":{
      "nameservers":["10.0.0.2","198.18.0.1"],"searches":["a.example","svc.cluster.local"],
      "options":[{"name":"ndots","value":"2"},{"name":"edns0"}]}})");
  EXPECT_EQ(PodResolvConf(spec, "team", "198.18.0.1", node),
            "search team.svc.cluster.local svc.cluster.local cluster.local a.example\n"
            "nameserver 198.18.0.1\nnameserver 10.0.0.2\n"
            "options ndots:2 edns0\n");
}

TEST(PodResolvConf, DefaultTakesTheNodesAndNoneOnlyTheDnsConfig) {
  const std::string node =
      "# the node's\nnameserver 192.0.2.53\nnameserver 192.0.2.54 ; second\nsearch corp.example "
      "lab.example\noptions edns0 ndots:1\n";
  EXPECT_EQ(PodResolvConf(nlohmann::json{{"dnsPolicy", "Default"}}, "team", "198.18.0.1", node),
            "search corp.example lab.example\n"
            "nameserver 192.0.2.53\nnameserver 192.0.2.54\n"
            "options edns0 ndots:1\n");
  auto spec = nlohmann::json::parse(R"({"dnsPolicy":"None","dnsConfig":{
      "nameservers":["10.0.0.1","10.0.0.2","10.0.0.3","10.0.0.4"]}})");
  EXPECT_EQ(PodResolvConf(spec, "team", "198.18.0.1", node),
            "nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n");  // at most 3
}

// A UDP exchange with the server on loopback: the sender's address picks the hosts file.
TEST(ClusterDnsServer, AnswersEachAskerFromItsOwnHostsFile) {
  auto dns = ClusterDns::Start({"127.0.0.1"}, 0);
  ASSERT_THAT(dns.status(), IsOk());
  (*dns)->SetHosts({{"127.0.0.1", "198.18.0.3 mine\n"}}, "198.18.0.4 everyone\n");
  const int port = (*dns)->ports()[0];
  auto ask = [&](const char* from, const std::string& name) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{}, server{};
    local.sin_family = server.sin_family = AF_INET;
    inet_pton(AF_INET, from, &local.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
    server.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
    std::vector<uint8_t> q = DnsQuery(name, 1);
    EXPECT_EQ(
        sendto(fd, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&server), sizeof(server)),
        static_cast<ssize_t>(q.size()));
    pollfd p = {fd, POLLIN, 0};
    std::vector<uint8_t> answer(512);
    DnsReply r;
    if (poll(&p, 1, 5000) == 1) {  // bounds a server that never answers
      answer.resize(static_cast<size_t>(std::max<ssize_t>(0, recv(fd, answer.data(), 512, 0))));
      r = ParseDnsReply(answer, q.size());
    }
    close(fd);
    return r;
  };
  EXPECT_EQ(ask("127.0.0.1", "mine").addresses, std::vector<std::string>{"198.18.0.3"});
  EXPECT_EQ(ask("127.0.0.1", "everyone").rcode, 3);
  EXPECT_EQ(ask("127.0.0.2", "everyone").addresses, std::vector<std::string>{"198.18.0.4"});
  EXPECT_EQ(ask("127.0.0.2", "mine").rcode, 3);
}

TEST(ClusterDnsServer, AnAddressItCannotHaveIsNamed) {
  auto dns = ClusterDns::Start({"not-an-ip"}, 0);
  EXPECT_FALSE(dns.ok());
  EXPECT_NE(dns.status().message().find("not-an-ip"), std::string::npos);
}

}  // namespace
}  // namespace kubetrain::localkube
