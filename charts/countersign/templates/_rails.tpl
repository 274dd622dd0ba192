{{- /*
The rails file (COUNTERSIGN_RAILS_FILE): every rail account, the hosts it
guards, and the file its secret key is mounted at. It names key files, never
keys.
*/ -}}
{{- define "countersign.railsFile" -}}
{{- $rails := list -}}
{{- range $r := .Values.rails -}}
{{- $a := dict "account" $r.account "rail" $r.rail "hosts" $r.hosts "key_file" (printf "%s/%s/key" (include "countersign.railKeyDir" $) $r.account) -}}
{{- if $r.baseURL -}}{{- $_ := set $a "base_url" $r.baseURL -}}{{- end -}}
{{- if $r.mcp -}}{{- $_ := set $a "mcp" $r.mcp -}}{{- end -}}
{{- if $r.payoutAccountNumbers -}}{{- $_ := set $a "payout_account_numbers" $r.payoutAccountNumbers -}}{{- end -}}
{{- $rails = append $rails $a -}}
{{- end -}}
{{- toYaml (dict "rails" $rails) -}}
{{- end -}}
