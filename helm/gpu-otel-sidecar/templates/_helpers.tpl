{{/* Chart-internal helpers. The named templates meant for your own charts are in _sidecar.tpl. */}}

{{- define "gpu-otel-sidecar.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-otel-sidecar.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gpu-otel-sidecar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-otel-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-otel-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-otel-sidecar.labels" -}}
helm.sh/chart: {{ include "gpu-otel-sidecar.chart" . }}
{{ include "gpu-otel-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Name of the ResourceClaimTemplate the chart creates in gpuVisibility mode dra. Built from the
release name only, so that it is the same whether it is computed here or from a parent chart
that includes the public templates (whose .Chart is its own).
*/}}
{{- define "gpu-otel-sidecar.claimTemplateName" -}}
{{- printf "%s-gpu-otel-sidecar-gpu" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the admission webhook's objects (Deployment, Service, ConfigMap, ...). */}}
{{- define "gpu-otel-sidecar.webhookName" -}}
{{- printf "%s-webhook" (include "gpu-otel-sidecar.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "gpu-otel-sidecar.webhookSelectorLabels" -}}
{{ include "gpu-otel-sidecar.selectorLabels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/* DNS names of the webhook's Service, for its serving certificate. */}}
{{- define "gpu-otel-sidecar.webhookDnsNames" -}}
{{- $svc := include "gpu-otel-sidecar.webhookName" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.collector.service.clusterDomain) | toJson }}
{{- end }}

{{/*
The sidecar the webhook injects, as JSON: what the named templates of _sidecar.tpl render for
this chart's values, for pods on the pod network and (key hostNetwork) for hostNetwork pods
(src/webhook/template.rs reads it as `SidecarTemplate`).
*/}}
{{- define "gpu-otel-sidecar.webhookSidecar" -}}
{{- $sidecar := dict "gpuVisibility" .Values.gpuVisibility.mode }}
{{- range $hostNetwork := list false true }}
{{- $values := deepCopy $.Values }}
{{- $_ := set $values "hostNetwork" $hostNetwork }}
{{- /* Rendered for restartPolicy Never: the webhook adapts it to each pod's policy. */}}
{{- $_ := set $values.classic "restartPolicy" "Never" }}
{{- $args := dict "root" $ "values" $values }}
{{- $placement := dict }}
{{- $_ := set $placement "podSpec" (include "gpu-otel-sidecar.podSpec" $args | fromYaml) }}
{{- $_ := set $placement "initContainers" (include "gpu-otel-sidecar.initContainers" $args | fromYamlArray) }}
{{- $_ := set $placement "containers" (include "gpu-otel-sidecar.containers" $args | fromYamlArray) }}
{{- $_ := set $placement "volumes" (include "gpu-otel-sidecar.volumes" $args | fromYamlArray) }}
{{- if $hostNetwork }}
{{- $_ := set $sidecar "hostNetwork" $placement }}
{{- else }}
{{- $sidecar = merge $sidecar $placement }}
{{- end }}
{{- end }}
{{- toPrettyJson $sidecar }}
{{- end }}
