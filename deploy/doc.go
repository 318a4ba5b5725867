// Package deploy holds the Kubernetes manifests of nri-cpualign (namespace,
// ConfigMap, DaemonSet, kustomization) and, under node/, the runtime and
// kubelet settings a node needs. It has no Go code: its test checks the
// manifests with the Kubernetes API types and strict decoding, the
// ConfigMap's TOML with pkg/config, and the image name against `make image`.
package deploy
