// Package config is the one TOML loader of nri-cpualign, used for the
// daemon's --config file, the runtime's NRI Configure string, `simulate`
// and the deploy manifest test. The keys mirror the kubelet's configuration
// (cpu_manager_policy, reserved_system_cpus, topology_manager_policy, ...).
//
// Loading is strict: an unknown key, a value of the wrong type or a bad
// value is an *Error naming the key, the line and the value. Keys that are
// absent keep their Default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// TOML key names, exactly as the configuration file spells them.
const (
	// The policy keys are the engine's: its *ConfigError names them.
	KeyCPUManagerPolicy             = policy.KeyCPUManagerPolicy
	KeyCPUManagerPolicyOptions      = policy.KeyCPUManagerPolicyOptions
	KeyReservedSystemCPUs           = policy.KeyReservedSystemCPUs
	KeyReservedCPUCount             = policy.KeyReservedCPUCount
	KeyTopologyManagerPolicy        = policy.KeyTopologyManagerPolicy
	KeyTopologyManagerScope         = policy.KeyTopologyManagerScope
	KeyTopologyManagerPolicyOptions = policy.KeyTopologyManagerPolicyOptions
	KeyMemoryManagerPolicy          = policy.KeyMemoryManagerPolicy
	// KeyPodLevelResourceManagers is the kubelet's feature gate
	// PodLevelResourceManagers (KEP-5526; beta, off by default in 1.37).
	KeyPodLevelResourceManagers = policy.KeyPodLevelResourceManagers
	// KeyKubeletVersion selects the kubelet release whose rules the
	// engine follows: "1.38" (the default) or "1.37".
	KeyKubeletVersion = policy.KeyKubeletVersion
	// KeyDisableCPUQuota is the kubelet's feature gate
	// DisableCPUQuotaWithExclusiveCPUs (on by default since 1.33).
	KeyDisableCPUQuota = "disable_cpu_quota_with_exclusive_cpus"
	KeyStateDir        = "state_dir"
	KeySysfsRoot       = "sysfs_root"
	// KeyProcfsRoot is where the NVIDIA driver's GPU files are read
	// (<procfs_root>/driver/nvidia/gpus/*/information).
	KeyProcfsRoot        = "procfs_root"
	KeyCgroupRoot        = "cgroup_root"
	KeySocketPath        = "socket_path"
	KeyMetricsAddress    = "metrics_address"
	KeyReconcilePeriod   = "reconcile_period"
	KeySharedPoolUpdates = "shared_pool_updates"
	// KeyContainerStartTimeout is no longer used: accepted and ignored,
	// with a warning (Config.Ignored).
	KeyContainerStartTimeout = "container_start_timeout"
	KeyLogLevel              = "log_level"
	KeyLogFormat             = "log_format"
	// NodeResourceTopology export (docs/node-resource-topology.md).
	KeyNodeResourceTopology = "node_resource_topology"
	KeyKubeconfig           = "kubeconfig"
	KeyNodeName             = "node_name"
	// The kubelet's PodResources API as a device hint source
	// (docs/devices.md).
	KeyPodResources        = "pod_resources"
	KeyPodResourcesSocket  = "pod_resources_socket"
	KeyPodResourcesTimeout = "pod_resources_timeout"
)

// Values of node_resource_topology.
const (
	NRTOff   = "off"
	NRTOn    = "on"
	nrtModes = NRTOff + "," + NRTOn
)

// Default values of the daemon-level keys.
const (
	DefaultStateDir        = "/var/lib/nri-cpualign"
	DefaultSysfsRoot       = "/sys"
	DefaultProcfsRoot      = "/proc"
	DefaultCgroupRoot      = "/sys/fs/cgroup"
	DefaultSocketPath      = "/var/run/nri/nri.sock"
	DefaultMetricsAddress  = "127.0.0.1:9464"
	DefaultReconcilePeriod = 10 * time.Second
	// DefaultPodResourcesSocket is the kubelet's (its root directory's
	// pod-resources/kubelet.sock).
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	// DefaultPodResourcesTimeout bounds the kubelet's answer: a container's
	// creation waits at most this long for it. A warm kubelet answers in
	// well under a millisecond (docs/performance.md).
	DefaultPodResourcesTimeout = 5 * time.Millisecond
	// MaxPodResourcesTimeout is the most pod_resources_timeout may be: the
	// call holds the container's creation.
	MaxPodResourcesTimeout = time.Second
)

