package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nri-cpualign/nri-cpualign/internal/request"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// cmdSimulate is `nri-cpualign simulate --sysfs-root DIR [--config
// FILE.toml]`: the placement engine on a (fake) machine, driven by JSON
// Lines on stdin, one JSON line out per line in, every answer flushed
// before the command waits for more input. The protocol is documented in the README ("Simulate: where would this pod
// land?").
func cmdSimulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("sysfs-root", "", "directory that plays /sys (required; read only)")
	procRoot := fs.String("procfs-root", "", "directory that plays /proc for the GPUs of devices and env (default: the configuration's procfs_root, /proc)")
	cfgPath := fs.String("config", "", "the daemon's TOML configuration (default: built-in defaults)")
	logLevel := fs.String("log-level", "warning", "log level of the messages on stderr")
	kubeletVersion := fs.String("kubelet-version", "", "the kubelet release whose rules to follow: "+kubever.Accepted+
		" (default: the configuration's kubelet_version); run twice to see what an upgrade moves")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *root == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: nri-cpualign simulate --sysfs-root DIR [--procfs-root DIR] [--config FILE.toml] [--kubelet-version 1.37|1.38] < requests.jsonl")
		return 2
	}
	var kv *kubever.Version
	if *kubeletVersion != "" {
		v, err := kubever.Parse(*kubeletVersion)
		if err != nil {
			fmt.Fprintf(stderr, "nri-cpualign simulate: --kubelet-version %q: %v\n", *kubeletVersion, err)
			return 2
		}
		kv = &v
	}
	log := logrus.New()
	log.SetOutput(stderr)
	if lvl, err := logrus.ParseLevel(*logLevel); err == nil {
		log.SetLevel(lvl)
	} else {
		fmt.Fprintf(stderr, "nri-cpualign simulate: --log-level %q: %v\n", *logLevel, err)
		return 2
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	defer out.Flush()
	var buf []byte
	emit := func(v any) {
		buf = append(appendAnswer(buf[:0], v), '\n')
		out.Write(buf)
	}

	cfg := config.Default()
	if *cfgPath != "" {
		c, err := config.LoadFile(*cfgPath)
		if err != nil {
			emit(errorLine{Error: err.Error(), Reason: "InvalidConfig"})
			return 1
		}
		cfg = c
	}
	pcfg, err := cfg.Policy()
	if err != nil {
		emit(errorLine{Error: err.Error(), Reason: "InvalidConfig"})
		return 1
	}
	if kv != nil {
		pcfg.KubeletVersion = *kv
	}
	topo, warns, err := sysfs.ReadWithWarnings(*root)
	if err != nil {
		emit(errorLine{Error: err.Error(), Reason: reasonOf(err, "TopologyDiscoveryError")})
		return 1
	}
	if pcfg.MemoryPolicy == policy.MemoryPolicyStatic {
		nodes, err := sysfs.ReadMemory(*root)
		if err != nil {
			emit(errorLine{Error: err.Error(), Reason: reasonOf(err, "TopologyDiscoveryError")})
			return 1
		}
		pcfg.MachineMemory = sysfs.Capacities(nodes)
	}
	for _, w := range warns {
		log.WithField("files", w.Files).Warn("simulate: " + w.Msg)
	}
	engine, err := policy.New(topo, pcfg)
	if err != nil {
		var ce *policy.ConfigError
		if errors.As(err, &ce) {
			err = cfg.KeyError(ce.Key, "", ce.Err.Error())
		}
		emit(errorLine{Error: err.Error(), Reason: "InvalidConfig"})
		return 1
	}
	log.WithFields(logrus.Fields{
		"sysfs_root": *root, "cpus": topo.NumCPUs(), "numa_nodes": topo.NUMANodes(),
		"cpu_manager_policy": pcfg.CPUManagerPolicy, "topology_manager_policy": engine.Config().TopologyPolicy,
		"scope": engine.Config().TopologyScope, "reserved": engine.Reserved().String(),
		"kubelet_version": engine.Config().KubeletVersion.String(),
	}).Info("simulate: ready")

	procfs := cfg.ProcfsRoot
	if *procRoot != "" {
		procfs = *procRoot
	}
	sim := &simulator{engine: engine, state: engine.NewState(), log: log, sysfsRoot: *root, procfsRoot: procfs}
	in := bufio.NewReaderSize(stdin, 64<<10)
	for n := 1; ; n++ {
		if in.Buffered() == 0 {
			// The next read may wait: the answers so far go out first. A
			// trace on a pipe or file is answered in large writes.
			out.Flush()
		}
		// The line is read in place (ReadBytes copied every line); one
		// longer than the buffer is gathered into a copy.
		line, err := in.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = in.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) == 0 && err != nil {
			if !errors.Is(err, io.EOF) {
				log.WithError(err).Error("simulate: reading stdin")
				return 1
			}
			return 0
		}
		emit(sim.handle(n, bytes.TrimSpace(line)))
	}
}

