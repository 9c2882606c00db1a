#include "operator/cli/commands.h"

#include <nlohmann/json.hpp>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/job_secret_env.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/tfjob.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"
#include "operator/local/gpus.h"
#include "operator/local/launcher.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;

constexpr char kUsage[] = R"(kubetrain: distributed training jobs on Kubernetes or on this machine.

Usage: kubetrain COMMAND [flags] [args]

Commands:
  run FILE           run a TrainingJob on this machine as local processes
  validate FILE...   check TrainingJob manifests (YAML or JSON, multi-document, - for stdin);
                     Kubeflow TFJobs (kubeflow.org/v1) too
  render FILE        print the Service and Pods the operator would create for a job (for a
                     Kubeflow TFJob, those Kubeflow's operator creates)
  convert FILE       print the TrainingJob equivalent to each Kubeflow TFJob in FILE
  help               show this help

Run 'kubetrain COMMAND --help' for a command's flags.
)";

struct LoadedJob {
  std::string where;  // "file.yaml: document 2 (TrainingJob default/fmnist)"
  api::TrainingJob job;
  api::FieldErrors errors;
  // A Kubeflow TFJob: as written, its TrainingJob equivalent and what does not carry over.
  bool tfjob = false;
  json source;
  json converted;
  std::vector<std::string> notes;
};

std::string Describe(const std::string& file, size_t index, size_t count, const json& doc) {
  std::string where = file;
  if (count > 1) absl::StrAppend(&where, ": document ", index + 1);
  if (doc.is_object() && doc.contains("metadata") && doc["metadata"].is_object() &&
      doc["metadata"].contains("name") && doc["metadata"]["name"].is_string()) {
    std::string kind = api::StringField(doc, "kind", "object");
    std::string name = doc["metadata"]["name"].get<std::string>();
    if (name.size() > 80) name = name.substr(0, 80) + "...";  // invalid anyway; reported below
    absl::StrAppend(&where, " (", kind.empty() ? "object" : kind, " ", name, ")");
  }
  return where;
}

// Reads every document of `file`; a file that cannot be read or parsed yields one error entry.
std::vector<LoadedJob> LoadFile(const std::string& file) {
  absl::StatusOr<std::string> text = api::ReadFileOrStdin(file);
  if (!text.ok()) return {{file, {}, {{"", std::string(text.status().message())}}}};
  absl::StatusOr<std::vector<json>> docs = api::ParseYamlDocuments(*text);
  if (!docs.ok()) return {{file, {}, {{"", std::string(docs.status().message())}}}};
  if (docs->empty()) return {{file, {}, {{"", "no documents: expected a TrainingJob"}}}};
  std::vector<LoadedJob> jobs;
  for (size_t i = 0; i < docs->size(); ++i) {
    const json& doc = (*docs)[i];
    LoadedJob loaded{Describe(file, i, docs->size(), doc), {}, {}};
    if (api::IsTfJob(doc)) {
      // Converted, then held to every rule a TrainingJob is; errors name the TFJob's fields.
      loaded.tfjob = true;
      api::TfJobConversion c = api::ConvertTfJob(doc, &loaded.errors);
      if (loaded.errors.empty()) {
        loaded.job = api::DecodeAndValidate(c.training_job, &loaded.errors);
        for (api::FieldError& e : loaded.errors) e.path = api::TfJobPath(doc, e.path);
      }
      loaded.source = doc;
      loaded.converted = std::move(c.training_job);
      loaded.notes = std::move(c.notes);
    } else {
      loaded.job = api::DecodeAndValidate(doc, &loaded.errors);
    }
    jobs.push_back(std::move(loaded));
  }
  return jobs;
}

// --help prints and exits 0; a bad flag prints its error and exits 2.
int FlagExit(const absl::Status& status, std::ostream& err) {
  if (HelpRequested(status)) return 0;
  err << status.message() << "\n";
  return 2;
}

