// network_bench's training cases (training.h).
#include "bench/network/training.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/allreduce/processes.h"
#include "bench/network/children.h"
#include "bench/network/peers.h"
#include "bench/stats.h"
#include "common/job_secret_env.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"

namespace kubetrain::network_bench {
namespace {

constexpr int kTaskPort = 2222;  // every task in a sandbox of its own: one port for all

// Copies the first `count` records of the gzipped IDX file `from` (worker/core/data/idx_reader.h)
// into `to`, its first dimension set to `count`.
absl::Status CopyIdxPrefix(const std::string& from, const std::string& to, int count) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(from.c_str(), "rb"), gzclose);
  if (!in) return absl::NotFoundError(absl::StrCat(from, ": cannot open (--data-dir)"));
  unsigned char magic[4];
  if (gzread(in.get(), magic, 4) != 4 || magic[0] != 0 || magic[1] != 0 || magic[2] != 8 ||
      magic[3] < 1 || magic[3] > 4) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": not an unsigned-byte IDX file"));
  }
  std::vector<unsigned char> dims(4 * magic[3]);
  if (gzread(in.get(), dims.data(), dims.size()) != static_cast<int>(dims.size())) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": truncated header"));
  }
  auto dim = [&](int i) {
    return (uint32_t{dims[4 * i]} << 24) | (uint32_t{dims[4 * i + 1]} << 16) |
           (uint32_t{dims[4 * i + 2]} << 8) | uint32_t{dims[4 * i + 3]};
  };
  if (static_cast<uint32_t>(count) > dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(from, " holds ", dim(0), " examples, fewer than the ", count,
                     " --train-examples or --test-examples asks for"));
  }
  size_t record = 1;
  for (int i = 1; i < magic[3]; ++i) record *= dim(i);
  for (int b = 0; b < 4; ++b) dims[b] = static_cast<unsigned char>(count >> (24 - 8 * b));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> out(gzopen(to.c_str(), "wb1"), gzclose);
  if (!out) return absl::UnavailableError(absl::StrCat(to, ": cannot create"));
  gzwrite(out.get(), magic, 4);
  gzwrite(out.get(), dims.data(), dims.size());
  std::vector<unsigned char> buffer(record * 1024);
  for (size_t left = record * static_cast<size_t>(count); left > 0;) {
    const size_t n = std::min(left, buffer.size());
    if (gzread(in.get(), buffer.data(), n) != static_cast<int>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(from, ": truncated"));
    }
    if (gzwrite(out.get(), buffer.data(), n) != static_cast<int>(n)) {
      return absl::UnavailableError(absl::StrCat(to, ": write failed"));
    }
    left -= n;
  }
  if (gzclose(out.release()) != Z_OK) return absl::UnavailableError(absl::StrCat(to, ": close"));
  return absl::OkStatus();
}

// --data-dir, or a copy of its first --train-examples / --test-examples in `tmp`.
absl::StatusOr<std::string> DataDir(const Options& o, const std::string& tmp) {
  if (o.train_examples <= 0 && o.test_examples <= 0) return o.data_dir;
  const std::string dir = tmp + "/data";
  std::error_code error;
  if (!std::filesystem::create_directories(dir, error) && error) {
    return absl::UnavailableError(absl::StrCat(dir, ": ", error.message()));
  }
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", o.train_examples},
                                     std::pair<std::string, int>{"t10k", o.test_examples}}) {
    for (const char* kind : {"images-idx3", "labels-idx1"}) {
      const std::string name = absl::StrCat("/", split, "-", kind, "-ubyte.gz");
      if (count > 0) {
        RETURN_IF_ERROR(CopyIdxPrefix(o.data_dir + name, dir + name, count));
      } else {
        if (!std::filesystem::copy_file(o.data_dir + name, dir + name, error)) {
          return absl::NotFoundError(
              absl::StrCat(o.data_dir, name, ": ", error.message(), " (--data-dir)"));
        }
      }
    }
  }
  return dir;
}

// TF_CONFIG for `type` `index` of a job with `workers` and `ps` (host:port lists).
std::string TfConfig(const std::vector<std::string>& workers, const std::vector<std::string>& ps,
                     const std::string& type, int index) {
  nlohmann::json cluster = {{"worker", workers}};
  if (!ps.empty()) cluster["ps"] = ps;
  return nlohmann::json{{"cluster", cluster}, {"task", {{"type", type}, {"index", index}}}}.dump();
}

