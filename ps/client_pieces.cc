// PsClient::PushAndPull of a sync step in pieces (ClientOptions::pipeline; docs/architecture.md
// §5.5). Each ps task's partitions are cut into pieces (PlacementPlan::Pieces). For every ps at
// once, the worker pushes piece 0; as soon as the ps has taken a piece (its Push answered, which
// happens once the gradients are summed, not once the step is complete), the worker pulls that
// piece for the next step and pushes the next one. The ps keeps a round per partition and
// answers a parked pull as soon as the partitions it names have their step, so a piece's values
// travel back while later pieces' gradients are still arriving: the links carry both ways at
// once instead of idling at the step's two barriers, as BytePS pipelines its partitions.
// A worker runs at most ClientOptions::push_window_bytes ahead of the pieces whose values it has
// back, so that no worker's pushes crowd out the pushes the next round waits for.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "grpcpp/support/async_unary_call.h"
#include "ps/client.h"
#include "ps/client_calls.h"
#include "ps/wire.h"

namespace kubetrain::ps {

absl::StatusOr<PushResult> PsClient::PushAndPullInPieces(
    std::span<const std::span<const float>> gradients, const Version& at,
    std::span<const std::span<float>> values, const Version& min_version) {
  const std::vector<int> all = AllPs();
  const size_t n = all.size();
  SlicePins pins;  // declared first: waits, when destroyed, for gRPC to let go of `gradients`
  std::vector<ShmLinks::Lease> leases = shm_->AcquireAll(all);
  calls::PushCall push{plan_,  gradients, at,      options_.worker,     pins,
                       leases, {at, 0},   nullptr, options_.compression};
  calls::PullCall pull = MakePullCall(values, &min_version, leases);

  struct Rpc {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
    int ps = 0;
    size_t piece = 0;
    bool is_push = false;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Rpc>> rpcs;
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.pull_timeout);
  size_t in_flight = 0;
  auto start = [&](int ps, size_t piece, bool is_push) {
    auto rpc = std::make_unique<Rpc>();
    rpc->ps = ps;
    rpc->piece = piece;
    rpc->is_push = is_push;
    rpc->context.set_deadline(deadline);
    const std::vector<size_t>& partitions = pieces_[ps][piece];
    if (is_push) {
      push.BuildFor(ps, partitions, rpc->request);
      rpc->reader = calls::PushCall::Start(stubs_[ps], &rpc->context, rpc->request, &cq);
    } else {
      pull.BuildFor(ps, partitions, rpc->request);
      rpc->reader = calls::PullCall::Start(stubs_[ps], &rpc->context, rpc->request, &cq);
    }
    rpc->reader->Finish(&rpc->response, &rpc->status, reinterpret_cast<void*>(rpcs.size()));
    rpcs.push_back(std::move(rpc));
    ++in_flight;
  };

  // What the pieces' answers add up to, per ps: the smallest step and count, and whether any
  // piece's push was stale.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> steps(n, kNone), applied(n, kNone);
  std::vector<bool> stale(n, false);
  absl::Status first;
  auto fail = [&](absl::Status status) {
    first = std::move(status);
    for (auto& rpc : rpcs) rpc->context.TryCancel();
  };
  // Per ps task: which pieces have their values back (all of the first `back` of them), and the
  // piece held until the window lets it go (0: none; piece 0 never waits).
  struct Progress {
    std::vector<bool> answered;
    size_t back = 0;
    size_t held = 0;
  };
  std::vector<Progress> progress(n);
  for (int ps : all) progress[ps].answered.assign(pieces_[ps].size(), false);
  // Whether `piece` may be pushed to `ps` now: the pieces before it still owed an answer are
  // one, or hold at most the window.
  auto may_push = [&](int ps, size_t piece) {
    const size_t from = progress[ps].back;
    if (options_.push_window_bytes == 0 || piece <= from + 1) return true;
    uint64_t owed = 0;
    for (size_t i = from; i < piece; ++i) owed += piece_bytes_[ps][i];
    return owed <= options_.push_window_bytes;
  };
  auto push_next = [&](int ps, size_t piece) {
    if (piece >= pieces_[ps].size()) return;
    if (may_push(ps, piece)) {
      start(ps, piece, /*is_push=*/true);
    } else {
      progress[ps].held = piece;
    }
  };
  for (int ps : all) start(ps, 0, /*is_push=*/true);
  while (in_flight > 0) {
    void* tag = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus next = NextEvent(cq, &tag, &ok);
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) {
      if (first.ok() && Stopped()) fail(absl::CancelledError("PushAndPull: stopped"));
      continue;
    }
    --in_flight;
    Rpc& rpc = *rpcs[reinterpret_cast<size_t>(tag)];
    if (!first.ok()) continue;
    absl::Status status = FromGrpc(rpc.status);
    if (status.ok() && rpc.is_push) {
      const int before = push.result.stale;
      status = push.Done(rpc.ps, rpc.response);
      if (push.result.stale != before) stale[rpc.ps] = true;
      if (status.ok()) {
        start(rpc.ps, rpc.piece, /*is_push=*/false);
        push_next(rpc.ps, rpc.piece + 1);
      }
    } else if (status.ok()) {
      status = pull.Done(rpc.ps, rpc.response);
      steps[rpc.ps] = std::min(steps[rpc.ps], pull.version.steps[rpc.ps]);
      applied[rpc.ps] = std::min(applied[rpc.ps], pull.version.applied[rpc.ps]);
      Progress& p = progress[rpc.ps];
      if (status.ok()) {
        p.answered[rpc.piece] = true;
        while (p.back < p.answered.size() && p.answered[p.back]) ++p.back;
        if (p.held != 0 && may_push(rpc.ps, p.held)) start(rpc.ps, std::exchange(p.held, 0), true);
      }
    }
    if (!status.ok()) {
      fail(Annotate(status, absl::StrCat(rpc.is_push ? "Push" : "Pull", " of piece ", rpc.piece,
                                         " ps ", rpc.ps, " (", addresses_[rpc.ps], ")")));
    }
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  if (first.ok()) first = pull.coverage.Complete(plan_, all);
  rpcs.clear();  // the requests hold the pinned gradient slices
  pins.WaitUntilReleased();
  if (!first.ok()) {
    // A ps may still be reading the gradients or writing the values: never use that buffer again.
    for (ShmLinks::Lease& lease : leases) lease.Discard();
    return first;
  }
  PushResult result{std::move(pull.version), 0};
  result.version.steps = std::move(steps);
  result.version.applied = std::move(applied);
  result.stale = static_cast<int>(std::count(stale.begin(), stale.end(), true));
  return result;
}

}  // namespace kubetrain::ps
