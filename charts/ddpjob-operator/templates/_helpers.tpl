{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "ddpjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name used as the prefix of every resource of this release. */}}
{{- define "ddpjob-operator.fullname" -}}
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

{{- define "ddpjob-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ddpjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ddpjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ddpjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ddpjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ddpjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The one namespace the operator watches in singleNamespace mode. */}}
{{- define "ddpjob-operator.watchNamespace" -}}
{{- default .Release.Namespace .Values.watchNamespace }}
{{- end }}

{{- define "ddpjob-operator.peeringName" -}}
{{- default (include "ddpjob-operator.fullname" .) .Values.ha.peeringName }}
{{- end }}

{{- define "ddpjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Labels every DDPJob worker pod carries (README contract), used to select trainer pods. */}}
{{- define "ddpjob-operator.workerSelector" -}}
app.kubernetes.io/name: ddpjob
app.kubernetes.io/component: worker
app.kubernetes.io/managed-by: ddpjob-operator
{{- end }}
