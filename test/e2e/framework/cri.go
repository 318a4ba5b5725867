package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"
)

// Client is a CRI client for the test runtime: the calls the kubelet makes.
type Client struct {
	conn  *grpc.ClientConn
	RT    cri.RuntimeServiceClient // raw runtime service, for calls not wrapped here
	Image string                   // image every container runs (the busybox test image)
	// Runtime is Containerd (also when empty) or CRIO: it decides the
	// container cgroup names.
	Runtime string
	// CgroupDriver is the runtime's (Cgroupfs when empty): it decides the
	// pod cgroup parent the client sends and the cgroup paths it expects.
	CgroupDriver CgroupDriver
	// NodeMemory is the node's memory in bytes, for the kubelet's
	// Burstable oom_score_adj.
	NodeMemory int64
}

// Dial connects to the CRI socket at addr (a path) and checks the runtime
// answers Version.
func Dial(ctx context.Context, addr, image string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("CRI dial %s: %w", addr, err)
	}
	c := &Client{conn: conn, RT: cri.NewRuntimeServiceClient(conn), Image: image, NodeMemory: NodeMemory()}
	if _, err := c.RT.Version(ctx, &cri.VersionRequest{}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("CRI Version on %s: %w", addr, err)
	}
	return c, nil
}

// DialEnv is Dial to e's runtime, with its image and cgroup naming.
func DialEnv(ctx context.Context, e Env) (*Client, error) {
	c, err := Dial(ctx, e.CRIAddress, e.TestImage)
	if err != nil {
		return nil, err
	}
	c.Runtime = e.Runtime
	c.CgroupDriver = c.RuntimeCgroupDriver(ctx)
	return c, nil
}

// RuntimeCgroupDriver asks the runtime which cgroup driver it uses (CRI
// RuntimeConfig, what the kubelet asks since 1.28): Systemd for containerd
// with SystemdCgroup = true or CRI-O with cgroup_manager = "systemd",
// Cgroupfs otherwise, also when the runtime does not answer the call.
func (c *Client) RuntimeCgroupDriver(ctx context.Context) CgroupDriver {
	r, err := c.RT.RuntimeConfig(ctx, &cri.RuntimeConfigRequest{})
	if err == nil && r.GetLinux().GetCgroupDriver() == cri.CgroupDriver_SYSTEMD {
		return Systemd
	}
	return Cgroupfs
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// PodSpec describes a pod the way the kubelet would run it: its QoS class and
// pod cgroup follow from its containers' resources.
type PodSpec struct {
	Name       string
	Namespace  string
	UID        string            // must be unique per pod: it names the pod cgroup
	Containers []Resources       // for the QoS class and the pod-level resources
	Labels     map[string]string // extra sandbox labels
}

// Pod is a running pod sandbox.
type Pod struct {
	ID     string
	QOS    QOS
	Config *cri.PodSandboxConfig
	// Driver is the cgroup driver its cgroup parent is written for.
	Driver CgroupDriver
}

// CgroupParent is the pod's cgroup parent as sent to the runtime: a path
// (cgroupfs driver) or a slice name (systemd driver).
func (p *Pod) CgroupParent() string { return p.Config.GetLinux().GetCgroupParent() }

// CgroupPath is the pod's cgroup relative to a hierarchy's root (v1) or to
// the unified tree's (v2).
func (p *Pod) CgroupPath() string { return SlicePath(p.CgroupParent()) }

// PodCgroupParent is what the kubelet sends as the cgroup parent of a pod
// of QoS class q with the client's cgroup driver.
func (c *Client) PodCgroupParent(q QOS, uid string) string {
	if c.CgroupDriver == Systemd {
		return PodSlice(q, uid)
	}
	return CgroupParent(q, uid)
}

// RunPod runs a pod sandbox with host networking (no CNI here), its own PID
// namespace per container, and the kubelet's cgroup parent and pod-level
// resources.
func (c *Client) RunPod(ctx context.Context, s PodSpec) (*Pod, error) {
	if s.Namespace == "" {
		s.Namespace = "e2e"
	}
	q := PodQOS(s.Containers...)
	labels := map[string]string{
		"io.kubernetes.pod.name":      s.Name,
		"io.kubernetes.pod.namespace": s.Namespace,
		"io.kubernetes.pod.uid":       s.UID,
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	cfg := &cri.PodSandboxConfig{
		Metadata:    &cri.PodSandboxMetadata{Name: s.Name, Uid: s.UID, Namespace: s.Namespace},
		Labels:      labels,
		Annotations: map[string]string{},
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent: c.PodCgroupParent(q, s.UID),
			Resources:    PodCRI(q, s.Containers...),
			SecurityContext: &cri.LinuxSandboxSecurityContext{
				// No hostname with host networking: runc refuses it without a UTS namespace.
				NamespaceOptions: &cri.NamespaceOption{
					Network: cri.NamespaceMode_NODE,
					Pid:     cri.NamespaceMode_CONTAINER,
					Ipc:     cri.NamespaceMode_POD,
				},
			},
		},
	}
	r, err := c.RT.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return nil, fmt.Errorf("RunPodSandbox %s/%s: %w", s.Namespace, s.Name, err)
	}
	return &Pod{ID: r.PodSandboxId, QOS: q, Config: cfg, Driver: c.CgroupDriver}, nil
}

