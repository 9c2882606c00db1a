// The ps against hostile or careless peers, over real gRPC on 127.0.0.1: malformed and oversized
// requests, non-finite values, thousands of pulls waiting for a step, and SIGTERM to the real
// kubetrain-ps process in the middle of all that.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "prometheus/registry.h"
#include "ps/server.h"
#include "ps/tests/ps_cluster.h"

extern char** environ;

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;

std::string Floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// An Init for one variable per entry of `lengths` ("v0", "v1", ...), each one partition of
// floats equal to 1, trained by plain SGD with learning rate 1.
v1::InitRequest MakeInit(const std::vector<size_t>& lengths,
                         v1::UpdateMode mode = v1::UPDATE_MODE_SYNC) {
  v1::InitRequest init;
  init.mutable_config()->set_mode(mode);
  init.mutable_config()->set_replicas_to_aggregate(1);
  init.mutable_config()->mutable_optimizer()->set_kind(v1::OPTIMIZER_SGD);
  init.mutable_config()->mutable_optimizer()->set_learning_rate(1.0);
  init.set_run_id("run-1");
  for (size_t i = 0; i < lengths.size(); ++i) {
    v1::Partition* p = init.add_partitions()->mutable_partition();
    p->mutable_key()->set_variable("v" + std::to_string(i));
    p->set_length(lengths[i]);
    p->set_values(Floats(std::vector<float>(lengths[i], 1.0f)));
  }
  return init;
}

v1::PushRequest MakePush(const v1::InitRequest& init, float fill, int64_t step = 0) {
  v1::PushRequest push;
  push.set_run_id(init.run_id());
  push.set_step(step);
  for (const v1::PartitionState& state : init.partitions()) {
    v1::Partition* g = push.add_gradients();
    *g->mutable_key() = state.partition().key();
    g->set_length(state.partition().length());
    g->set_values(Floats(std::vector<float>(state.partition().length(), fill)));
  }
  return push;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address, int tag = 0) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt("kubetrain.test.channel", tag);  // distinct args: a connection of its own
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

class PsFixture : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {.address = "127.0.0.1:0"}) {
    metrics_ = std::make_unique<PsMetrics>(registry_);
    auto server = PsServer::Start(options, metrics_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = Channel(server_->address());
    stub_ = v1::ParameterServer::NewStub(channel_);
  }

  grpc::Status Init(const v1::InitRequest& init) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::InitResponse response;
    return stub_->Init(&context, init, &response);
  }

  grpc::Status Push(const v1::PushRequest& push, v1::PushResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return stub_->Push(&context, push, response);
  }

  grpc::Status Pull(const v1::PullRequest& pull, v1::PullResponse* response,
                    absl::Duration timeout = absl::Seconds(30)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return stub_->Pull(&context, pull, response);
  }

  // Sends `bytes` as the whole request of `method`, bypassing any protobuf coding.
  grpc::Status Raw(const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(),
        grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &context,
        request, &response);
  }

  double Requests(const std::string& method, const std::string& code) {
    // A method/code pair not yet counted has no sample: none so far.
    return std::max(0.0, testing::Sample(registry_, "kubetrain_ps_requests_total",
                                         {{"method", method}, {"code", code}}));
  }

  prometheus::Registry registry_;
  std::unique_ptr<PsMetrics> metrics_;
  std::unique_ptr<PsServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

// Many Pulls in flight at once from one thread, answered through a completion queue.
class AsyncPulls {
 public:
  AsyncPulls(std::vector<std::shared_ptr<grpc::Channel>> channels, int count, int64_t min_step,
             absl::Duration timeout) {
    for (auto& channel : channels) stubs_.push_back(v1::ParameterServer::NewStub(channel));
    v1::PullRequest request;
    request.set_min_step(min_step);
    for (int i = 0; i < count; ++i) {
      Call& call = calls_.emplace_back();
      call.context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      call.reader = stubs_[i % stubs_.size()]->AsyncPull(&call.context, request, &cq_);
      call.reader->Finish(&call.response, &call.status, &call);
    }
  }
  ~AsyncPulls() {
    for (Call& call : calls_) call.context.TryCancel();
    Collect(absl::Seconds(30));
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Waits up to `timeout` for every call; returns how many have answered.
  int Collect(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (done_ < static_cast<int>(calls_.size())) {
      void* tag;
      bool ok;
      if (cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline)) !=
          grpc::CompletionQueue::GOT_EVENT) {
        break;
      }
      ++done_;
    }
    return done_;
  }

  int CountCode(grpc::StatusCode code) const {
    int n = 0;
    for (const Call& call : calls_) n += call.status.error_code() == code ? 1 : 0;
    return n;
  }
  const v1::PullResponse& response(int i) const { return calls_[i].response; }

 private:
  struct Call {
    grpc::ClientContext context;
    v1::PullResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PullResponse>> reader;
  };
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
  grpc::CompletionQueue cq_;
  std::deque<Call> calls_;  // a deque never moves them: gRPC holds their addresses
  int done_ = 0;
};

int ThreadCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

// The parked pulls and the channel state settle within milliseconds: poll often.
constexpr absl::Duration kPoll = absl::Milliseconds(5);

TEST_F(PsFixture, PullNamingOnePartitionManyTimesIsRefusedBeforeAnythingIsCopied) {
  Start();
  ASSERT_THAT(Init(MakeInit({1 << 20})), IsOk());  // one 4 MiB partition
  v1::PullRequest pull;
  for (int i = 0; i < 1000; ++i) pull.add_keys()->set_variable("v0");
  v1::PullResponse response;
  const grpc::Status status = Pull(pull, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "partition v0/0 named twice in one pull");
  EXPECT_EQ(Requests("Pull", "INVALID_ARGUMENT"), 1);
  // The same partition once is fine.
  pull.mutable_keys()->DeleteSubrange(1, 999);
  ASSERT_THAT(Pull(pull, &response), IsOk());
  EXPECT_EQ(response.values(0).values().size(), 4u << 20);
}

TEST_F(PsFixture, InitOrPushNamingAPartitionTwiceIsRefused) {
  Start();
  v1::InitRequest twice = MakeInit({4, 4});
  twice.mutable_partitions(1)->mutable_partition()->mutable_key()->set_variable("v0");
  grpc::Status status = Init(twice);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "duplicate partition v0/0");
  EXPECT_FALSE(server_->store().Status().initialized);

  const v1::InitRequest init = MakeInit({4, 4}, v1::UPDATE_MODE_ASYNC);
  ASSERT_THAT(Init(init), IsOk());
  v1::PushRequest push = MakePush(init, 1.0f);
  *push.mutable_gradients(1)->mutable_key() = push.gradients(0).key();
  v1::PushResponse response;
  status = Push(push, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "partition v0/0 pushed twice");
  EXPECT_EQ(server_->store().Status().global_step, 0);
  EXPECT_EQ(Requests("Init", "INVALID_ARGUMENT") + Requests("Push", "INVALID_ARGUMENT"), 2);
}

TEST_F(PsFixture, PullLargerThanTheMessageLimitIsRefusedNamingTheLimit) {
  Start({.address = "127.0.0.1:0", .service = {.max_response_bytes = 6 << 20}});
  ASSERT_THAT(Init(MakeInit({1 << 20, 1 << 20})), IsOk());  // 8 MiB in all
  v1::PullResponse response;
  grpc::Status status = Pull(v1::PullRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("over the 6291456-byte message limit"), std::string::npos)
      << status.error_message();
  v1::PullRequest one;
  one.add_keys()->set_variable("v1");
  EXPECT_THAT(Pull(one, &response), IsOk());
}

TEST_F(PsFixture, InitClaimingAHugeLengthWithoutValuesIsInvalidArgument) {
  Start();
  v1::InitRequest init = MakeInit({4});
  v1::Partition* p = init.mutable_partitions(0)->mutable_partition();
  p->set_length(uint64_t{1} << 62);
  p->clear_values();
  const grpc::Status status = Init(init);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "partition v0/0 has 0 value bytes for length 4611686018427387904; want 4 bytes "
            "(float32) per element");
  EXPECT_EQ(Requests("Init", "INVALID_ARGUMENT"), 1);
}

