// Package cluster is the end-to-end suite of the nri-cpualign DaemonSet on a
// real one-node Kubernetes cluster (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and a kubelet, v1.37, against the
// test containerd or CRI-O), installed the way the README's "Install on a cluster"
// says: `make image`, `ctr images import`, `kubectl apply -k deploy/`, the
// node label. scripts/e2e-cluster.sh (`make e2e-cluster`) starts the cluster
// and runs it; the specs have the build tag e2e and skip, saying why, where
// that environment is missing.
package cluster
