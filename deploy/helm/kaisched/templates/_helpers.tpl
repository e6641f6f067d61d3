{{/* Name of the scheduler's objects (ServiceAccount, ClusterRole, Deployment, ...). */}}
{{- define "kaisched.name" -}}
kaisched
{{- end }}

{{/* Namespace of every namespaced object of the chart. */}}
{{- define "kaisched.namespace" -}}
{{- required "namespace must not be empty" .Values.namespace }}
{{- end }}

{{/* Labels of every object of the chart. */}}
{{- define "kaisched.labels" -}}
app.kubernetes.io/name: kaisched
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kaisched
{{- end }}

{{/* Labels selecting the scheduler's pods. */}}
{{- define "kaisched.selectorLabels" -}}
app.kubernetes.io/name: kaisched
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "kaisched.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
