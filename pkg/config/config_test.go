package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

func TestLoadValid(t *testing.T) {
	doc := `
# every key once
cpu_manager_policy = "static"
reserved_system_cpus = "0,4"
reserved_cpu_count = 0
topology_manager_policy = "single-numa-node"
topology_manager_scope = "pod"
state_dir = "/tmp/state"
sysfs_root = "/host/sys"
procfs_root = "/host/proc"
cgroup_root = "/host/sys/fs/cgroup"
socket_path = "/run/nri/nri.sock"
metrics_address = ""
reconcile_period = "30s"
log_level = "debug"
log_format = "json"
shared_pool_updates = "in-answer"
memory_manager_policy = "None"
disable_cpu_quota_with_exclusive_cpus = false
kubelet_version = "1.37"
pod_resources = false
pod_resources_socket = "/run/kubelet/pod-resources/kubelet.sock"
pod_resources_timeout = "20ms"

[cpu_manager_policy_options]
full-pcpus-only = true
distribute-cpus-across-numa = "false"

[topology_manager_policy_options]
prefer-closest-numa-nodes = "true"
max-allowable-numa-nodes = 16
`
	c, err := Load([]byte(doc))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Config{
		CPUManagerPolicy:             "static",
		CPUManagerPolicyOptions:      map[string]string{"full-pcpus-only": "true", "distribute-cpus-across-numa": "false"},
		ReservedSystemCPUs:           "0,4",
		TopologyManagerPolicy:        "single-numa-node",
		TopologyManagerScope:         "pod",
		TopologyManagerPolicyOptions: map[string]string{"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "16"},
		StateDir:                     "/tmp/state",
		SysfsRoot:                    "/host/sys",
		ProcfsRoot:                   "/host/proc",
		CgroupRoot:                   "/host/sys/fs/cgroup",
		SocketPath:                   "/run/nri/nri.sock",
		MetricsAddress:               "",
		ReconcilePeriod:              Duration(30 * time.Second),
		SharedPoolUpdates:            SharedUpdatesInAnswer,
		LogLevel:                     "debug",
		LogFormat:                    "json",
		MemoryManagerPolicy:          "None",
		DisableCPUQuota:              false,
		KubeletVersion:               "1.37",
		NodeResourceTopology:         NRTOff,
		PodResources:                 false,
		PodResourcesSocket:           "/run/kubelet/pod-resources/kubelet.sock",
		PodResourcesTimeout:          Duration(20 * time.Millisecond),
	}
	got := c
	got.source, got.lines = "", nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load =\n%#v\nwant\n%#v", got, want)
	}
	if l := c.Line(KeyLogFormat); l != 16 {
		t.Errorf("Line(log_format) = %d, want 16", l)
	}
	if l := c.Line("cpu_manager_policy_options.full-pcpus-only"); l != 26 {
		t.Errorf("Line(full-pcpus-only) = %d, want 26", l)
	}
	if l := c.Line(KeyTopologyManagerPolicyOptions); l != 29 {
		t.Errorf("Line(topology_manager_policy_options) = %d, want 29", l)
	}

	p, err := c.Policy()
	if err != nil {
		t.Fatalf("Policy: %v", err)
	}
	if !p.ReservedCPUs.Equals(cpuset.New(0, 4)) || p.TopologyPolicy != "single-numa-node" || p.TopologyScope != "pod" ||
		p.CPUOptions["full-pcpus-only"] != "true" || p.TopologyOptions["max-allowable-numa-nodes"] != "16" || p.MemoryPolicy != "None" {
		t.Errorf("Policy = %+v", p)
	}
}