// Values accepted by the enumerated keys, in the kubelet's spelling
// (comma-separated so that they stay constants).
const (
	cpuPolicies      = "none,static"
	topologyPolicies = "none,best-effort,restricted,single-numa-node"
	topologyScopes   = "container,pod"
	memoryPolicies   = policy.MemoryPolicyNone + "," + policy.MemoryPolicyStatic
	logLevels        = "trace,debug,info,warn,warning,error,fatal,panic"
	logFormats       = "text,json"
	sharedUpdates    = SharedUpdatesDirect + "," + SharedUpdatesInAnswer
)

// Values of shared_pool_updates.
const (
	// SharedUpdatesDirect (the default): the daemon writes the shared pool
	// into the cpuset.cpus of every shared-pool container's cgroup itself,
	// right after its answer (about 20 µs a container), and a new exclusive
	// container's StartContainer waits until those writes are done, so its
	// CPUs are never shared. The runtime is not asked to update the
	// shared-pool containers, so its record of their cpuset keeps the value
	// they were created with. Needs write access to cgroup_root.
	SharedUpdatesDirect = "direct"
	// SharedUpdatesInAnswer: the CreateContainer and StopContainer answers
	// carry the new cpuset of every shared-pool container, and the runtime
	// applies them before the new container starts, so exclusive CPUs are
	// never shared, not even briefly. The answer grows with the number of
	// shared-pool containers.
	SharedUpdatesInAnswer = "in-answer"
	// removedAfterAnswer was a third value: the runtime updated the
	// shared-pool containers after the new container had started, which
	// cost every container a PostStartContainer round trip and left its
	// CPUs shared meanwhile. "direct" does the same job without either; a
	// configuration that still names it is refused with that advice.
	removedAfterAnswer = "after-answer"
)

// Config is the whole configuration of the daemon. The toml tags are the
// file's keys.
type Config struct {
	CPUManagerPolicy             string            `toml:"cpu_manager_policy"`
	CPUManagerPolicyOptions      map[string]string `toml:"cpu_manager_policy_options"`
	ReservedSystemCPUs           string            `toml:"reserved_system_cpus"`
	ReservedCPUCount             int               `toml:"reserved_cpu_count"`
	TopologyManagerPolicy        string            `toml:"topology_manager_policy"`
	TopologyManagerScope         string            `toml:"topology_manager_scope"`
	TopologyManagerPolicyOptions map[string]string `toml:"topology_manager_policy_options"`
	// MemoryManagerPolicy is the kubelet's memoryManagerPolicy: "None"
	// or "Static".
	MemoryManagerPolicy string `toml:"memory_manager_policy"`
	// DisableCPUQuota: containers with exclusive CPUs, and their pods,
	// run without a CFS quota, as under the kubelet's feature gate
	// DisableCPUQuotaWithExclusiveCPUs.
	DisableCPUQuota bool `toml:"disable_cpu_quota_with_exclusive_cpus"`
	// PodLevelResourceManagers: a Guaranteed pod with pod-level resources
	// gets its CPUs as one block under the pod scope, as under the
	// kubelet's feature gate PodLevelResourceManagers (off by default).
	PodLevelResourceManagers bool `toml:"pod_level_resource_managers"`
	// KubeletVersion is the kubelet release whose CPU, topology and
	// memory manager rules the engine follows: "1.38" or "1.37".
	KubeletVersion string `toml:"kubelet_version"`
	StateDir       string `toml:"state_dir"`
	SysfsRoot      string `toml:"sysfs_root"`
	// ProcfsRoot plays /proc for the device hints' GPU lookup.
	ProcfsRoot     string `toml:"procfs_root"`
	CgroupRoot     string `toml:"cgroup_root"`
	SocketPath     string `toml:"socket_path"`
	MetricsAddress string `toml:"metrics_address"`
	// ReconcilePeriod is how often the reconcile loop compares cgroups with
	// the assignments; 0 turns the loop off.
	ReconcilePeriod Duration `toml:"reconcile_period"`
	// SharedPoolUpdates is SharedUpdatesDirect or SharedUpdatesInAnswer.
	SharedPoolUpdates string `toml:"shared_pool_updates"`
	LogLevel          string `toml:"log_level"`
	LogFormat         string `toml:"log_format"`
	// ReservedMemory is the kubelet's reservedMemory (see memory.go).
	ReservedMemory []ReservedMemory `toml:"reserved_memory,omitempty"`
	// Ignored are the keys of the document that are no longer used,
	// each with why; the daemon warns about them.
	Ignored []IgnoredKey `toml:"-"`
	// NodeResourceTopology is NRTOff or NRTOn: publish the node's
	// NodeResourceTopology object for topology-aware schedulers.
	NodeResourceTopology string `toml:"node_resource_topology"`
	// Kubeconfig is the API server's kubeconfig file; "" is the pod's
	// service account (in-cluster).
	Kubeconfig string `toml:"kubeconfig"`
	// NodeName names the object; "" takes the NODE_NAME environment
	// variable (NodeNameOrEnv).
	NodeName string `toml:"node_name"`
	// PodResources: ask the kubelet's PodResources API, at
	// PodResourcesSocket, for a container's devices and their NUMA nodes,
	// waiting at most PodResourcesTimeout (no hint when it does not
	// answer in time).
	PodResources        bool     `toml:"pod_resources"`
	PodResourcesSocket  string   `toml:"pod_resources_socket"`
	PodResourcesTimeout Duration `toml:"pod_resources_timeout"`

	// source and lines remember where the configuration came from so that
	// errors found later (e.g. by policy.New) can name the line.
	source string
	lines  map[string]int
}