// simulator holds the one piece of mutable state of a simulate run.
type simulator struct {
	engine *policy.Engine
	state  policy.State
	log    *logrus.Logger
	// sysfsRoot and procfsRoot are where the devices of a line's devices,
	// env and mounts are looked up, as the daemon looks them up.
	sysfsRoot, procfsRoot string
	// slow decodes every line with encoding/json (tests: the reference
	// the fast parser is compared with).
	slow bool
}

// hintJSON is a hint on the wire; NUMA null or [] = any node.
type hintJSON struct {
	NUMA      []int `json:"numa"`
	Preferred bool  `json:"preferred"`
}

// deviceProvider names the hints device_numa gives, as the daemon names
// its device hint provider.
const deviceProvider = "devices"

// requestLine is every field an input line may carry.
type requestLine struct {
	Op                 string `json:"op"`
	Pod                string `json:"pod"`
	Container          string `json:"container"`
	CPUs               string `json:"cpus"`
	QoS                string `json:"qos"`
	CPURequestMilli    int64  `json:"cpu_request_milli"`
	CPULimitMilli      int64  `json:"cpu_limit_milli"`
	PodCPURequestMilli int64  `json:"pod_cpu_request_milli"`
	// PodCPULimitMilli is the pod's CPU limit (spec.resources), with
	// pod_cpu_request_milli the budget of a pod-level pod under
	// pod_level_resource_managers; 0 = none.
	PodCPULimitMilli int64                 `json:"pod_cpu_limit_milli"`
	ContainerType    string                `json:"container_type"`
	Hints            map[string][]hintJSON `json:"hints"`
	AffinityOverride *hintJSON             `json:"affinity_override"`
	// DeviceNUMA is the NUMA nodes of the container's devices, as the
	// daemon reads them from sysfs: the "devices" provider's hints.
	DeviceNUMA []int `json:"device_numa"`
	// Devices, Env and Mounts are the container's device nodes,
	// variables and mounts as the runtime hands them to the plugin: the
	// daemon's device lookup (sysfs, procfs, DRA metadata) gives the
	// "devices" provider's hints from them.
	Devices []deviceJSON `json:"devices"`
	Env     []string     `json:"env"`
	Mounts  []mountJSON  `json:"mounts"`
	// Memory and PodMemory are memory and hugepage limits by resource
	// name ("memory", "hugepages-2Mi") as quantities ("4Gi"), for the
	// memory manager (memory_manager_policy Static).
	Memory    map[string]string `json:"memory"`
	PodMemory map[string]string `json:"pod_memory"`
}

// deviceJSON is a device node as the runtime lists it: type "c" or
// "b", major and minor ("/dev/nvidia0", "c", 195, 0).
type deviceJSON struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

// mountJSON is a mount as the runtime lists it (a DRA claim's metadata:
// source on the host, destination under /var/run/dra-device-attributes).
type mountJSON struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// locatedJSON is a device that gave NUMA nodes, as /state shows it.
type locatedJSON struct {
	Device string `json:"device"`
	NUMA   []int  `json:"numa"`
}

// devicesFound is what the device lookup of a line found.
type devicesFound struct {
	Located []locatedJSON
	// Err is why the container got no device hint (the daemon's warning).
	Err string
}

// affinityJSON is the merged hint on the wire; NUMA null = any node.
type affinityJSON struct {
	NUMA      []int `json:"numa"`
	Preferred bool  `json:"preferred"`
}

type errorLine struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"`
	Line   int    `json:"line,omitempty"`
}

type containerError struct {
	Pod         string        `json:"pod"`
	Container   string        `json:"container"`
	Error       string        `json:"error"`
	Reason      string        `json:"reason"`
	Affinity    *affinityJSON `json:"affinity,omitempty"`
	Devices     []locatedJSON `json:"devices,omitempty"`
	DeviceError string        `json:"device_error,omitempty"`
}

