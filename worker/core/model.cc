#include "worker/core/model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/core/data/batch_iterator.h"
#include "worker/core/random.h"

namespace kubetrain::worker {
namespace {

// Downloads each variable's `part` (its value or its gradient) to `dst`, one after another.
void DownloadEach(Device& device, const std::vector<Variable*>& variables, Tensor Variable::*part,
                  float* dst) {
  for (Variable* v : variables) {
    device.Download(v->*part, dst, v->size());
    dst += v->size();
  }
}

}  // namespace

Model::Model(Device& device, std::string name, int num_classes,
             std::vector<std::unique_ptr<Layer>> layers)
    : device_(device),
      name_(std::move(name)),
      num_classes_(num_classes),
      layers_(std::move(layers)),
      graphs_(device, name_) {
  for (auto& layer : layers_) {
    first_variable_.push_back(variables_.size());
    for (Variable* v : layer->variables()) variables_.push_back(v);
  }
  layer_inputs_.resize(layers_.size());
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const Variable* v : variables_) n += v->size();
  return n;
}

absl::Status Model::Initialize(uint64_t seed) {
  uint64_t stream = 0;
  for (auto& layer : layers_) {
    Rng rng(seed, stream);  // one stream per layer: adding a layer does not reshuffle the others
    layer->Initialize(rng);
    stream += layer->fused_layers();
  }
  return device_.Synchronize();
}

void Model::Reserve(int batch) {
  if (batch <= capacity_) return;
  capacity_ = batch;
  ++generation_;
  for (auto& layer : layers_) layer->Reserve(batch);
  input_ = Tensor(device_, {batch, input_size()});
  labels_ = IntTensor(device_, {batch});
  losses_ = Tensor(device_, {batch});
  ones_ = Tensor(device_, {batch});
  device_.Fill(batch, 1.0f, ones_.data());
  logits_grad_ = Tensor(device_, {batch, num_classes_});
  predictions_ = IntTensor(device_, {batch});
  host_losses_.resize(batch);
  host_predictions_.resize(batch);
}