TEST_F(PsFixture, GarbageRequestBytesAreInvalidArgumentWithAMessage) {
  Start();
  ASSERT_THAT(Init(MakeInit({4})), IsOk());
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01garbage";
  for (const char* method :
       {"Init", "Push", "Pull", "PushAndPull", "Export", "Status", "Shutdown"}) {
    const grpc::Status status =
        Raw(std::string("/kubetrain.v1.ParameterServer/") + method, garbage);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_NE(status.error_message().find("malformed"), std::string::npos)
        << method << ": " << status.error_message();
    EXPECT_EQ(Requests(method, "INVALID_ARGUMENT"), 1) << method;
  }
  EXPECT_FALSE(server_->service().shutdown_requested());
}

TEST_F(PsFixture, AFloodOfRefusalsIsCountedInFullButLoggedAtMostTenLines) {
  Start();
  absl::Mutex mu;
  int lines = 0;
  std::string last;
  log::SetSink([&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    if (line.find("Refused request") == absl::string_view::npos) return;
    ++lines;
    last = std::string(line);
  });
  for (int i = 0; i < 200; ++i) Raw("/kubetrain.v1.ParameterServer/Status", "\xff");
  log::SetSink(nullptr);
  EXPECT_EQ(Requests("Status", "INVALID_ARGUMENT"), 200);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(lines, 10);
  EXPECT_NE(last.find("method=Status"), std::string::npos) << last;
}

TEST_F(PsFixture, NonFiniteGradientIsRefusedNamingPartitionAndIndexAndNothingIsApplied) {
  Start();
  const v1::InitRequest init = MakeInit({8, 32}, v1::UPDATE_MODE_ASYNC);
  ASSERT_THAT(Init(init), IsOk());
  v1::PushRequest push = MakePush(init, 0.5f);
  std::vector<float> bad(32, 0.5f);
  bad[17] = std::numeric_limits<float>::quiet_NaN();
  push.mutable_gradients(1)->set_values(Floats(bad));
  v1::PushResponse response;
  grpc::Status status = Push(push, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "gradient for partition v1/0 has nan at index 17; push refused, nothing applied");
  bad[17] = -std::numeric_limits<float>::infinity();
  push.mutable_gradients(1)->set_values(Floats(bad));
  status = Push(push, &response);
  EXPECT_NE(status.error_message().find("has -inf at index 17"), std::string::npos);
  EXPECT_EQ(testing::Sample(registry_, "kubetrain_ps_nonfinite_rejected_total"), 2);

  v1::PullResponse pulled;
  ASSERT_THAT(Pull(v1::PullRequest(), &pulled), IsOk());
  EXPECT_EQ(pulled.global_step(), 0);
  for (const v1::Partition& p : pulled.values()) {
    std::vector<float> values(p.length());
    std::memcpy(values.data(), p.values().data(), p.values().size());
    for (float v : values) ASSERT_EQ(v, 1.0f) << p.key().variable();
  }
  // Finite gradients still train.
  ASSERT_THAT(Push(MakePush(init, 0.5f), &response), IsOk());
  EXPECT_EQ(response.global_step(), 1);
}

TEST_F(PsFixture, NonFiniteInitValueIsRefused) {
  Start();
  v1::InitRequest init = MakeInit({4, 4});
  init.mutable_partitions(1)->mutable_partition()->set_values(
      Floats({1, 2, 3, std::numeric_limits<float>::infinity()}));
  const grpc::Status status = Init(init);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "partition v1/0 has inf at index 3; every value must be finite");
  EXPECT_FALSE(server_->store().Status().initialized);
}

// Each waiting Pull once held a server thread: 8,000 waiting pulls meant 8,000 threads.
TEST_F(PsFixture, TwoThousandWaitingPullsHoldNoThreadEachAndAllAnswerWhenTheStepComes) {
  Start();
  const v1::InitRequest init = MakeInit({256});
  ASSERT_THAT(Init(init), IsOk());
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(Channel(server_->address(), i + 1));
  {
    AsyncPulls warm(channels, 4, 0, absl::Seconds(30));  // connects every channel
    ASSERT_EQ(warm.Collect(absl::Seconds(30)), 4);
  }
  const int threads_before = ThreadCount();
  constexpr int kPulls = 2000;
  AsyncPulls pulls(channels, kPulls, /*min_step=*/1, absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return server_->service().parked_pulls() == kPulls; },
                         absl::Seconds(30), kPoll))
      << server_->service().parked_pulls();
  const int threads_waiting = ThreadCount();
  EXPECT_LT(threads_waiting - threads_before, 40)
      << threads_before << " threads before, " << threads_waiting << " with the pulls waiting";
  EXPECT_EQ(pulls.Collect(absl::ZeroDuration()), 0);

  v1::PushResponse pushed;
  ASSERT_THAT(Push(MakePush(init, 0.25f), &pushed), IsOk());
  EXPECT_EQ(pushed.global_step(), 1);
  ASSERT_EQ(pulls.Collect(absl::Seconds(30)), kPulls);
  EXPECT_EQ(pulls.CountCode(grpc::StatusCode::OK), kPulls);
  EXPECT_EQ(pulls.response(kPulls - 1).global_step(), 1);
  EXPECT_EQ(server_->service().parked_pulls(), 0u);
  EXPECT_EQ(Requests("Pull", "OK"), kPulls + 4);
}

