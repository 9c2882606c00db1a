// train_step: times the worker's training step (forward + backward through Model::
// ComputeGradients) on one backend, and compares the GEMM throughput achieved inside the step with
// the backend's bare BLAS running exactly the same GEMMs in the same process.
//
//   build/bin/train_step --model=cnn --batch-size=64 --steps=20 --threads=1 [--json]
//   build/bin/train_step --device=cuda [--tf32] [--cuda-graphs=false] [--precision=bf16] ...
//
// Every Device call goes through a ProfilingDevice, which records each GEMM's shape and time and
// the time of every other kernel, so the report also says where the rest of the step goes. With
// --cuda-graphs (the default on CUDA) each step after the warm-up is one captured graph
// (worker/core/step_graphs.h): the step time is the graph's, and the per-GEMM comparison, which
// needs each kernel issued on its own, is left out. Either way the report gives the launches and
// host waits per step (worker/tests/counting_device.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/stats.h"
#include "bench/train_step/backends.h"
#include "bench/train_step/profiling_device.h"
#include "common/flags.h"
#include "common/program.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/model.h"
#include "worker/core/models.h"
#include "worker/core/random.h"
#include "worker/tests/counting_device.h"

namespace kubetrain::bench {
namespace {

constexpr double kGoalRatio = 0.6;
constexpr int kDistinctBatches = 4;  // cycled, so the step does not see one batch only

struct Options {
  std::string model = "cnn";
  std::string device = "cpu";
  int batch_size = 64;
  int warmup = 3;
  int steps = 20;
  int threads = 1;
  std::optional<bool> tf32;
  std::optional<bool> cuda_graphs;
  worker::Precision precision = worker::Precision::kFloat32;
  uint64_t seed = 1;
  bool json = false;
};

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  FlagSet f("train_step",
            "Times forward+backward of a worker model and compares the GEMM throughput inside\n"
            "the step with the bare BLAS on the same GEMM shapes.");
  f.Add("model", &o.model, "mlp or cnn");
  f.Add("device", &o.device, "backend: cpu or cuda");
  f.Add("batch-size", &o.batch_size, "examples per step");
  f.Add("warmup", &o.warmup, "untimed steps first");
  f.Add("steps", &o.steps, "timed steps");
  f.Add("threads", &o.threads, "BLAS threads (cpu)");
  f.Add("tf32", &o.tf32,
        "as the worker's --tf32 (cuda): unset, convolutions in TF32; true, GEMMs too; false, "
        "neither");
  f.Add("cuda-graphs", &o.cuda_graphs,
        "capture each step in a CUDA graph after a warm-up step and replay it (default: on for "
        "cuda; the cpu backend runs steps as issued)");
  std::string precision = worker::PrecisionName(o.precision);
  f.Add("precision", &precision,
        "as the worker's --precision: fp32, or bf16 GEMMs and convolutions (float32 sums)");
  f.Add("seed", &o.seed, "seed of the model's initialisation and the random batches");
  f.Add("json", &o.json, "print one JSON object instead of text");
  RETURN_IF_ERROR(f.Parse(argc, argv).status());
  ASSIGN_OR_RETURN(o.precision, worker::PrecisionFromFlag(precision));
  if (o.batch_size < 1 || o.steps < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--batch-size and --steps must be >= 1, --warmup >= 0");
  }
  if (o.cuda_graphs == true && o.device != "cuda") {
    return absl::FailedPreconditionError(
        absl::StrCat("--cuda-graphs: the ", o.device,
                     " backend runs steps as issued; drop --cuda-graphs or use --device=cuda"));
  }
  return o;
}

bool GraphsOn(const Options& o) { return o.cuda_graphs.value_or(o.device == "cuda"); }

// Random images in [0, 1) and labels, as many distinct batches as kDistinctBatches.
struct Batches {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int32_t>> labels;
};

Batches MakeBatches(int64_t example_size, int batch, int classes, uint64_t seed) {
  worker::Rng rng(seed, /*stream=*/0xba7c4);
  Batches b;
  for (int i = 0; i < kDistinctBatches; ++i) {
    std::vector<float> images(static_cast<size_t>(example_size * batch));
    for (float& x : images) x = rng.Uniform();
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (int32_t& y : labels) y = static_cast<int32_t>(rng.Below(classes));
    b.images.push_back(std::move(images));
    b.labels.push_back(std::move(labels));
  }
  return b;
}

// The GEMMs of one shape, summed over the timed steps.
struct ShapeStats {
  int64_t calls = 0;
  double flops = 0.0;
  int64_t step_nanos = 0;
  int64_t bare_nanos = 0;
};
using ShapeKey = std::tuple<bool, bool, int, int, int>;

struct Report {
  Options options;
  int64_t parameters = 0;
  float last_loss = 0.0f;
  std::vector<int64_t> step_nanos;
  int64_t gemm_calls = 0;
  double gemm_flops = 0.0;
  int64_t gemm_nanos = 0;  // inside the step
  int64_t bare_nanos = 0;  // the same calls on the bare BLAS
  // Per timed step: the GEMM time of that step's calls, inside the step and on the bare BLAS.
  std::vector<int64_t> step_gemm_nanos;
  std::vector<int64_t> bare_gemm_nanos;
  std::map<ShapeKey, ShapeStats> shapes;
  std::vector<std::pair<Kernel, KernelStats>> kernels;
  bool gemms_compared = false;  // not with graphs: their kernels are not issued one by one
  // The backend's own convolutions (cuDNN), per step: inside the step, and the same calls on the
  // bare library (GemmReference::TimeConvolution); compared only where the backend has them.
  bool convolutions_compared = false;
  double conv_nanos_per_step = 0.0;
  double bare_conv_nanos_per_step = 0.0;
  worker::testing::CountingDevice::Counts counts;  // over the timed steps
  int64_t captures = 0;

