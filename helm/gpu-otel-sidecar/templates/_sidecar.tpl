{{/*
=============================================================================================
Named templates that inject gpu-otel-sidecar into a pod spec. Use them from this chart (the
example Job does) or from your own chart, with this chart as a dependency:

  # Chart.yaml of your chart
  dependencies:
    - name: gpu-otel-sidecar
      version: 0.1.0
      repository: file://../gpu-otel-sidecar   # or wherever you keep it

  # values.yaml of your chart
  gpu-otel-sidecar:
    example: {enabled: false}
    targetContainerName: trainer

  # your pod template
  {{- $gpu := dict "root" $ "values" (index .Values "gpu-otel-sidecar") }}
  spec:
    {{- include "gpu-otel-sidecar.podSpec" $gpu | nindent 4 }}
    initContainers:
      {{- include "gpu-otel-sidecar.initContainers" $gpu | nindent 6 }}
    containers:
      - name: trainer
        resources:
          limits: {nvidia.com/gpu: 1}
          {{- with include "gpu-otel-sidecar.containerResourceClaims" $gpu }}
          claims: {{- . | nindent 12 }}
          {{- end }}
      {{- include "gpu-otel-sidecar.containers" $gpu | nindent 6 }}
    volumes:
      {{- include "gpu-otel-sidecar.volumes" $gpu | nindent 6 }}
    {{- with include "gpu-otel-sidecar.podResourceClaims" $gpu }}
    resourceClaims: {{- . | nindent 6 }}
    {{- end }}

Each template takes either the chart root (`.`, values from .Values) or
(dict "root" $ "values" <this chart's values>). List templates render list items ("- ...")
or nothing, so they can be appended to lists that already hold your own entries; when one of
them may be empty and the list has nothing else (initContainers in classic mode), wrap it in
`with`. The values the templates read are those of this chart's values.yaml.

  gpu-otel-sidecar.initContainers          native mode: the sidecar, restartPolicy Always
  gpu-otel-sidecar.containers              classic mode: the sidecar as an ordinary container
  gpu-otel-sidecar.container               the container itself (a mapping), either mode
  gpu-otel-sidecar.podSpec                 pod fields: shareProcessNamespace in classic mode
  gpu-otel-sidecar.volumes                 pod volumes (the pod-resources hostPath)
  gpu-otel-sidecar.podResourceClaims       pod.spec.resourceClaims entries (DRA mode)
  gpu-otel-sidecar.containerResourceClaims resources.claims entries for YOUR GPU container
                                           (DRA mode), so both containers share the claim
=============================================================================================
*/}}

{{/* Internal: the sidecar's values, from either calling form, as YAML. */}}
{{- define "gpu-otel-sidecar.values" -}}
{{- if and (kindIs "map" .) (hasKey . "values") }}
{{- toYaml .values }}
{{- else if and (kindIs "map" .) (hasKey . "root") }}
{{- toYaml .root.Values }}
{{- else }}
{{- toYaml .Values }}
{{- end }}
{{- end }}