type assignResult struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	Exclusive bool   `json:"exclusive"`
}

type addResult struct {
	Pod       string       `json:"pod"`
	Container string       `json:"container"`
	CPUs      string       `json:"cpus"`
	Mems      string       `json:"mems"`
	Exclusive bool         `json:"exclusive"`
	Affinity  affinityJSON `json:"affinity"`
	// L3 is the uncore caches of an exclusive container's CPUs, shown
	// under strict-align-cpus-by-uncorecache only.
	L3 []int `json:"l3,omitempty"`
	// PodPool: a shared container of a pod-level pod, on its pod's
	// private pool (pod_level_resource_managers).
	PodPool bool `json:"pod_pool,omitempty"`
	// Devices and DeviceError: what the line's devices, env and mounts
	// gave (the devices with NUMA nodes), or why they gave no hint.
	Devices     []locatedJSON `json:"devices,omitempty"`
	DeviceError string        `json:"device_error,omitempty"`
}

type hintsResult struct {
	Pod       string                `json:"pod"`
	Container string                `json:"container"`
	Hints     map[string][]hintJSON `json:"hints"`
	// StrictUncore is strict-align-cpus-by-uncorecache when on: the CPU
	// hints then leave out NUMA nodes no strict placement fits in.
	StrictUncore string        `json:"strict_align_cpus_by_uncorecache,omitempty"`
	Devices      []locatedJSON `json:"devices,omitempty"`
	DeviceError  string        `json:"device_error,omitempty"`
}

type removeResult struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Removed   bool   `json:"removed"`
}

type stateResult struct {
	Shared      string                       `json:"shared"`
	Reserved    string                       `json:"reserved"`
	Assignments map[string]map[string]string `json:"assignments"`
	// Baseline: the containers a resize changed, with the CPUs they were
	// admitted with.
	Baseline map[string]map[string]string `json:"baseline,omitempty"`
	// Memory is the memory manager's state (the checkpoint's form:
	// machineState per node, entries per pod and container), under
	// memory_manager_policy Static only.
	Memory json.RawMessage `json:"memory,omitempty"`
	// PodShared: the shared containers of each pod-level pod, which run
	// on its block less its exclusive slices (assignments' "@pod").
	PodShared map[string][]string `json:"pod_shared,omitempty"`
}

type resizeResult struct {
	Pod       string       `json:"pod"`
	Container string       `json:"container"`
	Kind      string       `json:"kind"` // upsize, downsize, none
	CPUs      string       `json:"cpus"`
	Mems      string       `json:"mems"`
	Exclusive bool         `json:"exclusive"`
	Baseline  string       `json:"baseline,omitempty"`
	Added     string       `json:"added,omitempty"`
	Released  string       `json:"released,omitempty"`
	Affinity  affinityJSON `json:"affinity"`
}

func toAffinity(h hints.Hint) affinityJSON {
	if h.Affinity == 0 {
		return affinityJSON{Preferred: h.Preferred}
	}
	return affinityJSON{NUMA: h.Affinity.Nodes(), Preferred: h.Preferred}
}

// toHint checks node ids (a Mask holds 0-63; the engine then checks them
// against the machine) and converts.
func toHint(h hintJSON, field string) (hints.Hint, error) {
	for _, n := range h.NUMA {
		if n < 0 || n >= hints.MaxNUMANodes {
			return hints.Hint{}, fmt.Errorf("%s: NUMA node %d out of range 0-%d", field, n, hints.MaxNUMANodes-1)
		}
	}
	return hints.Hint{Affinity: hints.NewMask(h.NUMA...), Preferred: h.Preferred}, nil
}

// reasonOf is the Reason() word of the first error in err's chain that has
// one, else def.
func reasonOf(err error, def string) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		return r.Reason()
	}
	return def
}