  double total_step_nanos() const {
    double t = 0.0;
    for (int64_t n : step_nanos) t += static_cast<double>(n);
    return t;
  }
  double ms_per_step() const { return total_step_nanos() / step_nanos.size() / 1e6; }
  double min_ms_per_step() const {
    return *std::min_element(step_nanos.begin(), step_nanos.end()) / 1e6;
  }
  // The median resists other processes stealing the core for part of the run.
  double median_ms_per_step() const { return Median(step_nanos) / 1e6; }
  double examples_per_sec() const {
    return options.batch_size * static_cast<double>(step_nanos.size()) / total_step_nanos() * 1e9;
  }
  // Throughputs over the median step (every step issues the same GEMMs), so that another process
  // taking the core for a moment skews neither side of the ratio.
  double step_gflops() const {
    return gemm_flops / step_nanos.size() / static_cast<double>(Median(step_gemm_nanos));
  }
  double bare_gflops() const {
    return gemm_flops / step_nanos.size() / static_cast<double>(Median(bare_gemm_nanos));
  }
  double ratio() const { return step_gflops() / bare_gflops(); }
  double gemm_share() const { return gemm_nanos / total_step_nanos(); }
  double conv_ratio() const { return bare_conv_nanos_per_step / conv_nanos_per_step; }
  // GEMMs and convolutions together, as a share of the step.
  double gemm_conv_share() const {
    return gemm_share() + conv_nanos_per_step * step_nanos.size() / total_step_nanos();
  }
};

// Runs the warm-up and timed steps through `profiler` and `counter`, filling the step half of
// `report`.
absl::Status TimeSteps(worker::Model& model, ProfilingDevice& profiler,
                       worker::testing::CountingDevice& counter, const Batches& batches,
                       Report& report) {
  const Options& o = report.options;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) {
      profiler.Reset();
      counter.Reset();
    }
    const int b = i % kDistinctBatches;
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(report.last_loss, model.ComputeGradients(batches.images[b], batches.labels[b]),
                     "step ", i);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (i >= o.warmup) {
      report.step_nanos.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
    }
  }
  report.counts = counter.counts();
  report.captures = model.step_graphs().stats().captures;
  return absl::OkStatus();
}