{{/* Internal: fail early on values that cannot work. Takes (dict "root" "values"). */}}
{{- define "gpu-otel-sidecar.validate" -}}
{{- $root := .root }}
{{- $v := .values }}
{{- if not (has ($v.classic.restartPolicy | default "Never") (list "Never" "OnFailure" "Always")) }}
{{- fail (printf "gpu-otel-sidecar: classic.restartPolicy %q: expected Never, OnFailure or Always (the pod's restartPolicy)" (toString $v.classic.restartPolicy)) }}
{{- end }}
{{- if not (has $v.mode (list "native" "classic")) }}
{{- fail (printf "gpu-otel-sidecar: mode %q: expected native or classic" (toString $v.mode)) }}
{{- end }}
{{- $gv := $v.gpuVisibility }}
{{- if not (has $gv.mode (list "pod-resources" "dra" "uuids" "all")) }}
{{- fail (printf "gpu-otel-sidecar: gpuVisibility.mode %q: expected pod-resources, dra, uuids or all" (toString $gv.mode)) }}
{{- end }}
{{- if and (eq $gv.mode "uuids") (empty $gv.uuids) }}
{{- fail "gpu-otel-sidecar: gpuVisibility.mode uuids needs gpuVisibility.uuids (GPU or MIG UUIDs)" }}
{{- end }}
{{- if and (eq $v.mode "native") (semverCompare "<1.29.0-0" $root.Capabilities.KubeVersion.Version) }}
{{- fail (printf "gpu-otel-sidecar: mode native needs Kubernetes >= 1.29 (native sidecar containers); this cluster is %s: set mode=classic" $root.Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if and (eq $gv.mode "dra") (semverCompare "<1.32.0-0" $root.Capabilities.KubeVersion.Version) }}
{{- fail (printf "gpu-otel-sidecar: gpuVisibility.mode dra needs Kubernetes >= 1.32 (resource.k8s.io v1beta1 or later); this cluster is %s" $root.Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if not (has $v.collector.mode (list "hostIP" "service" "endpoint")) }}
{{- fail (printf "gpu-otel-sidecar: collector.mode %q: expected hostIP, service or endpoint" (toString $v.collector.mode)) }}
{{- end }}
{{- if and (eq $v.collector.mode "endpoint") (empty $v.collector.endpoint) }}
{{- fail "gpu-otel-sidecar: collector.mode endpoint needs collector.endpoint (a URL)" }}
{{- end }}
{{- if not (has $v.collector.protocol (list "grpc" "http/protobuf")) }}
{{- fail (printf "gpu-otel-sidecar: collector.protocol %q: expected grpc or http/protobuf" (toString $v.collector.protocol)) }}
{{- end }}
{{- end }}

{{/* Internal: OTLP endpoint URL. Takes (dict "root" "values"). */}}
{{- define "gpu-otel-sidecar.endpoint" -}}
{{- $root := .root }}
{{- $c := .values.collector }}
{{- $port := $c.port | default (ternary 4318 4317 (eq $c.protocol "http/protobuf")) }}
{{- if eq $c.mode "hostIP" }}
{{- printf "%s://$(K8S_HOST_IP):%v" $c.scheme $port }}
{{- else if eq $c.mode "service" }}
{{- printf "%s://%s.%s.svc.%s:%v" $c.scheme $c.service.name ($c.service.namespace | default $root.Release.Namespace) $c.service.clusterDomain $port }}
{{- else }}
{{- $c.endpoint }}
{{- end }}
{{- end }}

{{/*
Internal: OTEL_RESOURCE_ATTRIBUTES from a map, written as the agent (and every OTel SDK)
reads it: `key=value` pairs joined by commas, sorted by key, each value percent-encoded
(everything but letters, digits and `-_.~`: a comma, `=`, `%`, a space or non-ASCII
text stays the value it was). A number is written as in values.yaml where YAML kept it
exactly (Helm reads 12345678 as a float: it is written 12345678, not 1.2345678e+07); quote
a value in values.yaml to keep it as written in every case. A key must be non-empty and
hold no comma, `=`, space or `%`.
*/}}
{{- define "gpu-otel-sidecar.resourceAttributes" -}}
{{- $pairs := list }}
{{- range $k, $val := . }}
{{- if or (eq $k "") (regexMatch "[,=%\\s]" $k) }}
{{- fail (printf "gpu-otel-sidecar: telemetry.resourceAttributes key %q: a key must be non-empty, without comma, '=', '%%' or spaces" $k) }}
{{- end }}
{{- $text := toString $val }}
{{- if and (kindIs "float64" $val) (eq (float64 (int64 $val)) $val) }}
{{- $text = toString (int64 $val) }}
{{- end }}
{{- $pairs = append $pairs (printf "%s=%s" $k (urlquery $text | replace "+" "%20")) }}
{{- end }}
{{- join "," (sortAlpha $pairs) }}
{{- end }}

{{/* Internal: image reference. Takes (dict "root" "values"). */}}
{{- define "gpu-otel-sidecar.image" -}}
{{- $root := .root }}
{{- $img := .values.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- $tag := $img.tag }}
{{- if not $tag }}
{{- if eq $root.Chart.Name "gpu-otel-sidecar" }}
{{- $tag = $root.Chart.AppVersion }}
{{- else if and $root.Subcharts (hasKey $root.Subcharts "gpu-otel-sidecar") }}
{{- $tag = (index $root.Subcharts "gpu-otel-sidecar").Chart.AppVersion }}
{{- else }}
{{- fail "gpu-otel-sidecar: set image.tag (or image.digest)" }}
{{- end }}
{{- end }}
{{- printf "%s:%s" $img.repository $tag }}
{{- end }}
{{- end }}

{{/* Internal: where OTLP goes (env list items), shared by the sidecar and the webhook.
Takes (dict "root" "values"). */}}
{{- define "gpu-otel-sidecar.collectorEnv" -}}
{{- $v := .values -}}
{{- if eq $v.collector.mode "hostIP" -}}
- name: K8S_HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{ end -}}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ include "gpu-otel-sidecar.endpoint" . | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $v.collector.protocol | quote }}
{{- with $v.collector.headers.secretName }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $v.collector.headers.secretKey | quote }}
{{- end }}
{{- end }}