TEST_F(PsFixture, WaitingPullEndsAtMaxPullWaitOrWhenItsClientGivesUp) {
  Start({.address = "127.0.0.1:0", .service = {.max_pull_wait = absl::Milliseconds(300)}});
  ASSERT_THAT(Init(MakeInit({4})), IsOk());
  v1::PullRequest pull;
  pull.set_min_step(5);
  v1::PullResponse response;
  absl::Time start = absl::Now();
  grpc::Status status = Pull(pull, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_NE(status.error_message().find("global step 0 did not reach 5"), std::string::npos)
      << status.error_message();
  // The bound under test: the pull waited about max_pull_wait, not the client's 30 s deadline.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  // A client deadline shorter than max_pull_wait: the parked pull is dropped with the call.
  start = absl::Now();
  status = Pull(pull, &response, absl::Milliseconds(100));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // ended by the client's deadline
  EXPECT_TRUE(
      Eventually([&] { return server_->service().parked_pulls() == 0; }, absl::Seconds(5), kPoll));
}

TEST_F(PsFixture, StopAnswersWaitingPullsUnavailableAtOnce) {
  Start();
  ASSERT_THAT(Init(MakeInit({16})), IsOk());
  constexpr int kPulls = 300;
  AsyncPulls pulls({channel_}, kPulls, /*min_step=*/7, absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return server_->service().parked_pulls() == kPulls; },
                         absl::Seconds(30), kPoll));
  const absl::Time start = absl::Now();
  server_->Stop(absl::Seconds(1));
  EXPECT_LT(absl::Now() - start,
            absl::Seconds(2));  // Stop's promise: within its grace, and then some
  ASSERT_EQ(pulls.Collect(absl::Seconds(10)), kPulls);
  EXPECT_EQ(pulls.CountCode(grpc::StatusCode::UNAVAILABLE), kPulls);
}

TEST_F(PsFixture, IdleConnectionsAreClosedByTheServer) {
  Start({.address = "127.0.0.1:0", .max_connection_idle = absl::Milliseconds(300)});
  grpc::ClientContext context;
  v1::StatusResponse status;
  ASSERT_THAT(stub_->Status(&context, v1::StatusRequest(), &status), IsOk());
  EXPECT_EQ(channel_->GetState(false), GRPC_CHANNEL_READY);
  // The server's GOAWAY takes the client's connection down to idle.
  EXPECT_TRUE(Eventually([&] { return channel_->GetState(false) == GRPC_CHANNEL_IDLE; },
                         absl::Seconds(10), kPoll));
}

// ---- The kubetrain-ps process ----

class PsProcess {
 public:
  explicit PsProcess(std::vector<std::string> flags) {
    log_path_ = ::testing::TempDir() + "/kubetrain-ps-" + std::to_string(getpid()) + "-" +
                std::to_string(counter_++) + ".log";
    std::vector<std::string> args = {KUBETRAIN_PS_PATH, "--bind-address=127.0.0.1",
                                     "--metrics-port=0"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    spawn_error_ = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~PsProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_path_);
  }

  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // The address from the "Serving parameter server" line; "" if it does not come in time.
  std::string WaitForAddress(absl::Duration timeout) {
    if (spawn_error_ != 0) return "";
    const std::regex serving("Serving parameter server\" address=([0-9.]+:[0-9]+)");
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      std::smatch m;
      const std::string log = Log();
      if (std::regex_search(log, m, serving)) return m[1];
      absl::SleepFor(absl::Milliseconds(20));
    }
    return "";
  }

  // The process's resident memory in KiB (VmRSS of /proc/<pid>/status); 0 if unreadable.
  int64_t ResidentKib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    }
    return 0;
  }

  // Sends SIGTERM (unless `signal` is false); returns how long the process took to exit
  // (InfiniteDuration if it did not within `limit`) and its exit code in `code`.
  absl::Duration TerminateAndTime(absl::Duration limit, int* code, bool signal = true) {
    const absl::Time start = absl::Now();
    if (signal) kill(pid_, SIGTERM);
    while (absl::Now() - start < limit) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return absl::Now() - start;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::InfiniteDuration();
  }

 private:
  static inline int counter_ = 0;
  std::string log_path_;
  pid_t pid_ = -1;
  int spawn_error_ = 0;
  bool exited_ = false;
};

