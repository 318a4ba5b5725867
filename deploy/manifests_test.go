package deploy

import (
	"bytes"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	validator "github.com/containerd/nri/plugins/default-validator"
	"github.com/pelletier/go-toml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// pluginName is the name the daemon registers with NRI; the runtime
// validators' required_plugins name it.
const pluginName = daemon.PluginName

// configFile is the ConfigMap key the DaemonSet passes to --config.
const configFile = "config.toml"

// manifests is every Kubernetes object deploy/ (or the chart) renders,
// decoded strictly.
type manifests struct {
	namespaces []*corev1.Namespace
	configMaps []*corev1.ConfigMap
	daemonSets []*appsv1.DaemonSet
	rules      []*prometheusRule
	// The NodeResourceTopology export's objects.
	serviceAccounts     []*corev1.ServiceAccount
	clusterRoles        []*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	crds                []*crd
}

// crd is a CustomResourceDefinition, decoded loosely (its schema is the
// upstream project's).
type crd map[string]any

// splitDocuments splits a multi-document YAML stream at "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// decodeStrict decodes one YAML document into the Kubernetes type its kind
// names, failing on unknown or duplicated fields.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		obj = &prometheusRule{}
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "apiextensions.k8s.io/v1 CustomResourceDefinition":
		c := crd{}
		return &c, yaml.Unmarshal(doc, &c)
	default:
		return nil, &unknownKindError{tm.APIVersion, tm.Kind}
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

type unknownKindError struct{ apiVersion, kind string }

func (e *unknownKindError) Error() string {
	return "apiVersion " + e.apiVersion + " kind " + e.kind + " is not one this test knows; add its Go type to decodeStrict"
}

// loadManifests renders deploy/ as `kubectl apply -k deploy/` does and
// decodes every object strictly.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	return decodeManifests(t, "kustomize deploy/", kustomize(t, filesys.MakeFsOnDisk(), "."))
}