{{/* Internal: the variable that carries the pod label (the key): K8S_POD_LABEL_ and the key
in capitals, `_` for every other character (the agent's `label_variable`). */}}
{{- define "gpu-otel-sidecar.labelVariable" -}}
{{- printf "K8S_POD_LABEL_%s" (upper (regexReplaceAll "[^A-Za-z0-9]" . "_")) }}
{{- end }}

{{/* Internal: the container's env list. Takes (dict "root" "values"). */}}
{{- define "gpu-otel-sidecar.env" -}}
{{- $root := .root }}
{{- $v := .values }}
{{- $gv := $v.gpuVisibility -}}
# Pod identity from the Downward API (k8s.* resource attributes).
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: K8S_NAMESPACE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: K8S_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: K8S_CONTAINER_NAME
  value: {{ $v.targetContainerName | quote }}
# The pod's workload from its labels (k8s.job.name, k8s.pod.label.<key>): one variable per
# label; the kubelet gives "" for a label the pod lacks, which the agent leaves out.
{{- range $key := concat (list "batch.kubernetes.io/job-name" "job-name" "controller-uid") $v.telemetry.podLabels | uniq }}
- name: {{ include "gpu-otel-sidecar.labelVariable" $key }}
  valueFrom:
    fieldRef:
      fieldPath: {{ printf "metadata.labels['%s']" $key }}
{{- end }}
- name: GPU_SIDECAR_POD_LABELS
  value: {{ join "," $v.telemetry.podLabels | default "none" | quote }}
{{ include "gpu-otel-sidecar.collectorEnv" . }}
- name: OTEL_SERVICE_NAME
  value: {{ $v.telemetry.serviceName | quote }}
{{- with $v.telemetry.resourceAttributes }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ include "gpu-otel-sidecar.resourceAttributes" . | quote }}
{{- end }}
- name: OTEL_METRIC_EXPORT_INTERVAL
  value: {{ $v.telemetry.exportIntervalMillis | int | toString | quote }}
- name: GPU_SIDECAR_SAMPLE_INTERVAL
  value: {{ $v.telemetry.sampleInterval | quote }}
- name: GPU_SIDECAR_LOG_FORMAT
  value: {{ $v.telemetry.logFormat | quote }}
- name: GPU_SIDECAR_LOG_LEVEL
  value: {{ $v.telemetry.logLevel | quote }}
{{- if $v.hostNetwork }}
# hostNetwork pod: the pod's ports are the node's, so no fixed port (two such pods on a node
# would collide); the probes run `gpu-otel-sidecar health` on a socket in the pod's emptyDir.
- name: GPU_SIDECAR_HEALTH_ADDR
  value: {{ include "gpu-otel-sidecar.healthSocket" . | quote }}
{{- else }}
- name: GPU_SIDECAR_HEALTH_ADDR
  value: {{ printf "0.0.0.0:%d" ($v.health.port | int) | quote }}
{{- end }}
# The NVIDIA Container Toolkit mounts libnvidia-ml.so.1 for the `utility` capability.
- name: NVIDIA_DRIVER_CAPABILITIES
  value: "utility"
{{- if eq $gv.mode "pod-resources" }}
# Every GPU of the node is visible; the agent keeps only this pod's, as the kubelet's
# pod-resources API lists them.
- name: NVIDIA_VISIBLE_DEVICES
  value: "all"
- name: GPU_SIDECAR_DEVICES
  value: "pod-resources"
- name: GPU_SIDECAR_POD_RESOURCES_SOCKET
  value: {{ printf "%s/%s" (include "gpu-otel-sidecar.podResourcesMount" .) $gv.podResources.socketName | quote }}
{{- else if eq $gv.mode "dra" }}
# The shared ResourceClaim makes exactly the pod's GPUs visible.
- name: GPU_SIDECAR_DEVICES
  value: "all"
{{- else if eq $gv.mode "uuids" }}
- name: NVIDIA_VISIBLE_DEVICES
  value: {{ join "," $gv.uuids | quote }}
