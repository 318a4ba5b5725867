package deploy

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// chartDir is the Helm chart, rendered with `helm template`.
const chartDir = "helm/nri-cpualign"

// helmLabels are the labels the chart adds to every object's metadata
// (not to the pod template or the selector); deploy/ does not have them.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// checksumAnnotation is the pod template annotation holding the hash of
// the chart's ConfigMap.
const checksumAnnotation = "checksum/config"

// helmBinary is the helm the chart tests run: $HELM, else the repository's
// bin/helm (make chart-check installs the pinned version there and sets
// HELM, so that a missing helm fails there instead of skipping).
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := filepath.Abs("../bin/helm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h); err != nil {
		t.Skip("helm is not installed: make chart-check installs the pinned helm into bin/ and runs these tests with it")
	}
	return h
}

// helmTemplate renders the chart as release "nri-cpualign" with extra
// helm arguments (--set ...); the error carries helm's standard error.
func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", "nri-cpualign", chartDir}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// loadChart renders and decodes the chart with extra helm arguments.
func loadChart(t *testing.T, args ...string) manifests {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeManifests(t, "helm template "+strings.Join(args, " "), out)
}

// chartConfig is the configuration the chart's ConfigMap gives the
// plugin, loaded as the plugin loads it.
func chartConfig(t *testing.T, m manifests) config.Config {
	t.Helper()
	cfg, err := config.Load(configMapTOML(t, m))
	if err != nil {
		t.Fatalf("the chart's config.toml does not load: %v", err)
	}
	return cfg
}

// withoutHelmLabels checks that the chart's labels are on an object and
// removes them.
func withoutHelmLabels(t *testing.T, kind string, labels map[string]string) map[string]string {
	t.Helper()
	out := maps.Clone(labels)
	for _, l := range helmLabels {
		if out[l] == "" {
			t.Errorf("chart's %s has no label %s", kind, l)
		}
		delete(out, l)
	}
	return out
}

// TestChartRendersDeployManifests: with its default values the chart
// renders deploy/'s namespace, ConfigMap (config.toml byte for byte) and
// DaemonSet. The only differences allowed are Helm's labels and how a
// configuration change reaches the pod template: kustomize names the
// ConfigMap after its content's hash, the chart keeps the name and puts
// the hash in an annotation.
func TestChartRendersDeployManifests(t *testing.T) {
	// --include-crds: helm install installs crds/ itself.
	k, c := loadManifests(t), loadChart(t, "--include-crds")

	cmName := k.configMaps[0].Name
	if !strings.HasPrefix(cmName, "nri-cpualign-") {
		t.Fatalf("kustomize's ConfigMap %q is not nri-cpualign-<hash>", cmName)
	}
	k.configMaps[0].Name = "nri-cpualign"
	for i, v := range k.daemonSets[0].Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cmName {
			k.daemonSets[0].Spec.Template.Spec.Volumes[i].ConfigMap.Name = "nri-cpualign"
		}
	}

	c.namespaces[0].Labels = withoutHelmLabels(t, "Namespace", c.namespaces[0].Labels)
	c.configMaps[0].Labels = withoutHelmLabels(t, "ConfigMap", c.configMaps[0].Labels)
	c.daemonSets[0].Labels = withoutHelmLabels(t, "DaemonSet", c.daemonSets[0].Labels)
	if len(c.serviceAccounts) != 1 || len(c.clusterRoles) != 1 || len(c.clusterRoleBindings) != 1 || len(c.crds) != 1 {
		t.Fatalf("the chart renders %d ServiceAccounts, %d ClusterRoles, %d ClusterRoleBindings, %d CRDs; want one each",
			len(c.serviceAccounts), len(c.clusterRoles), len(c.clusterRoleBindings), len(c.crds))
	}
	c.serviceAccounts[0].Labels = withoutHelmLabels(t, "ServiceAccount", c.serviceAccounts[0].Labels)
	c.clusterRoles[0].Labels = withoutHelmLabels(t, "ClusterRole", c.clusterRoles[0].Labels)
	c.clusterRoleBindings[0].Labels = withoutHelmLabels(t, "ClusterRoleBinding", c.clusterRoleBindings[0].Labels)
	ann := c.daemonSets[0].Spec.Template.Annotations
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(ann[checksumAnnotation]) {
		t.Errorf("chart's pod template annotation %s = %q, want a sha256", checksumAnnotation, ann[checksumAnnotation])
	}
	delete(ann, checksumAnnotation)

	for _, pair := range []struct {
		kind string
		k, c any
	}{
		{"Namespace", k.namespaces[0], c.namespaces[0]},
		{"ConfigMap", k.configMaps[0], c.configMaps[0]},
		{"DaemonSet", k.daemonSets[0], c.daemonSets[0]},
		{"ServiceAccount", k.serviceAccounts[0], c.serviceAccounts[0]},
		{"ClusterRole", k.clusterRoles[0], c.clusterRoles[0]},
		{"ClusterRoleBinding", k.clusterRoleBindings[0], c.clusterRoleBindings[0]},
		{"CustomResourceDefinition", shippedCRD(t), *c.crds[0]},
	} {
		if !reflect.DeepEqual(pair.k, pair.c) {
			t.Errorf("the chart's %s differs from deploy/'s:\n%s", pair.kind, firstDifference(t, pair.k, pair.c))
		}
	}
}

