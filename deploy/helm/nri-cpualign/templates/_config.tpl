{{/*
config.toml of the ConfigMap: deploy/config.toml's text with the values in
place of its settings (for the default values, the same text; deploy's
tests compare them).
*/}}
{{- define "nri-cpualign.config" -}}
{{- $cpumanagerOpts := .Values.config.cpu_manager_policy_options | default dict -}}
{{- $cpumanagerKnown := list "full-pcpus-only" "distribute-cpus-across-numa" "align-by-socket" "distribute-cpus-across-cores" "strict-cpu-reservation" "prefer-align-cpus-by-uncorecache" "strict-align-cpus-by-uncorecache" -}}
{{- $topologymanagerOpts := .Values.config.topology_manager_policy_options | default dict -}}
{{- $topologymanagerKnown := list "prefer-closest-numa-nodes" "max-allowable-numa-nodes" -}}
# nri-cpualign's configuration on the cluster, mounted in the pod at
# /etc/nri-cpualign/config.toml. Every key is listed; the keys mirror the
# kubelet's KubeletConfiguration (cpuManagerPolicy -> cpu_manager_policy,
# ...). kustomize makes it the ConfigMap nri-cpualign-<hash of this text>
# (deploy/kustomization.yaml) and the Helm chart renders the same text from
# its values, with its hash in the pod template: either way a change rolls
# out like a new image, one node at a time, each pod Ready before the next.
# Checkpointed assignments are kept; a changed reservation or option set is
# reconciled against them at start-up.

# CPU manager policy, as the kubelet's cpuManagerPolicy: "static" gives
# Guaranteed containers with an integer CPU request exclusive CPUs;
# "none" leaves every container on all CPUs (the plugin then only
# reports).
cpu_manager_policy = {{ .Values.config.cpu_manager_policy | toString | toJson }}

# CPUs kept for the system and for Burstable/BestEffort containers, never
# given out exclusively (the kubelet's reservedSystemCPUs). A Linux CPU
# list; when set it wins over reserved_cpu_count.
{{ if .Values.config.reserved_system_cpus -}}
reserved_system_cpus = {{ .Values.config.reserved_system_cpus | toString | toJson }}
{{- else -}}
# reserved_system_cpus = "0,1"
{{- end }}

# Or a number of CPUs to reserve, picked by topology (the kubelet derives
# it from kubeReserved + systemReserved cpu, rounded up). Keep the
# kubelet's kubeReserved/systemReserved cpu equal to this, so the
# scheduler's allocatable matches what the plugin can hand out. The
# plugin refuses to start under "static" without a reservation.
reserved_cpu_count = {{ .Values.config.reserved_cpu_count | int }}

# Topology manager policy, as the kubelet's topologyManagerPolicy:
# "none", "best-effort" (prefer NUMA-aligned CPUs, never refuse),
# "restricted" or "single-numa-node" (refuse a container that cannot be
# aligned: CreateContainer fails with TopologyAffinityError).
topology_manager_policy = {{ .Values.config.topology_manager_policy | toString | toJson }}

# Topology manager scope: "container" (align each container) or "pod"
# (align all containers of a pod together).
topology_manager_scope = {{ .Values.config.topology_manager_scope | toString | toJson }}

# Memory manager policy, as the kubelet's memoryManagerPolicy: "None"
# leaves every container on every memory node (cpuset.mems); "Static"
# accounts Guaranteed containers' memory and hugepages per NUMA node and
# pins their cpuset.mems (docs/topology-manager.md).
memory_manager_policy = {{ .Values.config.memory_manager_policy | toString | toJson }}

# Memory reserved per NUMA node and resource, as the kubelet's
# reservedMemory ("Static" needs some; sum it to the memory the kubelet
# holds back: kube/system-reserved + eviction threshold).
{{ if .Values.config.reserved_memory -}}
reserved_memory = [
{{- range $i, $r := .Values.config.reserved_memory }}{{ if $i }},{{ end }} { numa_node = {{ $r.numa_node | int }}, limits = {
{{- range $j, $k := keys $r.limits | sortAlpha }}{{ if $j }},{{ end }} {{ $k | toJson }} = {{ index $r.limits $k | toString | toJson }}{{ end }} } }
{{- end }} ]
{{- else -}}
# reserved_memory = [{ numa_node = 0, limits = { memory = "1Gi" } }]
{{- end }}

# No CFS quota for containers with exclusive CPUs, nor for their pods, as
# the kubelet's feature gate DisableCPUQuotaWithExclusiveCPUs (on by
# default since 1.33); false leaves the kubelet's quota.
disable_cpu_quota_with_exclusive_cpus = {{ .Values.config.disable_cpu_quota_with_exclusive_cpus | toJson }}

# Pod-level resource managers, as the kubelet's feature gate
# PodLevelResourceManagers (off by default): nri-cpualign simulate only,
# the daemon refuses true (docs/pod-level-resources.md).
pod_level_resource_managers = {{ .Values.config.pod_level_resource_managers | toJson }}

# The kubelet release whose CPU, topology and memory manager rules are
# followed: "1.38" (the default) or "1.37", for a node whose kubelet is
# still 1.37 (docs/migration.md, "Kubelet versions").
kubelet_version = {{ .Values.config.kubelet_version | toJson }}

# Where the checkpoint lives (a hostPath volume, so it survives restarts
# and upgrades).
state_dir = {{ .Values.config.state_dir | toString | toJson }}