// Duration is a time.Duration written in TOML as a Go duration string
// ("10s", "1m30s"); the integer 0 is accepted too and means 0.
type Duration time.Duration

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Default is the configuration used for every key a file leaves out: the
// static policy, no topology manager, no reservation (which the daemon
// refuses under static, as the kubelet does: set reserved_system_cpus or
// reserved_cpu_count; reserved_cpu_count = 0 written in the file runs with
// none, with a warning), metrics on localhost.
func Default() Config {
	return Config{
		CPUManagerPolicy:             "static",
		CPUManagerPolicyOptions:      map[string]string{},
		TopologyManagerPolicy:        "none",
		TopologyManagerScope:         "container",
		TopologyManagerPolicyOptions: map[string]string{},
		MemoryManagerPolicy:          policy.MemoryPolicyNone,
		KubeletVersion:               kubever.Default.String(),
		DisableCPUQuota:              true,
		StateDir:                     DefaultStateDir,
		SysfsRoot:                    DefaultSysfsRoot,
		ProcfsRoot:                   DefaultProcfsRoot,
		CgroupRoot:                   DefaultCgroupRoot,
		SocketPath:                   DefaultSocketPath,
		MetricsAddress:               DefaultMetricsAddress,
		ReconcilePeriod:              Duration(DefaultReconcilePeriod),
		SharedPoolUpdates:            SharedUpdatesDirect,
		LogLevel:                     "info",
		LogFormat:                    "text",
		NodeResourceTopology:         NRTOff,
		PodResources:                 true,
		PodResourcesSocket:           DefaultPodResourcesSocket,
		PodResourcesTimeout:          Duration(DefaultPodResourcesTimeout),
	}
}

// Error is one problem in a configuration. Line is 0 when the problem is
// not tied to one line (e.g. a value set by a flag); Value is the offending
// value as written, empty for an unknown key or a syntax error.
type Error struct {
	File  string // file name, empty for an in-memory document
	Line  int
	Key   string // dotted key, e.g. "cpu_manager_policy_options.full-pcpus-only"
	Value string
	Msg   string
}

