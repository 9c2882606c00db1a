{{/*
kubetrain.name: the chart name (or nameOverride), for app.kubernetes.io/name.
*/}}
{{- define "kubetrain.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kubetrain.fullname: the prefix of every object name; the release name alone when it already
contains the chart name (`helm install kubetrain ...` gives kubetrain-operator, as in deploy/).
*/}}
{{- define "kubetrain.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
kubetrain.operatorName: the Deployment, RBAC objects and leader-election Lease are named this.
*/}}
{{- define "kubetrain.operatorName" -}}
{{- printf "%s-operator" (include "kubetrain.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kubetrain.chart: chart name and version, for the helm.sh/chart label.
*/}}
{{- define "kubetrain.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kubetrain.selectorLabels: the immutable subset used in selectors.
*/}}
{{- define "kubetrain.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubetrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
kubetrain.labels: the app.kubernetes.io/* label set every object of the chart carries.
*/}}
{{- define "kubetrain.labels" -}}
helm.sh/chart: {{ include "kubetrain.chart" . }}
{{ include "kubetrain.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubetrain
{{- end }}

{{/*
kubetrain.serviceAccountName: the ServiceAccount the operator runs as.
*/}}
{{- define "kubetrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubetrain.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
kubetrain.image: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "kubetrain.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
kubetrain.floatingTag: "true" when image.tag is one that moves (latest, main, ...): NOTES then
advises image.pullPolicy=Always unless it is set.
*/}}
{{- define "kubetrain.floatingTag" -}}
{{- has .Values.image.tag (list "latest" "main" "master" "stable" "edge" "nightly" "dev") }}
{{- end }}

{{/*
kubetrain.rules: the operator's least-privilege RBAC rules on the namespaces it watches (the
verbs operator/controller and operator/kube use; see deploy/rbac/cluster-role.yaml).
*/}}
{{- define "kubetrain.rules" -}}
- apiGroups: ["kubetrain.dev"]
  resources: ["trainingjobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["kubetrain.dev"]
  resources: ["trainingjobs/status"]
  verbs: ["update"]
- apiGroups: ["kubetrain.dev"]
  resources: ["trainingjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["get", "list", "watch", "create", "delete"]
# deletecollection: the pods a finished or suspended job stops go in one request, by the
# job's labels.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["deletecollection"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
# spec.checkpoint.volumeClaimTemplate: the claim <job>-checkpoint, made before the job's pods
# (get when it already exists: a Retained claim a later job of the name mounts). The garbage
# collector deletes it with its job (reclaimPolicy Delete); the operator deletes none.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.tfjob.enabled }}
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/status"]
  verbs: ["update"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/finalizers"]
  verbs: ["update"]
{{- end }}
{{- if eq .Values.gangScheduler "volcano" }}
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: ["create", "delete"]
{{- end }}
{{- end }}