// What render and convert take: one FILE and --output yaml or json. 0 when so, else the exit
// status of a usage error (2), said on `err`.
int CheckFileAndOutput(const char* command, const std::vector<std::string>& files,
                       const std::string& output, std::ostream& err) {
  if (files.size() != 1) {
    err << "kubetrain " << command << ": give exactly one FILE (see kubetrain " << command
        << " --help)\n";
    return 2;
  }
  if (output != "yaml" && output != "json") {
    err << "--output: must be yaml or json, got \"" << output << "\"\n";
    return 2;
  }
  return 0;
}

void PrintErrors(const LoadedJob& j, std::ostream& err) {
  err << api::ToStatus(j.errors, j.where).message() << "\n";
}

}  // namespace

int Validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("kubetrain validate",
                "Checks TrainingJob manifests: every problem is reported with its field path.\n"
                "Exit status 0 when all are valid, 1 otherwise.");
  flags.SetPositionalUsage("FILE...");
  absl::StatusOr<std::vector<std::string>> files = flags.Parse(args);
  if (!files.ok()) return FlagExit(files.status(), err);
  if (files->empty()) {
    err << "kubetrain validate: no files given (see kubetrain validate --help)\n";
    return 2;
  }
  int invalid = 0;
  for (const std::string& file : *files) {
    for (const LoadedJob& j : LoadFile(file)) {
      if (j.errors.empty()) {
        out << j.where << ": valid"
            << (j.tfjob ? " (as the TrainingJob `kubetrain convert` writes)" : "") << "\n";
        for (const std::string& note : j.notes) out << "  note: " << note << "\n";
      } else {
        ++invalid;
        PrintErrors(j, err);
      }
    }
  }
  return invalid == 0 ? 0 : 1;
}

