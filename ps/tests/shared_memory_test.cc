// Pushes and pulls through shared memory (ps/shared_memory.h): the same values as over gRPC
// bytes, what the ps refuses to map, and recovery when the ps forgets a region.
#include "ps/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "ps/client.h"
#include "ps/service.h"
#include "ps/tests/ps_cluster.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using testing::Buffers;
using testing::Cluster;
using ::testing::HasSubstr;
using testing::Spans;

// Two variables over two ps, 8 MB in all: over gRPC's 4 MiB default message.
PlacementPlan Plan() {
  auto plan = PlacementPlan::Build({{"dense/kernel", 2'000'000}, {"dense/bias", 256}}, 2);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// Element i of each variable valued i % 5.
ModelState Initial(const PlacementPlan& plan) {
  return testing::InitialState(plan, {UpdateMode::kAsync, 1, {.learning_rate = 1}}, 5);
}

std::vector<std::span<const float>> ConstSpans(std::vector<std::vector<float>>& b) {
  return {b.begin(), b.end()};
}

TEST(PsSharedMemory, PushAndPullMoveTheSameValuesWithoutTensorBytesOnTheWire) {
  Cluster cluster(2);
  const PlacementPlan plan = Plan();
  auto shm = cluster.Client(plan, true);
  auto grpc = cluster.Client(plan, false);
  ASSERT_THAT(grpc->Init(Initial(plan)), IsOk());
  const double model_bytes = static_cast<double>(plan.BytesOn(0) + plan.BytesOn(1));

  auto values = Buffers(plan, 0);
  ASSERT_THAT(shm->Pull(Spans(values)), IsOk());  // attaches, then pulls through the buffers
  const double received = cluster.Total("kubetrain_ps_received_bytes_total"),
               sent = cluster.Total("kubetrain_ps_sent_bytes_total");
  for (int round = 1; round <= 3; ++round) {
    auto grads = Buffers(plan, 0.5f * float(round));
    auto version = shm->Pull(Spans(values));
    ASSERT_THAT(version, IsOk());
    auto pushed = shm->Push(ConstSpans(grads), *version);
    ASSERT_THAT(pushed, IsOk());
    EXPECT_EQ(pushed->version.steps, std::vector<int64_t>({round, round}));
  }
  ASSERT_THAT(shm->Pull(Spans(values)), IsOk());
  // Three pushes and four pulls of 8 MB each, and not a tenth of one through the sockets.
  EXPECT_LT(cluster.Total("kubetrain_ps_received_bytes_total") - received +
                cluster.Total("kubetrain_ps_sent_bytes_total") - sent,
            model_bytes / 10);
  EXPECT_GE(cluster.Total("kubetrain_ps_shared_memory_bytes_total"), 7 * model_bytes);

  // The values a gRPC client pulls agree with the shared-memory client's, to the bit.
  auto over_grpc = Buffers(plan, -1);
  ASSERT_THAT(grpc->Pull(Spans(over_grpc)), IsOk());
  EXPECT_GT(cluster.Total("kubetrain_ps_sent_bytes_total") - sent, model_bytes);
  ASSERT_EQ(values, over_grpc);
  const float applied = 0.5f + 1.0f + 1.5f;
  for (size_t v = 0; v < values.size(); ++v) {
    for (size_t i = 0; i < values[v].size(); i += 997) {
      ASSERT_EQ(values[v][i], float(i % 5) - applied)
          << plan.variables()[v].name << "[" << i << "]";
    }
  }
}

TEST(PsSharedMemory, APsWithSharedMemoryOffKeepsItsClientsOnBytes) {
  Cluster cluster(2, {.shared_memory = false});
  const PlacementPlan plan = Plan();
  auto client = cluster.Client(plan, true);
  ASSERT_THAT(client->Init(Initial(plan)), IsOk());
  auto values = Buffers(plan, 0);
  auto version = client->Pull(Spans(values));
  ASSERT_THAT(version, IsOk());
  auto grads = Buffers(plan, 1);
  ASSERT_THAT(client->Push(ConstSpans(grads), *version), IsOk());
  ASSERT_THAT(client->Pull(Spans(values)), IsOk());
  EXPECT_EQ(values[0][1], 0.0f);  // 1 - 1
  EXPECT_GT(cluster.Total("kubetrain_ps_received_bytes_total"),
            static_cast<double>(plan.BytesOn(0) + plan.BytesOn(1)));
}

TEST(PsSharedMemory, AClientWhoseRegionThePsForgotAttachesAgain) {
  // A ps that keeps one region: each client's offer evicts the other's, as a restart would.
  Cluster cluster(2, {.max_shm_regions = 1});
  const PlacementPlan plan = Plan();
  auto first = cluster.Client(plan, true);
  auto second = cluster.Client(plan, true);
  ASSERT_THAT(first->Init(Initial(plan)), IsOk());
  auto a = Buffers(plan, 0), b = Buffers(plan, 0);
  ASSERT_THAT(first->Pull(Spans(a)), IsOk());
  auto version = second->Pull(Spans(b));  // evicts the first's regions
  ASSERT_THAT(version, IsOk());
  // A pull is retried with a fresh buffer: the caller never sees the eviction.
  ASSERT_THAT(first->Pull(Spans(a)), IsOk());
  EXPECT_EQ(a, b);
  // A push is not retried (it may have reached another ps): ABORTED, as after a re-initialised
  // ps, so the worker pulls again; the next push attaches afresh.
  auto grads = Buffers(plan, 1);
  EXPECT_THAT(second->Push(ConstSpans(grads), *version),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("shared-memory region")));
  version = second->Pull(Spans(b));
  ASSERT_THAT(version, IsOk());
  ASSERT_THAT(second->Push(ConstSpans(grads), *version), IsOk());
  ASSERT_THAT(second->Pull(Spans(b)), IsOk());
  EXPECT_EQ(b[0][1], 0.0f);  // 1 - 1
}