// The first line of `text` that starts with `prefix` and is followed by a JSON object for which
// `match` holds.
template <typename Match>
std::optional<nlohmann::json> JsonLine(absl::string_view text, absl::string_view prefix,
                                       Match match) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix) || !absl::StartsWith(line, "{")) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && match(j)) return j;
  }
  return std::nullopt;
}

// A log line's key=value (common/logging.h), unquoted.
std::optional<std::string> Field(absl::string_view line, absl::string_view key) {
  const std::string k = absl::StrCat(" ", key, "=");
  const size_t at = absl::StrCat(" ", line).find(k);
  if (at == std::string::npos) return std::nullopt;
  absl::string_view rest = line.substr(at + k.size() - 1);
  if (absl::ConsumePrefix(&rest, "\"")) return std::string(rest.substr(0, rest.find('"')));
  return std::string(rest.substr(0, rest.find(' ')));
}

std::optional<absl::Time> LineTime(absl::string_view line) {
  std::optional<std::string> text = Field(line, "time");
  absl::Time t;
  std::string error;
  if (!text || !absl::ParseTime(absl::RFC3339_full, *text, &t, &error)) return std::nullopt;
  return t;
}

// The chief's figures from its output: the summary line kubetrain-worker prints on stdout, and
// its per-epoch "evaluation" log lines placed on the summary's clock (training started
// wall_seconds before "Training complete").
absl::StatusOr<TrainResult> KubetrainResult(absl::string_view output, double target) {
  std::optional<nlohmann::json> summary = JsonLine(output, "", [](const nlohmann::json& j) {
    return j.value("event", "") == "training_complete";
  });
  if (!summary) {
    return absl::InternalError("the chief printed no training summary");
  }
  TrainResult r;
  r.examples_per_sec = summary->value("examples_per_sec", 0.0);
  r.wall_seconds = summary->value("wall_seconds", 0.0);
  r.accuracy = summary->value("test_accuracy", 0.0);
  std::optional<absl::Time> complete;
  std::vector<std::pair<absl::Time, double>> evals;
  std::vector<std::pair<absl::Time, int64_t>> progress;  // (time, step)
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::optional<std::string> msg = Field(line, "msg");
    if (!msg) continue;
    if (*msg == "Training complete") complete = LineTime(line);
    std::optional<std::string> accuracy = Field(line, "accuracy");
    double a = 0;
    std::optional<absl::Time> t = LineTime(line);
    if (*msg == "evaluation" && accuracy && t && absl::SimpleAtod(*accuracy, &a)) {
      evals.emplace_back(*t, a);
    }
    std::optional<std::string> step = Field(line, "step");
    int64_t st = 0;
    if (*msg == "progress" && step && t && absl::SimpleAtoi(*step, &st))
      progress.emplace_back(*t, st);
  }
  // The steady-state step: the median over the progress lines' intervals (--log-every) after
  // the first, which holds the warm-up.
  std::vector<double> steps;
  for (size_t i = 2; i < progress.size(); ++i) {
    const int64_t n = progress[i].second - progress[i - 1].second;
    if (n > 0)
      steps.push_back(absl::ToDoubleSeconds(progress[i].first - progress[i - 1].first) / n);
  }
  if (!steps.empty()) r.step_seconds = bench::Median(steps);
  if (complete) {
    const absl::Time start = *complete - absl::Seconds(r.wall_seconds);
    for (const auto& [t, a] : evals) {
      if (a >= target) {
        r.seconds_to_target = absl::ToDoubleSeconds(t - start);
        break;
      }
    }
  }
  return r;
}

absl::StatusOr<TrainResult> TorchResult(absl::string_view output, double target) {
  std::optional<nlohmann::json> result =
      JsonLine(output, "RESULT ", [](const nlohmann::json&) { return true; });
  if (!result) return absl::InternalError("torch_peer.py printed no RESULT line");
  TrainResult r;
  r.examples_per_sec = result->value("examples_per_sec", 0.0);
  r.wall_seconds = result->value("wall_seconds", 0.0);
  r.accuracy = result->value("test_accuracy", 0.0);
  r.step_seconds = result->value("step_seconds", 0.0);
  for (const nlohmann::json& e : result->value("evals", nlohmann::json::array())) {
    if (e.value("accuracy", 0.0) >= target) {
      r.seconds_to_target = e.value("seconds", 0.0);
      break;
    }
  }
  return r;
}