# Where the DaemonSet mounts the host's /sys (read-only), for the CPU
# topology, and the host's cgroup tree (writable), for the shared pool and
# the reconcile loop.
sysfs_root = {{ .Values.config.sysfs_root | toString | toJson }}
cgroup_root = {{ .Values.config.cgroup_root | toString | toJson }}

# The NVIDIA driver's GPU files (driver/nvidia/gpus/*/information), which
# map a container's /dev/nvidiaN or GPU UUID to its PCI function: the
# container's own /proc shows the host's.
procfs_root = {{ .Values.config.procfs_root | toString | toJson }}

# The runtime's NRI socket (containerd socket_path / CRI-O nri_listen).
socket_path = {{ .Values.config.socket_path | toString | toJson }}

# Prometheus metrics, /healthz and the /state JSON endpoint. The pod uses
# the host network, so this is the node's loopback: reach it on the node
# or with `kubectl port-forward`. Use ":9464" to let Prometheus scrape
# the node's address. The DaemonSet's probes ask /healthz on this port and
# pass --require-healthz (the plugin refuses to start with no address):
# change their port with it, or, for "" (endpoint off), remove both (the
# chart derives them from this value).
metrics_address = {{ .Values.config.metrics_address | toString | toJson }}

# How often cgroup cpusets are compared with the assignments and
# restored when something else changed them. "0" turns it off.
reconcile_period = {{ .Values.config.reconcile_period | toString | toJson }}

# How shared-pool containers follow the pool when exclusive CPUs are
# taken or freed. "direct" (the default): the plugin writes their cgroups'
# cpuset.cpus itself (~20 µs each) before the new container starts, on a
# systemd cgroup driver node through systemd's D-Bus API first; the
# runtime's record of their cpuset stays as created. "in-answer": the
# runtime updates them before the new container starts (~10 ms each,
# which the start waits for). Left unset, the default falls back to
# "in-answer" where systemd manages the cgroups but the system bus is not
# mounted, or cgroup_root is read-only; written, it is kept. Fixed at
# start-up.
{{ with .Values.config.shared_pool_updates }}shared_pool_updates = {{ . | toString | toJson }}{{ else }}# shared_pool_updates = "direct"{{ end }}

# Logging: trace, debug, info, warn, error; format "text" or "json".
log_level = {{ .Values.config.log_level | toString | toJson }}
log_format = {{ .Values.config.log_format | toString | toJson }}

# NodeResourceTopology export for a topology-aware scheduler
# (docs/node-resource-topology.md): "on" publishes this node's free CPUs
# per NUMA node in the object named after the node. It needs the CRD and
# RBAC of deploy/ and the pod's service account token
# (automountServiceAccountToken: true; the chart sets it with "on").
node_resource_topology = {{ .Values.config.node_resource_topology | toString | toJson }}
# The API server's kubeconfig file; "" is the pod's service account.
kubeconfig = {{ .Values.config.kubeconfig | toString | toJson }}
# The object's name; "" takes NODE_NAME (the DaemonSet's spec.nodeName).
node_name = {{ .Values.config.node_name | toString | toJson }}

# The kubelet's PodResources API (docs/devices.md): the devices device
# plugins gave each container (GPUs of any vendor, ...) and the NUMA nodes
# they reported join the device hints, as under the kubelet's topology
# manager. The DaemonSet mounts the socket's directory read-only. A
# container's creation waits at most pod_resources_timeout (at most 1s)
# for the answer; no socket or no answer in time: no hint from it and a
# warning (at most one a minute).
pod_resources = {{ .Values.config.pod_resources | toJson }}
pod_resources_socket = {{ .Values.config.pod_resources_socket | toString | toJson }}
pod_resources_timeout = {{ .Values.config.pod_resources_timeout | toString | toJson }}

# Static policy options, as the kubelet's cpuManagerPolicyOptions. All off
# by default; uncomment to turn one on.
[cpu_manager_policy_options]
# Only whole physical cores; requests that are not a multiple of the SMT
# width fail with SMTAlignmentError.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "full-pcpus-only" "true") }}
# Spread a multi-NUMA allocation evenly over the NUMA nodes it needs.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "distribute-cpus-across-numa" "true") }}
# Align to whole sockets rather than NUMA nodes.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "align-by-socket" "true") }}
# Spread CPUs over as many physical cores as possible.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "distribute-cpus-across-cores" "true") }}
# Keep Burstable/BestEffort containers off the reserved CPUs too.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "strict-cpu-reservation" "true") }}
# Pack each container into as few L3 (uncore) caches as possible.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "prefer-align-cpus-by-uncorecache" "true") }}
# nri-cpualign's own extension, not a kubelet option (README, "Strict
# uncore-cache alignment"): one uncore cache per container (larger ones
# whole caches plus at most one partly used) or UncoreCacheAlignmentError;
# "exclusive" also keeps each cache to one exclusive container.
{{ include "nri-cpualign.option" (list $cpumanagerOpts "strict-align-cpus-by-uncorecache" "true") }}
{{- include "nri-cpualign.otherOptions" (list $cpumanagerOpts $cpumanagerKnown) }}

# Topology manager options, as the kubelet's topologyManagerPolicyOptions.
[topology_manager_policy_options]
# Prefer the set of NUMA nodes with the shortest distances.
{{ include "nri-cpualign.option" (list $topologymanagerOpts "prefer-closest-numa-nodes" "true") }}
# Allow machines with more than 8 NUMA nodes (slow hint merging).
{{ include "nri-cpualign.option" (list $topologymanagerOpts "max-allowable-numa-nodes" "8") }}
{{- include "nri-cpualign.otherOptions" (list $topologymanagerOpts $topologymanagerKnown) }}
{{- end -}}
