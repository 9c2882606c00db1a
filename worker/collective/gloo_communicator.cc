#include "worker/collective/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"
#include "worker/collective/float_reductions.h"

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

// Upper bound on the ring's segments (Gloo keeps two in flight per peer). Gloo's default of 1 MiB
// costs a send/receive-ready handshake and a wake-up of its I/O thread per MiB; 4 MiB segments
// make all-reduces of 16 MiB and more about 10% faster over TCP (bench/allreduce). Buffers up to
// 2 x ranks MiB are unaffected: Gloo caps a segment at 1/(2 x ranks) of the buffer.
constexpr size_t kMaxGlooSegmentBytes = size_t{4} << 20;

// All-reduces of up to kMaxRingBytes run through Gloo's ring algorithm objects, built once per
// buffer and kept: their buffers are registered with the pairs once, and a step's all-reduce is
// then only the ring's sends and receives. The one-call gloo::allreduce registers the buffer
// and exchanges ready notices for each segment on every call, which at the size of a training
// step's fused gradients costs more than the transfer: the MLP (940 KB of gradients) trained
// at 42.9k examples/s with it and 72.8k with kept rings, two workers on two cores (`kubetrain
// run` of deploy/examples/fashion-mnist-allreduce.yaml; bench/peers), and on a slower machine
// 21.8k with it and 32.1k with kept rings (`bench/peers/run.py --parts mlp --modes
// allreduce-gloo`). Larger buffers take the one-call path, whose segments pipeline the transfer
// with the reduction where the two-rank ring sends the whole buffer before it reduces: two
// ranks on two cores (`allreduce_bench`), 2 MiB in 3.0-3.9 ms against 4.8-5.1 ms, 4 MiB alike,
// 16 MiB in 16-18 ms against 25-27 ms. It needs no ring's staging memory either (about twice
// its buffer).
constexpr size_t kMaxRingBytes = size_t{1} << 20;
constexpr size_t kRingCacheBytes = size_t{64} << 20;  // the kept rings' buffers, together
// Close's goodbye: every rank of a run that ended together gets there within moments of the
// others; one that has not in this long is stuck, and closing is what is left to do.
constexpr absl::Duration kCloseTimeout = absl::Seconds(10);

const gloo::ReductionFunction<float>* RingReduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return gloo::ReductionFunction<float>::min;
    case ReduceOp::kMax:
      return gloo::ReductionFunction<float>::max;
    case ReduceOp::kSum:
      break;
  }
  return gloo::ReductionFunction<float>::sum;
}

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
  log::Info("Gloo communicator connected",
            {{"rank", options.rank}, {"size", options.size}, {"address", options.hostname}});
  return comm;
}

GlooCommunicator::~GlooCommunicator() {
  // Gloo's ring objects free their staging memory before they unregister it from the pairs, so
  // a peer's data arriving in between (a peer still in a step while this rank stops or re-forms
  // its group) would land in freed memory: close the connections first.
  ClosePairs();
  rings_.clear();
}

void GlooCommunicator::ClosePairs() {
  if (context_ == nullptr) return;
  for (int i = 0; i < options_.size; ++i) {
    if (i == options_.rank) continue;
    std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(i);
    if (pair != nullptr) pair->close();
  }
}

gloo::Algorithm& GlooCommunicator::Ring(float* data, size_t count, ReduceOp op) {
  for (auto it = rings_.begin(); it != rings_.end(); ++it) {
    if (it->data == data && it->count == count && it->op == op) {
      std::rotate(it, it + 1, rings_.end());
      return *rings_.back().ring;
    }
  }
  // Every rank makes the same calls in the same order, so each builds (and drops) the same rings
  // at the same point, and the slots the rings take from the context agree.
  size_t kept = count * sizeof(float);
  for (const CachedRing& r : rings_) kept += r.count * sizeof(float);
  while (!rings_.empty() && kept > kRingCacheBytes) {
    kept -= rings_.front().count * sizeof(float);
    rings_.erase(rings_.begin());
  }
  std::shared_ptr<gloo::Algorithm> ring;
  const std::vector<float*> buffers = {data};
  if (options_.size == 2) {
    // Two ranks: each sends its whole buffer once, the chunked ring's traffic without its
    // per-chunk exchanges (with both ranks starting together, 3.9 ms for 940 KB against 0.3 ms
    // in a two-process loop of 600 all-reduces).
    ring = std::make_shared<gloo::AllreduceRing<float>>(context_, buffers, static_cast<int>(count),
                                                        RingReduction(op));
  } else {
    ring = std::make_shared<gloo::AllreduceRingChunked<float>>(
        context_, buffers, static_cast<int>(count), RingReduction(op));
  }
  rings_.push_back({data, count, op, std::move(ring)});
  return *rings_.back().ring;
}

absl::Status GlooCommunicator::AllReduce(float* data, size_t count, ReduceOp op) {
  if (options_.size == 1 || count == 0) return absl::OkStatus();
  if (count * sizeof(float) <= kMaxRingBytes) {
    return GlooCall("allreduce", [&] { Ring(data, count, op).run(); });
  }
  return GlooCall("allreduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setMaxSegmentSize(kMaxGlooSegmentBytes);
    opts.setReduceFunction(FloatReductionFor(op));
    gloo::allreduce(opts);
  });
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
  return s;
}

}  // namespace kubetrain::worker
