{{- define "lktest.labels" -}}
app.kubernetes.io/name: lktest
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
