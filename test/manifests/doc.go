// Package manifests checks what kubext's pods may reach on a node, in every
// way kubext is installed: config/default rendered with kustomize's Go API
// (krusty, as `kubectl kustomize` renders it) and the Helm chart rendered by
// bin/helm with its default values and with every option that changes a pod
// turned on. Each pod spec is held against an allowlist per component
// (manager, ip-agent, reboot-agent): the host namespaces it joins, the host
// paths it mounts (read-only), the capabilities it adds after dropping all,
// its seccomp profile, user, privilege escalation and read-only root, and
// the pod and container fields it uses. Anything not on the list fails the
// test, so a new hostPath, capability or pod field is a deliberate change
// here, reviewed with docs/reboot-security.md.
package manifests
