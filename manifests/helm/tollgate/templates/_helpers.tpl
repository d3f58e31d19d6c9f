{{/* Labels of every object but the webhook configurations (whose labels the leader owns). */}}
{{- define "tollgate.labels" -}}
app.kubernetes.io/name: tollgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The pods' labels: the Deployment's selector, the Service's, the PDB's and the spread constraints'. */}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: tollgate
app.kubernetes.io/component: webhook
{{- end }}

{{/* The one subject of every binding: Tollgate's ServiceAccount. */}}
{{- define "tollgate.subjects" -}}
subjects:
- kind: ServiceAccount
  name: tollgate
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/* The Secret the Deployment mounts at /etc/tollgate/tls. */}}
{{- define "tollgate.tlsSecretName" -}}
{{- if and (eq .Values.certificates.mode "static") .Values.certificates.static.existingSecret -}}
{{ .Values.certificates.static.existingSecret }}
{{- else -}}
tollgate-tls
{{- end }}
{{- end }}

{{/* Refuse values the server cannot honour. */}}
{{- define "tollgate.validate" -}}
{{- if not (has .Values.certificates.mode (list "static" "cert-manager" "self-managed")) }}
{{- fail (printf "certificates.mode must be static, cert-manager or self-managed, not %q" .Values.certificates.mode) }}
{{- end }}
{{- if and (eq .Values.certificates.mode "static") (not .Values.certificates.static.existingSecret) }}
{{- if not (and .Values.certificates.static.tlsCrt .Values.certificates.static.tlsKey .Values.certificates.static.caCrt) }}
{{- fail "certificates.mode static needs certificates.static.tlsCrt, tlsKey and caCrt (e.g. --set-file certificates.static.tlsCrt=tls/tls.crt after `tollgate certs --out-dir tls`) or certificates.static.existingSecret" }}
{{- end }}
{{- end }}
{{- if and .Values.webhooks.create (not .Values.webhooks.manage) }}
{{- fail "webhooks.create needs webhooks.manage" }}
{{- end }}
{{- end }}