// Error renders "config FILE line N: key "K": bad value "V": MSG", leaving
// out the parts that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config")
	if e.File != "" {
		b.WriteString(" " + e.File)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " line %d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": key %q", e.Key)
	}
	if e.Value != "" {
		fmt.Fprintf(&b, ": bad value %q", e.Value)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// raw is what the TOML document decodes into: the option tables and the
// period take several TOML types, which Load converts and checks itself.
type raw struct {
	CPUManagerPolicy             *string             `toml:"cpu_manager_policy"`
	CPUManagerPolicyOptions      map[string]any      `toml:"cpu_manager_policy_options"`
	ReservedSystemCPUs           *string             `toml:"reserved_system_cpus"`
	ReservedCPUCount             *int64              `toml:"reserved_cpu_count"`
	TopologyManagerPolicy        *string             `toml:"topology_manager_policy"`
	TopologyManagerScope         *string             `toml:"topology_manager_scope"`
	TopologyManagerPolicyOptions map[string]any      `toml:"topology_manager_policy_options"`
	MemoryManagerPolicy          *string             `toml:"memory_manager_policy"`
	DisableCPUQuota              *bool               `toml:"disable_cpu_quota_with_exclusive_cpus"`
	PodLevelResourceManagers     *bool               `toml:"pod_level_resource_managers"`
	KubeletVersion               *string             `toml:"kubelet_version"`
	StateDir                     *string             `toml:"state_dir"`
	SysfsRoot                    *string             `toml:"sysfs_root"`
	ProcfsRoot                   *string             `toml:"procfs_root"`
	CgroupRoot                   *string             `toml:"cgroup_root"`
	SocketPath                   *string             `toml:"socket_path"`
	MetricsAddress               *string             `toml:"metrics_address"`
	ReconcilePeriod              any                 `toml:"reconcile_period"`
	SharedPoolUpdates            *string             `toml:"shared_pool_updates"`
	ContainerStartTimeout        any                 `toml:"container_start_timeout"`
	LogLevel                     *string             `toml:"log_level"`
	LogFormat                    *string             `toml:"log_format"`
	ReservedMemory               []rawReservedMemory `toml:"reserved_memory"`
	NodeResourceTopology         *string             `toml:"node_resource_topology"`
	Kubeconfig                   *string             `toml:"kubeconfig"`
	NodeName                     *string             `toml:"node_name"`
	PodResources                 *bool               `toml:"pod_resources"`
	PodResourcesSocket           *string             `toml:"pod_resources_socket"`
	PodResourcesTimeout          any                 `toml:"pod_resources_timeout"`
}

// Load parses a TOML document over Default and validates it. Every problem
// is an *Error (several are joined with errors.Join).
func Load(data []byte) (Config, error) { return load(data, "") }

// LoadFile is Load of a file; errors also name the file.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return load(data, path)
}