// RemovePod stops the pod's containers (2 s grace, as the kubelet stops
// them before the sandbox: CRI-O's StopPodSandbox alone waits 30 s for a
// process deaf to SIGTERM), stops and removes the sandbox and then removes
// the pod cgroup in every hierarchy, the kubelet's job that runc leaves
// undone. A pod that is already gone is fine. It tries every step and
// joins the errors.
func (c *Client) RemovePod(ctx context.Context, id, cgroupParent string) error {
	var errs []error
	ctrs, err := c.RT.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{PodSandboxId: id}})
	if err != nil {
		errs = append(errs, fmt.Errorf("ListContainers of pod %s: %w", id, err))
	}
	for _, ct := range ctrs.GetContainers() {
		if ct.GetState() != cri.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if _, err := c.RT.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ct.GetId(), Timeout: 2}); err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, fmt.Errorf("StopContainer %s: %w", ct.GetId(), err))
		}
	}
	if _, err := c.RT.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); err != nil && status.Code(err) != codes.NotFound {
		errs = append(errs, fmt.Errorf("StopPodSandbox %s: %w", id, err))
	}
	if _, err := c.RT.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id}); err != nil && status.Code(err) != codes.NotFound {
		errs = append(errs, fmt.Errorf("RemovePodSandbox %s: %w", id, err))
	}
	if cgroupParent != "" {
		if err := RemovePodCgroups(cgroupParent); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemovePodCgroups removes the pod cgroup directory in every v1 hierarchy
// (or the v2 tree), with the empty cgroups left inside it (e.g. CRI-O's
// conmon cgroups). A pod slice of the systemd driver is stopped through
// systemd first, as the kubelet does. Missing directories are fine; a
// cgroup that still has processes is an error.
func RemovePodCgroups(cgroupParent string) error {
	isSlice := strings.HasPrefix(cgroupParent, "kubepods-") && strings.HasSuffix(cgroupParent, ".slice")
	if !strings.HasPrefix(cgroupParent, "/kubepods/") && !isSlice {
		return fmt.Errorf("refusing to remove cgroup %q outside /kubepods", cgroupParent)
	}
	if isSlice {
		// An unknown or already stopped unit is fine.
		_ = exec.Command("systemctl", "stop", "--quiet", cgroupParent).Run()
	}
	path := SlicePath(cgroupParent)
	pattern := filepath.Join(CgroupRoot, "*") + path
	if Unified {
		pattern = filepath.Join(CgroupRoot, path)
	}
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := removeCgroupTree(d); err != nil {
			errs = append(errs, fmt.Errorf("remove pod cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree rmdirs a cgroup directory after its child cgroups,
// deepest first (a cgroup's files go with its directory).
func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Container is a created container.
type Container struct {
	ID   string
	Name string
	Pod  *Pod
	// CgroupName is the container's cgroup directory under the pod's
	// ("" = ID, containerd's name; CRI-O's is "crio-<ID>").
	CgroupName string
}

// CgroupsPath is the container's cgroup (relative to a v1 hierarchy's root,
// or the v2 tree's), as the runtime names it.
func (ct *Container) CgroupsPath() string {
	leaf := ct.CgroupName
	if leaf == "" {
		leaf = ct.ID
	}
	return ct.Pod.CgroupPath() + "/" + leaf
}

// NewContainer describes a container created in p under id, with the
// runtime's cgroup name: <id> (containerd) or crio-<id> (CRI-O) with the
// cgroupfs driver, the systemd scopes cri-containerd-<id>.scope and
// crio-<id>.scope with the systemd driver.
func (c *Client) NewContainer(id, name string, p *Pod) *Container {
	ct := &Container{ID: id, Name: name, Pod: p}
	ct.CgroupName = ContainerCgroupName(c.Runtime, p.Driver, id)
	return ct
}

// ContainerCgroupName is the cgroup directory name runtime gives container
// id under its pod's cgroup with driver ("" = the id itself).
func ContainerCgroupName(runtime string, driver CgroupDriver, id string) string {
	switch {
	case driver == Systemd && runtime == CRIO:
		return "crio-" + id + ".scope"
	case driver == Systemd:
		return "cri-containerd-" + id + ".scope"
	case runtime == CRIO:
		return "crio-" + id
	}
	return ""
}

// ImageSpec is the image spec of a container running image: CRI-O wants
// the name the user asked for again (UserSpecifiedImage) to check its
// signature policy; containerd ignores it.
func ImageSpec(image string) *cri.ImageSpec {
	return &cri.ImageSpec{Image: image, UserSpecifiedImage: image}
}

// ClampOOMScoreAdj raises a negative oom_score_adj to 0 on CRI-O. This VM
// gives no process CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj
// (Guaranteed: -997) and every such container would fail to start;
// containerd is set up to clamp it itself (restrict_oom_score_adj), CRI-O
// has no such setting.
func (c *Client) ClampOOMScoreAdj(r *cri.LinuxContainerResources) {
	if c.Runtime == CRIO && r != nil && r.OomScoreAdj < 0 {
		r.OomScoreAdj = 0
	}
}

// ContainerOption changes a container's configuration before creation.
type ContainerOption func(*cri.ContainerConfig)

// WithCommand runs cmd instead of the image's default command.
func WithCommand(cmd ...string) ContainerOption {
	return func(cfg *cri.ContainerConfig) { cfg.Command = cmd }
}

// WithAttempt sets the container's attempt number, which the kubelet
// raises when it creates a container of the same name again (a restart,
// or a retry after a failed start); the runtimes name containers by it.
func WithAttempt(n uint32) ContainerOption {
	return func(cfg *cri.ContainerConfig) { cfg.Metadata.Attempt = n }
}

// CreateContainer creates (does not start) a container running the test
// image's default command (sleep until SIGTERM) with the kubelet's resources
// for r in the pod's QoS class.
func (c *Client) CreateContainer(ctx context.Context, p *Pod, name string, r Resources, opts ...ContainerOption) (*Container, error) {
	cfg := &cri.ContainerConfig{
		Metadata:    &cri.ContainerMetadata{Name: name},
		Image:       ImageSpec(c.Image),
		Labels:      map[string]string{"io.kubernetes.container.name": name},
		Annotations: map[string]string{},
		Linux: &cri.LinuxContainerConfig{
			Resources: r.CRIOnNode(p.QOS, c.NodeMemory),
			// The zero NamespaceMode is POD: without repeating the pod's
			// options the container would share the pause container's PID
			// namespace and /proc/1 would not be its own process.
			SecurityContext: &cri.LinuxContainerSecurityContext{
				NamespaceOptions: p.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
			},
		},
	}
	c.ClampOOMScoreAdj(cfg.Linux.Resources)
	for _, o := range opts {
		o(cfg)
	}
	resp, err := c.RT.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config})
	if err != nil {
		return nil, fmt.Errorf("CreateContainer %s in pod %s: %w", name, p.Config.GetMetadata().GetName(), err)
	}
	return c.NewContainer(resp.ContainerId, name, p), nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, ct *Container) error {
	if _, err := c.RT.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ct.ID}); err != nil {
		return fmt.Errorf("StartContainer %s: %w", ct.Name, err)
	}
	return nil
}

// RunContainer creates and starts a container.
func (c *Client) RunContainer(ctx context.Context, p *Pod, name string, r Resources, opts ...ContainerOption) (*Container, error) {
	ct, err := c.CreateContainer(ctx, p, name, r, opts...)
	if err != nil {
		return nil, err
	}
	return ct, c.StartContainer(ctx, ct)
}

// StopContainer stops a container (SIGTERM, the test image exits at once).
func (c *Client) StopContainer(ctx context.Context, ct *Container) error {
	if _, err := c.RT.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ct.ID, Timeout: 10}); err != nil {
		return fmt.Errorf("StopContainer %s: %w", ct.Name, err)
	}
	return nil
}

