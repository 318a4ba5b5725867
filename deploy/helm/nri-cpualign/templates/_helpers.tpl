{{/*
The labels of every object: deploy/'s app.kubernetes.io/name, which the
DaemonSet's selector uses, plus Helm's (not on the pod template, so that a
DaemonSet from `kubectl apply -k deploy/` and one from the chart run the
same pods).
*/}}
{{- define "nri-cpualign.labels" -}}
app.kubernetes.io/name: nri-cpualign
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nri-cpualign.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
metrics_address split into the probes' host and port. The plugin listens
there on the host network; an address on every interface (":9464",
"0.0.0.0:9464", "[::]:9464") is probed on the node's loopback.
*/}}
{{- define "nri-cpualign.metricsPort" -}}
{{- $addr := toString .Values.config.metrics_address -}}
{{- $m := regexFind ":[0-9]+$" $addr -}}
{{- if not $m -}}
{{- fail (printf "config.metrics_address %q: the probes need host:port with a numeric port (or set probes.enabled=false)" $addr) -}}
{{- end -}}
{{- $port := trimPrefix ":" $m | int -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- fail (printf "config.metrics_address %q: the probes need a fixed port from 1 to 65535 (or set probes.enabled=false)" $addr) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{- define "nri-cpualign.metricsHost" -}}
{{- $host := regexReplaceAll ":[0-9]+$" (toString .Values.config.metrics_address) "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (eq $host "") (eq $host "0.0.0.0") (eq $host "::") -}}
127.0.0.1
{{- else -}}
{{ $host }}
{{- end -}}
{{- end -}}

{{/*
One policy option line of config.toml: set from the values, or shown
commented out with an example value, as deploy/config.toml shows it.
Arguments: the options map, the option name, the example value.
*/}}
{{- define "nri-cpualign.option" -}}
{{- $opts := index . 0 -}}
{{- $name := index . 1 -}}
{{- if hasKey $opts $name -}}
{{ $name }} = {{ index $opts $name | toString | toJson }}
{{- else -}}
# {{ $name }} = {{ index . 2 | toJson }}
{{- end -}}
{{- end -}}

{{/*
Options of a table the chart does not list (the plugin refuses unknown
names at start, naming them). Arguments: the options map, the listed names.
*/}}
{{- define "nri-cpualign.otherOptions" -}}
{{- $opts := index . 0 -}}
{{- $known := index . 1 -}}
{{- range $name := keys $opts | sortAlpha -}}
{{- if not (has $name $known) }}
{{ $name }} = {{ index $opts $name | toString | toJson }}
{{- end -}}
{{- end -}}
{{- end -}}