func load(data []byte, file string) (Config, error) {
	var r raw
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Config{}, decodeError(err, file)
	}
	c := Default()
	c.source = file
	c.lines = keyLines(data)
	var errs []error
	bad := func(key, value, format string, args ...any) {
		errs = append(errs, &Error{File: file, Line: c.lineOf(key), Key: key, Value: value, Msg: fmt.Sprintf(format, args...)})
	}
	setStr := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	setStr(&c.CPUManagerPolicy, r.CPUManagerPolicy)
	setStr(&c.ReservedSystemCPUs, r.ReservedSystemCPUs)
	setStr(&c.TopologyManagerPolicy, r.TopologyManagerPolicy)
	setStr(&c.TopologyManagerScope, r.TopologyManagerScope)
	setStr(&c.StateDir, r.StateDir)
	setStr(&c.SysfsRoot, r.SysfsRoot)
	setStr(&c.ProcfsRoot, r.ProcfsRoot)
	setStr(&c.CgroupRoot, r.CgroupRoot)
	setStr(&c.SocketPath, r.SocketPath)
	setStr(&c.MetricsAddress, r.MetricsAddress)
	setStr(&c.LogLevel, r.LogLevel)
	setStr(&c.LogFormat, r.LogFormat)
	setStr(&c.SharedPoolUpdates, r.SharedPoolUpdates)
	setStr(&c.MemoryManagerPolicy, r.MemoryManagerPolicy)
	setStr(&c.NodeResourceTopology, r.NodeResourceTopology)
	setStr(&c.Kubeconfig, r.Kubeconfig)
	setStr(&c.NodeName, r.NodeName)
	setStr(&c.KubeletVersion, r.KubeletVersion)
	setStr(&c.PodResourcesSocket, r.PodResourcesSocket)
	if r.PodResources != nil {
		c.PodResources = *r.PodResources
	}
	if r.PodResourcesTimeout != nil {
		v, ok := r.PodResourcesTimeout.(string)
		d, err := time.ParseDuration(v)
		if !ok || err != nil {
			bad(KeyPodResourcesTimeout, fmt.Sprint(r.PodResourcesTimeout), `want a duration string like "5ms"`)
		} else {
			c.PodResourcesTimeout = Duration(d) // its range is checked by problems
		}
	}
	if r.DisableCPUQuota != nil {
		c.DisableCPUQuota = *r.DisableCPUQuota
	}
	if r.PodLevelResourceManagers != nil {
		c.PodLevelResourceManagers = *r.PodLevelResourceManagers
	}
	if r.ReservedCPUCount != nil {
		n := *r.ReservedCPUCount
		if n < 0 || n > 1<<20 {
			bad(KeyReservedCPUCount, strconv.FormatInt(n, 10), "want a CPU count >= 0")
		} else {
			c.ReservedCPUCount = int(n)
		}
	}
	c.CPUManagerPolicyOptions = optionTable(KeyCPUManagerPolicyOptions, r.CPUManagerPolicyOptions, bad)
	c.TopologyManagerPolicyOptions = optionTable(KeyTopologyManagerPolicyOptions, r.TopologyManagerPolicyOptions, bad)
	if r.ReconcilePeriod != nil {
		d, value, err := parsePeriod(r.ReconcilePeriod)
		if err != nil {
			bad(KeyReconcilePeriod, value, "%v", err)
		} else {
			c.ReconcilePeriod = Duration(d)
		}
	}
	if r.ReservedMemory != nil {
		c.ReservedMemory = reservedMemory(r.ReservedMemory, bad)
	}
	if r.ContainerStartTimeout != nil {
		c.Ignored = append(c.Ignored, IgnoredKey{Key: KeyContainerStartTimeout, Line: c.lines[KeyContainerStartTimeout],
			Why: "a container that never started keeps its CPUs for its pod, as under the kubelet; the pod's removal frees them"})
	}
	for _, e := range c.problems() {
		e.File, e.Line = file, c.lineOf(e.Key)
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// optionTable converts a policy-options table: the kubelet writes option
// values as strings ("true"), TOML users write booleans; both are kept as
// the string the kubelet would see. Option names are checked by problems,
// their values by the policy.
func optionTable(key string, in map[string]any, bad func(key, value, format string, args ...any)) map[string]string {
	out := map[string]string{}
	for name, v := range in {
		switch v := v.(type) {
		case string:
			out[name] = v
		case bool:
			out[name] = strconv.FormatBool(v)
		case int64:
			out[name] = strconv.FormatInt(v, 10)
		default:
			bad(key+"."+name, fmt.Sprint(v), "want a string or boolean option value, got %T", v)
		}
	}
	return out
}

func parsePeriod(v any) (time.Duration, string, error) {
	switch v := v.(type) {
	case string:
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, v, errors.New(`want a duration like "10s" or "0" (off)`)
		}
		if d < 0 {
			return 0, v, errors.New("want a duration >= 0 (0 = off)")
		}
		return d, v, nil
	case int64:
		if v == 0 {
			return 0, "0", nil
		}
		return 0, strconv.FormatInt(v, 10), errors.New(`want a duration string like "10s" (a bare number has no unit; only 0 = off is allowed)`)
	default:
		return 0, fmt.Sprint(v), errors.New(`want a duration string like "10s"`)
	}
}