// handle answers one input line (n is its 1-based number).
func (s *simulator) handle(n int, line []byte) any {
	if len(line) == 0 {
		return errorLine{Error: "empty line: want a JSON object", Line: n}
	}
	var req requestLine
	if s.slow || !parseFast(line, &req) {
		req = requestLine{}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return errorLine{Error: "not a valid request: " + err.Error(), Line: n}
		}
		// dec.More is false before a stray '}' or ']': check the rest itself.
		if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
			return errorLine{Error: fmt.Sprintf("not a valid request: %q after the JSON object; want one JSON object per line", rest), Line: n}
		}
	}
	switch req.Op {
	case "assign":
		return s.assign(req)
	case "add":
		return s.add(req)
	case "hints":
		return s.hints(req)
	case "resize":
		return s.resize(req)
	case "remove":
		s.state = s.engine.Remove(s.state, req.Pod, req.Container)
		return removeResult{Pod: req.Pod, Container: req.Container, Removed: true}
	case "remove_pod":
		// The pod's end: every container, and a pod-level pod's block.
		if req.Pod == "" {
			return errorLine{Error: `remove_pod needs "pod"`, Line: n}
		}
		s.state = s.engine.RemovePod(s.state, req.Pod)
		return removeResult{Pod: req.Pod, Removed: true}
	case "state":
		return s.snapshot()
	case "":
		return errorLine{Error: `missing "op" (want assign, add, hints, resize, remove, remove_pod or state)`, Line: n}
	default:
		return errorLine{Error: fmt.Sprintf("unknown op %q (want assign, add, hints, resize, remove, remove_pod or state)", req.Op), Line: n}
	}
}

func (s *simulator) assign(req requestLine) any {
	fail := func(err error) any {
		return containerError{Pod: req.Pod, Container: req.Container, Error: err.Error(), Reason: reasonOf(err, allocator.ReasonInvalidState)}
	}
	if req.Pod == "" || req.Container == "" {
		return fail(&allocator.InvalidStateError{Pod: req.Pod, Container: req.Container, Msg: "assign needs pod and container"})
	}
	cpus, err := topology.ParseList(req.CPUs)
	if err != nil || cpus.IsEmpty() {
		return fail(&allocator.InvalidStateError{Pod: req.Pod, Container: req.Container, Msg: fmt.Sprintf("cpus %q is not a non-empty Linux CPU list", req.CPUs)})
	}
	next, err := s.engine.Assign(s.state, req.Pod, req.Container, cpus)
	if err != nil {
		return fail(err)
	}
	s.state = next
	return assignResult{Pod: req.Pod, Container: req.Container, CPUs: cpus.String(), Exclusive: true}
}

// request converts an add or hints line to the engine's Request, with
// what its devices, env and mounts gave.
func (s *simulator) request(req requestLine) (policy.Request, devicesFound, error) {
	r, err := s.requestHints(req)
	if err != nil || (len(req.Devices) == 0 && len(req.Env) == 0 && len(req.Mounts) == 0) {
		return r, devicesFound{}, err
	}
	bad := func(format string, args ...any) error {
		return &policy.RequestError{Pod: req.Pod, Container: req.Container, Field: "devices", Msg: fmt.Sprintf(format, args...)}
	}
	if len(req.DeviceNUMA) > 0 {
		return r, devicesFound{}, bad("device_numa and devices/env/mounts both give the device provider's hints")
	}
	if _, dup := r.Hints[deviceProvider]; dup {
		return r, devicesFound{}, bad("hints.%s and devices/env/mounts both give the device provider's hints", deviceProvider)
	}
	ctr := &api.Container{Env: req.Env, Linux: &api.LinuxContainer{}}
	for i, d := range req.Devices {
		if d.Type != "c" && d.Type != "b" {
			return r, devicesFound{}, bad("devices[%d]: type %q: want \"c\" or \"b\"", i, d.Type)
		}
		ctr.Linux.Devices = append(ctr.Linux.Devices, &api.LinuxDevice{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor})
	}
	for _, m := range req.Mounts {
		ctr.Mounts = append(ctr.Mounts, &api.Mount{Source: m.Source, Destination: m.Destination, Type: "bind"})
	}
	nodes, located, skipped, err := request.LocateDevices(s.sysfsRoot, s.procfsRoot, ctr)
	for _, v := range skipped {
		s.log.WithField("value", v).Warn("simulate: device plugin variable ignored for device hints")
	}
	if err != nil {
		s.log.WithError(err).Warn("simulate: cannot read the NUMA node of a device; no device hint")
		return r, devicesFound{Err: err.Error()}, nil
	}
	found := devicesFound{}
	for _, d := range located {
		found.Located = append(found.Located, locatedJSON{Device: d.Device, NUMA: d.NUMA})
	}
	if len(nodes) > 0 {
		if r.Hints == nil {
			r.Hints = map[string][]hints.Hint{}
		}
		r.Hints[deviceProvider] = s.engine.DeviceHints(nodes)
	}
	return r, found, nil
}

