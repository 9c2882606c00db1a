// Cluster DNS for pods in sandboxes (localkube/README.md "Pod sandboxes", Names): a UDP name
// server on each node's bridge address, which every sandboxed pod's /etc/resolv.conf names, as
// a real pod's names the cluster's CoreDNS. A pod's names are in its /etc/hosts, which glibc
// reads first; but resolvers ask DNS for whatever record the hosts file lacks (c-ares, gRPC's
// default, asks for an AAAA record of every name it connects to), and with no server to answer
// they wait out their timeout: a gRPC channel took seconds to connect inside a pod. This one
// answers from the asking pod's own hosts file, found by the query's source address, as
// CoreDNS answers from the cluster's records: A and AAAA records for a name the file lists, no
// records (NOERROR) for other types of a listed name, NXDOMAIN for every other name, so a
// pod's search list (`<ns>.svc.cluster.local svc.cluster.local cluster.local`) is walked at
// once. Nothing is forwarded: a sandbox reaches no network outside the cluster.
//
// Thread-safe: SetHosts from any thread while the server answers on its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace kubetrain::localkube {

// The answer to one DNS query datagram (RFC 1035 §4.1) from `hosts_text` (hosts(5) lines); none
// (an empty vector) for a datagram that is no query, which a server drops.
std::vector<uint8_t> AnswerDnsQuery(std::span<const uint8_t> query, const std::string& hosts_text);

// A pod's /etc/resolv.conf as the kubelet forms it (pkg/kubelet/network/dns): by
// spec.dnsPolicy, ClusterFirst (the default) and ClusterFirstWithHostNet give `nameserver` (the
// cluster DNS), the search list `<ns>.svc.cluster.local svc.cluster.local cluster.local` and
// `ndots:5`; Default the node's own `node_resolv_conf` (its nameserver, search and options
// lines); None nothing. spec.dnsConfig's nameservers and searches then follow (duplicates
// dropped) and its options replace those of the same name; at most 3 nameservers and 32
// search paths are kept, as the kubelet keeps. A spec ValidatePod accepted is assumed; other
// fields' types are skipped over.
std::string PodResolvConf(const nlohmann::json& spec, const std::string& ns,
                          const std::string& nameserver, const std::string& node_resolv_conf);

class ClusterDns {
 public:
  // Serves UDP on port `port` of each of `addresses` (IPv4; port 0: any free one, the same
  // index in ports()). Fails, naming the address, when one cannot be bound.
  static absl::StatusOr<std::unique_ptr<ClusterDns>> Start(
      const std::vector<std::string>& addresses, int port);
  ~ClusterDns();  // stops answering, within moments
  ClusterDns(const ClusterDns&) = delete;
  ClusterDns& operator=(const ClusterDns&) = delete;

  // The hosts file of each pod by its IP, and what anyone else asking gets.
  void SetHosts(std::map<std::string, std::string> by_ip, std::string others);
  const std::vector<int>& ports() const { return ports_; }

 private:
  ClusterDns() = default;
  void Serve();
  std::string HostsFor(const std::string& ip) const;

  std::vector<int> sockets_, ports_;
  int wake_fd_ = -1;  // an eventfd: written to stop
  std::thread thread_;
  mutable std::mutex mu_;  // guards by_ip_ and others_
  std::map<std::string, std::string> by_ip_;
  std::string others_;
};

}  // namespace kubetrain::localkube