// Validate checks every value of c (as Load does); use it for a Config
// built or changed in code, e.g. after command-line flags override keys.
// Checks that need the machine (option names, reserved CPUs online) are
// policy.New's.
func (c Config) Validate() error {
	var errs []error
	for _, e := range c.problems() {
		e.File, e.Line = c.source, c.lineOf(e.Key)
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// problems returns one *Error per bad value, without file and line.
func (c Config) problems() []*Error {
	var out []*Error
	bad := func(key, value, format string, args ...any) {
		out = append(out, &Error{Key: key, Value: value, Msg: fmt.Sprintf(format, args...)})
	}
	oneOf := func(key, value string, allowed string) {
		values := strings.Split(allowed, ",")
		if contains(values, value) {
			return
		}
		if near := nearest(value, values, normOption); near != "" {
			bad(key, value, "want one of %s; did you mean %q?", strings.Join(values, ", "), near)
			return
		}
		bad(key, value, "want one of %s", strings.Join(values, ", "))
	}
	oneOf(KeyCPUManagerPolicy, c.CPUManagerPolicy, cpuPolicies)
	oneOf(KeyTopologyManagerPolicy, c.TopologyManagerPolicy, topologyPolicies)
	oneOf(KeyTopologyManagerScope, c.TopologyManagerScope, topologyScopes)
	oneOf(KeyMemoryManagerPolicy, c.MemoryManagerPolicy, memoryPolicies)
	if _, err := kubever.Parse(c.KubeletVersion); err != nil {
		bad(KeyKubeletVersion, c.KubeletVersion, "want one of %s (the kubelet release whose resource-manager rules are followed)", kubever.Accepted)
	}
	c.reservedMemoryProblems(bad)
	oneOf(KeyLogLevel, c.LogLevel, logLevels)
	oneOf(KeyLogFormat, c.LogFormat, logFormats)
	oneOf(KeyNodeResourceTopology, c.NodeResourceTopology, nrtModes)
	if c.SharedPoolUpdates == removedAfterAnswer {
		bad(KeySharedPoolUpdates, c.SharedPoolUpdates, "%q is no longer supported: use %q (the default: the plugin writes the shared pool into the cgroups "+
			"and the new container's start waits only for those writes), or %q where the plugin may not write cgroups",
			removedAfterAnswer, SharedUpdatesDirect, SharedUpdatesInAnswer)
	} else {
		oneOf(KeySharedPoolUpdates, c.SharedPoolUpdates, sharedUpdates)
	}
	if strings.TrimSpace(c.ReservedSystemCPUs) != "" {
		if _, err := sysfs.ParseList(c.ReservedSystemCPUs); err != nil { // bounded ids: "0-4000000000" must not hang
			bad(KeyReservedSystemCPUs, c.ReservedSystemCPUs, `want a Linux CPU list like "0,1" or "0-3,8-11"`)
		}
	}
	if c.ReservedCPUCount < 0 {
		bad(KeyReservedCPUCount, strconv.Itoa(c.ReservedCPUCount), "want a CPU count >= 0")
	}
	if c.ReconcilePeriod < 0 {
		bad(KeyReconcilePeriod, time.Duration(c.ReconcilePeriod).String(), "want a duration >= 0 (0 = off)")
	}
	for _, k := range []struct{ key, value string }{
		{KeyStateDir, c.StateDir}, {KeySysfsRoot, c.SysfsRoot}, {KeyProcfsRoot, c.ProcfsRoot}, {KeyCgroupRoot, c.CgroupRoot}, {KeySocketPath, c.SocketPath},
	} {
		if strings.TrimSpace(k.value) == "" {
			bad(k.key, "", "must not be empty")
		}
	}
	if c.PodResources {
		if strings.TrimSpace(c.PodResourcesSocket) == "" {
			bad(KeyPodResourcesSocket, "", "must not be empty while pod_resources is on")
		}
		if t := time.Duration(c.PodResourcesTimeout); t <= 0 || t > MaxPodResourcesTimeout {
			bad(KeyPodResourcesTimeout, t.String(), `want a duration above 0 and at most 1s, like "5ms": the kubelet's answer holds the container's creation`)
		}
	}
	if c.MetricsAddress != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			bad(KeyMetricsAddress, c.MetricsAddress, `want host:port like "127.0.0.1:9464", or "" to turn metrics off`)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad(KeyMetricsAddress, c.MetricsAddress, "want a port number 0-65535")
		}
	}
	for _, t := range []struct {
		key  string
		opts map[string]string
	}{{KeyCPUManagerPolicyOptions, c.CPUManagerPolicyOptions}, {KeyTopologyManagerPolicyOptions, c.TopologyManagerPolicyOptions}} {
		for name := range t.opts {
			if strings.TrimSpace(name) == "" {
				bad(t.key, "", "an option name must not be empty")
			}
		}
		optionProblems(t.key, t.opts, bad)
	}
	return out
}

