#include "worker/collective/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"

namespace kubetrain::worker {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Gloo reports errors by throwing; every entry point into it goes through here. A timeout or a
// lost peer (IoException) is UNAVAILABLE: the job can restart and resume from a checkpoint.
template <typename F>
absl::Status GlooCall(absl::string_view what, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(absl::StrCat("gloo ", what, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo ", what, ": ", e.what()));
  }
}

// Gloo's Store interface over ours; Gloo expects failures as exceptions.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(KeyValueStore& store, absl::Duration timeout) : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_.Set(key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(std::string(s.message()));
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = store_.Get(key, timeout_);
    if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    return std::vector<char>(v->begin(), v->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, ToMillis(timeout_)); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> v = store_.Get(key, absl::FromChrono(timeout));
      if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    }
  }

 private:
  KeyValueStore& store_;
  absl::Duration timeout_;
};

// Close's goodbye: every rank of a run that ended together gets there within moments of the
// others; one that has not in this long is stuck, and closing is what is left to do.
constexpr absl::Duration kCloseTimeout = absl::Seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    KeyValueStore& store, const GlooOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", options.rank, " is outside a world of ", options.size));
  }
  if (options.hostname.empty() || options.hostname == "0.0.0.0" || options.hostname == "::") {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: listen address \"", options.hostname,
                     "\" cannot be dialled by peers; give this host's IP (--bind-address)"));
  }
  std::unique_ptr<GlooCommunicator> comm(new GlooCommunicator(options));
  if (options.size == 1) return comm;  // nothing to connect; every collective is the identity
  // First, so that Gloo's I/O thread keeps to this rank's CPUs too.
  ASSIGN_OR_RETURN(comm->binding_, CpuBinding::Bind(store, "ring/cpus/", options.rank, options.size,
                                                    options.timeout, options.bind_cpus));
  absl::Status s = GlooCall("rendezvous", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(ToMillis(options.timeout));
    StoreAdapter adapter(store, options.timeout);
    context->connectFullMesh(adapter, device);
    comm->context_ = std::move(context);
  });
  if (!s.ok()) return s;
  ASSIGN_OR_RETURN(comm->ring_, TcpRing::Connect(store, {.rank = options.rank,
                                                         .size = options.size,
                                                         .hostname = options.hostname,
                                                         .timeout = options.timeout,
                                                         .stop = options.stop}));
  log::Info("Gloo communicator connected", {{"rank", options.rank},
                                            {"size", options.size},
                                            {"address", options.hostname},
                                            {"cpus", comm->binding_.Describe()}});
  return comm;
}

GlooCommunicator::~GlooCommunicator() {
  // A peer still in a step (this rank stopped or re-forms its group) sees the connections close
  // rather than waiting out its timeout.
  ClosePairs();
}

void GlooCommunicator::ClosePairs() {
  if (ring_ != nullptr) ring_->Shutdown();
  if (context_ == nullptr) return;
  for (int i = 0; i < options_.size; ++i) {
    if (i == options_.rank) continue;
    std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(i);
    if (pair != nullptr) pair->close();
  }
}

absl::Status GlooCommunicator::AllReduce(float* data, size_t count, ReduceOp op) {
  if (options_.size == 1 || count == 0) return absl::OkStatus();
  return ring_->AllReduce(data, count, op);
}

absl::Status GlooCommunicator::AllReduceManyCompressed(absl::Span<const absl::Span<float>> buffers,
                                                       ps::WireFloat wire) {
  if (options_.size == 1) return absl::OkStatus();
  for (absl::Span<float> b : buffers) {
    if (b.empty()) continue;
    RETURN_IF_ERROR(ring_->AllReduce(b.data(), b.size(), ReduceOp::kSum, wire));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= options_.size) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  if (options_.size == 1 || count == 0) return absl::OkStatus();
  return GlooCall("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data, count);  // the root sends its output buffer when it has no input
    opts.setRoot(root);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Barrier() {
  if (options_.size == 1) return absl::OkStatus();
  return GlooCall("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    gloo::barrier(opts);
  });
}

absl::Status GlooCommunicator::Close() {
  // Gloo fails every wait on a connection once its peer closes it, even a wait whose data has
  // already arrived: a rank that closed right after the last collective could fail a peer still
  // being woken for that collective's last message. A barrier first: once it returns here, every
  // rank has finished its collectives (a peer still in the barrier may see it cut short, which
  // Close reports and callers ignore).
  absl::Status s = absl::OkStatus();
  if (options_.size > 1 && context_ != nullptr) {
    s = GlooCall("closing", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(ToMillis(std::min(options_.timeout, kCloseTimeout)));
      gloo::barrier(opts);
    });
  }
  ClosePairs();
  binding_.Release();
  return s;
}

}  // namespace kubetrain::worker