// requestHints converts the line's request and given hints.
func (s *simulator) requestHints(req requestLine) (policy.Request, error) {
	bad := func(field, format string, args ...any) error {
		return &policy.RequestError{Pod: req.Pod, Container: req.Container, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	r := policy.Request{
		Pod: req.Pod, Container: req.Container, QoS: policy.QoS(req.QoS),
		CPURequestMilli: req.CPURequestMilli, CPULimitMilli: req.CPULimitMilli,
		PodCPURequestMilli: req.PodCPURequestMilli, PodCPULimitMilli: req.PodCPULimitMilli,
	}
	switch req.ContainerType {
	case "", "app":
		r.Type = allocator.App
	case "init":
		r.Type = allocator.Init
	case "sidecar":
		r.Type = allocator.Sidecar
	default:
		return r, bad("container_type", "%q is not one of app, init, sidecar", req.ContainerType)
	}
	if req.Hints != nil {
		r.Hints = make(map[string][]hints.Hint, len(req.Hints))
		for name, list := range req.Hints {
			if list == nil {
				r.Hints[name] = nil
				continue
			}
			hs := make([]hints.Hint, 0, len(list))
			for i, h := range list {
				hint, err := toHint(h, fmt.Sprintf("hints.%s[%d]", name, i))
				if err != nil {
					return r, bad("hints", "%v", err)
				}
				hs = append(hs, hint)
			}
			r.Hints[name] = hs
		}
	}
	if len(req.DeviceNUMA) > 0 {
		if _, dup := r.Hints[deviceProvider]; dup {
			return r, bad("device_numa", "device_numa and hints.%s both give the device provider's hints", deviceProvider)
		}
		for i, n := range req.DeviceNUMA {
			if n < 0 || n >= hints.MaxNUMANodes {
				return r, bad("device_numa", "device_numa[%d]: NUMA node %d out of range 0-%d", i, n, hints.MaxNUMANodes-1)
			}
		}
		if r.Hints == nil {
			r.Hints = map[string][]hints.Hint{}
		}
		r.Hints[deviceProvider] = s.engine.DeviceHints(req.DeviceNUMA)
	}
	if req.AffinityOverride != nil {
		h, err := toHint(*req.AffinityOverride, "affinity_override")
		if err != nil {
			return r, bad("affinity_override", "%v", err)
		}
		r.AffinityOverride = &h
	}
	var err error
	if r.Memory, err = memoryRequest(req.Memory); err != nil {
		return r, bad("memory", "%v", err)
	}
	if r.PodMemory, err = memoryRequest(req.PodMemory); err != nil {
		return r, bad("pod_memory", "%v", err)
	}
	return r, nil
}

// memoryRequest reads a line's memory field: resource name -> quantity.
func memoryRequest(in map[string]string) (memorymanager.Request, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(memorymanager.Request, len(in))
	for name, v := range in {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a quantity like \"4Gi\"", name, v)
		}
		n, ok := q.AsInt64()
		if !ok || n < 0 {
			return nil, fmt.Errorf("%s: %q is not a whole number of bytes >= 0", name, v)
		}
		out[memorymanager.Resource(name)] = uint64(n)
	}
	return out, nil
}

