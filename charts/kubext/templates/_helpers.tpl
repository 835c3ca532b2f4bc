{{/*
Prefix of every object's name: .Values.namePrefix, else "<release>-".
*/}}
{{- define "kubext.prefix" -}}
{{- if .Values.namePrefix -}}
{{- .Values.namePrefix -}}
{{- else -}}
{{- printf "%s-" .Release.Name -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "kubext.labels" -}}
app.kubernetes.io/name: kubext
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The manager's selector. The same labels as config/manager: the admission
policies, the Services and the PodDisruptionBudget select them.
*/}}
{{- define "kubext.managerSelector" -}}
app.kubernetes.io/name: kubext
control-plane: controller-manager
{{- end -}}

{{/* The image reference: repository@digest, else repository:tag. */}}
{{- define "kubext.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The logging flags of every binary. */}}
{{- define "kubext.logArgs" -}}
- --zap-log-level={{ .Values.logging.level }}
- --zap-encoder={{ .Values.logging.format }}
{{- end -}}

{{/*
One document of a config/ file copied into files/ by `make chart-sync`,
found by kind and metadata.name, as YAML (callers use fromYaml). Rendering
RBAC rules and policies from these copies keeps config/ the one source of
truth. Fails when the document is missing, so a renamed object in config/
breaks the render instead of silently dropping rules.
Usage: include "kubext.configDoc" (list $ "config/rbac/role.yaml" "ClusterRole" "manager-role")
*/}}
{{- define "kubext.configDoc" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $kind := index . 2 -}}
{{- $name := index . 3 -}}
{{- $content := $root.Files.Get (printf "files/%s" $file) -}}
{{- if not $content -}}
{{- fail (printf "chart file files/%s missing: run make chart-sync" $file) -}}
{{- end -}}
{{- $found := "" -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $content -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (eq (toString $obj.kind) $kind) (eq (toString (dig "metadata" "name" "" $obj)) $name) -}}
{{- $found = toYaml $obj -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "no %s %s in files/%s: run make chart-sync" $kind $name $file) -}}
{{- end -}}
{{- $found -}}
{{- end -}}

{{/*
Like kubext.configDoc, but "" when the file has no such document: for
objects config/ has only in some configurations (e.g. the manager's
namespaced Role, generated only when a marker asks for one).
*/}}
{{- define "kubext.configDocOptional" -}}
{{- $root := index . 0 -}}
{{- $content := $root.Files.Get (printf "files/%s" (index . 1)) -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $content -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (eq (toString $obj.kind) (index $ 2)) (eq (toString (dig "metadata" "name" "" $obj)) (index $ 3)) -}}
{{- toYaml $obj -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
RBAC rules of config/rbac with the release's prefix: the markers name
objects as config/default does (kubext-...), e.g. resourceNames of the
webhook configuration and its certificate Secret; the chart names them with
its prefix, so the rules follow.
*/}}
{{- define "kubext.prefixedRules" -}}
{{- $prefix := index . 0 -}}
{{- $rules := list -}}
{{- range $r := index . 1 -}}
{{- if $r.resourceNames -}}
{{- $names := list -}}
{{- range $n := $r.resourceNames -}}
{{- $names = append $names (regexReplaceAll "^kubext-" $n $prefix) -}}
{{- end -}}
{{- $r = merge (dict "resourceNames" $names) (omit $r "resourceNames") -}}
{{- end -}}
{{- $rules = append $rules $r -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}

{{/* Every document of a config/ copy, as a YAML list (callers use fromYamlArray). */}}
{{- define "kubext.configDocs" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $content := $root.Files.Get (printf "files/%s" $file) -}}
{{- if not $content -}}
{{- fail (printf "chart file files/%s missing: run make chart-sync" $file) -}}
{{- end -}}
{{- $docs := list -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $content -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if $obj -}}
{{- $docs = append $docs $obj -}}
{{- end -}}
{{- end -}}
{{- toYaml $docs -}}
{{- end -}}