// Policy returns the engine's part of the configuration, with
// reserved_system_cpus parsed.
func (c Config) Policy() (policy.Config, error) {
	reserved := cpuset.New()
	if s := strings.TrimSpace(c.ReservedSystemCPUs); s != "" {
		r, err := sysfs.ParseList(s)
		if err != nil {
			return policy.Config{}, &Error{File: c.source, Line: c.lines[KeyReservedSystemCPUs], Key: KeyReservedSystemCPUs,
				Value: c.ReservedSystemCPUs, Msg: `want a Linux CPU list like "0,1" or "0-3,8-11"`}
		}
		reserved = r
	}
	version, err := kubever.Parse(c.KubeletVersion)
	if err != nil {
		return policy.Config{}, &Error{File: c.source, Line: c.lines[KeyKubeletVersion], Key: KeyKubeletVersion,
			Value: c.KubeletVersion, Msg: "want one of " + kubever.Accepted}
	}
	return policy.Config{
		CPUManagerPolicy: c.CPUManagerPolicy,
		ReservedCPUs:     reserved,
		ReservedCount:    c.ReservedCPUCount,
		CPUOptions:       copyMap(c.CPUManagerPolicyOptions),
		TopologyPolicy:   c.TopologyManagerPolicy,
		TopologyScope:    c.TopologyManagerScope,
		TopologyOptions:  copyMap(c.TopologyManagerPolicyOptions),
		MemoryPolicy:     c.MemoryManagerPolicy,
		ReservedMemory:   c.Reservations(),

		PodLevelResourceManagers: c.PodLevelResourceManagers,
		KubeletVersion:           version,
	}, nil
}

// HasReservation reports whether c reserves any CPU for the system, which
// the daemon requires under the static policy.
func (c Config) HasReservation() bool {
	return strings.TrimSpace(c.ReservedSystemCPUs) != "" || c.ReservedCPUCount > 0
}

// Source is the file c was loaded from ("" for a document or a default).
func (c Config) Source() string { return c.source }

// Line is the line of the document on which key (dotted for table
// entries, e.g. "cpu_manager_policy_options.full-pcpus-only") was set, 0
// when it was not set there. For a table key it is the table's header line.
func (c Config) Line(key string) int { return c.lines[key] }

// KeyError builds an *Error about key for a problem found after loading
// (e.g. by policy.New), naming the file and line where key was set.
func (c Config) KeyError(key, value, msg string) *Error {
	line := c.lines[key]
	if line == 0 {
		// An option table entry is reported at its own line when present,
		// else at its table.
		if i := strings.IndexByte(key, '.'); i > 0 {
			line = c.lines[key[:i]]
		}
	}
	return &Error{File: c.source, Line: line, Key: key, Value: value, Msg: msg}
}

// Encode writes c as a TOML document that Load reads back to c; the daemon
// logs it as the effective configuration.
func (c Config) Encode() ([]byte, error) {
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	return b.Bytes(), nil
}

// Summary is a one-line, key-sorted rendering of c for logs.
func (c Config) Summary() string {
	kv := map[string]string{
		KeyCPUManagerPolicy:             c.CPUManagerPolicy,
		KeyCPUManagerPolicyOptions:      mapString(c.CPUManagerPolicyOptions),
		KeyReservedSystemCPUs:           strconv.Quote(c.ReservedSystemCPUs),
		KeyReservedCPUCount:             strconv.Itoa(c.ReservedCPUCount),
		KeyTopologyManagerPolicy:        c.TopologyManagerPolicy,
		KeyTopologyManagerScope:         c.TopologyManagerScope,
		KeyTopologyManagerPolicyOptions: mapString(c.TopologyManagerPolicyOptions),
		KeyMemoryManagerPolicy:          c.MemoryManagerPolicy,
		KeyDisableCPUQuota:              strconv.FormatBool(c.DisableCPUQuota),
		KeyPodLevelResourceManagers:     strconv.FormatBool(c.PodLevelResourceManagers),
		KeyKubeletVersion:               c.KubeletVersion,
		KeyStateDir:                     c.StateDir,
		KeySysfsRoot:                    c.SysfsRoot,
		KeyProcfsRoot:                   c.ProcfsRoot,
		KeyCgroupRoot:                   c.CgroupRoot,
		KeySocketPath:                   c.SocketPath,
		KeyMetricsAddress:               strconv.Quote(c.MetricsAddress),
		KeyReconcilePeriod:              time.Duration(c.ReconcilePeriod).String(),
		KeySharedPoolUpdates:            c.SharedPoolUpdates,
		KeyLogLevel:                     c.LogLevel,
		KeyLogFormat:                    c.LogFormat,
		KeyReservedMemory:               reservedMemoryString(c.ReservedMemory),
		KeyPodResources:                 strconv.FormatBool(c.PodResources),
		KeyPodResourcesSocket:           c.PodResourcesSocket,
		KeyPodResourcesTimeout:          time.Duration(c.PodResourcesTimeout).String(),
	}
	keys := slices.Sorted(maps.Keys(kv))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + kv[k]
	}
	return strings.Join(parts, " ")
}

