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

{{- define "tessera.node.fullname" -}}
{{- printf "%s-node" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
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