struct Job {
  const Setup& s;
  std::string data_dir;
  std::string tmp;
  double global_lr = 0;  // --lr scaled to the global batch
};

// One kubetrain run of `mode` ("allreduce", "allreduce-overlap", "ps-sync"), the chief's result.
absl::StatusOr<TrainResult> RunKubetrain(const Job& job, const std::string& mode,
                                         ps::WireFloat wire) {
  const Setup& s = job.s;
  const Options& o = s.opt;
  const int n = o.nodes;
  const bool ps = mode == "ps-sync";
  std::vector<std::string> workers, ps_tasks;
  for (int r = 0; r < n; ++r) {
    workers.push_back(absl::StrCat(s.ranks[r]->ip(), ":", kTaskPort));
    if (ps) ps_tasks.push_back(absl::StrCat(s.shards[r]->ip(), ":", kTaskPort));
  }
  const std::string run = absl::StrCat(job.tmp, "/", ModeName(mode, wire));
  std::map<std::string, std::string> env = BaseEnv();
  env[kJobSecretEnv] = GenerateJobSecret();
  env["KUBETRAIN_PS_SHARED_MEMORY"] = "false";  // the bytes cross the link, as between pods
  env["KUBETRAIN_CHECKPOINT_DIR"] = run + "/checkpoints";
  env["OPENBLAS_NUM_THREADS"] = "1";
  const std::string bin = std::filesystem::path(bench::SelfPath()).parent_path().string();
  Children children(s.stop, s.deadline);
  for (int r = 0; ps && r < n; ++r) {
    env["TF_CONFIG"] = TfConfig(workers, ps_tasks, "ps", r);
    RETURN_IF_ERROR(children.Start(*s.shards[r], {bin + "/kubetrain-ps"}, env).status());
  }
  std::vector<std::string> args = {
      absl::StrCat("--mode=", ps ? "ps-sync" : "allreduce"),
      absl::StrCat("--model=", o.train_model),
      absl::StrCat("--epochs=", o.train_epochs),
      absl::StrCat("--batch-size=", o.batch_size),
      "--optimizer=momentum",
      "--momentum=0.9",
      absl::StrCat("--lr=", job.global_lr),
      "--lr-reference-batch=0",
      "--lr-decay",
      "--lr-floor=0.05",
      "--seed=1",
      absl::StrCat("--data-dir=", job.data_dir),
      "--threads=1",
      "--bind-cpus=false",
      "--log-every=1s",
      absl::StrCat("--gradient-compression=", wire == ps::WireFloat::kFloat32   ? "none"
                                              : wire == ps::WireFloat::kFloat16 ? "fp16"
                                                                                : "bf16")};
  if (!ps) args.push_back("--communicator=gloo");
  if (mode == "allreduce-overlap") {
    args.push_back("--overlap-allreduce");
    args.push_back(absl::StrCat("--fusion-threshold-mb=", o.fusion_mb));
  }
  std::vector<int> ids;
  for (int r = 0; r < n; ++r) {
    env["TF_CONFIG"] = TfConfig(workers, ps_tasks, "worker", r);
    std::vector<std::string> argv = {bin + "/kubetrain-worker"};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSIGN_OR_RETURN(int id, children.Start(*s.ranks[r], std::move(argv), env));
    ids.push_back(id);
  }
  RETURN_IF_ERROR(children.WaitExit(ids));  // the ps tasks are killed with `children`
  return KubetrainResult(children.output(ids[0]), o.target_accuracy);
}

