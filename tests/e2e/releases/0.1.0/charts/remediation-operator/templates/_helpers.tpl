{{/*
Names, labels and image references shared by every template of the chart.
*/}}

{{- define "remediation-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: release name plus chart name, unless the release name already contains it.
*/}}
{{- define "remediation-operator.fullname" -}}
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
The namespace of every namespaced object: namespace.name, else the release namespace.
*/}}
{{- define "remediation-operator.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name }}
{{- end }}

{{- define "remediation-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "remediation-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "remediation-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Chart labels. Not `app.kubernetes.io/managed-by: remediation-operator`: that value marks the
executor Jobs the operator creates itself; these objects are managed by Helm.
*/}}
{{- define "remediation-operator.labels" -}}
helm.sh/chart: {{ include "remediation-operator.chart" . }}
{{ include "remediation-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: remediation-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "remediation-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "remediation-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}: repository:tag@digest when a digest is
given (the digest is what the runtime pulls; the tag stays for humans), else repository:tag.
Call with (dict "image" .Values.x.image "default" "fallback-tag").
*/}}
{{- define "remediation-operator.image" -}}
{{- $tag := default .default .image.tag }}
{{- if not $tag }}
{{- fail (printf "image.tag is empty for repository %q: set a pinned tag" .image.repository) }}
{{- end }}
{{- if eq $tag "latest" }}
{{- fail (printf "image tag \"latest\" for %q is not a pin: set a version tag" .image.repository) }}
{{- end }}
{{- if .image.digest }}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}
{{- end }}

{{- define "remediation-operator.jobTemplatesDir" -}}
/etc/remediation-operator/job-templates
{{- end }}