// firstDifference shows two objects as YAML from their first differing
// line on.
func firstDifference(t *testing.T, a, b any) string {
	t.Helper()
	ya, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	yb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	la, lb := strings.Split(string(ya), "\n"), strings.Split(string(yb), "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		if i >= len(la) || i >= len(lb) || la[i] != lb[i] {
			tail := func(l []string) string { return strings.Join(l[min(i, len(l)):min(i+8, len(l))], "\n") }
			return fmt.Sprintf("line %d\n--- deploy/:\n%s\n--- chart:\n%s", i+1, tail(la), tail(lb))
		}
	}
	return "(same YAML, different Go values)"
}

// chartValues is the chart's values.yaml.
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	return v
}

// TestChartValuesHaveEveryKey: values.yaml's config has exactly the TOML
// keys of pkg/config (a new key must get a value, with a default).
func TestChartValuesHaveEveryKey(t *testing.T) {
	cfg, ok := chartValues(t)["config"].(map[string]any)
	if !ok {
		t.Fatal("values.yaml has no config map")
	}
	want := tomlKeys()
	slices.Sort(want)
	got := slices.Sorted(maps.Keys(cfg))
	if !slices.Equal(got, want) {
		t.Errorf("values.yaml config keys %q, pkg/config's %q", got, want)
	}
}

// TestChartConfigFollowsValues sets every key to a value other than its
// default and reads it back the way the plugin loads the ConfigMap; the
// mounts follow the paths.
func TestChartConfigFollowsValues(t *testing.T) {
	m := loadChart(t,
		"--set", "config.cpu_manager_policy=none",
		"--set", "config.reserved_system_cpus=0\\,2-3",
		"--set", "config.reserved_cpu_count=4",
		"--set", "config.topology_manager_policy=single-numa-node",
		"--set", "config.topology_manager_scope=pod",
		"--set", "config.state_dir=/var/lib/cpualign-state",
		"--set", "config.sysfs_root=/hsys",
		"--set", "config.cgroup_root=/hcg",
		"--set", "config.socket_path=/run/nri-test/nri.sock",
		"--set", "config.metrics_address=127.0.0.1:9500",
		"--set", "config.reconcile_period=0",
		"--set", "config.shared_pool_updates=in-answer",
		"--set", "config.log_level=debug",
		"--set", "config.log_format=json",
		"--set", "config.cpu_manager_policy_options.full-pcpus-only=true",
		"--set", "config.cpu_manager_policy_options.strict-align-cpus-by-uncorecache=exclusive",
		"--set", "config.topology_manager_policy_options.max-allowable-numa-nodes=16",
		"--set", "config.reserved_memory[0].numa_node=1",
		"--set", "config.reserved_memory[0].limits.memory=1Gi",
		"--set", "config.reserved_memory[0].limits.hugepages-2Mi=64Mi",
		"--set", "config.reserved_memory[1].numa_node=0",
		"--set", "config.reserved_memory[1].limits.memory=512Mi",
	)
	cfg := chartConfig(t, m)
	for _, f := range []struct {
		key       string
		got, want any
	}{
		{config.KeyCPUManagerPolicy, cfg.CPUManagerPolicy, "none"},
		{config.KeyReservedSystemCPUs, cfg.ReservedSystemCPUs, "0,2-3"},
		{config.KeyReservedCPUCount, cfg.ReservedCPUCount, 4},
		{config.KeyTopologyManagerPolicy, cfg.TopologyManagerPolicy, "single-numa-node"},
		{config.KeyTopologyManagerScope, cfg.TopologyManagerScope, "pod"},
		{config.KeyStateDir, cfg.StateDir, "/var/lib/cpualign-state"},
		{config.KeySysfsRoot, cfg.SysfsRoot, "/hsys"},
		{config.KeyCgroupRoot, cfg.CgroupRoot, "/hcg"},
		{config.KeySocketPath, cfg.SocketPath, "/run/nri-test/nri.sock"},
		{config.KeyMetricsAddress, cfg.MetricsAddress, "127.0.0.1:9500"},
		{config.KeyReconcilePeriod, cfg.ReconcilePeriod, config.Duration(0)},
		{config.KeySharedPoolUpdates, cfg.SharedPoolUpdates, "in-answer"},
		{config.KeyLogLevel, cfg.LogLevel, "debug"},
		{config.KeyLogFormat, cfg.LogFormat, "json"},
		{config.KeyCPUManagerPolicyOptions, cfg.CPUManagerPolicyOptions, map[string]string{"full-pcpus-only": "true", "strict-align-cpus-by-uncorecache": "exclusive"}},
		{config.KeyTopologyManagerPolicyOptions, cfg.TopologyManagerPolicyOptions, map[string]string{"max-allowable-numa-nodes": "16"}},
		{config.KeyReservedMemory, cfg.ReservedMemory, []config.ReservedMemory{
			{NUMANode: 1, Limits: map[string]string{"memory": "1Gi", "hugepages-2Mi": "64Mi"}},
			{NUMANode: 0, Limits: map[string]string{"memory": "512Mi"}}}},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.key, f.got, f.want)
		}
	}

	ds := m.daemonSets[0]
	for dir, hostPath := range map[string]string{
		"/run/nri-test": "/var/run/nri", "/var/lib/cpualign-state": "/var/lib/nri-cpualign",
		"/hsys": "/sys", "/hcg": "/sys/fs/cgroup",
	} {
		if v, _ := volumeFor(t, ds, dir); v.HostPath == nil || v.HostPath.Path != hostPath {
			t.Errorf("mount %s: volume %+v, want host path %s", dir, v.VolumeSource, hostPath)
		}
	}
}