// `wire` float16 registers DDP's fp16_compress_hook (torch_peer.py --comm-hook=fp16).
absl::StatusOr<TrainResult> RunDdp(const Job& job, ps::WireFloat wire) {
  const Setup& s = job.s;
  const Options& o = s.opt;
  const std::string script = absl::StrCat(KUBETRAIN_SOURCE_DIR, "/bench/peers/torch_peer.py");
  const std::string ckpt = job.tmp + "/ddp-checkpoints";
  std::error_code error;
  if (!std::filesystem::create_directories(ckpt, error) && error) {
    return absl::UnavailableError(absl::StrCat(ckpt, ": ", error.message()));
  }
  ASSIGN_OR_RETURN(int port, FreePort(*s.ranks[0]));
  std::map<std::string, std::string> env = BaseEnv();
  env["GLOO_SOCKET_IFNAME"] = "eth0";
  for (const char* threads : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    env[threads] = "1";
  }
  const double seconds_left = std::max(1.0, absl::ToDoubleSeconds(s.deadline - absl::Now()));
  Children children(s.stop, s.deadline);
  std::vector<int> ids;
  for (int r = 0; r < o.nodes; ++r) {
    std::vector<std::string> argv = {
        "python3",
        script,
        "train",
        absl::StrCat("--rank=", r),
        absl::StrCat("--world=", o.nodes),
        absl::StrCat("--master=", s.ranks[0]->ip()),
        absl::StrCat("--port=", port),
        absl::StrCat("--model=", o.train_model),
        absl::StrCat("--epochs=", o.train_epochs),
        absl::StrCat("--batch-size=", o.batch_size),
        absl::StrCat("--lr=", job.global_lr),
        "--momentum=0.9",
        "--lr-floor=0.05",
        "--seed=1",
        absl::StrCat("--data-dir=", job.data_dir),
        absl::StrCat("--deadline=", seconds_left),
        absl::StrCat("--checkpoint-dir=", r == 0 ? ckpt : ""),
        wire == ps::WireFloat::kFloat16 ? "--comm-hook=fp16" : "--comm-hook=none"};
    ASSIGN_OR_RETURN(int id, children.Start(*s.ranks[r], std::move(argv), env));
    ids.push_back(id);
  }
  RETURN_IF_ERROR(children.WaitExit(ids));
  return TorchResult(children.output(ids[0]), o.target_accuracy);
}

// The model's parameter count, from the worker's own model zoo.
absl::StatusOr<int64_t> Parameters(const std::string& model) {
  worker::CpuDevice device;
  ASSIGN_OR_RETURN(std::unique_ptr<worker::Model> m, worker::MakeModel(model, device, 1));
  return m->num_parameters();
}

}  // namespace

const std::vector<std::string>& TrainModes() {
  static const std::vector<std::string> modes = {"allreduce", "allreduce-overlap", "ps-sync",
                                                 "ddp"};
  return modes;
}

absl::StatusOr<std::vector<TrainResult>> RunTraining(Setup& s) {
  const Options& o = s.opt;
  ASSIGN_OR_RETURN(const int64_t parameters, Parameters(o.train_model));
  ASSIGN_OR_RETURN(const ps::WireFloat wire, Compression(o));
  ASSIGN_OR_RETURN(std::unique_ptr<TempDir> tmp, TempDir::Make());
  Job job{.s = s, .tmp = tmp->path()};
  ASSIGN_OR_RETURN(job.data_dir, DataDir(o, tmp->path()));
  job.global_lr = o.lr * o.nodes * o.batch_size / 128.0;
  const int n = o.nodes;
  std::vector<TrainResult> rows;
  std::optional<bool> torch_usable;  // probed once, before the first DDP run
  for (const std::string& mode : TrainModes()) {
    if (!absl::StrContains(absl::StrCat(",", o.train_modes, ","), absl::StrCat(",", mode, ","))) {
      continue;
    }
    std::vector<ps::WireFloat> wires = {ps::WireFloat::kFloat32};
    // DDP's 16-bit counterpart is its fp16_compress_hook; its bf16 hook needs a backend that sums
    // bfloat16, which gloo (torch 1.13) refuses ("Invalid scalar type").
    if (wire != ps::WireFloat::kFloat32 && (mode != "ddp" || wire == ps::WireFloat::kFloat16)) {
      wires.push_back(wire);
    }
    if (mode == "ddp" && wire == ps::WireFloat::kBFloat16) {
      s.notes.push_back(
          "ddp+bf16: not run: DDP's bf16_compress_hook needs a backend that sums "
          "bfloat16, and gloo does not");
    }
    for (ps::WireFloat w : wires) {
      const std::string name = ModeName(mode, w);
      std::fprintf(stderr, "network_bench: training %s, %s ...\n", o.train_model.c_str(),
                   name.c_str());
      absl::StatusOr<TrainResult> r;
      if (mode == "ddp") {
        if (!torch_usable.has_value()) {
          ASSIGN_OR_RETURN(torch_usable, TorchUsable(s, "ddp"));
        }
        if (!*torch_usable) continue;
        r = RunDdp(job, w);
      } else {
        r = RunKubetrain(job, mode, w);
      }
      if (!r.ok()) return Annotate(r.status(), absl::StrCat("training ", name));
      r->mode = name;
      if (r->step_seconds <= 0 && r->examples_per_sec > 0) {
        r->step_seconds = n * o.batch_size / r->examples_per_sec;
      }
      const double wire_bytes =
          static_cast<double>(parameters) * (w == ps::WireFloat::kFloat32 ? 4 : 2);
      r->exchange_model_seconds = 2.0 * (n - 1) / n * wire_bytes / s.rate;
      std::fprintf(stderr,
                   "network_bench: training %-22s %9.0f examples/s  step %.4f s (exchange model "
                   "%.4f s)  accuracy %.4f\n",
                   name.c_str(), r->examples_per_sec, r->step_seconds, r->exchange_model_seconds,
                   r->accuracy);
      rows.push_back(*std::move(r));
    }
  }
  s.notes.push_back(absl::StrFormat(
      "training: --model=%s (%d parameters, %.1f MB), %d workers x batch %d, %d epoch(s) on %s "
      "training examples, lr %.3g (momentum 0.9, cosine decay to 5%%), one thread per process",
      o.train_model, parameters, parameters * 4 / 1e6, n, o.batch_size, o.train_epochs,
      o.train_examples > 0 ? absl::StrCat(o.train_examples) : "all 60000", job.global_lr));
  return rows;
}