absl::Status Model::CheckBatch(absl::Span<const float> images,
                               absl::Span<const int32_t> labels) const {
  const auto batch = static_cast<int64_t>(labels.size());
  if (batch == 0 || static_cast<int64_t>(images.size()) != batch * input_size()) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", batch, " labels needs ",
                                                   batch * input_size(), " image floats, got ",
                                                   images.size()));
  }
  for (int32_t label : labels) {
    if (label < 0 || label >= num_classes_) {
      return absl::InvalidArgumentError(absl::StrCat("label ", label, " is out of range"));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::Load(absl::Span<const float> images, absl::Span<const int32_t> labels) {
  RETURN_IF_ERROR(CheckBatch(images, labels));
  Reserve(static_cast<int>(labels.size()));
  device_.Upload(images.data(), input_, images.size());
  device_.Upload(labels.data(), labels_, static_cast<int64_t>(labels.size()));
  return absl::OkStatus();
}

const float* Model::Forward(int batch) {
  const float* x = input_.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    layer_inputs_[i] = x;
    x = layers_[i]->Forward(x, batch);
  }
  return x;
}

void Model::Backward(int batch) {
  const float* grad = logits_grad_.data();
  for (size_t i = layers_.size(); i-- > 0;) {
    grad = layers_[i]->Backward(layer_inputs_[i], grad, batch, /*need_input_grad=*/i > 0);
    // A layer without variables completes nothing new.
    if (gradients_ready_ &&
        (i + 1 == layers_.size() || first_variable_[i] < first_variable_[i + 1])) {
      gradients_ready_(first_variable_[i]);
    }
  }
}

double Model::SumLoss(int batch) {
  device_.Download(losses_, host_losses_.data(), batch);
  double sum = 0.0;
  for (int i = 0; i < batch; ++i) sum += host_losses_[i];
  return sum;
}

absl::StatusOr<int> Model::ForwardBackward(absl::Span<const float> images,
                                           absl::Span<const int32_t> labels, float* loss,
                                           StepTail* tail) {
  RETURN_IF_ERROR(CheckBatch(images, labels));
  const int batch = static_cast<int>(labels.size());
  // Buffers grow before a step may be captured: a capture cannot allocate.
  Reserve(batch);
  // A named lambda: StepGraphs::Issue refers to it and must not outlive it.
  auto issue = [&](const float* host_images, const int32_t* host_labels) {
    device_.Upload(host_images, input_, static_cast<int64_t>(images.size()));
    device_.Upload(host_labels, labels_, batch);
    const float* logits = Forward(batch);
    device_.SoftmaxCrossEntropy(batch, num_classes_, logits, labels_.data(), 1.0f / batch,
                                losses_.data(), logits_grad_.data());
    Backward(batch);
    if (loss != nullptr) {
      // loss = (1/batch) · losses[1×batch] · ones[batch×1]
      device_.Gemm(false, false, 1, 1, batch, 1.0f / batch, losses_.data(), ones_.data(), 0.0f,
                   loss);
    }
    return tail != nullptr ? tail->Issue() : absl::OkStatus();
  };
  if (gradients_ready_) {
    RETURN_IF_ERROR(issue(images.data(), labels.data()));
  } else {
    RETURN_IF_ERROR(graphs_.Run({batch, loss, tail}, generation_, images, labels, issue),
                    "step of ", name_);
  }
  return batch;
}

absl::StatusOr<float> Model::ComputeGradients(absl::Span<const float> images,
                                              absl::Span<const int32_t> labels) {
  ASSIGN_OR_RETURN(const int batch, ForwardBackward(images, labels, nullptr, nullptr));
  const double loss = SumLoss(batch);
  RETURN_IF_ERROR(device_.Synchronize(), "computing gradients of ", name_);
  return static_cast<float>(loss / batch);
}

absl::Status Model::ComputeGradients(absl::Span<const float> images,
                                     absl::Span<const int32_t> labels, float* loss,
                                     StepTail* tail) {
  return ForwardBackward(images, labels, loss, tail).status();
}

absl::StatusOr<EvalResult> Model::EvaluateBatch(absl::Span<const float> images,
                                                absl::Span<const int32_t> labels) {
  RETURN_IF_ERROR(Load(images, labels));
  const int batch = static_cast<int>(labels.size());
  const float* logits = Forward(batch);
  device_.SoftmaxCrossEntropy(batch, num_classes_, logits, labels_.data(), 1.0f, losses_.data(),
                              nullptr);
  device_.ArgMax(batch, num_classes_, logits, predictions_.data());
  const double loss = SumLoss(batch);
  device_.Download(predictions_, host_predictions_.data(), batch);
  RETURN_IF_ERROR(device_.Synchronize(), "evaluating ", name_);
  int64_t correct = 0;
  for (int i = 0; i < batch; ++i) correct += host_predictions_[i] == labels[i];
  return EvalResult{loss / batch, static_cast<double>(correct) / batch, batch};
}

absl::StatusOr<EvalResult> Model::Evaluate(const Dataset& data, int batch_size,
                                           const std::atomic<bool>* cancel, EvalShare share) {
  if (data.example_size() != input_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, " takes ", input_size(), " floats per example, data has ", data.example_size()));
  }
  if (share.count < 1 || share.index < 0 || share.index >= share.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("evaluation share ", share.index, " of ", share.count, " does not exist"));
  }
  if (data.size() == 0) return absl::InvalidArgumentError("cannot evaluate on an empty dataset");
  const int64_t begin = data.size() * share.index / share.count;
  const int64_t end = data.size() * (share.index + 1) / share.count;
  BatchIterator batches(data, IndexRange(begin, end), batch_size);
  double loss_sum = 0.0, correct = 0.0;
  int64_t examples = 0;
  while (const Batch* b = batches.Next()) {
    if (cancel != nullptr && cancel->load()) return absl::CancelledError("evaluation cancelled");
    ASSIGN_OR_RETURN(EvalResult r, EvaluateBatch(b->image_span(), b->label_span()));
    loss_sum += r.loss * r.examples;
    correct += r.accuracy * r.examples;
    examples += r.examples;
  }
  if (examples == 0) return EvalResult{};
  return EvalResult{loss_sum / examples, correct / examples, examples};
}

absl::Status Model::CheckFlatSize(size_t size) const {
  if (static_cast<int64_t>(size) == num_parameters()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name_, " has ", num_parameters(), " parameters, flat buffer has ", size));
}

absl::Status Model::ReadValues(absl::Span<float> out) {
  RETURN_IF_ERROR(CheckFlatSize(out.size()));
  DownloadEach(device_, variables_, &Variable::value, out.data());
  return device_.Synchronize();
}

absl::Status Model::ReadGradients(absl::Span<float> out) {
  RETURN_IF_ERROR(CheckFlatSize(out.size()));
  DownloadEach(device_, variables_, &Variable::grad, out.data());
  return device_.Synchronize();
}

absl::Status Model::WriteValues(absl::Span<const float> values) {
  RETURN_IF_ERROR(CheckFlatSize(values.size()));
  const float* src = values.data();
  for (Variable* v : variables_) {
    device_.Upload(src, v->value, v->size());
    src += v->size();
  }
  return device_.Synchronize();
}

}  // namespace kubetrain::worker
