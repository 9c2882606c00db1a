// Reconciler's side of elastic_bounds.h: an invalid edit of spec.elastic is refused, not a
// failure of the job (docs/architecture.md §10).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "operator/api/decode.h"
#include "operator/controller/conditions.h"
#include "operator/controller/elastic_bounds.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {

void Reconciler::KeepValidBounds(Pass& p, api::FieldErrors* errors,
                                 api::FieldErrors* out_of_bounds) {
  if (errors->empty()) {
    p.remember_bounds = true;
    return;
  }
  std::optional<json> kept = WithRememberedBounds(p.object, *errors);
  if (!kept) return;
  api::FieldErrors again;
  api::FieldErrors again_out;
  api::TrainingJob job = api::DecodeAndValidate(*kept, &again, &again_out);
  if (!again.empty()) return;  // the remembered bounds do not help: the edit fails the job
  const api::ElasticPolicy& e = *job.spec.elastic;
  p.refused_edit = absl::StrCat(
      "TrainingJob ", p.JobRef(), ": the edit of spec.elastic is refused and the job ",
      "keeps minReplicas ", e.min_replicas.value_or(0), ", maxReplicas ",
      e.max_replicas.value_or(0), ": ",
      absl::StrJoin(*errors, "; ",
                    [](std::string* out, const api::FieldError& f) { out->append(f.ToString()); }),
      "; edit spec.elastic to valid bounds");
  p.job = std::move(job);
  *errors = {};
  *out_of_bounds = std::move(again_out);
}

void Reconciler::ReportRefusedEdit(Pass& p) {
  if (p.refused_edit.empty()) {
    RemoveCondition(&p.status, kEditRefused);
    return;
  }
  if (SetCondition(&p.status, kEditRefused, true, "InvalidElasticBounds", p.refused_edit, p.now)) {
    events_.Warning(p.object, "InvalidElasticBounds", p.refused_edit);
    log::Info("Refused an edit of spec.elastic", {{"job", p.JobRef()}});
  }
}

}  // namespace kubetrain::controller