func (s *simulator) add(req requestLine) any {
	r, found, err := s.request(req)
	if err == nil {
		var next policy.State
		var d policy.Decision
		next, d, err = s.engine.Add(s.state, r)
		if err == nil {
			s.state = next
			var cpus string
			if d.Exclusive || d.PodPool || s.slow {
				cpus = cpuList(d.CPUs)
			} else {
				// A shared-pool container's CPUs are the engine's
				// SharedMask (Engine.Add, step 5), which the state holds
				// as a bitmap: printing it skips walking a map of ~250
				// CPUs. The slow path (tests) prints d.CPUs.
				cpus = s.engine.SharedMask(next).String()
			}
			res := addResult{Pod: req.Pod, Container: req.Container, CPUs: cpus, Mems: cpuList(d.Mems),
				Exclusive: d.Exclusive, Affinity: toAffinity(d.Affinity), PodPool: d.PodPool,
				Devices: found.Located, DeviceError: found.Err}
			if s.log.IsLevelEnabled(logrus.DebugLevel) { // the fields cost more than the decision
				s.log.WithFields(logrus.Fields{"pod": req.Pod, "container": req.Container, "cpus": res.CPUs,
					"mems": res.Mems, "exclusive": d.Exclusive, "numa": d.Affinity.Affinity.String(), "score": d.Affinity.Score}).Debug("simulate: add")
			}
			if d.Exclusive && s.engine.StrictUncore() != allocator.UncoreStrictOff {
				res.L3 = s.engine.Topology().L3GroupsOf(d.CPUs)
			}
			return res
		}
	}
	out := containerError{Pod: req.Pod, Container: req.Container, Error: err.Error(), Reason: reasonOf(err, "Error"),
		Devices: found.Located, DeviceError: found.Err}
	var tae *hints.TopologyAffinityError
	if errors.As(err, &tae) {
		a := toAffinity(tae.Hint)
		out.Affinity = &a
	}
	if s.log.IsLevelEnabled(logrus.DebugLevel) {
		s.log.WithFields(logrus.Fields{"pod": req.Pod, "container": req.Container, "reason": out.Reason}).Debug("simulate: add rejected")
	}
	return out
}

func (s *simulator) hints(req requestLine) any {
	r, found, err := s.request(req)
	if err != nil {
		return containerError{Pod: req.Pod, Container: req.Container, Error: err.Error(), Reason: reasonOf(err, "Error")}
	}
	if err := s.engine.CheckRequest(r); err != nil {
		return containerError{Pod: req.Pod, Container: req.Container, Error: err.Error(), Reason: reasonOf(err, "Error")}
	}
	out := hintsResult{Pod: req.Pod, Container: req.Container, Hints: map[string][]hintJSON{},
		Devices: found.Located, DeviceError: found.Err}
	if u := s.engine.StrictUncore(); u != allocator.UncoreStrictOff {
		out.StrictUncore = u.String()
	}
	providers := s.engine.Hints(s.state, r)
	fromDevices := len(req.DeviceNUMA) > 0 || len(req.Devices) > 0 || len(req.Env) > 0 || len(req.Mounts) > 0
	if dh, ok := r.Hints[deviceProvider]; ok && fromDevices {
		providers[deviceProvider] = dh
	}
	for name, list := range providers {
		if list == nil {
			out.Hints[name] = nil
			continue
		}
		hs := make([]hintJSON, 0, len(list))
		for _, h := range list {
			hs = append(hs, hintJSON(toAffinity(h)))
		}
		out.Hints[name] = hs
	}
	return out
}

func (s *simulator) snapshot() any {
	snap := s.engine.Snapshot(s.state)
	return stateResult{Shared: snap.Shared, Reserved: snap.Reserved, Assignments: snap.Assignments, Baseline: snap.Baseline, Memory: snap.Memory, PodShared: snap.PodShared}
}

// resize is an in-place resize of an existing container to the line's
// request (Engine.Resize); a downsize gives its CPUs back at once (the
// daemon waits for the runtime's PostUpdateContainer).
func (s *simulator) resize(req requestLine) any {
	r, _, err := s.request(req)
	if err == nil {
		var next policy.State
		var d policy.ResizeDecision
		next, d, err = s.engine.Resize(s.state, r)
		if err == nil {
			s.state = next
			res := resizeResult{Pod: req.Pod, Container: req.Container, Kind: d.Kind, CPUs: cpuList(d.CPUs), Mems: cpuList(d.Mems),
				Exclusive: d.Exclusive, Affinity: toAffinity(d.Affinity)}
			if d.Exclusive {
				res.Baseline, res.Added, res.Released = d.Baseline.String(), d.Added.String(), d.Released.String()
			}
			s.log.WithFields(logrus.Fields{"pod": req.Pod, "container": req.Container, "cpus": res.CPUs, "kind": d.Kind}).Debug("simulate: resize")
			return res
		}
	}
	out := containerError{Pod: req.Pod, Container: req.Container, Error: err.Error(), Reason: reasonOf(err, "Error")}
	var tae *hints.TopologyAffinityError
	if errors.As(err, &tae) {
		a := toAffinity(tae.Hint)
		out.Affinity = &a
	}
	return out
}