// ---- What the ps refuses to map ----

std::unique_ptr<ShmBuffer> Buffer(const PlacementPlan& plan) {
  std::vector<const PartitionSpec*> specs;
  for (size_t index : plan.PartitionsOn(0)) specs.push_back(&plan.partitions()[index]);
  auto buffer = ShmBuffer::Create(specs);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  return *std::move(buffer);
}

TEST(ShmRegion, MapsAnOfferAndRefusesEveryForgery) {
  const PlacementPlan plan = Plan();
  std::unique_ptr<ShmBuffer> buffer = Buffer(plan);
  const v1::AttachRequest offer = buffer->Offer(3);
  auto region = ShmRegion::Attach(offer);
  ASSERT_THAT(region, IsOk());
  const PartitionSpec& first = plan.partitions()[plan.PartitionsOn(0)[0]];
  buffer->gradient(0)[7] = 42;
  auto gradient = (*region)->Gradient(first.key, first.length);
  ASSERT_THAT(gradient, IsOk());
  EXPECT_EQ((*gradient)[7], 42);  // the same memory
  EXPECT_THAT((*region)->Gradient(first.key, first.length + 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(first.key.variable)));

  auto refused = [](v1::AttachRequest forged) { return ShmRegion::Attach(forged).status(); };
  v1::AttachRequest forged = offer;
  forged.mutable_nonce()->front() ^= 1;
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("nonce differs")));
  forged = offer;
  forged.set_bytes(offer.bytes() + 64);
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not a file of")));
  forged = offer;
  forged.set_fd(STDERR_FILENO);
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a kubetrain memfd")));
  forged = offer;
  forged.set_pid(0x3ffffff0);  // above any pid_max: a worker on another host
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not on this ps's host")));
  forged = offer;
  forged.mutable_slots(0)->set_value_offset(offer.bytes() - 64);
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the")));
  forged = offer;
  forged.mutable_slots(0)->set_gradient_offset(65);
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("misaligned")));
  forged = offer;
  *forged.add_slots() = offer.slots(0);
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two slots")));

  // A memfd of the right name, size and nonce that the worker could still shrink: a ps mapping
  // it would fault when it did.
  const int fd = memfd_create(kShmName, MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(offer.bytes())), 0);
  ASSERT_EQ(pwrite(fd, offer.nonce().data(), offer.nonce().size(), 0),
            static_cast<ssize_t>(offer.nonce().size()));
  forged = offer;
  forged.set_fd(fd);
  EXPECT_THAT(refused(forged),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not sealed")));
  close(fd);
}

