{{/* Chart name, overridable. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every namespaced object; the release name alone when it already contains the chart name. */}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tessera.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tessera
{{- end -}}

{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tessera.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tessera.agent.fullname" -}}
{{- printf "%s-agent" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tessera.devicePlugin.fullname" -}}
{{- printf "%s-device-plugin" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The user name a service account of the release authenticates as. */}}
{{- define "tessera.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .context.Release.Namespace .name -}}
{{- end -}}

{{/* CEL: the value of annotation `.key` on object `.obj` ("" when absent). */}}
{{- define "tessera.cel.annotation" -}}
(has({{ .obj }}.metadata.annotations) && '{{ .key }}' in {{ .obj }}.metadata.annotations ? {{ .obj }}.metadata.annotations['{{ .key }}'] : '')
{{- end -}}

{{/* CEL: whether the request changes annotation `.` (on CREATE: whether it sets it). */}}
{{- define "tessera.cel.annotationChanged" -}}
{{ include "tessera.cel.annotation" (dict "obj" "object" "key" .) }} != (request.operation == 'UPDATE' ? {{ include "tessera.cel.annotation" (dict "obj" "oldObject" "key" .) }} : '')
{{- end -}}

{{- define "tessera.webhook.secretName" -}}
{{- printf "%s-webhook-tls" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tessera.webhook.certName" -}}
{{- printf "%s-webhook" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* DNS name the API server uses to reach the webhook Service. */}}
{{- define "tessera.webhook.dnsName" -}}
{{- printf "%s.%s.svc" (include "tessera.scheduler.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "tessera.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Pod-spec fields the agent's and the device plugin's DaemonSets share (values: nodeDaemonSet). */}}
{{- define "tessera.nodePodPlacement" -}}
{{- $ds := .Values.nodeDaemonSet }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $ds.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $ds.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $ds.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $ds.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  seccompProfile:
    type: RuntimeDefault
{{- end -}}