// Replays the recorded GEMMs on the bare BLAS (one untimed pass first, as the step had its warm-up
// steps) and fills the GEMM half of `report`.
absl::Status CompareGemms(const ProfilingDevice& profiler, GemmReference& reference,
                          Report& report) {
  const std::vector<GemmCall>& calls = profiler.gemm_calls();
  if (calls.empty()) return absl::FailedPreconditionError("the step issued no GEMM");
  RETURN_IF_ERROR(reference.Run(calls).status(), "bare GEMM warm-up");
  ASSIGN_OR_RETURN(std::vector<int64_t> bare, reference.Run(calls), "bare GEMM");
  const size_t steps = report.step_nanos.size();
  if (calls.size() % steps != 0) {
    return absl::InternalError(absl::StrCat(calls.size(), " GEMMs in ", steps,
                                            " steps: the steps did not issue the same GEMMs"));
  }
  const size_t per_step = calls.size() / steps;
  report.step_gemm_nanos.assign(steps, 0);
  report.bare_gemm_nanos.assign(steps, 0);
  for (size_t i = 0; i < calls.size(); ++i) {
    report.step_gemm_nanos[i / per_step] += calls[i].nanos;
    report.bare_gemm_nanos[i / per_step] += bare[i];
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const GemmCall& g = calls[i];
    ShapeStats& s = report.shapes[{g.trans_a, g.trans_b, g.m, g.n, g.k}];
    ++s.calls;
    s.flops += g.flops();
    s.step_nanos += g.nanos;
    s.bare_nanos += bare[i];
    ++report.gemm_calls;
    report.gemm_flops += g.flops();
    report.gemm_nanos += g.nanos;
    report.bare_nanos += bare[i];
  }
  for (int k = 0; k < kNumKernels; ++k) {
    const auto kernel = static_cast<Kernel>(k);
    if (profiler.stats(kernel).calls > 0)
      report.kernels.emplace_back(kernel, profiler.stats(kernel));
  }
  std::sort(report.kernels.begin(), report.kernels.end(),
            [](const auto& x, const auto& y) { return x.second.nanos > y.second.nanos; });
  report.gemms_compared = true;
  return absl::OkStatus();
}

// Times each convolution layer's calls on the bare library and fills the convolution half of
// `report`; nothing where the backend gave no layer convolution kernels of its own.
absl::Status CompareConvolutions(const ProfilingDevice& profiler, GemmReference& reference,
                                 Report& report) {
  const double steps = static_cast<double>(report.step_nanos.size());
  for (const ConvolutionLayer& layer : profiler.convolution_layers()) {
    const worker::Conv2DShape& s = layer.shape;
    ASSIGN_OR_RETURN(const auto bare, reference.TimeConvolution(s, report.options.batch_size),
                     "bare convolution ", s.height, "x", s.width, "x", s.in_channels, " -> ",
                     s.filters);
    for (size_t d = 0; d < bare.size(); ++d) {
      report.conv_nanos_per_step += layer.directions[d].nanos / steps;
      report.bare_conv_nanos_per_step +=
          layer.directions[d].calls / steps * static_cast<double>(bare[d]);
    }
  }
  report.convolutions_compared = !profiler.convolution_layers().empty();
  return absl::OkStatus();
}

std::string ShapeName(const ShapeKey& key) {
  const auto& [ta, tb, m, n, k] = key;
  return absl::StrFormat("%s%s m=%d n=%d k=%d", ta ? "T" : "N", tb ? "T" : "N", m, n, k);
}

// What --tf32 puts on tensor cores: "convolutions" (unset), "all" (true) or "none" (false).
std::string Tf32Mode(const Options& o) {
  if (!o.tf32.has_value()) return "convolutions";
  return *o.tf32 ? "all" : "none";
}