// kustomize renders the kustomization in dir of fs, as kubectl's embedded
// kustomize does, into one YAML stream.
func kustomize(t *testing.T, fs filesys.FileSystem, dir string) []byte {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeManifests decodes a rendered YAML stream (what names it, for
// errors) into one namespace, ConfigMap and DaemonSet.
func decodeManifests(t *testing.T, what string, data []byte) manifests {
	t.Helper()
	var m manifests
	docs := splitDocuments(data)
	for i, doc := range docs {
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s: object %d: %v", what, i+1, err)
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			m.namespaces = append(m.namespaces, o)
		case *corev1.ConfigMap:
			m.configMaps = append(m.configMaps, o)
		case *appsv1.DaemonSet:
			m.daemonSets = append(m.daemonSets, o)
		case *prometheusRule:
			m.rules = append(m.rules, o)
		case *corev1.ServiceAccount:
			m.serviceAccounts = append(m.serviceAccounts, o)
		case *rbacv1.ClusterRole:
			m.clusterRoles = append(m.clusterRoles, o)
		case *rbacv1.ClusterRoleBinding:
			m.clusterRoleBindings = append(m.clusterRoleBindings, o)
		case *crd:
			m.crds = append(m.crds, o)
		}
	}
	if len(m.namespaces) != 1 || len(m.configMaps) != 1 || len(m.daemonSets) != 1 {
		t.Fatalf("%s renders %d namespaces, %d ConfigMaps, %d DaemonSets; want one of each", what, len(m.namespaces), len(m.configMaps), len(m.daemonSets))
	}
	return m
}

// TestStrictDecodingRejectsUnknownFields shows the decoder used on the
// manifests is strict, so the other tests would catch a misspelled field.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	data, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, new, wantErr string
	}{
		{"misspelled field", "priorityClassName:", "priorityClass:", `unknown field "priorityClass"`},
		{"duplicated field", "      hostNetwork: true\n", "      hostNetwork: true\n      hostNetwork: false\n", "hostNetwork"},
		{"wrong type", "maxUnavailable: 1", "maxUnavailable: [1]", "maxUnavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(data, []byte(tt.old)) {
				t.Fatalf("daemonset.yaml no longer contains %q", tt.old)
			}
			_, err := decodeStrict(bytes.Replace(data, []byte(tt.old), []byte(tt.new), 1))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("decode error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
	if _, err := decodeStrict([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")); err == nil {
		t.Fatal("an unknown kind decoded without error")
	}
}

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoded strictly, so any other field is reported.
type kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name      string   `json:"name"`
		Namespace string   `json:"namespace"`
		Files     []string `json:"files"`
		Options   struct {
			Labels map[string]string `json:"labels"`
		} `json:"options"`
	} `json:"configMapGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

func loadKustomization(t *testing.T) kustomization {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	return k
}

// notInKustomization are deploy/'s YAML files kubectl apply -k must not
// apply: the PrometheusRule needs the Prometheus operator's CRD; the
// NodeResourceTopology CRD is the cluster's, shared with other exporters,
// and kubectl delete -k must not delete it (and every object of it).
var notInKustomization = map[string]bool{"kustomization.yaml": true, "prometheus-rules.yaml": true, "noderesourcetopology-crd.yaml": true}

func TestKustomizationListsEveryManifest(t *testing.T) {
	k := loadKustomization(t)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if !notInKustomization[f] {
			want = append(want, f)
		}
	}
	res := append([]string(nil), k.Resources...)
	sort.Strings(res)
	if !reflect.DeepEqual(res, want) {
		t.Errorf("kustomization resources %q, manifests in deploy/ %q", res, want)
	}
	// Namespace first, so `kubectl apply -k` creates it before its objects.
	if len(k.Resources) == 0 || k.Resources[0] != "namespace.yaml" {
		t.Errorf("kustomization resources %q should start with namespace.yaml", k.Resources)
	}
	// The ConfigMap is generated from config.toml, with a content hash in
	// its name (kustomize's default: no disableNameSuffixHash).
	if len(k.ConfigMapGenerator) != 1 || !reflect.DeepEqual(k.ConfigMapGenerator[0].Files, []string{configFile}) {
		t.Fatalf("configMapGenerator %+v, want one ConfigMap from %s", k.ConfigMapGenerator, configFile)
	}
	m := loadManifests(t)
	cm := m.configMaps[0]
	if !regexp.MustCompile(`^nri-cpualign-[a-z0-9]{10}$`).MatchString(cm.Name) {
		t.Errorf("generated ConfigMap %q has no content hash suffix", cm.Name)
	}
	data, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[configFile] != string(data) {
		t.Errorf("ConfigMap %s does not hold %s as it is", cm.Name, configFile)
	}
}

// TestConfigChangeRollsOut: a different config.toml is a ConfigMap with
// another name, and the DaemonSet's pod template names it, so applying it
// replaces the pods (a rolling update) as a new image would.
func TestConfigChangeRollsOut(t *testing.T) {
	base := loadManifests(t)
	fs := filesys.MakeFsInMemory()
	for _, f := range []string{"kustomization.yaml", "namespace.yaml", "rbac.yaml", "daemonset.yaml", configFile} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f == configFile {
			data = bytes.Replace(data, []byte(`log_level = "info"`), []byte(`log_level = "debug"`), 1)
		}
		if err := fs.WriteFile("/deploy/"+f, data); err != nil {
			t.Fatal(err)
		}
	}
	changed := decodeManifests(t, "kustomize deploy/ with log_level = debug", kustomize(t, fs, "/deploy"))
	if !strings.Contains(changed.configMaps[0].Data[configFile], `log_level = "debug"`) {
		t.Fatal("the edited config.toml did not reach the ConfigMap")
	}
	for _, m := range []manifests{base, changed} {
		if v, _ := volumeFor(t, m.daemonSets[0], "/etc/nri-cpualign"); v.ConfigMap == nil || v.ConfigMap.Name != m.configMaps[0].Name {
			t.Fatalf("the DaemonSet mounts %+v, not the generated ConfigMap %s", v.ConfigMap, m.configMaps[0].Name)
		}
	}
	if base.configMaps[0].Name == changed.configMaps[0].Name {
		t.Errorf("ConfigMap name %s is the same for another configuration: the pods would not roll", base.configMaps[0].Name)
	}
	if reflect.DeepEqual(base.daemonSets[0].Spec.Template, changed.daemonSets[0].Spec.Template) {
		t.Error("the pod template is the same for another configuration: the pods would not roll")
	}
}

func container(t *testing.T, ds *appsv1.DaemonSet) corev1.Container {
	t.Helper()
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(ds.Spec.Template.Spec.InitContainers) != 0 {
		t.Fatalf("DaemonSet has %d containers and %d init containers, want 1 and 0", len(cs), len(ds.Spec.Template.Spec.InitContainers))
	}
	return cs[0]
}

// renders are deploy/ rendered by kustomize and, when helm is at hand, the
// chart with its default values: the checks below hold for both.
func renders(t *testing.T) map[string]func(*testing.T) manifests {
	return map[string]func(*testing.T) manifests{
		"kustomize": loadManifests,
		"chart":     func(t *testing.T) manifests { return loadChart(t) },
	}
}

// forEachRender runs check on every render, each as a subtest.
func forEachRender(t *testing.T, check func(*testing.T, manifests)) {
	for name, load := range renders(t) {
		t.Run(name, func(t *testing.T) { check(t, load(t)) })
	}
}

func TestDaemonSet(t *testing.T) { forEachRender(t, checkDaemonSet) }

func checkDaemonSet(t *testing.T, m manifests) {
	ds, ns := m.daemonSets[0], m.namespaces[0]
	spec := ds.Spec.Template.Spec
	c := container(t, ds)

	if ds.Namespace != ns.Name || m.configMaps[0].Namespace != ns.Name {
		t.Errorf("DaemonSet in %q, ConfigMap in %q, namespace is %q", ds.Namespace, m.configMaps[0].Namespace, ns.Name)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s must allow hostPath and the host network (pod-security enforce=privileged)", ns.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet selector %v does not match its pod labels %v", sel, ds.Spec.Template.Labels)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
	}
	if !spec.HostNetwork {
		t.Error("hostNetwork is off: the plugin must start before (and without) the CNI plugin")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken should be false: with node_resource_topology off (the default) the plugin never talks to the API server")
	}
	checkNRTAccess(t, m)
	if len(spec.NodeSelector) == 0 || spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v, want kubernetes.io/os=linux plus the opt-in label", spec.NodeSelector)
	}
	tolerateAll := false
	for _, tol := range spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
			tolerateAll = true
		}
	}
	if !tolerateAll {
		t.Errorf("tolerations %v lack {operator: Exists} (every taint)", spec.Tolerations)
	}
	// One node at a time, behind the readiness probe (checked in
	// checkMountsMatchConfig).
	if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.String() != "1" {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", u)
	}
	if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
		t.Errorf("image %q: want a version tag, never latest", c.Image)
	}

	// Guaranteed QoS (requests == limits for CPU and memory) with a
	// fractional CPU, so the plugin puts itself in the shared pool.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[r]
		lim, okLim := c.Resources.Limits[r]
		if !okReq || !okLim || req.Cmp(lim) != 0 {
			t.Errorf("%s request %v and limit %v must both be set and equal (Guaranteed QoS)", r, req.String(), lim.String())
		}
	}
	cpu := c.Resources.Limits[corev1.ResourceCPU]
	if cpu.MilliValue()%1000 == 0 {
		t.Errorf("cpu %s is a whole number of CPUs: the plugin would give itself an exclusive CPU", cpu.String())
	}
	if cpu.Cmp(resource.MustParse("500m")) > 0 {
		t.Errorf("cpu %s is not small", cpu.String())
	}

	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Fatal("the container must run as root (runAsUser: 0) to reach the NRI socket")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the container must not be privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}

	// The tolerate-missing annotation must be the key both runtime
	// validators are configured with, set to a true value.
	for _, key := range []string{containerdValidator(t).TolerateMissingAnnotation, crioValidator(t).TolerateMissingAnnotation} {
		v, ok := ds.Spec.Template.Annotations[key]
		if b, err := strconv.ParseBool(v); !ok || err != nil || !b {
			t.Errorf("pod annotation %s = %q, want \"true\" (the plugin's own container starts while no plugin is connected)", key, v)
		}
	}
}

// configMapTOML returns the TOML the DaemonSet passes to --config, after
// checking that the flag points into the ConfigMap's volume.
func configMapTOML(t *testing.T, m manifests) []byte {
	t.Helper()
	ds, cm := m.daemonSets[0], m.configMaps[0]
	c := container(t, ds)
	var cfgPath string
	for i, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		} else if a == "--config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" || cfgPath == "" {
		t.Fatalf("container args %q, want run --config=<file>", c.Args)
	}
	vol, mount := volumeFor(t, ds, path.Dir(cfgPath))
	if vol.ConfigMap == nil || vol.ConfigMap.Name != cm.Name || !mount.ReadOnly {
		t.Fatalf("--config %s is not in a read-only mount of ConfigMap %s", cfgPath, cm.Name)
	}
	data, ok := cm.Data[path.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s (the --config file)", cm.Name, path.Base(cfgPath))
	}
	if path.Base(cfgPath) != configFile {
		t.Errorf("--config file %s, want %s", path.Base(cfgPath), configFile)
	}
	return []byte(data)
}

// volumeFor returns the volume mounted exactly at dir, and its mount.
func volumeFor(t *testing.T, ds *appsv1.DaemonSet, dir string) (corev1.Volume, corev1.VolumeMount) {
	t.Helper()
	c := container(t, ds)
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != dir {
			continue
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name {
				return v, vm
			}
		}
		t.Fatalf("mount %s names volume %s, which the pod does not have", dir, vm.Name)
	}
	t.Fatalf("nothing is mounted at %s (mounts: %+v)", dir, c.VolumeMounts)
	return corev1.Volume{}, corev1.VolumeMount{}
}

// commentedOptions returns the `# name = "value"` lines of a TOML table.
func commentedOptions(doc, table string) map[string]string {
	out := map[string]string{}
	i := strings.Index(doc, "["+table+"]")
	if i < 0 {
		return out
	}
	section := doc[i+len(table)+2:]
	if j := strings.Index(section, "\n["); j >= 0 {
		section = section[:j]
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*#\s*([a-z-]+)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(section, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// tomlKeys returns the TOML keys of config.Config (its toml tags).
func tomlKeys() []string {
	var keys []string
	rt := reflect.TypeOf(config.Config{})
	for i := 0; i < rt.NumField(); i++ {
		if tag, ok := rt.Field(i).Tag.Lookup("toml"); ok && tag != "-" {
			keys = append(keys, strings.Split(tag, ",")[0])
		}
	}
	return keys
}

// documentedKeys returns the top-level keys a TOML document sets or shows
// commented out ("# key = ..."), and its table headers.
func documentedKeys(doc string) map[string]bool {
	re := regexp.MustCompile(`^(?:#\s*)?([a-z_]+)\s*=|^\[([a-z_]+)\]`)
	keys := map[string]bool{}
	inTable := false
	for _, l := range strings.Split(doc, "\n") {
		l = strings.TrimSpace(l)
		m := re.FindStringSubmatch(l)
		switch {
		case m == nil:
		case m[2] != "":
			keys[m[2]] = true
			inTable = true
		case !inTable:
			keys[m[1]] = true
		}
	}
	return keys
}

func TestConfigMapLoadsAndDocumentsEveryKey(t *testing.T) {
	forEachRender(t, checkConfigMapDocumentsEveryKey)
}

func checkConfigMapDocumentsEveryKey(t *testing.T, m manifests) {
	doc := configMapTOML(t, m)
	cfg, err := config.Load(doc)
	if err != nil {
		t.Fatalf("the ConfigMap's %s does not load: %v", configFile, err)
	}
	if cfg.CPUManagerPolicy == "static" && !cfg.HasReservation() {
		t.Error("static policy without a reservation: the daemon refuses to start")
	}
	keys := tomlKeys()
	if len(keys) < 10 {
		t.Fatalf("config.Config has only %d toml keys; the reflection is wrong", len(keys))
	}
	documented := documentedKeys(string(doc))
	for _, k := range keys {
		if !documented[k] {
			t.Errorf("the ConfigMap's TOML neither sets nor shows key %q (every key of pkg/config must be there)", k)
		}
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for k := range documented {
		if !known[k] {
			t.Errorf("the ConfigMap's TOML shows key %q, which pkg/config does not have", k)
		}
	}

	// The commented-out policy options must be real option names with
	// valid example values: uncommenting one must parse.
	for _, sec := range []struct {
		table string
		want  int // every option the parser knows
		parse func(map[string]string) error
	}{
		{config.KeyCPUManagerPolicyOptions, 7, func(m map[string]string) error { _, err := allocator.ParseOptions(m); return err }},
		{config.KeyTopologyManagerPolicyOptions, 2, func(m map[string]string) error { _, err := hints.ParseOptions(m); return err }},
	} {
		opts := commentedOptions(string(doc), sec.table)
		if len(opts) != sec.want {
			t.Errorf("[%s] documents %d options, want all %d", sec.table, len(opts), sec.want)
		}
		for name, value := range opts {
			if err := sec.parse(map[string]string{name: value}); err != nil {
				t.Errorf("[%s] documents %s = %q: %v", sec.table, name, value, err)
			}
		}
	}

	// Every commented-out key, uncommented, must load too (values are
	// examples a user may switch on).
	for _, l := range strings.Split(string(doc), "\n") {
		if mm := regexp.MustCompile(`^#\s*([a-z_]+\s*=.*)$`).FindStringSubmatch(strings.TrimSpace(l)); mm != nil {
			alt := strings.Replace(string(doc), l, mm[1], 1)
			if _, err := config.Load([]byte(alt)); err != nil {
				t.Errorf("uncommenting %q breaks the config: %v", strings.TrimSpace(l), err)
			}
		}
	}
}

func TestMountsMatchConfig(t *testing.T) { forEachRender(t, checkMountsMatchConfig) }

func checkMountsMatchConfig(t *testing.T, m manifests) {
	ds := m.daemonSets[0]
	cfg, err := config.Load(configMapTOML(t, m))
	if err != nil {
		t.Fatal(err)
	}
	hostPath := func(v corev1.Volume) string {
		if v.HostPath == nil {
			t.Fatalf("volume %s is not a hostPath", v.Name)
		}
		return v.HostPath.Path
	}

	// NRI socket: its directory is the host's runtime socket directory.
	v, vm := volumeFor(t, ds, path.Dir(cfg.SocketPath))
	if hp := hostPath(v); hp != path.Dir(config.DefaultSocketPath) || vm.ReadOnly {
		t.Errorf("socket directory %s: volume from host %s (read-only %v), want a writable mount of %s", path.Dir(cfg.SocketPath), hp, vm.ReadOnly, path.Dir(config.DefaultSocketPath))
	}
	for name, sock := range map[string]string{"containerd-nri.toml": containerdNRI(t).SocketPath, "crio-nri.conf": crioNRI(t).SocketPath} {
		if path.Dir(sock) != hostPath(v) {
			t.Errorf("node/%s puts the socket at %s, outside the mounted host directory %s", name, sock, hostPath(v))
		}
	}

	// sysfs: the host's /sys, read-only; the cgroups: the host's, writable
	// (shared_pool_updates = "direct" writes them), not under sysfs_root.
	v, vm = volumeFor(t, ds, cfg.SysfsRoot)
	if hp := hostPath(v); hp != "/sys" || !vm.ReadOnly {
		t.Errorf("sysfs_root %s: volume from host %s (read-only %v), want /sys read-only", cfg.SysfsRoot, hp, vm.ReadOnly)
	}
	v, vm = volumeFor(t, ds, cfg.CgroupRoot)
	if hp := hostPath(v); hp != config.DefaultCgroupRoot || vm.ReadOnly || vm.MountPath != cfg.CgroupRoot {
		t.Errorf("cgroup_root %s: volume from host %s at %s (read-only %v), want a writable mount of %s there", cfg.CgroupRoot, hp, vm.MountPath, vm.ReadOnly, config.DefaultCgroupRoot)
	}
	if cfg.SharedPoolUpdates != config.SharedUpdatesDirect {
		t.Errorf("shared_pool_updates %q, want %q (the default, which the writable cgroup mount is for)", cfg.SharedPoolUpdates, config.SharedUpdatesDirect)
	}
	if cfg.SysfsRoot == "/sys" {
		t.Error("sysfs_root /sys: the runtime's own /sys/fs/cgroup mount (the container's cgroup namespace) would shadow the host's cgroups")
	}

	// The system bus: its host directory, writable, at the same path,
	// and the address naming the socket in it (systemd's D-Bus API on a
	// systemd cgroup driver node; the image has no /var/run, godbus's
	// default).
	checkSystemBus(t, ds, "/run/dbus")

	// The kubelet's PodResources socket: its directory, the host's,
	// read-only (the plugin only asks).
	if !cfg.PodResources {
		t.Error("pod_resources is off: the device plugins' devices give no hint")
	}
	v, vm = volumeFor(t, ds, path.Dir(cfg.PodResourcesSocket))
	if hp := hostPath(v); hp != path.Dir(config.DefaultPodResourcesSocket) || !vm.ReadOnly {
		t.Errorf("pod_resources_socket %s: volume from host %s (read-only %v), want %s read-only", cfg.PodResourcesSocket, hp, vm.ReadOnly, path.Dir(config.DefaultPodResourcesSocket))
	}

	// The kubelet's plugin directory, where DRA drivers write the KEP-5304
	// metadata of claims: read-only, at the host's path, since the plugin
	// opens the host path a container's mount names.
	v, vm = volumeFor(t, ds, "/var/lib/kubelet/plugins")
	if hp := hostPath(v); hp != "/var/lib/kubelet/plugins" || !vm.ReadOnly {
		t.Errorf("kubelet plugins: volume from host %s (read-only %v), want /var/lib/kubelet/plugins read-only at the same path", hp, vm.ReadOnly)
	}

	// State directory: writable, on the host, at the same path.
	v, vm = volumeFor(t, ds, cfg.StateDir)
	if hp := hostPath(v); hp != config.DefaultStateDir || vm.ReadOnly {
		t.Errorf("state_dir %s: volume from host %s (read-only %v), want a writable mount of %s", cfg.StateDir, hp, vm.ReadOnly, config.DefaultStateDir)
	}

	// Liveness and readiness: /healthz on the metrics address (ready
	// means connected to the runtime and synchronized).
	host, port, err := net.SplitHostPort(cfg.MetricsAddress)
	if err != nil {
		t.Fatalf("metrics_address %q: %v", cfg.MetricsAddress, err)
	}
	c := container(t, ds)
	if !slices.Contains(c.Args, "--require-healthz") {
		t.Errorf("args %q: with probes on /healthz the plugin must run with --require-healthz (refuse to start without a metrics endpoint)", c.Args)
	}
	for kind, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", kind)
			continue
		}
		if probe.HTTPGet.Path != "/healthz" || probe.HTTPGet.Port.String() != port {
			t.Errorf("%s probe %s on port %s, want /healthz on the metrics port %s", kind, probe.HTTPGet.Path, probe.HTTPGet.Port.String(), port)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && probe.HTTPGet.Host != host {
			t.Errorf("metrics listen on %s only, but the %s probe goes to %q", host, kind, probe.HTTPGet.Host)
		}
	}
}

// checkSystemBus checks that the pod mounts the host's system bus
// directory dir writable at the same path and points the plugin's D-Bus
// client at the socket in it.
func checkSystemBus(t *testing.T, ds *appsv1.DaemonSet, dir string) {
	t.Helper()
	v, vm := volumeFor(t, ds, dir)
	if v.HostPath == nil || v.HostPath.Path != dir || vm.ReadOnly {
		t.Errorf("system bus %s: volume %+v (read-only %v), want a writable mount of the host's %s", dir, v.VolumeSource, vm.ReadOnly, dir)
	}
	if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate) {
		t.Errorf("system bus %s: hostPath type %v, want DirectoryOrCreate (a node without dbus must still run the plugin)", dir, v.HostPath.Type)
	}
	want := "unix:path=" + dir + "/system_bus_socket"
	c := container(t, ds)
	if got := envOf(&c, "DBUS_SYSTEM_BUS_ADDRESS"); got != want {
		t.Errorf("DBUS_SYSTEM_BUS_ADDRESS %q, want %q", got, want)
	}
}

// envOf is the value of the container's environment variable name.
func envOf(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestImageName checks that the DaemonSet runs the image `make image`
// builds (the Makefile's IMAGE default) and that kustomize's image entry
// names the same repository and tag.
func TestImageName(t *testing.T) {
	m := loadManifests(t)
	img := container(t, m.daemonSets[0]).Image
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mm := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if mm == nil {
		t.Fatal("the Makefile sets no IMAGE ?= default")
	}
	version := makefileVersion(t)
	if made := strings.ReplaceAll(string(mm[1]), "$(VERSION)", version); made != img {
		t.Errorf("DaemonSet image %q, `make image` builds %q", img, made)
	}
	if !strings.HasSuffix(img, ":"+version) {
		t.Errorf("DaemonSet image %q is not tagged with the Makefile's VERSION %s", img, version)
	}
	script, err := os.ReadFile("../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	repoOf := img[:strings.LastIndex(img, ":")]
	if !strings.Contains(string(script), "IMAGE=${IMAGE:-"+repoOf+":$VERSION}") {
		t.Errorf("scripts/image.sh's default image is not %s:$VERSION", repoOf)
	}
	if container(t, m.daemonSets[0]).ImagePullPolicy != corev1.PullIfNotPresent {
		t.Error("imagePullPolicy must be IfNotPresent: imported images are not in any registry")
	}
	i := strings.LastIndex(img, ":")
	repo, tag := img[:i], img[i+1:]
	k := loadKustomization(t)
	if len(k.Images) != 1 || k.Images[0].Name != repo || k.Images[0].NewTag != tag || k.Images[0].NewName != "" {
		t.Errorf("kustomization images %+v, want one entry %s with newTag %s", k.Images, repo, tag)
	}
}

// makefileVersion is the Makefile's VERSION, the release the image tag,
// the kustomization and the chart name.
func makefileVersion(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mm := regexp.MustCompile(`(?m)^VERSION\s*\?=\s*([0-9]+\.[0-9]+\.[0-9]+\S*)\s*$`).FindSubmatch(mk)
	if mm == nil {
		t.Fatal("the Makefile sets no VERSION ?= x.y.z")
	}
	return string(mm[1])
}

// nriSection is containerd's [plugins.'io.containerd.nri.v1.nri'] table
// (containerd 2.x internal/nri Config); the validator part is NRI's own
// type, which containerd embeds.
type nriSection struct {
	Disable                   bool                              `toml:"disable"`
	SocketPath                string                            `toml:"socket_path"`
	PluginPath                string                            `toml:"plugin_path"`
	PluginConfigPath          string                            `toml:"plugin_config_path"`
	PluginRegistrationTimeout string                            `toml:"plugin_registration_timeout"`
	PluginRequestTimeout      string                            `toml:"plugin_request_timeout"`
	DisableConnections        bool                              `toml:"disable_connections"`
	DefaultValidator          *validator.DefaultValidatorConfig `toml:"default_validator"`
}

func decodeTOMLStrict(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func containerdSection(t *testing.T, file string) nriSection {
	t.Helper()
	var doc struct {
		Plugins map[string]nriSection `toml:"plugins"`
	}
	decodeTOMLStrict(t, file, &doc)
	s, ok := doc.Plugins["io.containerd.nri.v1.nri"]
	if !ok || len(doc.Plugins) != 1 {
		t.Fatalf("%s: want exactly the plugins.'io.containerd.nri.v1.nri' table, got %v", file, doc.Plugins)
	}
	return s
}

func containerdNRI(t *testing.T) nriSection { return containerdSection(t, "node/containerd-nri.toml") }

func containerdValidator(t *testing.T) validator.DefaultValidatorConfig {
	s := containerdSection(t, "node/containerd-nri-validator.toml")
	if s.DefaultValidator == nil {
		t.Fatal("node/containerd-nri-validator.toml has no default_validator table")
	}
	return *s.DefaultValidator
}

// crioNRI is CRI-O's [crio.nri] table (CRI-O's internal/config/nri names).
type crioNRITable struct {
	Enabled                   bool   `toml:"enable_nri"`
	SocketPath                string `toml:"nri_listen"`
	PluginPath                string `toml:"nri_plugin_dir"`
	PluginConfigPath          string `toml:"nri_plugin_config_dir"`
	PluginRegistrationTimeout string `toml:"nri_plugin_registration_timeout"`
	PluginRequestTimeout      string `toml:"nri_plugin_request_timeout"`
	DisableConnections        bool   `toml:"nri_disable_connections"`
	DefaultValidator          *struct {
		Enable                    bool     `toml:"nri_enable_default_validator"`
		RequiredPlugins           []string `toml:"nri_validator_required_plugins"`
		TolerateMissingAnnotation string   `toml:"nri_validator_tolerate_missing_plugins_annotation"`
		RejectOCIHooks            bool     `toml:"nri_validator_reject_oci_hook_adjustment"`
		RejectDefaultSeccomp      bool     `toml:"nri_validator_reject_runtime_default_seccomp_adjustment"`
		RejectUnconfinedSeccomp   bool     `toml:"nri_validator_reject_unconfined_seccomp_adjustment"`
		RejectCustomSeccomp       bool     `toml:"nri_validator_reject_custom_seccomp_adjustment"`
		RejectNamespaces          bool     `toml:"nri_validator_reject_namespace_adjustment"`
	} `toml:"default_validator"`
}

func crioTable(t *testing.T, file string) crioNRITable {
	t.Helper()
	var doc struct {
		Crio struct {
			NRI crioNRITable `toml:"nri"`
		} `toml:"crio"`
	}
	decodeTOMLStrict(t, file, &doc)
	return doc.Crio.NRI
}

func crioNRI(t *testing.T) crioNRITable { return crioTable(t, "node/crio-nri.conf") }

func crioValidator(t *testing.T) validator.DefaultValidatorConfig {
	v := crioTable(t, "node/crio-nri-validator.conf").DefaultValidator
	if v == nil {
		t.Fatal("node/crio-nri-validator.conf has no [crio.nri.default_validator] table")
	}
	return validator.DefaultValidatorConfig{Enable: v.Enable, RequiredPlugins: v.RequiredPlugins, TolerateMissingAnnotation: v.TolerateMissingAnnotation,
		RejectOCIHookAdjustment: v.RejectOCIHooks, RejectRuntimeDefaultSeccompAdjustment: v.RejectDefaultSeccomp,
		RejectUnconfinedSeccompAdjustment: v.RejectUnconfinedSeccomp, RejectCustomSeccompAdjustment: v.RejectCustomSeccomp,
		RejectNamespaceAdjustment: v.RejectNamespaces}
}

// TestValidatorRejectsWhatThePluginNeverDoes: NRI's own default validator,
// configured from each fail-closed snippet, passes the plugin's cpuset
// adjustment (cpuset and CFS quota) and refuses an OCI hook, a seccomp policy or a namespace
// claimed by the same plugin slot: the socket is as good as root, and the
// plugin never needs those.
func TestValidatorRejectsWhatThePluginNeverDoes(t *testing.T) {
	const id = "ctr-1"
	pod := &api.PodSandbox{Id: "sb-1", Name: "p", Namespace: "ns"}
	ctr := &api.Container{Id: id, Name: "c", PodSandboxId: "sb-1"}
	slot := []*api.PluginInstance{{Name: pluginName, Index: "90"}}
	request := func(claim func(o *api.OwningPlugins) error) *api.ValidateContainerAdjustmentRequest {
		adj := &api.ContainerAdjustment{}
		adj.SetLinuxCPUSetCPUs("2-3")
		adj.SetLinuxCPUQuota(-1) // disable_cpu_quota_with_exclusive_cpus
		o := api.NewOwningPlugins()
		if err := o.ClaimCPUSetCPUs(id, pluginName); err != nil {
			t.Fatal(err)
		}
		if err := o.ClaimCPUQuota(id, pluginName); err != nil {
			t.Fatal(err)
		}
		if claim != nil {
			if err := claim(o); err != nil {
				t.Fatal(err)
			}
		}
		return &api.ValidateContainerAdjustmentRequest{Pod: pod, Container: ctr, Adjust: adj, Owners: o, Plugins: slot}
	}
	for name, cfg := range map[string]validator.DefaultValidatorConfig{"containerd": containerdValidator(t), "CRI-O": crioValidator(t)} {
		v := validator.NewDefaultValidator(&cfg)
		if err := v.ValidateContainerAdjustment(t.Context(), request(nil)); err != nil {
			t.Errorf("%s: the plugin's own cpuset adjustment refused: %v", name, err)
		}
		for what, claim := range map[string]func(o *api.OwningPlugins) error{
			"OCI hook":  func(o *api.OwningPlugins) error { return o.ClaimHooks(id, pluginName) },
			"seccomp":   func(o *api.OwningPlugins) error { return o.ClaimSeccompPolicy(id, pluginName) },
			"namespace": func(o *api.OwningPlugins) error { return o.ClaimNamespace(id, "network", pluginName) },
		} {
			if err := v.ValidateContainerAdjustment(t.Context(), request(claim)); err == nil {
				t.Errorf("%s validator accepts a %s adjustment", name, what)
			}
		}
	}
}

func TestRuntimeSnippets(t *testing.T) {
	c := containerdNRI(t)
	if c.Disable || c.DisableConnections {
		t.Errorf("containerd snippet: disable=%v disable_connections=%v, want both false", c.Disable, c.DisableConnections)
	}
	if c.DefaultValidator != nil {
		t.Error("containerd-nri.toml turns on the validator; fail-closed mode is opt-in (containerd-nri-validator.toml)")
	}
	o := crioNRI(t)
	if !o.Enabled || o.DisableConnections {
		t.Errorf("CRI-O snippet: enable_nri=%v nri_disable_connections=%v, want true and false", o.Enabled, o.DisableConnections)
	}
	for name, v := range map[string]validator.DefaultValidatorConfig{"containerd": containerdValidator(t), "CRI-O": crioValidator(t)} {
		if !v.Enable || !reflect.DeepEqual(v.RequiredPlugins, []string{pluginName}) || v.TolerateMissingAnnotation == "" {
			t.Errorf("%s validator %+v, want enabled, requiring %q, with a toleration annotation", name, v, pluginName)
		}
	}
}

// kubeletConfig is the part of KubeletConfiguration
// (kubelet.config.k8s.io/v1beta1) the snippet sets, decoded strictly.
type kubeletConfig struct {
	APIVersion            string `json:"apiVersion"`
	Kind                  string `json:"kind"`
	CPUManagerPolicy      string `json:"cpuManagerPolicy"`
	TopologyManagerPolicy string `json:"topologyManagerPolicy"`
	MemoryManagerPolicy   string `json:"memoryManagerPolicy"`
}

func TestKubeletSnippet(t *testing.T) {
	data, err := os.ReadFile("node/kubelet-cpualign.conf")
	if err != nil {
		t.Fatal(err)
	}
	var k kubeletConfig
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("node/kubelet-cpualign.conf: %v", err)
	}
	want := kubeletConfig{"kubelet.config.k8s.io/v1beta1", "KubeletConfiguration", "none", "none", "None"}
	if k != want {
		t.Errorf("kubelet snippet %+v, want %+v", k, want)
	}
}

// TestExampleConfig checks the commented example config of the daemon
// (deploy/nri-cpualign.toml): it loads, and it shows every key, as the
// ConfigMap does.
func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile("nri-cpualign.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(data); err != nil {
		t.Fatalf("nri-cpualign.toml does not load: %v", err)
	}
	documented := documentedKeys(string(data))
	for _, k := range tomlKeys() {
		if !documented[k] {
			t.Errorf("nri-cpualign.toml neither sets nor shows key %q", k)
		}
	}
}

// checkNRTAccess: the DaemonSet runs as the service account that may write
// NodeResourceTopology objects and nothing else, and gets NODE_NAME from
// the downward API; the CRD is shipped.
func checkNRTAccess(t *testing.T, m manifests) {
	t.Helper()
	ds, ns := m.daemonSets[0], m.namespaces[0]
	if len(m.serviceAccounts) != 1 || len(m.clusterRoles) != 1 || len(m.clusterRoleBindings) != 1 {
		t.Fatalf("%d ServiceAccounts, %d ClusterRoles, %d ClusterRoleBindings; want one each",
			len(m.serviceAccounts), len(m.clusterRoles), len(m.clusterRoleBindings))
	}
	sa, role, binding := m.serviceAccounts[0], m.clusterRoles[0], m.clusterRoleBindings[0]
	if ds.Spec.Template.Spec.ServiceAccountName != sa.Name || sa.Namespace != ns.Name {
		t.Errorf("DaemonSet runs as %q, ServiceAccount is %s/%s", ds.Spec.Template.Spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"topology.node.k8s.io"}, Resources: []string{"noderesourcetopologies"},
		Verbs: []string{"get", "create", "update", "patch"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules %+v, want only %+v", role.Rules, want)
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}) ||
		!reflect.DeepEqual(binding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}) {
		t.Errorf("ClusterRoleBinding %+v does not bind %s to %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
	var env *corev1.EnvVar
	for i, e := range container(t, ds).Env {
		if e.Name == "NODE_NAME" {
			env = &container(t, ds).Env[i]
		}
	}
	if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME %+v, want it from the downward API's spec.nodeName", env)
	}
}

// shippedCRD is deploy/noderesourcetopology-crd.yaml, decoded.
func shippedCRD(t *testing.T) crd {
	t.Helper()
	data, err := os.ReadFile("noderesourcetopology-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	return *obj.(*crd)
}

// TestCRDShipped: deploy/ ships the NodeResourceTopology CRD, with the
// version the plugin writes served and stored, and its licence beside it.
func TestCRDShipped(t *testing.T) {
	c := shippedCRD(t)
	meta, _ := c["metadata"].(map[string]any)
	spec, _ := c["spec"].(map[string]any)
	if meta["name"] != "noderesourcetopologies.topology.node.k8s.io" || spec["group"] != "topology.node.k8s.io" || spec["scope"] != "Cluster" {
		t.Fatalf("CRD %v group %v scope %v", meta["name"], spec["group"], spec["scope"])
	}
	stored := false
	for _, v := range spec["versions"].([]any) {
		v := v.(map[string]any)
		if v["name"] == "v1alpha2" && v["served"] == true && v["storage"] == true {
			stored = true
		}
	}
	if !stored {
		t.Error("the CRD does not serve and store v1alpha2, the version the plugin writes")
	}
	lic, err := os.ReadFile("noderesourcetopology-crd.LICENSE")
	if err != nil || !strings.Contains(string(lic), "Apache License") {
		t.Errorf("the CRD's licence: %v", err)
	}
	if m := loadManifests(t); len(m.crds) != 0 {
		t.Error("kubectl apply -k deploy/ applies the CRD: kubectl delete -k would delete every NodeResourceTopology of the cluster")
	}
}
