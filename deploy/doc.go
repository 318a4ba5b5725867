// Package deploy holds the Kubernetes manifests of nri-cpualign (namespace,
// DaemonSet, the ConfigMap generated from config.toml, kustomization), the
// Helm chart under helm/nri-cpualign, the Prometheus alerts and, under
// node/, the runtime and kubelet settings a node needs. It has no Go code:
// its tests render the manifests with kustomize (and the chart with helm
// when it is installed, make chart-check), decode them with the Kubernetes
// API types and strict decoding, check that both render the same objects,
// the TOML with pkg/config, the image name against `make image`, and the
// alerts' metrics against docs/metrics.md.
package deploy
