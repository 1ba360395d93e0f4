{{/* The release's name prefix: <release>-horovod, cut to 50 characters (pod names add suffixes). */}}
{{- define "horovod.fullname" -}}
{{- printf "%s-horovod" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "horovod.workerName" -}}
{{- printf "%s-worker" (include "horovod.fullname" .) -}}
{{- end -}}

{{- define "horovod.labels" -}}
app.kubernetes.io/name: horovod
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The workers' DNS names, space-separated: <worker>-<i>.<service>. */}}
{{- define "horovod.workerAddresses" -}}
{{- $worker := include "horovod.workerName" . -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.workers.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s" $worker $i $worker) -}}
{{- end -}}
{{- join " " $hosts -}}
{{- end -}}

{{/* horovodrun's -H value: <worker-i>.<service>:<slots> for every worker pod. */}}
{{- define "horovod.hosts" -}}
{{- $worker := include "horovod.workerName" . -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.workers.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s:%d" $worker $i $worker (int $.Values.workers.slots)) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}