// TestChartHostPaths: the host side of the mounts is a value of its own.
func TestChartHostPaths(t *testing.T) {
	m := loadChart(t, "--set", "hostPaths.nriSocketDir=/run/test-nri", "--set", "hostPaths.stateDir=/tmp/state")
	cfg := chartConfig(t, m)
	for dir, want := range map[string]string{filepath.Dir(cfg.SocketPath): "/run/test-nri", cfg.StateDir: "/tmp/state"} {
		if v, _ := volumeFor(t, m.daemonSets[0], dir); v.HostPath == nil || v.HostPath.Path != want {
			t.Errorf("mount %s: volume %+v, want host path %s", dir, v.VolumeSource, want)
		}
	}
}

// TestChartSystemBus: hostPaths.systemBusDir moves the system bus mount
// and its address; "" mounts nothing (the plugin then says at start-up
// that the runtime applies the shared pool).
func TestChartSystemBus(t *testing.T) {
	m := loadChart(t, "--set", "hostPaths.systemBusDir=/var/run/dbus")
	checkSystemBus(t, m.daemonSets[0], "/var/run/dbus")
	m = loadChart(t, "--set", "hostPaths.systemBusDir=")
	ds := m.daemonSets[0]
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "system-bus" {
			t.Errorf("systemBusDir \"\" still mounts %+v", v.VolumeSource)
		}
	}
	c := container(t, ds)
	if got := envOf(&c, "DBUS_SYSTEM_BUS_ADDRESS"); got != "" {
		t.Errorf("systemBusDir \"\" still sets DBUS_SYSTEM_BUS_ADDRESS=%s", got)
	}
}