func TestLoadEmptyIsDefault(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n"} {
		c, err := Load([]byte(doc))
		if err != nil {
			t.Fatalf("Load(%q): %v", doc, err)
		}
		c.lines = nil
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Load(%q) = %+v, want Default %+v", doc, c, Default())
		}
	}
	d := Default()
	if d.CPUManagerPolicy != "static" || d.SocketPath != "/var/run/nri/nri.sock" || d.StateDir != "/var/lib/nri-cpualign" ||
		time.Duration(d.ReconcilePeriod) != 10*time.Second || d.HasReservation() ||
		d.MemoryManagerPolicy != "None" || !d.DisableCPUQuota {
		t.Errorf("Default = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

func TestReconcilePeriodForms(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want time.Duration
	}{
		{`reconcile_period = "0"`, 0},
		{`reconcile_period = 0`, 0},
		{`reconcile_period = "1m30s"`, 90 * time.Second},
		{`reconcile_period = "250ms"`, 250 * time.Millisecond},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			c, err := Load([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if time.Duration(c.ReconcilePeriod) != tc.want {
				t.Errorf("got %v, want %v", time.Duration(c.ReconcilePeriod), tc.want)
			}
		})
	}
}

// container_start_timeout is no longer used: an existing file that sets
// it still loads, whatever the value, and the key is reported as ignored
// with its line.
func TestContainerStartTimeoutIgnored(t *testing.T) {
	for _, doc := range []string{
		"log_level = \"info\"\ncontainer_start_timeout = \"30s\"\n",
		"log_level = \"info\"\ncontainer_start_timeout = \"0\"\n",
		"log_level = \"info\"\ncontainer_start_timeout = \"-1s\"\n",
	} {
		c, err := Load([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if len(c.Ignored) != 1 || c.Ignored[0].Key != KeyContainerStartTimeout || c.Ignored[0].Line != 2 || !strings.Contains(c.Ignored[0].Why, "pod") {
			t.Errorf("%q: ignored %+v, want container_start_timeout on line 2", doc, c.Ignored)
		}
	}
	c, err := Load([]byte("log_level = \"info\"\n"))
	if err != nil || len(c.Ignored) != 0 {
		t.Errorf("without the key: ignored %+v, err %v; want none", c.Ignored, err)
	}
}

// TestLoadErrors checks that every kind of mistake names its key, its line
// and (for a bad value) the value.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		doc   string
		key   string
		line  int
		value string
		msg   string // substring of the message
	}{
		{"unknown top-level key", "cpu_manager_policy = \"static\"\ncpu_manager_polcy = \"static\"\n", "cpu_manager_polcy", 2, "", "unknown key"},
		{"unknown table", "[cpu_manager]\npolicy = \"static\"\n", "cpu_manager", 1, "", "unknown key"},
		{"syntax error", "log_level = \n", "", 1, "", "unexpected character"},
		{"duplicate key", "log_level = \"info\"\nlog_level = \"debug\"\n", "log_level", 2, "", "already defined"},
		{"wrong type string for int", "\n\nreserved_cpu_count = \"two\"\n", "reserved_cpu_count", 3, "", "wrong type: got a TOML string, want an integer"},
		{"wrong type int for string", "cpu_manager_policy = 1\n", "cpu_manager_policy", 1, "", "wrong type"},
		{"options not a table", "cpu_manager_policy_options = \"full-pcpus-only\"\n", "cpu_manager_policy_options", 1, "", "want a table"},
		{"bad cpu policy", "\ncpu_manager_policy = \"dynamic\"\n", "cpu_manager_policy", 2, "dynamic", "none, static"},
		{"bad topology policy", "topology_manager_policy = \"strict\"\n", "topology_manager_policy", 1, "strict", "single-numa-node"},
		{"bad scope", "topology_manager_scope = \"node\"\n", "topology_manager_scope", 1, "node", "container, pod"},
		{"bad node_resource_topology", "\nnode_resource_topology = \"true\"\n", "node_resource_topology", 2, "true", "want one of off, on"},
		{"node_name not a string", "node_name = 3\n", "node_name", 1, "", "wrong type"},
		{"bad reserved list", "reserved_system_cpus = \"0-\"\n", "reserved_system_cpus", 1, "0-", "CPU list"},
		{"negative reserved count", "reserved_cpu_count = -1\n", "reserved_cpu_count", 1, "-1", ">= 0"},
		{"bad period", "reconcile_period = \"10 seconds\"\n", "reconcile_period", 1, "10 seconds", "duration"},
		{"negative period", "reconcile_period = \"-5s\"\n", "reconcile_period", 1, "-5s", ">= 0"},
		{"period without unit", "reconcile_period = 10\n", "reconcile_period", 1, "10", "no unit"},
		{"period of wrong type", "reconcile_period = true\n", "reconcile_period", 1, "true", "duration"},
		{"bad log level", "log_level = \"loud\"\n", "log_level", 1, "loud", "debug"},
		{"bad log format", "log_format = \"xml\"\n", "log_format", 1, "xml", "text, json"},
		{"bad shared pool updates", "shared_pool_updates = \"later\"\n", "shared_pool_updates", 1, "later", "direct, in-answer"},
		// A removed value names its replacement.
		{"removed after-answer", "\nshared_pool_updates = \"after-answer\"\n", "shared_pool_updates", 2, "after-answer", `no longer supported: use "direct"`},
		{"empty state dir", "state_dir = \"\"\n", "state_dir", 1, "", "must not be empty"},
		{"empty socket", "socket_path = \" \"\n", "socket_path", 1, "", "must not be empty"},
		{"empty sysfs root", "sysfs_root = \"\"\n", "sysfs_root", 1, "", "must not be empty"},
		{"empty procfs root", "procfs_root = \"\"\n", "procfs_root", 1, "", "must not be empty"},
		{"empty cgroup root", "cgroup_root = \"\"\n", "cgroup_root", 1, "", "must not be empty"},
		{"empty pod resources socket", "pod_resources_socket = \"\"\n", "pod_resources_socket", 1, "", "must not be empty while pod_resources is on"},
		{"pod resources not a boolean", "pod_resources = \"on\"\n", "pod_resources", 1, "", "want a boolean"},
		{"pod resources timeout without unit", "pod_resources_timeout = 5\n", "pod_resources_timeout", 1, "5", `want a duration string like "5ms"`},
		{"bad pod resources timeout", "pod_resources_timeout = \"5 ms\"\n", "pod_resources_timeout", 1, "5 ms", `want a duration string like "5ms"`},
		{"zero pod resources timeout", "\npod_resources_timeout = \"0s\"\n", "pod_resources_timeout", 2, "0s", "above 0 and at most 1s"},
		{"pod resources timeout over 1s", "pod_resources_timeout = \"2s\"\n", "pod_resources_timeout", 1, "2s", "above 0 and at most 1s"},
		{"metrics address without port", "metrics_address = \"localhost\"\n", "metrics_address", 1, "localhost", "host:port"},
		{"metrics address bad port", "metrics_address = \":99999\"\n", "metrics_address", 1, ":99999", "port"},
		{"option of wrong type", "[cpu_manager_policy_options]\n\nfull-pcpus-only = 1.5\n", "cpu_manager_policy_options.full-pcpus-only", 3, "1.5", "string or boolean"},
		{"topology option of wrong type", "[topology_manager_policy_options]\nprefer-closest-numa-nodes = [true]\n", "topology_manager_policy_options.prefer-closest-numa-nodes", 2, "[true]", "string or boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Load(%q) succeeded", tc.doc)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *config.Error", err, err)
			}
			if ce.Key != tc.key || ce.Line != tc.line || ce.Value != tc.value {
				t.Errorf("got key %q line %d value %q, want key %q line %d value %q (%v)", ce.Key, ce.Line, ce.Value, tc.key, tc.line, tc.value, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q lacks %q", err, tc.msg)
			}
			if tc.key != "" && !strings.Contains(err.Error(), `key "`+tc.key+`"`) {
				t.Errorf("error %q does not name key %q", err, tc.key)
			}
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	doc := "log_level = \"loud\"\nlog_format = \"xml\"\ncpu_manager_policy = \"x\"\n"
	_, err := Load([]byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`line 1: key "log_level"`, `line 2: key "log_format"`, `line 3: key "cpu_manager_policy"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// Two unknown keys are both reported.
	_, err = Load([]byte("a = 1\nb = 2\n"))
	if err == nil || !strings.Contains(err.Error(), `line 1: key "a": unknown key`) || !strings.Contains(err.Error(), `line 2: key "b": unknown key`) {
		t.Errorf("unknown keys: %v", err)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cfg.toml")
	if err := os.WriteFile(path, []byte("reserved_cpu_count = 2\nlog_format = \"yaml\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), "config "+path+" line 2: key \"log_format\": bad value \"yaml\"") {
		t.Errorf("LoadFile error = %v", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.toml")); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file error = %v", err)
	}
	if err := os.WriteFile(path, []byte("reserved_cpu_count = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(path)
	if err != nil || c.ReservedCPUCount != 2 || c.Source() != path || !c.HasReservation() {
		t.Errorf("LoadFile = %+v, %v", c, err)
	}
	ke := c.KeyError(KeyReservedCPUCount, "2", "too many")
	if ke.Error() != "config "+path+" line 1: key \"reserved_cpu_count\": bad value \"2\": too many" {
		t.Errorf("KeyError = %q", ke)
	}
}

func TestValidateAfterOverride(t *testing.T) {
	c := Default()
	c.ReservedSystemCPUs = "a-b"
	c.ReconcilePeriod = Duration(-time.Second)
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `key "reserved_system_cpus": bad value "a-b"`) || !strings.Contains(err.Error(), `key "reconcile_period": bad value "-1s"`) {
		t.Errorf("Validate = %v", err)
	}
	if _, err := c.Policy(); err == nil || !strings.Contains(err.Error(), "reserved_system_cpus") {
		t.Errorf("Policy with bad reserved list = %v", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	c := Default()
	c.ReservedSystemCPUs = "0-1"
	c.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true"}
	c.ReconcilePeriod = Duration(90 * time.Second)
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Load(b)
	if err != nil {
		t.Fatalf("Load(Encode()) = %v\n%s", err, b)
	}
	back.lines = nil
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip:\n%s\ngot  %+v\nwant %+v", b, back, c)
	}
	if s := c.Summary(); !strings.Contains(s, "reconcile_period=1m30s") || !strings.Contains(s, "cpu_manager_policy_options={full-pcpus-only:true}") {
		t.Errorf("Summary = %q", s)
	}
}

// The commented example in deploy/ must load as it is, and with every
// commented-out setting switched on (so the documented keys and values
// stay valid).
func TestDeployExample(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "nri-cpualign.toml")
	c, err := LoadFile(path)
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if c.CPUManagerPolicy != "static" || c.ReservedCPUCount != 2 || !c.HasReservation() {
		t.Errorf("example config = %+v", c)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			if k, _, ok := strings.Cut(rest, " = "); ok && !strings.Contains(k, " ") {
				line = rest
				n++
			}
		}
		b.WriteString(line + "\n")
	}
	all, err := Load([]byte(b.String()))
	if err != nil {
		t.Fatalf("example with every setting uncommented: %v\n%s", err, b.String())
	}
	if n != 33 || !all.PodResources || all.PodResourcesTimeout != Duration(DefaultPodResourcesTimeout) || all.PodLevelResourceManagers || all.ReservedSystemCPUs != "0,64" || all.CPUManagerPolicyOptions["full-pcpus-only"] != "true" ||
		all.TopologyManagerPolicyOptions["max-allowable-numa-nodes"] != "16" || all.MetricsAddress != DefaultMetricsAddress ||
		len(all.Reservations()) != 1 || all.Reservations()[0].Limits["hugepages-2Mi"] != 64<<20 ||
		all.NodeResourceTopology != NRTOn || all.NodeName != "worker-1" || all.ProcfsRoot != "/proc" {
		t.Errorf("uncommented %d settings, got %+v", n, all)
	}
}

// memory_manager_policy takes the kubelet's values; Static without
// reserved memory is refused as the kubelet refuses it, naming the key
// and the line.
func TestMemoryManagerPolicy(t *testing.T) {
	c, err := Load([]byte(`memory_manager_policy = "None"`))
	if err != nil || c.MemoryManagerPolicy != "None" {
		t.Fatalf("None: %+v, %v", c.MemoryManagerPolicy, err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"\nmemory_manager_policy = \"Static\"", `config line 2: key "memory_manager_policy": bad value "Static": Static needs reserved memory ` +
			`(the kubelet: "you should specify the system reserved memory")`},
		{`memory_manager_policy = "none"`, `key "memory_manager_policy": bad value "none": want one of None, Static; did you mean "None"?`},
		{`memory_manager_policy = 1`, `key "memory_manager_policy": wrong type: got a TOML integer, want a string`},
	} {
		_, err := Load([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", tc.doc, err, tc.want)
		}
	}
}

// disable_cpu_quota_with_exclusive_cpus is a boolean, true by default
// like the kubelet's gate.
func TestDisableCPUQuotaKey(t *testing.T) {
	for doc, want := range map[string]bool{"": true, "disable_cpu_quota_with_exclusive_cpus = true": true, "disable_cpu_quota_with_exclusive_cpus = false": false} {
		c, err := Load([]byte(doc))
		if err != nil || c.DisableCPUQuota != want {
			t.Errorf("Load(%q) = %v, %v; want %v", doc, c.DisableCPUQuota, err, want)
		}
	}
	_, err := Load([]byte(`disable_cpu_quota_with_exclusive_cpus = "yes"`))
	want := `key "disable_cpu_quota_with_exclusive_cpus": wrong type: got a TOML string, want a boolean`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Load(string) = %v, want an error containing %q", err, want)
	}
}

// The NodeResourceTopology keys: off by default; the node name from the
// file wins over NODE_NAME.
func TestNodeResourceTopologyKeys(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	c, err := Load([]byte("node_resource_topology = \"on\"\nkubeconfig = \"/etc/kubernetes/kubelet.conf\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeResourceTopology != NRTOn || c.Kubeconfig != "/etc/kubernetes/kubelet.conf" || c.NodeNameOrEnv() != "from-env" {
		t.Errorf("got %q %q %q", c.NodeResourceTopology, c.Kubeconfig, c.NodeNameOrEnv())
	}
	c, err = Load([]byte("node_name = \"worker-3\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeResourceTopology != NRTOff || c.NodeNameOrEnv() != "worker-3" {
		t.Errorf("got %q %q, want off, worker-3", c.NodeResourceTopology, c.NodeNameOrEnv())
	}
}

// The PodResources keys: on by default, at the kubelet's socket, 5 ms;
// off, the socket and timeout are not checked.
func TestPodResourcesKeys(t *testing.T) {
	c, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.PodResources || c.PodResourcesSocket != "/var/lib/kubelet/pod-resources/kubelet.sock" || c.PodResourcesTimeout != Duration(5*time.Millisecond) {
		t.Errorf("defaults: got %v %q %v", c.PodResources, c.PodResourcesSocket, time.Duration(c.PodResourcesTimeout))
	}
	c, err = Load([]byte("pod_resources = false\npod_resources_socket = \"\"\n"))
	if err != nil || c.PodResources {
		t.Errorf("off with no socket: got %v, %v", c.PodResources, err)
	}
	if s := c.Summary(); !strings.Contains(s, "pod_resources=false pod_resources_socket= pod_resources_timeout=5ms") {
		t.Errorf("Summary %q lacks the PodResources keys", s)
	}
}

// pod_level_resource_managers is a boolean, false by default like the
// kubelet's gate, and reaches the engine's configuration.
func TestPodLevelResourceManagersKey(t *testing.T) {
	for doc, want := range map[string]bool{"": false, "pod_level_resource_managers = true": true, "pod_level_resource_managers = false": false} {
		c, err := Load([]byte(doc))
		if err != nil || c.PodLevelResourceManagers != want {
			t.Fatalf("Load(%q) = %v, %v; want %v", doc, c.PodLevelResourceManagers, err, want)
		}
		p, err := c.Policy()
		if err != nil || p.PodLevelResourceManagers != want {
			t.Fatalf("Load(%q).Policy() = %v, %v; want %v", doc, p.PodLevelResourceManagers, err, want)
		}
	}
	_, err := Load([]byte("\n" + `pod_level_resource_managers = "true"`))
	want := `line 2: key "pod_level_resource_managers": wrong type: got a TOML string, want a boolean`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load(string) = %v, want an error containing %q", err, want)
	}
}

// kubelet_version is "1.38" by default, takes "1.37", reaches the engine's
// configuration as a kubever.Version, and refuses anything else naming
// the key and the accepted values.
func TestKubeletVersionKey(t *testing.T) {
	for doc, want := range map[string]kubever.Version{
		"":                         kubever.V138,
		`kubelet_version = "1.38"`: kubever.V138,
		`kubelet_version = "1.37"`: kubever.V137,
	} {
		c, err := Load([]byte(doc))
		if err != nil {
			t.Fatalf("Load(%q): %v", doc, err)
		}
		p, err := c.Policy()
		if err != nil || p.KubeletVersion != want {
			t.Fatalf("Load(%q).Policy() = %v, %v; want %v", doc, p.KubeletVersion, err, want)
		}
	}
	_, err := Load([]byte("\n" + `kubelet_version = "1.36"`))
	want := `line 2: key "kubelet_version": bad value "1.36": want one of 1.38, 1.37`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load(1.36) = %v, want an error containing %q", err, want)
	}
	_, err = Load([]byte(`kubelet_version = 1.37`))
	want = `key "kubelet_version": wrong type: got a TOML float, want a string`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load(float) = %v, want an error containing %q", err, want)
	}
}