func mapString(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + m[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// decodeError turns a go-toml error into *Error values with key and line.
func decodeError(err error, file string) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		errs := make([]error, 0, len(strict.Errors))
		for i := range strict.Errors {
			e := &strict.Errors[i]
			line, _ := e.Position()
			key := strings.Join(e.Key(), ".")
			errs = append(errs, &Error{File: file, Line: line, Key: key, Msg: unknownKeyMsg(key)})
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		// go-toml names the Go field ("cannot decode TOML string into
		// struct field config.raw.X of type int"); say it in TOML terms.
		if rest, ok := strings.CutPrefix(msg, "cannot decode TOML "); ok {
			got, _, _ := strings.Cut(rest, " ")
			msg = "wrong type: got a TOML " + got
			if want := expectedType(key); want != "" {
				msg += ", want " + want
			}
		}
		return &Error{File: file, Line: line, Key: key, Msg: msg}
	}
	return &Error{File: file, Msg: err.Error()}
}

// expectedType names the TOML type a key takes, for type errors.
func expectedType(key string) string {
	switch key {
	case KeyReservedCPUCount:
		return "an integer"
	case KeyDisableCPUQuota, KeyPodLevelResourceManagers, KeyPodResources:
		return "a boolean"
	case KeyCPUManagerPolicyOptions, KeyTopologyManagerPolicyOptions:
		return "a table"
	case KeyReconcilePeriod:
		return `a duration string like "10s"`
	case KeyPodResourcesTimeout:
		return `a duration string like "5ms"`
	case KeyReservedMemory:
		return "an array of tables ([[reserved_memory]])"
	}
	if strings.Contains(key, ".") {
		return ""
	}
	return "a string"
}

// keyLines maps every dotted key of a well-formed document to the line
// where it is set; a table header maps its own name.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	var prefix []string
	arrays := map[string]int{} // entries seen per array of tables
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue && e.Kind != unstable.Table && e.Kind != unstable.ArrayTable {
			continue
		}
		var parts []string
		line := 0
		it := e.Key()
		for it.Next() {
			n := it.Node()
			if line == 0 {
				line = p.Shape(n.Raw).Start.Line
			}
			parts = append(parts, string(n.Data))
		}
		if e.Kind == unstable.ArrayTable {
			// Entries are keyed name[i]; the name alone is its first entry.
			name := strings.Join(parts, ".")
			i := arrays[name]
			arrays[name]++
			if i == 0 {
				lines[name] = line
			}
			prefix = []string{name + "[" + strconv.Itoa(i) + "]"}
			lines[prefix[0]] = line
			continue
		}
		if e.Kind != unstable.KeyValue {
			prefix = parts
			lines[strings.Join(parts, ".")] = line
			continue
		}
		full := append(append([]string{}, prefix...), parts...)
		for i := 1; i <= len(full); i++ {
			// A dotted key also sets its tables (a.b = 1 defines a).
			k := strings.Join(full[:i], ".")
			if _, seen := lines[k]; !seen {
				lines[k] = line
			}
		}
	}
	return lines
}

// IgnoredKey is a key a configuration document sets that is no longer
// used: accepted, so that an existing file still loads, and ignored.
type IgnoredKey struct {
	Key  string
	Line int // 0 when unknown
	Why  string
}

// NodeNameOrEnv is node_name, or else the NODE_NAME environment variable
// (the DaemonSet sets it from the downward API).
func (c Config) NodeNameOrEnv() string {
	if c.NodeName != "" {
		return c.NodeName
	}
	return os.Getenv("NODE_NAME")
}