void PrintText(const Report& r) {
  const Options& o = r.options;
  const double steps = static_cast<double>(r.step_nanos.size());
  absl::PrintF(
      "train_step: model=%s (%d parameters) device=%s precision=%s%s batch=%d threads=%d "
      "warmup=%d steps=%d\n",
      o.model, r.parameters, o.device, worker::PrecisionName(o.precision),
      o.device == "cuda" ? absl::StrCat(" tf32=", Tf32Mode(o), " cuda_graphs=", GraphsOn(o)) : "",
      o.batch_size, o.threads, o.warmup, o.steps);
  if (o.device == "cpu") {
    const std::string advice = worker::BlasKernelAdviceHere();
    absl::PrintF(
        "blas:        %s\n",
        advice.empty() ? absl::StrCat("OpenBLAS ", worker::BlasCoreName(), " kernels") : advice);
  }
  absl::PrintF(
      "step:        %.3f ms/step (median %.3f, min %.3f), %.0f examples/s, last loss %.4f\n",
      r.ms_per_step(), r.median_ms_per_step(), r.min_ms_per_step(), r.examples_per_sec(),
      r.last_loss);
  absl::PrintF("launches:    %.1f/step, %.1f host waits/step, %.1f uploads/step (%d captures)\n",
               r.counts.launches / steps, r.counts.host_waits / steps, r.counts.uploads / steps,
               r.captures);
  if (!r.gemms_compared) {
    absl::PrintF("gemm:        inside the captured graph; --cuda-graphs=false compares them\n");
    return;
  }
  absl::PrintF(
      "gemm (step): %.1f calls/step, %.4f GFLOP/step, %.3f ms/step (mean) = %.1f%% of step, "
      "%.2f GFLOP/s (median step)\n",
      r.gemm_calls / steps, r.gemm_flops / steps / 1e9, r.gemm_nanos / steps / 1e6,
      100.0 * r.gemm_share(), r.step_gflops());
  absl::PrintF("bare sgemm:  same %d calls, %.3f ms/step (mean), %.2f GFLOP/s (median step)\n",
               r.gemm_calls, r.bare_nanos / steps / 1e6, r.bare_gflops());
  absl::PrintF("gemm_ratio:  %.3f (step / bare; goal >= %.1f)\n", r.ratio(), kGoalRatio);
  if (r.convolutions_compared) {
    absl::PrintF(
        "conv (step): %.3f ms/step; bare cuDNN: %.3f ms/step; conv_ratio %.3f (bare / step)\n",
        r.conv_nanos_per_step / 1e6, r.bare_conv_nanos_per_step / 1e6, r.conv_ratio());
    absl::PrintF("gemm+conv:   %.1f%% of the step\n", 100.0 * r.gemm_conv_share());
  }
  absl::PrintF("kernels (ms/step, %% of step):\n");
  for (const auto& [kernel, s] : r.kernels) {
    absl::PrintF("  %-14s %8.3f ms %5.1f%%  (%.1f calls/step)\n", KernelName(kernel),
                 s.nanos / steps / 1e6, 100.0 * s.nanos / r.total_step_nanos(), s.calls / steps);
  }
  absl::PrintF("gemm shapes (per step: calls, ms in step, GFLOP/s in step, bare, ratio):\n");
  for (const auto& [key, s] : r.shapes) {
    absl::PrintF("  %-28s %5.1f %8.3f ms %7.2f %7.2f %6.3f\n", ShapeName(key), s.calls / steps,
                 s.step_nanos / steps / 1e6, s.flops / s.step_nanos, s.flops / s.bare_nanos,
                 static_cast<double>(s.bare_nanos) / s.step_nanos);
  }
}