// TestChartProbesFollowMetricsAddress: the probes ask /healthz where
// metrics_address listens, and an address the probes cannot use fails the
// rendering with a message naming the value.
func TestChartProbesFollowMetricsAddress(t *testing.T) {
	for _, tt := range []struct {
		addr, host string
		port       int32
	}{
		{"127.0.0.1:9464", "127.0.0.1", 9464},
		{":9500", "127.0.0.1", 9500},
		{"0.0.0.0:9100", "127.0.0.1", 9100},
		{"[::1]:9464", "::1", 9464},
		{"10.1.2.3:8080", "10.1.2.3", 8080},
	} {
		t.Run(tt.addr, func(t *testing.T) {
			m := loadChart(t, "--set", "config.metrics_address="+tt.addr)
			c := container(t, m.daemonSets[0])
			for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Fatalf("no %s probe", kind)
				}
				if p.HTTPGet.Host != tt.host || p.HTTPGet.Port.IntVal != tt.port || p.HTTPGet.Path != "/healthz" {
					t.Errorf("%s probe %s:%s%s, want %s:%d/healthz", kind, p.HTTPGet.Host, p.HTTPGet.Port.String(), p.HTTPGet.Path, tt.host, tt.port)
				}
			}
			if !slices.Contains(c.Args, "--require-healthz") {
				t.Errorf("args %q lack --require-healthz", c.Args)
			}
		})
	}

	for _, tt := range []struct{ addr, wantErr string }{
		{"", "config.metrics_address is empty"},
		{"off", "config.metrics_address is empty"},
		{"127.0.0.1:0", `config.metrics_address "127.0.0.1:0": the probes need a fixed port`},
		{"localhost", `config.metrics_address "localhost": the probes need host:port`},
	} {
		t.Run("refuses "+tt.addr, func(t *testing.T) {
			_, err := helmTemplate(t, "--set", "config.metrics_address="+tt.addr)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("helm template with metrics_address %q: error %v, want one saying %q", tt.addr, err, tt.wantErr)
			}
		})
	}

	// Probes off: no probe, no --require-healthz, and the endpoint may be off.
	m := loadChart(t, "--set", "probes.enabled=false", "--set", "config.metrics_address=")
	c := container(t, m.daemonSets[0])
	if c.LivenessProbe != nil || c.ReadinessProbe != nil || slices.Contains(c.Args, "--require-healthz") {
		t.Errorf("probes.enabled=false: liveness %v, readiness %v, args %q", c.LivenessProbe, c.ReadinessProbe, c.Args)
	}
	if cfg := chartConfig(t, m); cfg.MetricsAddress != "" {
		t.Errorf("metrics_address %q, want \"\"", cfg.MetricsAddress)
	}
}

// TestChartConfigChangeRollsOut: another configuration changes the pod
// template (its checksum annotation), so `helm upgrade` rolls it out like
// a new image; a change outside the configuration leaves the checksum.
func TestChartConfigChangeRollsOut(t *testing.T) {
	sum := func(ds *appsv1.DaemonSet) string { return ds.Spec.Template.Annotations[checksumAnnotation] }
	base := sum(loadChart(t).daemonSets[0])
	if base == "" {
		t.Fatalf("no %s annotation", checksumAnnotation)
	}
	for _, set := range []string{"config.log_level=debug", "config.reserved_cpu_count=2", "config.cpu_manager_policy_options.full-pcpus-only=true"} {
		if got := sum(loadChart(t, "--set", set).daemonSets[0]); got == base {
			t.Errorf("--set %s: %s unchanged, the pods would keep the old configuration", set, checksumAnnotation)
		}
	}
	if got := sum(loadChart(t, "--set", "resources.limits.memory=128Mi", "--set", "resources.requests.memory=128Mi").daemonSets[0]); got != base {
		t.Errorf("a resources change altered %s (%s -> %s)", checksumAnnotation, base, got)
	}
}

// TestChartImageAndVersion: the image tag defaults to the chart's
// appVersion, which is the Makefile's VERSION; image.tag overrides it.
func TestChartImageAndVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if v := makefileVersion(t); chart.AppVersion != v {
		t.Errorf("Chart.yaml appVersion %q, the Makefile's VERSION %q", chart.AppVersion, v)
	}
	if img := container(t, loadChart(t).daemonSets[0]).Image; img != "ghcr.io/nri-cpualign/nri-cpualign:"+chart.AppVersion {
		t.Errorf("default image %q, want the appVersion tag", img)
	}
	img := container(t, loadChart(t, "--set", "image.repository=registry.example.com/cpualign", "--set", "image.tag=0.2.0-rc1").daemonSets[0]).Image
	if img != "registry.example.com/cpualign:0.2.0-rc1" {
		t.Errorf("image %q, want registry.example.com/cpualign:0.2.0-rc1", img)
	}
}