- name: GPU_SIDECAR_DEVICES
  value: {{ join "," $gv.uuids | quote }}
{{- else }}
# gpuVisibility.mode all: every GPU of the node is reported.
- name: NVIDIA_VISIBLE_DEVICES
  value: "all"
- name: GPU_SIDECAR_DEVICES
  value: "all"
{{- end }}
{{- $restartPolicy := $v.classic.restartPolicy | default "Never" }}
{{- if and (eq $v.mode "classic") (ne $restartPolicy "Always") }}
{{- if $v.classic.exitWithProcess }}
# Classic sidecar: exit 0 once the training process, seen once, is gone (or the pod's other
# containers have ended), so the Job completes.
- name: GPU_SIDECAR_EXIT_WITH_PROCESS
  value: {{ $v.classic.exitWithProcess | quote }}
{{- else }}
# Classic sidecar: exit 0 once no process of the pod's other containers is left, whatever the
# trainer runs (python3, torchrun, a shell script), so the Job completes.
- name: GPU_SIDECAR_EXIT_WITH_CONTAINERS
  value: "true"
{{- end }}
{{- if eq $restartPolicy "OnFailure" }}
# restartPolicy OnFailure: the sidecar ends only once the trainer has not been restarted within
# the kubelet's restart back-off.
- name: GPU_SIDECAR_POD_RESTART_POLICY
  value: "OnFailure"
{{- end }}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The sidecar container, as a mapping (no list dash). */}}
{{- define "gpu-otel-sidecar.container" -}}
{{- $root := . }}
{{- if and (kindIs "map" .) (hasKey . "root") }}{{ $root = .root }}{{ end }}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- $args := dict "root" $root "values" $v }}
{{- include "gpu-otel-sidecar.validate" $args }}
{{- $gv := $v.gpuVisibility -}}
name: {{ $v.containerName }}
image: {{ include "gpu-otel-sidecar.image" $args | quote }}
imagePullPolicy: {{ $v.image.pullPolicy }}
env:
  {{- include "gpu-otel-sidecar.env" $args | nindent 2 }}
{{- $hostNetwork := $v.hostNetwork }}
{{- if not $hostNetwork }}
ports:
  - name: gpusc-health
    containerPort: {{ $v.health.port | int }}
    protocol: TCP
{{- end }}
{{- with $v.health.livenessProbe }}
{{- if .enabled }}
livenessProbe:
  {{- if $hostNetwork }}
  exec:
    command: ["/gpu-otel-sidecar", "health", "--liveness"]
  {{- else }}
  httpGet:
    path: /healthz
    port: gpusc-health
  {{- end }}
  initialDelaySeconds: {{ .initialDelaySeconds | int }}
  periodSeconds: {{ .periodSeconds | int }}
  timeoutSeconds: {{ .timeoutSeconds | int }}
  failureThreshold: {{ .failureThreshold | int }}
{{- end }}
{{- end }}
{{- with $v.health.readinessProbe }}
{{- if .enabled }}
readinessProbe:
  {{- if $hostNetwork }}
  exec:
    command: ["/gpu-otel-sidecar", "health"]
  {{- else }}
  httpGet:
    path: /readyz
    port: gpusc-health
  {{- end }}
  periodSeconds: {{ .periodSeconds | int }}
  timeoutSeconds: {{ .timeoutSeconds | int }}
  failureThreshold: {{ .failureThreshold | int }}
{{- end }}
{{- end }}
{{- $res := deepCopy ($v.resources | default (dict)) }}
{{- if eq $gv.mode "dra" }}
{{- $_ := set $res "claims" (list (dict "name" $gv.dra.claimName)) }}
{{- end }}
{{- with $res }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $sc := deepCopy ($v.securityContext | default (dict)) }}
{{- if and (eq $gv.mode "pod-resources") $gv.podResources.runAsRoot }}
{{- /* The kubelet's pod-resources socket accepts root only; everything else stays restricted. */}}
{{- $_ := set $sc "runAsUser" 0 }}
{{- $_ := set $sc "runAsNonRoot" false }}
{{- end }}
securityContext:
  {{- toYaml $sc | nindent 2 }}
{{- if or (eq $gv.mode "pod-resources") $hostNetwork }}
volumeMounts:
  {{- if eq $gv.mode "pod-resources" }}
  - name: gpu-otel-sidecar-pod-resources
    mountPath: {{ include "gpu-otel-sidecar.podResourcesMount" $args | quote }}
    readOnly: true
  {{- end }}
  {{- if $hostNetwork }}
  - name: gpu-otel-sidecar-run
    mountPath: {{ include "gpu-otel-sidecar.healthSocket" $args | trimPrefix "unix:" | dir | quote }}
  {{- end }}
{{- end }}
terminationMessagePolicy: FallbackToLogsOnError
{{- end }}