void PrintJson(const Report& r) {
  const Options& o = r.options;
  const double steps = static_cast<double>(r.step_nanos.size());
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto& [kernel, s] : r.kernels) {
    kernels[std::string(KernelName(kernel))] = {{"calls_per_step", s.calls / steps},
                                                {"ms_per_step", s.nanos / steps / 1e6}};
  }
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& [key, s] : r.shapes) {
    const auto& [ta, tb, m, n, k] = key;
    shapes.push_back({{"trans_a", ta},
                      {"trans_b", tb},
                      {"m", m},
                      {"n", n},
                      {"k", k},
                      {"calls_per_step", s.calls / steps},
                      {"step_gflops_per_sec", s.flops / s.step_nanos},
                      {"bare_gflops_per_sec", s.flops / s.bare_nanos}});
  }
  nlohmann::json out = {
      {"model", o.model},
      {"device", o.device},
      {"batch_size", o.batch_size},
      {"threads", o.threads},
      {"tf32", Tf32Mode(o)},
      {"precision", worker::PrecisionName(o.precision)},
      {"cuda_graphs", GraphsOn(o)},
      {"warmup", o.warmup},
      {"steps", o.steps},
      {"parameters", r.parameters},
      {"last_loss", r.last_loss},
      {"ms_per_step", r.ms_per_step()},
      {"median_ms_per_step", r.median_ms_per_step()},
      {"min_ms_per_step", r.min_ms_per_step()},
      {"examples_per_sec", r.examples_per_sec()},
      {"launches_per_step", r.counts.launches / steps},
      {"host_waits_per_step", r.counts.host_waits / steps},
      {"uploads_per_step", r.counts.uploads / steps},
      {"captures", r.captures},
  };
  if (r.gemms_compared) {
    out.update({
        {"gemm_calls_per_step", r.gemm_calls / steps},
        {"gemm_gflop_per_step", r.gemm_flops / steps / 1e9},
        {"gemm_ms_per_step", r.gemm_nanos / steps / 1e6},
        {"gemm_share_of_step", r.gemm_share()},
        {"step_gemm_gflops_per_sec", r.step_gflops()},
        {"bare_sgemm_gflops_per_sec", r.bare_gflops()},
        {"gemm_ratio", r.ratio()},
        {"gemm_ratio_goal", kGoalRatio},
        {"gemm_conv_share_of_step", r.gemm_conv_share()},
        {"kernels", kernels},
        {"gemm_shapes", shapes},
    });
  }
  if (r.convolutions_compared) {
    out.update({
        {"conv_ms_per_step", r.conv_nanos_per_step / 1e6},
        {"bare_conv_ms_per_step", r.bare_conv_nanos_per_step / 1e6},
        {"conv_ratio", r.conv_ratio()},
    });
  }
  std::cout << out.dump() << std::endl;
}

absl::Status Run(int argc, char** argv) {
  Report report;
  ASSIGN_OR_RETURN(report.options, ParseFlags(argc, argv));
  const Options& o = report.options;
  ASSIGN_OR_RETURN(
      Backend backend,
      MakeBackend(o.device, {.threads = o.threads, .tf32 = o.tf32, .precision = o.precision}));
  // Declared after the backend: the model's buffers are freed through them before it goes. A
  // captured step cannot wait after each kernel, so with graphs the profiler is left out.
  ProfilingDevice profiler(*backend.device);
  worker::testing::CountingDevice counter(GraphsOn(o) ? *backend.device : profiler);
  ASSIGN_OR_RETURN(std::unique_ptr<worker::Model> model, MakeModel(o.model, counter, o.seed));
  model->UseStepGraphs(GraphsOn(o));
  report.parameters = model->num_parameters();
  const Batches batches =
      MakeBatches(model->input_size(), o.batch_size, model->num_classes(), o.seed);
  RETURN_IF_ERROR(TimeSteps(*model, profiler, counter, batches, report));
  if (!GraphsOn(o)) {
    RETURN_IF_ERROR(CompareGemms(profiler, *backend.reference, report));
    RETURN_IF_ERROR(CompareConvolutions(profiler, *backend.reference, report));
  }
  if (o.json) {
    PrintJson(report);
  } else {
    PrintText(report);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::bench

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  const absl::Status status = kubetrain::bench::Run(argc, argv);
  if (kubetrain::HelpRequested(status)) return 0;
  if (!status.ok()) {
    std::fprintf(stderr, "train_step: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