// TestChartPrometheusRule: off by default; on, it holds exactly the
// alerts of deploy/prometheus-rules.yaml.
func TestChartPrometheusRule(t *testing.T) {
	if m := loadChart(t); len(m.rules) != 0 {
		t.Errorf("the chart renders %d PrometheusRules by default, want none (the CRD may not exist)", len(m.rules))
	}
	m := loadChart(t, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=prometheus")
	if len(m.rules) != 1 {
		t.Fatalf("prometheusRule.enabled=true renders %d PrometheusRules, want 1", len(m.rules))
	}
	got, want := m.rules[0], loadRules(t)
	if got.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v lack release=prometheus", got.Metadata.Labels)
	}
	if got.Metadata.Namespace != want.Metadata.Namespace || !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("the chart's PrometheusRule differs from deploy/prometheus-rules.yaml:\n%s", firstDifference(t, want.Spec, got.Spec))
	}
}

// TestChartNodeResourceTopology: config.node_resource_topology=on reaches
// the plugin's configuration and mounts the service account token the
// export needs; off (the default) mounts none.
func TestChartNodeResourceTopology(t *testing.T) {
	m := loadChart(t, "--set", "config.node_resource_topology=on", "--set", "config.node_name=w1")
	if cfg := chartConfig(t, m); cfg.NodeResourceTopology != config.NRTOn || cfg.NodeName != "w1" || cfg.Kubeconfig != "" {
		t.Errorf("config node_resource_topology %q node_name %q kubeconfig %q", cfg.NodeResourceTopology, cfg.NodeName, cfg.Kubeconfig)
	}
	if a := m.daemonSets[0].Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Error("node_resource_topology=on without the service account token")
	}
	if a := loadChart(t).daemonSets[0].Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the default values mount the service account token")
	}
}

// TestChartPodResources: the kubelet's pod-resources directory is mounted
// read-only at the configured socket's directory, from
// hostPaths.podResourcesDir; pod_resources=false mounts nothing.
func TestChartPodResources(t *testing.T) {
	m := loadChart(t, "--set", "hostPaths.podResourcesDir=/data/kubelet/pod-resources",
		"--set", "config.pod_resources_socket=/run/podres/kubelet.sock", "--set", "config.pod_resources_timeout=20ms")
	cfg := chartConfig(t, m)
	if !cfg.PodResources || cfg.PodResourcesSocket != "/run/podres/kubelet.sock" || time.Duration(cfg.PodResourcesTimeout) != 20*time.Millisecond {
		t.Errorf("config pod_resources %v, socket %q, timeout %v", cfg.PodResources, cfg.PodResourcesSocket, time.Duration(cfg.PodResourcesTimeout))
	}
	v, vm := volumeFor(t, m.daemonSets[0], "/run/podres")
	if v.HostPath == nil || v.HostPath.Path != "/data/kubelet/pod-resources" || !vm.ReadOnly {
		t.Errorf("pod-resources mount: volume %+v (read-only %v), want /data/kubelet/pod-resources read-only", v.VolumeSource, vm.ReadOnly)
	}

	m = loadChart(t, "--set", "config.pod_resources=false")
	if cfg := chartConfig(t, m); cfg.PodResources {
		t.Error("config.pod_resources=false renders pod_resources = true")
	}
	spec := m.daemonSets[0].Spec.Template.Spec
	for _, v := range spec.Volumes {
		if v.Name == "pod-resources" {
			t.Error("config.pod_resources=false still mounts the kubelet's pod-resources directory")
		}
	}
}

// TestChartKubeletPlugins: hostPaths.kubeletPluginsDir is mounted read-only
// at its own path (the DRA metadata is read by the host path a container's
// mount names); "" mounts nothing.
func TestChartKubeletPlugins(t *testing.T) {
	m := loadChart(t, "--set", "hostPaths.kubeletPluginsDir=/data/kubelet/plugins")
	v, vm := volumeFor(t, m.daemonSets[0], "/data/kubelet/plugins")
	if v.HostPath == nil || v.HostPath.Path != "/data/kubelet/plugins" || !vm.ReadOnly || vm.MountPath != "/data/kubelet/plugins" {
		t.Errorf("kubelet-plugins mount: volume %+v at %s (read-only %v), want /data/kubelet/plugins read-only at the same path", v.VolumeSource, vm.MountPath, vm.ReadOnly)
	}
	m = loadChart(t, "--set", "hostPaths.kubeletPluginsDir=")
	for _, v := range m.daemonSets[0].Spec.Template.Spec.Volumes {
		if v.Name == "kubelet-plugins" {
			t.Error(`hostPaths.kubeletPluginsDir="" still mounts the kubelet's plugin directory`)
		}
	}
}