TEST(ShmRegistry, ForgetsTheRegionOfAWorkerThatWasKilled) {
  const PlacementPlan plan = Plan();
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a worker: offers a buffer, then waits to be killed
    std::unique_ptr<ShmBuffer> buffer = Buffer(plan);
    const std::string offer = buffer->Offer(1).SerializeAsString();
    const uint32_t n = static_cast<uint32_t>(offer.size());
    if (write(from_child[1], &n, sizeof(n)) != sizeof(n) ||
        write(from_child[1], offer.data(), n) != static_cast<ssize_t>(n)) {
      _exit(1);
    }
    char byte;
    (void)read(to_child[0], &byte, 1);
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  uint32_t n = 0;
  ASSERT_EQ(read(from_child[0], &n, sizeof(n)), static_cast<ssize_t>(sizeof(n)));
  std::string bytes(n, '\0');
  ASSERT_EQ(read(from_child[0], bytes.data(), n), static_cast<ssize_t>(n));
  v1::AttachRequest offer;
  ASSERT_TRUE(offer.ParseFromString(bytes));

  ShmRegistry registry;
  auto theirs = ShmRegion::Attach(offer);  // another process's memory
  ASSERT_THAT(theirs, IsOk());
  EXPECT_TRUE((*theirs)->Alive());
  registry.Add(*std::move(theirs));
  std::unique_ptr<ShmBuffer> mine = Buffer(plan);
  auto own = ShmRegion::Attach(mine->Offer(2));
  ASSERT_THAT(own, IsOk());
  const uint64_t kept = registry.Add(*own);
  EXPECT_EQ(registry.size(), 2u);

  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(to_child[1]);
  close(from_child[0]);
  registry.Add(*own);  // the next offer sweeps the dead worker's region
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_THAT(registry.Find(kept), IsOk());
  EXPECT_THAT(registry.Find(kept + 1), StatusIs(absl::StatusCode::kAborted));
}

// A worker process in new `namespaces` (unshare flags): its offer, and a handle that ends it.
// Skips (empty offer) where namespaces cannot be made (not root).
struct ForeignWorker {
  v1::AttachRequest offer;
  pid_t pid = -1;
  int hold = -1;  // closing it lets the worker exit
  ~ForeignWorker() {
    if (hold >= 0) close(hold);
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
};

void StartForeignWorker(const PlacementPlan& plan, int namespaces, ForeignWorker* worker) {
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_child[1]);
    close(from_child[0]);
    uint32_t n = 0;
    if (unshare(namespaces) != 0)
      _exit(write(from_child[1], &n, sizeof(n)) == static_cast<ssize_t>(sizeof(n)) ? 0 : 1);
    // A new PID namespace takes in only children: the worker is the first, its PID 1.
    if ((namespaces & CLONE_NEWPID) != 0) {
      const pid_t inner = fork();
      if (inner != 0) _exit(inner > 0 && waitpid(inner, nullptr, 0) == inner ? 0 : 1);
    }
    std::unique_ptr<ShmBuffer> buffer = Buffer(plan);
    const std::string offer = buffer->Offer(1).SerializeAsString();
    n = static_cast<uint32_t>(offer.size());
    if (write(from_child[1], &n, sizeof(n)) != sizeof(n) ||
        write(from_child[1], offer.data(), n) != static_cast<ssize_t>(n)) {
      _exit(1);
    }
    char byte;
    (void)!read(to_child[0], &byte, 1);
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  worker->pid = child;
  worker->hold = to_child[1];
  uint32_t n = 0;
  ASSERT_EQ(read(from_child[0], &n, sizeof(n)), static_cast<ssize_t>(sizeof(n)));
  std::string bytes(n, '\0');
  ASSERT_EQ(read(from_child[0], bytes.data(), n), static_cast<ssize_t>(n));
  close(from_child[0]);
  ASSERT_TRUE(worker->offer.ParseFromString(bytes));
}

// A worker in another pod (pods on one machine: their own IPC namespace, and PID namespace or
// not) is not mapped, though /proc may reach its memory; one in this process space is.
TEST(ShmRegion, MapsOnlyAWorkerInItsOwnPidAndIpcNamespaces) {
  const PlacementPlan plan = Plan();
  ForeignWorker same;
  StartForeignWorker(plan, 0, &same);
  EXPECT_THAT(ShmRegion::Attach(same.offer), IsOk());
  EXPECT_EQ(same.offer.process_space(), ProcessSpace());
  EXPECT_FALSE(ProcessSpace().empty());
  for (int namespaces : {CLONE_NEWIPC, CLONE_NEWPID | CLONE_NEWIPC, CLONE_NEWPID}) {
    ForeignWorker other;
    StartForeignWorker(plan, namespaces, &other);
    if (other.offer.pid() == 0) GTEST_SKIP() << "making namespaces needs root";
    EXPECT_NE(other.offer.process_space(), ProcessSpace());
    EXPECT_THAT(ShmRegion::Attach(other.offer),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("another pod")))
        << "namespaces " << namespaces;
  }
}

}  // namespace
}  // namespace kubetrain::ps