namespace {

// DDP's examples/s in the row named "ddp" plus `mode`'s wire suffix ("+fp16"), 0 if it did not run.
double DdpOnWire(const std::vector<TrainResult>& rows, absl::string_view mode) {
  const size_t plus = mode.find('+');
  const std::string name =
      absl::StrCat("ddp", plus == absl::string_view::npos ? "" : mode.substr(plus));
  for (const TrainResult& r : rows) {
    if (r.mode == name) return r.examples_per_sec;
  }
  return 0;
}

}  // namespace

void PrintTraining(const Setup& s, const std::vector<TrainResult>& rows) {
  const double ddp = DdpOnWire(rows, "ddp");
  const Options& o = s.opt;
  if (o.json) {
    for (const TrainResult& r : rows) {
      std::printf(
          "{\"mode\":\"train-%s\",\"model\":\"%s\",\"nodes\":%d,\"link_gbit\":%g,"
          "\"examples_per_sec\":%.1f,\"step_seconds\":%.6f,\"exchange_model_seconds\":%.6f,"
          "\"seconds_to_target\":%s,\"target_accuracy\":%g,\"test_accuracy\":%.4f,"
          "\"wall_seconds\":%.3f%s%s}\n",
          r.mode.c_str(), o.train_model.c_str(), o.nodes, o.link_gbit, r.examples_per_sec,
          r.step_seconds, r.exchange_model_seconds,
          r.seconds_to_target < 0 ? "null" : absl::StrFormat("%.3f", r.seconds_to_target).c_str(),
          o.target_accuracy, r.accuracy, r.wall_seconds,
          JsonRatio("examples_per_sec_over_ddp", r.examples_per_sec, ddp).c_str(),
          JsonRatio("examples_per_sec_over_ddp_same_wire", r.examples_per_sec,
                    DdpOnWire(rows, r.mode))
              .c_str());
    }
    return;
  }
  std::printf(
      "training %s on %d nodes; step = steady-state median; exchange model = "
      "2(N-1)/N*M/R per step\n",
      o.train_model.c_str(), o.nodes);
  std::printf("%-24s %11s %9s %10s %10s %11s %9s %8s %9s\n", "mode", "examples/s", "step s",
              "exchange s", "step/exch", absl::StrFormat("to %.3f s", o.target_accuracy).c_str(),
              "accuracy", "/ddp", "/ddp wire");
  for (const TrainResult& r : rows) {
    std::printf(
        "%-24s %11.0f %9.4f %10.4f %10.2f %11s %9.4f %8s %9s\n", r.mode.c_str(), r.examples_per_sec,
        r.step_seconds, r.exchange_model_seconds,
        r.exchange_model_seconds > 0 ? r.step_seconds / r.exchange_model_seconds : 0,
        r.seconds_to_target < 0 ? "-" : absl::StrFormat("%.1f", r.seconds_to_target).c_str(),
        r.accuracy, Ratio(r.examples_per_sec, ddp).c_str(),
        Ratio(r.examples_per_sec, DdpOnWire(rows, r.mode)).c_str());
  }
}

}  // namespace kubetrain::network_bench