{{/* Native mode: the sidecar as an init container with restartPolicy Always; else nothing. */}}
{{- define "gpu-otel-sidecar.initContainers" -}}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- if eq $v.mode "native" -}}
- {{- include "gpu-otel-sidecar.container" . | nindent 2 }}
  restartPolicy: Always
{{- end }}
{{- end }}

{{/* Classic mode: the sidecar as an ordinary container; else nothing. */}}
{{- define "gpu-otel-sidecar.containers" -}}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- if eq $v.mode "classic" -}}
- {{- include "gpu-otel-sidecar.container" . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod-level fields: shareProcessNamespace in classic mode; else nothing. */}}
{{- define "gpu-otel-sidecar.podSpec" -}}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- if and (eq $v.mode "classic") (ne ($v.classic.restartPolicy | default "Never") "Always") -}}
# Classic sidecar: it watches the trainer's process to exit with it (not in restartPolicy
# Always pods, where it runs as long as the pod).
shareProcessNamespace: true
{{- end }}
{{- end }}

{{/*
Pod volumes the sidecar needs (list items), or nothing: the kubelet's pod-resources
directory (DirectoryOrCreate: a node whose kubelet root is elsewhere still starts the pod;
the sidecar then says it finds no socket, and the trainer runs), and in a hostNetwork pod
the emptyDir of its health socket.
*/}}
{{- define "gpu-otel-sidecar.volumes" -}}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- $volumes := list }}
{{- if eq $v.gpuVisibility.mode "pod-resources" }}
{{- $hostPath := dict "path" (include "gpu-otel-sidecar.podResourcesHostPath" $v) "type" "DirectoryOrCreate" }}
{{- $volumes = append $volumes (dict "name" "gpu-otel-sidecar-pod-resources" "hostPath" $hostPath) }}
{{- end }}
{{- if $v.hostNetwork }}
{{- $volumes = append $volumes (dict "name" "gpu-otel-sidecar-run" "emptyDir" (dict)) }}
{{- end }}
{{- with $volumes }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* Internal: the pod-resources directory on the node. Takes the values. */}}
{{- define "gpu-otel-sidecar.podResourcesHostPath" -}}
{{- $pr := .gpuVisibility.podResources }}
{{- if $pr.hostPath }}
{{- trimSuffix "/" $pr.hostPath }}
{{- else }}
{{- printf "%s/pod-resources" (trimSuffix "/" .kubeletRoot) }}
{{- end }}
{{- end }}

{{/* Internal: where the pod-resources directory is mounted in the sidecar (whatever the
node's kubelet root). */}}
{{- define "gpu-otel-sidecar.podResourcesMount" -}}
/var/lib/kubelet/pod-resources
{{- end }}

{{/* Internal: the health endpoint of a hostNetwork pod's sidecar. */}}
{{- define "gpu-otel-sidecar.healthSocket" -}}
unix:/run/gpu-otel-sidecar/health.sock
{{- end }}

{{/* pod.spec.resourceClaims entries (DRA mode), or nothing. */}}
{{- define "gpu-otel-sidecar.podResourceClaims" -}}
{{- $root := . }}
{{- if and (kindIs "map" .) (hasKey . "root") }}{{ $root = .root }}{{ end }}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- $dra := $v.gpuVisibility.dra }}
{{- if eq $v.gpuVisibility.mode "dra" -}}
- name: {{ $dra.claimName }}
  {{- if $dra.resourceClaimName }}
  resourceClaimName: {{ $dra.resourceClaimName }}
  {{- else }}
  resourceClaimTemplateName: {{ $dra.resourceClaimTemplateName | default (include "gpu-otel-sidecar.claimTemplateName" $root) }}
  {{- end }}
{{- end }}
{{- end }}

{{/* resources.claims entries for the GPU-using container (DRA mode), or nothing. */}}
{{- define "gpu-otel-sidecar.containerResourceClaims" -}}
{{- $v := include "gpu-otel-sidecar.values" . | fromYaml }}
{{- if eq $v.gpuVisibility.mode "dra" -}}
- name: {{ $v.gpuVisibility.dra.claimName }}
{{- end }}
{{- end }}
