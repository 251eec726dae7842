{{/*
The name of every object of the release: the ServiceAccount, the RBAC objects, the
Deployment, the Lease. "-metrics" and "-leader-election" are appended to some, so it is
cut at 55 characters: a Service's name must fit in 63.
*/}}
{{- define "zombied.fullname" -}}
{{- $default := ternary .Release.Name (printf "%s-zombied" .Release.Name) (contains "zombied" .Release.Name) -}}
{{- .Values.fullnameOverride | default $default | trunc 55 | trimSuffix "-" -}}
{{- end -}}

{{/* What the Deployment, the PodDisruptionBudget and the Service select on. */}}
{{- define "zombied.selectorLabels" -}}
app.kubernetes.io/name: zombied
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The recommended labels of every object, with its component:
include "zombied.labels" (dict "root" $ "component" "controller")
*/}}
{{- define "zombied.labels" -}}
{{ include "zombied.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: zombied
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The rules zombied needs where it reaps: watch terminal pods, delete them, record an Event. */}}
{{- define "zombied.podRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}

{{/* The chart's ServiceAccount, as an RBAC subject. */}}
{{- define "zombied.subject" -}}
- kind: ServiceAccount
  name: {{ include "zombied.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* The pods' PriorityClass: the chart's own, one the cluster has, or none (empty). */}}
{{- define "zombied.priorityClassName" -}}
{{- if .Values.priorityClass.create -}}
{{- if .Values.priorityClassName -}}
{{- fail "priorityClassName: names an existing PriorityClass; leave it empty with priorityClass.create=true (the chart's own is named after the release)" -}}
{{- end -}}
{{- include "zombied.fullname" . -}}
{{- else -}}
{{- .Values.priorityClassName -}}
{{- end -}}
{{- end -}}

{{/*
The options the chart sets from its values, each with the value that sets it instead.
Given again in extraArgs, the later flag would win over the chart's (a --listen the
probes do not follow, a Lease the Role does not allow); in config, the chart's flag
would win over the file, silently. Both are refused. flag: [config key, instead].
*/}}
{{- define "zombied.checkOptions" -}}
{{- $owned := dict
  "listen" (list "listen" "set listenPort instead (the container port and the probes follow it)")
  "namespaces" (list "namespaces" "set mode=namespaced and namespaces instead (the Roles follow them)")
  "leader-elect" (list "leaderElect" "every replica elects a leader")
  "lease-name" (list "leaseName" "the Lease is named after the release (fullnameOverride), as the leader-election Role allows")
  "lease-namespace" (list "leaseNamespace" "the Lease is in the release namespace, as the leader-election Role allows")
  "drain-timeout" (list "drainTimeout" "the drain must end within the pods' terminationGracePeriodSeconds")
  "log-format" (list "logFormat" "the pods log JSON lines")
  "config" (list "" "set config instead (the chart mounts it and rolls the pods when it changes)")
-}}
{{- range .Values.extraArgs }}
{{- $flag := regexReplaceAll "^--([^=]*).*$" . "${1}" }}
{{- with get $owned $flag }}
{{- fail (printf "extraArgs: --%s is set by the chart; %s" $flag (index . 1)) }}
{{- end }}
{{- end }}
{{- range $flag, $spec := $owned }}
{{- $key := index $spec 0 }}
{{- if and $key (hasKey $.Values.config $key) }}
{{- fail (printf "config: %s is set by the chart's --%s, which wins over the file; %s" $key $flag (index $spec 1)) }}
{{- end }}
{{- end }}
{{- end -}}