// RemoveContainer removes a (stopped) container.
func (c *Client) RemoveContainer(ctx context.Context, ct *Container) error {
	if _, err := c.RT.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: ct.ID}); err != nil {
		return fmt.Errorf("RemoveContainer %s: %w", ct.Name, err)
	}
	return nil
}

// ContainerCount is the number of containers the runtime knows, in any state.
func (c *Client) ContainerCount(ctx context.Context) (int, error) {
	r, err := c.RT.ListContainers(ctx, &cri.ListContainersRequest{})
	if err != nil {
		return 0, fmt.Errorf("ListContainers: %w", err)
	}
	return len(r.Containers), nil
}

// Exec runs cmd in the container and returns its stdout; a non-zero exit is
// an error carrying stderr.
func (c *Client) Exec(ctx context.Context, ct *Container, cmd ...string) (string, error) {
	r, err := c.RT.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: ct.ID, Cmd: cmd, Timeout: 20})
	if err != nil {
		return "", fmt.Errorf("ExecSync %v in %s: %w", cmd, ct.Name, err)
	}
	if r.ExitCode != 0 {
		return "", fmt.Errorf("ExecSync %v in %s: exit %d: %s", cmd, ct.Name, r.ExitCode, r.Stderr)
	}
	return string(r.Stdout), nil
}

// CPUsAllowed returns Cpus_allowed_list of PID 1 inside the container: the
// CPUs the workload can really run on.
func (c *Client) CPUsAllowed(ctx context.Context, ct *Container) (cpuset.CPUSet, error) {
	out, err := c.Exec(ctx, ct, "cat", "/proc/1/status")
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	return ParseStatusCPUs(out)
}

// ParseStatusCPUs extracts Cpus_allowed_list from a /proc/<pid>/status text.
func ParseStatusCPUs(status string) (cpuset.CPUSet, error) {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			s, err := cpuset.Parse(strings.TrimSpace(v))
			if err != nil {
				return cpuset.CPUSet{}, fmt.Errorf("parse Cpus_allowed_list %q: %w", strings.TrimSpace(v), err)
			}
			return s, nil
		}
	}
	return cpuset.CPUSet{}, errors.New("no Cpus_allowed_list line in /proc/1/status")
}

// ListPods returns the pod sandboxes (in any state) carrying every label in sel.
func (c *Client) ListPods(ctx context.Context, sel map[string]string) ([]*cri.PodSandbox, error) {
	r, err := c.RT.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{Filter: &cri.PodSandboxFilter{LabelSelector: sel}})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	return r.Items, nil
}