int Render(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
           const std::atomic<bool>& stop) {
  std::string ns;
  std::string cluster_domain;
  std::string output = "yaml";
  FlagSet flags("kubetrain render",
                "Prints the Secret, the headless Service, the checkpoint claim and the Pods the "
                "operator creates for "
                "each TrainingJob in FILE,\nlike 'helm template' (the Secret with a new random "
                "token each time). Owner references are added by the "
                "operator once the API server has\nassigned the job a uid. For a Kubeflow TFJob: "
                "the Services and Pods Kubeflow's operator creates.");
  flags.SetPositionalUsage("FILE");
  flags.Add("namespace", &ns, "namespace for jobs whose manifest names none (default \"default\")");
  flags.Add("cluster-domain", &cluster_domain,
            "DNS suffix after .svc in TF_CONFIG addresses, e.g. cluster.local");
  flags.Add("output", &output, "yaml or json");
  absl::StatusOr<std::vector<std::string>> files = flags.Parse(args);
  if (!files.ok()) return FlagExit(files.status(), err);
  if (int usage = CheckFileAndOutput("render", *files, output, err)) return usage;
  std::vector<LoadedJob> jobs = LoadFile(files->front());
  bool ok = true;
  for (const LoadedJob& j : jobs) {
    if (!j.errors.empty()) {
      PrintErrors(j, err);
      ok = false;
    }
  }
  if (!ok) return 1;
  api::ClusterDnsAddresses addresses(cluster_domain);
  // Streamed: a large job is thousands of pods, each with the whole cluster in TF_CONFIG, and
  // SIGTERM must be honoured within moments rather than after the last one. The JSON form is
  // byte-for-byte what dumping one List would print.
  bool first = true;
  auto write = [&](const json& obj) {
    if (output == "yaml") {
      out << "---\n" << api::ToYaml(obj);
      return;
    }
    std::string text = obj.dump(2);
    out << (first ? "{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n" : ",\n") << "    ";
    for (char c : text) {
      out << c;
      if (c == '\n') out << "    ";
    }
    first = false;
  };
  for (LoadedJob& j : jobs) {
    if (j.tfjob) {  // Kubeflow's objects, as kubetrain's operator creates them
      if (j.job.metadata.namespace_.empty() && !ns.empty()) j.job.metadata.namespace_ = ns;
      write(api::BuildJobSecret(j.job, GenerateJobSecret()));  // the pods read their secret
      for (const json& obj : api::RenderTfJob(j.source, ns, cluster_domain)) {
        if (stop.load()) break;
        write(obj);
      }
      continue;
    }
    if (j.job.metadata.namespace_.empty() && !ns.empty()) j.job.metadata.namespace_ = ns;
    if (stop.load()) break;
    // A fresh secret, so that the output applied as it is runs a job its tasks can talk in.
    write(api::BuildJobSecret(j.job, GenerateJobSecret()));
    write(api::BuildService(j.job));
    if (j.job.spec.checkpoint && j.job.spec.checkpoint->volume_claim_template) {
      write(api::BuildCheckpointClaim(j.job));
    }
    for (const api::Task& t : api::Tasks(j.job, addresses)) {
      if (stop.load()) break;
      write(api::BuildPod(j.job, t.type, t.index, addresses));
    }
  }
  if (stop.load()) {
    out.flush();
    err << "kubetrain render: interrupted\n";
    return 130;
  }
  if (output == "json") out << "\n  ],\n  \"kind\": \"List\"\n}\n";
  return 0;
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const std::atomic<bool>& stop, std::atomic<int>* scale) {
  local::LaunchOptions options;
  options.scale = scale;
  options.command.bin_dir = local::ExecutableDir();
  FlagSet flags(
      "kubetrain run",
      "Runs the TrainingJob (or Kubeflow TFJob, as `kubetrain convert` writes it) in FILE on "
      "this\nmachine: one process per task on free 127.0.0.1 ports,\nwith the TF_CONFIG a pod "
      "would get, restart policies, "
      "backoffLimit, activeDeadlineSeconds and\nsuccessPolicy applied. Containers run "
      "their command (binaries in --bin-dir first, then PATH);\nwithout a command, "
      "image kubetrain/<name> runs kubetrain-<name>. On a machine with GPUs (those "
      "in\nCUDA_VISIBLE_DEVICES, else nvidia-smi -L) the chief, worker and evaluator "
      "tasks get one each,\nround-robin, as CUDA_VISIBLE_DEVICES. An elastic job (spec.elastic) "
      "gains a worker on\nSIGUSR1 and loses its last one on SIGUSR2, within its bounds.\nExit "
      "status: 0 succeeded, 1 "
      "failed, 2 bad usage or manifest, 130 interrupted.");
  flags.SetPositionalUsage("FILE");
  flags.Add("bin-dir", &options.command.bin_dir,
            "directory searched first for the containers' programs (default: kubetrain's own)");
  flags.Add("grace-period", &options.grace_period,
            "how long tasks get to exit after the job ends or after SIGTERM, before SIGKILL");
  flags.Add("progress-interval", &options.progress_interval,
            "how often the progress line is repeated while the chief reports progress");
  flags.Add("restart-delay", &options.restart_delay,
            "delay before a task's first restart; doubles per restart up to 30s");
  flags.Add("bind-cpus", &options.bind_cpus,
            "keep each training task (chief, workers) of a fixed-size job to its own share of "
            "this machine's CPUs, as mpirun binds ranks (false: the kernel places them)");
  absl::StatusOr<std::vector<std::string>> files = flags.Parse(args);
  if (!files.ok()) return FlagExit(files.status(), err);
  if (files->size() != 1) {
    err << "kubetrain run: give exactly one FILE (see kubetrain run --help)\n";
    return 2;
  }
  std::vector<LoadedJob> jobs = LoadFile(files->front());
  if (jobs.size() != 1) {
    err << files->front() << ": holds " << jobs.size()
        << " documents; kubetrain run takes one TrainingJob per file\n";
    return 2;
  }
  if (!jobs[0].errors.empty()) {
    PrintErrors(jobs[0], err);
    return 2;
  }
  // A TFJob runs as the TrainingJob it converts to; what differs is said first.
  for (const std::string& note : jobs[0].notes) err << jobs[0].where << ": note: " << note << "\n";
  // CUDA_VISIBLE_DEVICES passes through (a value hiding every GPU stays in force); tasks that
  // get a GPU of their own below override it.
  for (const char* name : {"PATH", "HOME", "USER", "LANG", "TMPDIR", "CUDA_VISIBLE_DEVICES"}) {
    if (const char* v = std::getenv(name)) options.command.base_env[name] = v;
  }
  options.gpus = local::DetectGpus();
  local::LocalJob job(jobs[0].job, options, out);
  absl::StatusOr<local::JobResult> result = job.Run(stop);
  if (!result.ok()) {
    err << files->front() << ": " << result.status().message() << "\n";
    return 2;
  }
  out << "kubetrain | " << (jobs[0].tfjob ? "TFJob " : "TrainingJob ") << jobs[0].job.metadata.name
      << " " << result->reason << " in "
      << absl::StrFormat("%.1fs", absl::ToDoubleSeconds(result->wall)) << ": " << result->message
      << " (restarts: " << result->restarts << ")\n";
  if (result->summary) out << "kubetrain | chief summary: " << result->summary->dump() << "\n";
  if (result->succeeded) return 0;
  return result->reason == "Interrupted" ? 130 : 1;
}

int Convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string output = "yaml";
  FlagSet flags("kubetrain convert",
                "Prints the TrainingJob (kubetrain.dev/v1) equivalent to each Kubeflow TFJob\n"
                "(kubeflow.org/v1) in FILE; what does not carry over is said on stderr, one\n"
                "line per field. Exit status 0 when every TFJob converted, 1 otherwise.");
  flags.SetPositionalUsage("FILE");
  flags.Add("output", &output, "yaml or json");
  absl::StatusOr<std::vector<std::string>> files = flags.Parse(args);
  if (!files.ok()) return FlagExit(files.status(), err);
  if (int usage = CheckFileAndOutput("convert", *files, output, err)) return usage;
  int failed = 0;
  for (const LoadedJob& j : LoadFile(files->front())) {
    if (!j.tfjob) {
      ++failed;
      err << j.where << ": not a Kubeflow TFJob (apiVersion kubeflow.org/v1, kind TFJob)\n";
      continue;
    }
    if (!j.errors.empty()) {
      ++failed;
      PrintErrors(j, err);
      continue;
    }
    for (const std::string& note : j.notes) err << j.where << ": note: " << note << "\n";
    if (output == "yaml") {
      out << "---\n" << api::ToYaml(j.converted);
    } else {
      out << j.converted.dump(2) << "\n";
    }
  }
  return failed == 0 ? 0 : 1;
}

namespace {

int Dispatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             const std::atomic<bool>& stop, std::atomic<int>* scale) {
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? err : out) << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "validate") return Validate(rest, out, err);
  if (args[0] == "render") return Render(rest, out, err, stop);
  if (args[0] == "run") return Run(rest, out, err, stop, scale);
  if (args[0] == "convert") return Convert(rest, out, err);
  err << "kubetrain: unknown command \"" << args[0] << "\"\n\n" << kUsage;
  return 2;
}

}  // namespace

int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
         const std::atomic<bool>& stop, std::atomic<int>* scale) {
  // The last line of defence: a defect must end in a message and exit status, never an abort
  // that leaves a core file and no hint of which input caused it.
  try {
    return Dispatch(args, out, err, stop, scale);
  } catch (const std::exception& e) {
    err << "kubetrain: internal error: " << e.what()
        << "; please report it with the manifest that caused it\n";
    return 70;  // EX_SOFTWARE
  }
}

}  // namespace kubetrain::cli
