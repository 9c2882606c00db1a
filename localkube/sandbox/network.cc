#include "localkube/sandbox/network.h"

#include <linux/capability.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "localkube/sandbox/names.h"
#include "localkube/sandbox/tools.h"

namespace kubetrain::sandbox {
namespace {

constexpr int64_t kMinRate = 64'000;
constexpr int64_t kMaxRate = 100'000'000'000;
// Policy rules on each bridge: traffic from a node's sandboxes is routed only to the instance's
// own block (and, by the local table before these, to the host's addresses); anything else is
// unreachable, so no sandbox packet leaves the machine and instances do not reach each other.
constexpr int kRuleToBlock = 32100;
constexpr int kRuleUnreachable = 32101;

bool HasNetAdmin() {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return true;  // let the first command say
  return data[CAP_NET_ADMIN / 32].effective & (1u << (CAP_NET_ADMIN % 32));
}

// One sentence, for callers that fall back to running without sandboxes.
absl::Status CheckPreconditions() {
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Sandbox networks need root (network namespaces, veths, bridges, tc); this process runs "
        "as uid ",
        ::geteuid()));
  }
  if (!HasNetAdmin()) {
    return absl::FailedPreconditionError(
        "Sandbox networks need CAP_NET_ADMIN, which this process lacks");
  }
  int error = 0;
  // On a thread of its own: unshare moves only that thread, which then ends.
  std::thread probe([&] { error = ::unshare(CLONE_NEWNET) == 0 ? 0 : errno; });
  probe.join();
  if (error != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Sandbox networks need network namespaces, which this machine refuses (unshare: ",
        std::strerror(error), ")"));
  }
  for (absl::string_view tool : {"ip", "tc"}) {
    absl::Status found = FindTool(tool).status();
    if (!found.ok()) return absl::FailedPreconditionError(found.message());
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const NetworkOptions& options) {
  RETURN_IF_ERROR(ValidateFamily(options.family));
  if (!options.prefix.empty()) RETURN_IF_ERROR(ValidatePrefix(options.family, options.prefix));
  if (options.nodes < 1 || options.nodes > kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes is ", options.nodes, "; a sandbox network has 1 to ", kMaxNodes));
  }
  if (options.uplink_bits_per_second &&
      (*options.uplink_bits_per_second < kMinRate || *options.uplink_bits_per_second > kMaxRate)) {
    return absl::InvalidArgumentError(absl::StrCat("uplink_bits_per_second is ",
                                                   *options.uplink_bits_per_second, "; use ",
                                                   kMinRate, " to ", kMaxRate, " or none"));
  }
  if (options.block && (*options.block < 0 || *options.block >= kBlocks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block is ", *options.block, "; use 0 to ", kBlocks - 1, " or none"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LockFile>> ClaimPrefix(const NetworkOptions& options,
                                                      std::string* prefix) {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 64; ++attempt) {
    *prefix = options.prefix.empty()
                  ? absl::StrFormat("%s%04x", options.family, static_cast<int>(rng() & 0xffff))
                  : options.prefix;
    ASSIGN_OR_RETURN(std::unique_ptr<LockFile> lock,
                     LockFile::TryAcquire(InstanceLockPath(options.lock_dir, *prefix)));
    if (lock) return lock;
    if (!options.prefix.empty()) {
      return absl::AlreadyExistsError(
          absl::StrCat("sandbox prefix ", *prefix, " is held by a running instance"));
    }
  }
  return absl::ResourceExhaustedError("found no free sandbox prefix in 64 tries");
}

absl::StatusOr<std::unique_ptr<LockFile>> ClaimBlock(const NetworkOptions& options, int* block) {
  for (int b = options.block.value_or(0); b < kBlocks; ++b) {
    ASSIGN_OR_RETURN(std::unique_ptr<LockFile> lock,
                     LockFile::TryAcquire(BlockLockPath(options.lock_dir, b)));
    if (lock) {
      *block = b;
      return lock;
    }
    if (options.block) {
      return absl::AlreadyExistsError(
          absl::StrCat("sandbox address block ", BlockCidr(b), " is held by a running instance"));
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "all ", kBlocks, " sandbox address blocks of 198.18.0.0/15 are held by running instances"));
}

absl::Status WriteSysctl(const std::string& path, absl::string_view value) {
  std::ofstream out(path);
  out << value;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", value, " to ", path));
  return absl::OkStatus();
}

// The tc commands that shape `dev` to `bits_per_second`, over a root qdisc of ours that
// ApplyUplink has removed (or none).
std::vector<std::vector<std::string>> Shaper(const std::string& dev, int64_t bits_per_second,
                                             UplinkQueue queue) {
  // The bucket holds what the link carries in 1 ms, and at least 96 KiB so that a GSO packet (up
  // to 64 KiB) fits. A real link never beats its rate, but a full bucket passes at the host's
  // own speed: with 10 ms of burst (1.25 MB at 1 Gbit/s) a 1 MiB all-reduce after a pause ran at
  // up to 2.4x the rate, so which side of a comparison paused longer between its calls won it.
  // 1 ms still carries bulk transfers at the rate (network_test, network_bench's raw TCP).
  const std::string burst = absl::StrCat(std::max<int64_t>(bits_per_second / 8 / 1000, 96 * 1024));
  const std::string rate = absl::StrCat(bits_per_second, "bit");
  if (queue == UplinkQueue::kFifo) {
    return {{"qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency",
             "50ms"}};
  }
  // htb: one class at the rate with the same bucket, split into the small segments' class 1:1,
  // which goes first (prio 0) and may take the whole rate, and the bulk's 1:2. The bulk's FIFO
  // holds 50 ms at the rate, as tbf's does.
  const int64_t acks_share = std::max<int64_t>(bits_per_second / 20, 8000);
  // quantum: what a class sends per turn when both have packets; htb's default (a tenth of the
  // rate in bytes) is past what it allows above 16 Mbit/s.
  auto klass = [&](const char* id, int64_t share, const char* prio) {
    std::vector<std::string> args = {"class", "add", "dev", dev, "parent", "1:9", "classid", id};
    const std::string htb[] = {"htb",     "rate",   absl::StrCat(share, "bit"),
                               "ceil",    rate,     "burst",
                               burst,     "cburst", burst,
                               "quantum", "100000", "prio",
                               prio};
    args.insert(args.end(), std::begin(htb), std::end(htb));
    return args;
  };
  return {
      {"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "2"},
      {"class", "add", "dev", dev, "parent", "1:", "classid", "1:9", "htb", "rate", rate, "ceil",
       rate, "burst", burst, "cburst", burst},
      klass("1:1", acks_share, "0"),
      klass("1:2", bits_per_second - acks_share, "1"),
      {"qdisc", "add", "dev", dev, "parent", "1:1", "pfifo", "limit", "10000"},
      {"qdisc", "add", "dev", dev, "parent", "1:2", "bfifo", "limit",
       absl::StrCat(std::max<int64_t>(bits_per_second / 8 / 20, 96 * 1024))},
      // TCP (protocol 6) with an IP total length under 128 bytes.
      {"filter", "add", "dev",    dev,      "parent", "1:",       "protocol", "ip",
       "prio",   "1",   "u32",    "match",  "ip",     "protocol", "6",        "0xff",
       "match",  "u16", "0x0000", "0xff80", "at",     "2",        "flowid",   "1:1"},
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<Network>> Network::Create(NetworkOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  RETURN_IF_ERROR(CheckPreconditions());
  std::error_code ec;
  std::filesystem::create_directories(options.lock_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("Sandbox networks need the lock folder ",
                                                      options.lock_dir, ": ", ec.message()));
  }
  absl::StatusOr<std::vector<std::string>> swept = SweepStale(options.family, options.lock_dir);
  if (!swept.ok()) log::Warn("Failed to sweep stale sandbox networks", {{"err", swept.status()}});

  std::unique_ptr<Network> net(new Network());
  net->family_ = options.family;
  ASSIGN_OR_RETURN(net->ip_tool_, FindTool("ip"));
  ASSIGN_OR_RETURN(net->instance_lock_, ClaimPrefix(options, &net->prefix_));
  // From here on the destructor removes whatever carries the prefix, complete or not.
  RETURN_IF_ERROR(RemoveInstanceObjects(net->family_, net->prefix_));
  net->link_group_ = absl::StrCat(LinkGroup(net->prefix_));
  ASSIGN_OR_RETURN(net->block_lock_, ClaimBlock(options, &net->block_));
  net->cut_.assign(options.nodes, false);
  net->rate_.assign(options.nodes, options.uplink_bits_per_second);
  net->queue_ = options.uplink_queue;
  net->root_qdisc_.assign(options.nodes, false);
  net->last_host_.assign(options.nodes, 1);
  for (int node = 0; node < options.nodes; ++node) {
    RETURN_IF_ERROR(net->CreateNode(node), "creating sandbox node ", node);
  }
  log::Info("Created sandbox network",
            {{"prefix", net->prefix_}, {"block", net->block_cidr()}, {"nodes", options.nodes}});
  return net;
}

Network::~Network() {
  sandboxes_.clear();  // their namespace descriptors
  if (!instance_lock_) return;
  absl::Status removed = RemoveInstanceObjects(family_, prefix_);
  if (!removed.ok()) {
    log::Warn("Failed to remove sandbox network", {{"prefix", prefix_}, {"err", removed}});
  }
}

std::string Network::block_cidr() const { return BlockCidr(block_); }
std::string Network::node_cidr(int node) const { return NodeCidr(block_, node); }
std::string Network::node_gateway(int node) const { return NodeAddress(block_, node, 1); }
std::string Network::bridge(int node) const { return BridgeName(prefix_, node); }

absl::Status Network::CheckNode(int node) const {
  if (node >= 0 && node < nodes()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("node ", node, " is not one of this sandbox network's 0 to ", nodes() - 1));
}

absl::Status Network::CreateNode(int node) {
  const std::string br = bridge(node), ifb = IfbName(prefix_, node);
  RETURN_IF_ERROR(
      RunTool("ip", {"link", "add", br, "group", link_group_, "type", "bridge"}).status());
  RETURN_IF_ERROR(RunTool("ip", {"addr", "add", node_gateway(node) + "/24", "dev", br}).status());
  // Forwarding on the bridges only (IPv4 decides by the receiving interface): the host's other
  // interfaces keep theirs, and the setting goes with the bridge.
  RETURN_IF_ERROR(WriteSysctl(absl::StrCat("/proc/sys/net/ipv4/conf/", br, "/forwarding"), "1"));
  RETURN_IF_ERROR(RunTool("ip", {"rule", "add", "pref", absl::StrCat(kRuleToBlock), "iif", br, "to",
                                 block_cidr(), "lookup", "main"})
                      .status());
  RETURN_IF_ERROR(RunTool("ip", {"rule", "add", "pref", absl::StrCat(kRuleUnreachable), "iif", br,
                                 "unreachable"})
                      .status());
  RETURN_IF_ERROR(RunTool("ip", {"link", "set", br, "up"}).status());
  // The uplink is the bridge's own interface: what the host routes into the node leaves through
  // the bridge's egress qdisc, what the node's sandboxes send off-node enters the host through
  // the bridge's ingress; traffic between sandboxes of one node is bridged port to port and
  // passes neither. Ingress has no shaping qdisc, so the ingress hook redirects everything to an
  // ifb, whose egress qdisc shapes (or drops) it. Shaping the veth ends instead would cap each
  // sandbox, not the node, and would slow traffic inside the node too.
  RETURN_IF_ERROR(
      RunTool("ip", {"link", "add", ifb, "group", link_group_, "type", "ifb"}).status());
  RETURN_IF_ERROR(RunTool("ip", {"link", "set", ifb, "up"}).status());
  RETURN_IF_ERROR(
      RunTool("tc", {"qdisc", "add", "dev", br, "handle", "ffff:", "ingress"}).status());
  RETURN_IF_ERROR(RunTool("tc", {"filter", "add", "dev", br, "parent", "ffff:", "protocol", "all",
                                 "u32", "match", "u32", "0", "0", "action", "mirred", "egress",
                                 "redirect", "dev", ifb})
                      .status());
  return ApplyUplink(node);
}

absl::Status Network::ApplyUplink(int node) {
  for (const std::string& dev : {bridge(node), IfbName(prefix_, node)}) {
    // blackhole is built into every kernel with qdiscs (this one has no gact to drop with).
    if (cut_[node]) {
      RETURN_IF_ERROR(
          RunTool("tc", {"qdisc", "replace", "dev", dev, "root", "blackhole"}).status());
    } else if (rate_[node]) {
      // Rebuilt whole: htb's classes and filter cannot be replaced in place.
      if (root_qdisc_[node]) {
        RETURN_IF_ERROR(RunTool("tc", {"qdisc", "del", "dev", dev, "root"}).status());
      }
      for (const std::vector<std::string>& args : Shaper(dev, *rate_[node], queue_)) {
        RETURN_IF_ERROR(RunTool("tc", args).status());
      }
    } else if (root_qdisc_[node]) {
      RETURN_IF_ERROR(RunTool("tc", {"qdisc", "del", "dev", dev, "root"}).status());
    }
  }
  root_qdisc_[node] = cut_[node] || rate_[node].has_value();
  return absl::OkStatus();
}

absl::Status Network::CutNode(int node) {
  RETURN_IF_ERROR(CheckNode(node));
  cut_[node] = true;
  RETURN_IF_ERROR(ApplyUplink(node), "cutting sandbox node ", node);
  log::Info("Cut sandbox node", {{"prefix", prefix_}, {"node", node}});
  return absl::OkStatus();
}

absl::Status Network::HealNode(int node) {
  RETURN_IF_ERROR(CheckNode(node));
  cut_[node] = false;
  RETURN_IF_ERROR(ApplyUplink(node), "healing sandbox node ", node);
  log::Info("Healed sandbox node", {{"prefix", prefix_}, {"node", node}});
  return absl::OkStatus();
}

absl::Status Network::SetUplinkRate(int node, std::optional<int64_t> bits_per_second) {
  RETURN_IF_ERROR(CheckNode(node));
  if (bits_per_second && (*bits_per_second < kMinRate || *bits_per_second > kMaxRate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "uplink rate ", *bits_per_second, " bit/s is outside ", kMinRate, " to ", kMaxRate));
  }
  rate_[node] = bits_per_second;
  return ApplyUplink(node);
}

}  // namespace kubetrain::sandbox