TEST(PsProcess, OutOfRangeFlagsAreRefusedBeforeListening) {
  for (const char* flag : {"--port=99999", "--max-pull-wait=-5s", "--max-message-mb=1"}) {
    PsProcess ps({flag});
    int code = -1;
    ASSERT_LT(ps.TerminateAndTime(absl::Seconds(10), &code, /*signal=*/false), absl::Seconds(10))
        << flag;
    EXPECT_EQ(code, 2) << flag;
    const std::string flag_name = std::string(flag).substr(0, std::string(flag).find('='));
    EXPECT_NE(ps.Log().find(flag_name + ": must be"), std::string::npos) << ps.Log();
    EXPECT_EQ(ps.Log().find("Serving parameter server"), std::string::npos) << ps.Log();
  }
}

TEST(PsProcess, SigtermWithPullsWaitingExitsWithinTwoSeconds) {
  PsProcess ps({"--port=0"});
  const std::string address = ps.WaitForAddress(absl::Seconds(20));
  ASSERT_FALSE(address.empty()) << ps.Log();
  EXPECT_NE(address, "127.0.0.1:0");
  auto channel = Channel(address);
  auto stub = v1::ParameterServer::NewStub(channel);
  {
    grpc::ClientContext context;
    v1::InitResponse response;
    ASSERT_THAT(stub->Init(&context, MakeInit({1024}), &response), IsOk());
  }
  AsyncPulls pulls({channel}, 500, /*min_step=*/10, absl::Seconds(60));
  {
    // A pull that needs no step, sent after them on the same connection, is answered once the ps
    // has read them all: HTTP/2 keeps the order of one connection's streams.
    AsyncPulls after({channel}, 1, /*min_step=*/0, absl::Seconds(30));
    ASSERT_EQ(after.Collect(absl::Seconds(30)), 1);
    ASSERT_EQ(after.CountCode(grpc::StatusCode::OK), 1);
  }
  int code = -1;
  const absl::Duration took = ps.TerminateAndTime(absl::Seconds(10), &code);
  EXPECT_LT(took, absl::Seconds(2)) << ps.Log();
  EXPECT_EQ(code, 0) << ps.Log();
  EXPECT_EQ(pulls.Collect(absl::Seconds(10)), 500);
  EXPECT_EQ(pulls.CountCode(grpc::StatusCode::OK), 0);
}

TEST(PsProcess, SigtermDuringALargeInitExitsWithinTwoSeconds) {
  PsProcess ps({"--port=0"});
  const std::string address = ps.WaitForAddress(absl::Seconds(20));
  ASSERT_FALSE(address.empty()) << ps.Log();
  auto stub = v1::ParameterServer::NewStub(Channel(address));
  const v1::InitRequest init = MakeInit({16 << 20, 16 << 20});  // 128 MiB
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::InitResponse response;
  grpc::Status status;
  const int64_t before_kib = ps.ResidentKib();
  std::thread chief([&] { status = stub->Init(&context, init, &response); });
  // The ps is taking the request in once its memory has grown by a quarter of it.
  EXPECT_TRUE(Eventually([&] { return ps.ResidentKib() >= before_kib + (32 << 10); },
                         absl::Seconds(20), kPoll))
      << ps.ResidentKib() - before_kib << " KiB more";
  int code = -1;
  const absl::Duration took = ps.TerminateAndTime(absl::Seconds(10), &code);
  chief.join();
  EXPECT_LT(took, absl::Seconds(2)) << ps.Log();
  EXPECT_EQ(code, 0) << ps.Log();
}

}  // namespace
}  // namespace kubetrain::ps
