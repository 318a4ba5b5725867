//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// repoRoot is the repository, seen from the package directory go test runs in.
const repoRoot = "../.."

// deployment is what the spec takes from deploy/: the DaemonSet, its one
// container, and the ConfigMap's files.
type deployment struct {
	ds        *appsv1.DaemonSet
	ctr       corev1.Container
	configMap map[string]string
}

func readDeployment() deployment {
	GinkgoHelper()
	var d deployment
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/daemonset.yaml"))
	Expect(err).NotTo(HaveOccurred())
	d.ds = &appsv1.DaemonSet{}
	Expect(yaml.UnmarshalStrict(data, d.ds)).To(Succeed())
	Expect(d.ds.Spec.Template.Spec.Containers).To(HaveLen(1))
	d.ctr = d.ds.Spec.Template.Spec.Containers[0]
	// kustomize's configMapGenerator makes the ConfigMap of this file.
	data, err = os.ReadFile(filepath.Join(repoRoot, "deploy/config.toml"))
	Expect(err).NotTo(HaveOccurred())
	d.configMap = map[string]string{"config.toml": string(data)}
	return d
}

// guaranteedResources turns the container's requests and limits into the
// suite's Resources (which give the kubelet's CRI values and cgroup parent).
func guaranteedResources(c corev1.Container) framework.Resources {
	req, lim := c.Resources.Requests, c.Resources.Limits
	return framework.Resources{
		CPURequestMilli: req.Cpu().MilliValue(), CPULimitMilli: lim.Cpu().MilliValue(),
		MemRequest: req.Memory().Value(), MemLimit: lim.Memory().Value(),
	}
}

// pluginProcesses lists the pids of processes whose executable is named
// nri-cpualign: a binary-started plugin from another spec or `make demo`
// (which would fight the pod's plugin over every cpuset), or the pod's own.
func pluginProcesses() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && path.Base(strings.TrimSuffix(exe, " (deleted)")) == "nri-cpualign" && !framework.ProcessGone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// crioStore is the containers-storage reference of the CRI-O instance
// configured in conf ("overlay@<root>+<runroot>"), where skopeo puts images
// for it.
func crioStore(conf string) (string, error) {
	b, err := os.ReadFile(conf)
	if err != nil {
		return "", err
	}
	vals := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		if _, seen := vals[k]; !seen {
			vals[k] = v
		}
	}
	driver, root, runroot := vals["storage_driver"], vals["root"], vals["runroot"]
	if driver == "" || root == "" || runroot == "" {
		return "", fmt.Errorf("%s: no storage_driver, root and runroot", conf)
	}
	return driver + "@" + root + "+" + runroot, nil
}

// procStatusField returns one field of /proc/<pid>/status.
func procStatusField(pid int, field string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// The same plugin as the binary-started specs, now from the image that
// `make image` builds, run the way deploy/daemonset.yaml runs it: a
// Guaranteed 100m pod on the host network with the DaemonSet's args,
// mounts, security context and the ConfigMap's config.
var _ = Describe("the image from make image, run as the DaemonSet's pod on "+RuntimeName, Ordered, Serial, func() {
	var (
		dep          deployment
		pods         = &Pods{}
		stateDir     string
		logDir       string
		imageName    string
		plugin       *framework.Container
		metricsURL   string
		sharedBefore *framework.Container
	)

	pluginLog := func() string {
		b, _ := os.ReadFile(filepath.Join(logDir, "nri-cpualign.log"))
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		return strings.Join(lines[max(0, len(lines)-60):], "\n")
	}

	get := func(ctx context.Context, path string) (int, []byte, error) {
		return framework.HTTPGet(ctx, metricsURL+path)
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		dep = readDeployment()
		imageName = dep.ctr.Image

		// 1. The archive, built by `make image` exactly as a user would,
		// and checked to carry the name the DaemonSet runs.
		archive := filepath.Join(WorkDir, "nri-cpualign-image.tar")
		cmd := exec.CommandContext(ctx, "make", "-s", "-C", repoRoot, "image", "IMAGE_ARCHIVE="+archive)
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "make image:\n%s", out)
		Expect(string(out)).To(ContainSubstring("("+imageName+")"), "make image built another name than the DaemonSet's image")

		// 2. Imported into the runtime as on a node without a registry:
		// containerd with ctr (CRI sees it once it labels it managed),
		// CRI-O with skopeo into its containers-storage, the way
		// setup-crio.sh imports the test images.
		if Env.IsCRIO() {
			store, err := crioStore(Env.CrioConfig)
			Expect(err).NotTo(HaveOccurred())
			out, err = exec.CommandContext(ctx, "skopeo", "copy", "-q", "oci-archive:"+archive, "containers-storage:["+store+"]"+imageName).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), "skopeo copy into %s:\n%s", store, out)
		} else {
			out, err = exec.CommandContext(ctx, Env.Ctr, "-a", Env.ContainerdAddress, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), "ctr images import:\n%s", out)
		}
		conn, err := grpc.NewClient("unix://"+Env.CRIAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		images := cri.NewImageServiceClient(conn)
		Eventually(func(g Gomega) {
			st, err := images.ImageStatus(ctx, &cri.ImageStatusRequest{Image: &cri.ImageSpec{Image: imageName}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.GetImage()).NotTo(BeNil(), "CRI does not see %s yet", imageName)
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())

		// 3. No binary-started plugin may be connected: two plugins named
		// cpualign both setting cpusets make every CreateContainer fail.
		// (A plugin another spec just killed may take a moment to go.)
		Eventually(pluginProcesses).WithContext(ctx).WithTimeout(15*time.Second).Should(BeEmpty(),
			"an nri-cpualign process is still running (another spec's plugin, or `make demo`: stop it with make demo-down)")

		// 4. The pod, as the kubelet would run the DaemonSet's pod template.
		podSpec := dep.ds.Spec.Template.Spec
		Expect(podSpec.HostNetwork).To(BeTrue())
		res := guaranteedResources(dep.ctr)
		q := framework.PodQOS(res)
		Expect(q).To(Equal(framework.Guaranteed), "the DaemonSet's pod must be Guaranteed")
		stateDir = filepath.Join(WorkDir, "image-state")
		logDir = filepath.Join(WorkDir, "image-logs")
		cfgDir := filepath.Join(WorkDir, "image-config")
		// No kubelet runs here: its pod-resources and plugin directories
		// are empty ones, as DirectoryOrCreate makes them on such a node.
		podResDir := filepath.Join(WorkDir, "image-kubelet-pod-resources")
		pluginsDir := filepath.Join(WorkDir, "image-kubelet-plugins")
		for _, d := range []string{stateDir, logDir, cfgDir, podResDir, pluginsDir} {
			Expect(os.MkdirAll(d, 0o755)).To(Succeed())
		}
		uid := NewPodUID("nri-cpualign")
		annotations := map[string]string{}
		for k, v := range dep.ds.Spec.Template.Annotations {
			annotations[k] = v
		}
		podCfg := &cri.PodSandboxConfig{
			Metadata:     &cri.PodSandboxMetadata{Name: "nri-cpualign-e2e", Uid: uid, Namespace: dep.ds.Namespace},
			Labels:       map[string]string{"io.kubernetes.pod.name": "nri-cpualign-e2e", "io.kubernetes.pod.namespace": dep.ds.Namespace, "io.kubernetes.pod.uid": uid},
			Annotations:  annotations,
			LogDirectory: logDir,
			Linux: &cri.LinuxPodSandboxConfig{
				CgroupParent: CRI.PodCgroupParent(q, uid),
				Resources:    framework.PodCRI(q, res),
				SecurityContext: &cri.LinuxSandboxSecurityContext{
					NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, Pid: cri.NamespaceMode_CONTAINER, Ipc: cri.NamespaceMode_POD},
				},
			},
		}
		sb, err := CRI.RT.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: podCfg})
		Expect(err).NotTo(HaveOccurred())
		pod := &framework.Pod{ID: sb.PodSandboxId, QOS: q, Config: podCfg, Driver: CRI.CgroupDriver}
		DeferCleanup(func(ctx SpecContext) {
			Expect(CRI.RemovePod(ctx, pod.ID, pod.CgroupParent())).To(Succeed())
			// The plugin must be gone before the next spec starts its own.
			Eventually(pluginProcesses).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeEmpty())
		}, NodeTimeout(time.Minute))

		// The DaemonSet's volumes, mapped to this machine: the NRI socket
		// directory is the test containerd's, the state directory a fresh
		// one, the ConfigMap a directory holding its files; /sys is /sys and
		// /run/dbus is /run/dbus.
		// The runtime reports whether it can make a mount recursively
		// read-only, which is what the kubelet checks for IfPossible.
		status, err := CRI.RT.Status(ctx, &cri.StatusRequest{})
		Expect(err).NotTo(HaveOccurred())
		rroSupported := false
		for _, h := range status.GetRuntimeHandlers() {
			if h.GetName() == "" {
				rroSupported = h.GetFeatures().GetRecursiveReadOnlyMounts()
			}
		}
		cfgData, ok := dep.configMap["config.toml"]
		Expect(ok).To(BeTrue())
		cfg, err := config.Load([]byte(cfgData))
		Expect(err).NotTo(HaveOccurred())
		Expect(path.Base(cfg.SocketPath)).To(Equal(filepath.Base(Env.NRISocket)), "the test socket's name differs from socket_path's")
		for name, data := range dep.configMap {
			Expect(os.WriteFile(filepath.Join(cfgDir, name), []byte(data), 0o644)).To(Succeed())
		}
		hostDirs := map[string]string{
			path.Dir(config.DefaultSocketPath): filepath.Dir(Env.NRISocket),
			"/sys":                             "/sys",
			config.DefaultCgroupRoot:           config.DefaultCgroupRoot,
			config.DefaultStateDir:             stateDir,
			// The system bus directory, DirectoryOrCreate as in the
			// DaemonSet: the host's own, made empty where it has none.
			"/run/dbus": "/run/dbus",
			path.Dir(config.DefaultPodResourcesSocket): podResDir,
			"/var/lib/kubelet/plugins":                 pluginsDir,
		}
		Expect(os.MkdirAll("/run/dbus", 0o755)).To(Succeed())
		var mounts []*cri.Mount
		for _, vm := range dep.ctr.VolumeMounts {
			var vol corev1.Volume
			for _, v := range podSpec.Volumes {
				if v.Name == vm.Name {
					vol = v
				}
			}
			m := &cri.Mount{ContainerPath: vm.MountPath, Readonly: vm.ReadOnly}
			switch {
			case vol.HostPath != nil:
				host, ok := hostDirs[vol.HostPath.Path]
				Expect(ok).To(BeTrue(), "hostPath %s has no counterpart on the test machine", vol.HostPath.Path)
				m.HostPath = host
			case vol.ConfigMap != nil:
				m.HostPath = cfgDir
			default:
				Fail("volume " + vm.Name + " is neither a hostPath nor the ConfigMap")
			}
			if vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled && rroSupported {
				m.RecursiveReadOnly = true
			}
			mounts = append(mounts, m)
		}

		sc := dep.ctr.SecurityContext
		var drop []string
		for _, c := range sc.Capabilities.Drop {
			drop = append(drop, string(c))
		}
		ctrRes := res.CRI(q)
		CRI.ClampOOMScoreAdj(ctrRes)
		ctrCfg := &cri.ContainerConfig{
			Metadata:    &cri.ContainerMetadata{Name: dep.ctr.Name},
			Image:       framework.ImageSpec(imageName),
			Args:        dep.ctr.Args,
			Labels:      map[string]string{"io.kubernetes.container.name": dep.ctr.Name},
			Annotations: map[string]string{},
			Mounts:      mounts,
			LogPath:     "nri-cpualign.log",
			Linux: &cri.LinuxContainerConfig{
				Resources: ctrRes,
				SecurityContext: &cri.LinuxContainerSecurityContext{
					NamespaceOptions: podCfg.Linux.SecurityContext.NamespaceOptions,
					RunAsUser:        &cri.Int64Value{Value: *sc.RunAsUser},
					RunAsGroup:       &cri.Int64Value{Value: *sc.RunAsGroup},
					ReadonlyRootfs:   *sc.ReadOnlyRootFilesystem,
					NoNewPrivs:       !*sc.AllowPrivilegeEscalation,
					Capabilities:     &cri.Capability{DropCapabilities: drop},
					Seccomp:          &cri.SecurityProfile{ProfileType: cri.SecurityProfile_RuntimeDefault},
				},
			},
		}
		offset := framework.FileSize(Env.RuntimeLog)
		cr, err := CRI.RT.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: pod.ID, Config: ctrCfg, SandboxConfig: podCfg})
		Expect(err).NotTo(HaveOccurred())
		plugin = CRI.NewContainer(cr.ContainerId, dep.ctr.Name, pod)
		Expect(CRI.StartContainer(ctx, plugin)).To(Succeed())
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err = framework.WaitForLine(wctx, Env.RuntimeLog, offset, PluginName, SynchronizedLine)
		Expect(err).NotTo(HaveOccurred(), "the plugin pod did not connect; its log:\n%s", pluginLog())

		// The liveness probe's target, as the kubelet reaches it.
		probe := dep.ctr.LivenessProbe.HTTPGet
		metricsURL = "http://" + net.JoinHostPort(probe.Host, probe.Port.String())
		Eventually(func(g Gomega) {
			code, body, err := get(ctx, probe.Path)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), "%s: %s", probe.Path, body)
		}).WithContext(ctx).WithTimeout(10*time.Second).Should(Succeed(), "liveness probe; plugin log:\n%s", pluginLog())

		// A shared container that runs before anything is exclusive.
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		sharedBefore = pods.RunWith(ctx, "image-burstable", framework.Resources{CPURequestMilli: 250, CPULimitMilli: 500, MemLimit: 32 << 20})
	}, NodeTimeout(10*time.Minute)) // make image compiles the whole binary once more (-trimpath) on a cold cache

	It("runs as root with no capabilities, from the image, with the host's /sys read-only and its cgroups writable", func(ctx SpecContext) {
		pids := pluginProcesses()
		Expect(pids).To(HaveLen(1), "want exactly the pod's plugin process")
		pid := pids[0]
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		Expect(err).NotTo(HaveOccurred())
		Expect(exe).To(Equal("/usr/bin/nri-cpualign"), "the plugin does not run the image's binary")
		Expect(strings.Fields(procStatusField(pid, "Uid"))).To(HaveEach("0"))
		Expect(procStatusField(pid, "CapEff")).To(Equal("0000000000000000"))
		Expect(procStatusField(pid, "NoNewPrivs")).To(Equal("1"))
		mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		Expect(err).NotTo(HaveOccurred())
		var hostSys, hostCgroup, root string
		for _, l := range strings.Split(string(mountinfo), "\n") {
			f := strings.Fields(l)
			if len(f) > 5 && f[4] == "/host/sys" {
				hostSys = f[5]
			}
			if len(f) > 5 && f[4] == "/host/cgroup" {
				hostCgroup = f[5]
			}
			if len(f) > 5 && f[4] == "/" {
				root = f[5]
			}
		}
		Expect(strings.Split(hostSys, ",")).To(ContainElement("ro"), "/host/sys is not read-only")
		// shared_pool_updates = "direct" writes the shared-pool cgroups there.
		Expect(strings.Split(hostCgroup, ",")).To(ContainElement("rw"), "/host/cgroup is not writable")
		Expect(strings.Split(root, ",")).To(ContainElement("ro"), "the image's root filesystem is not read-only")
		// NodeTimeout, not SpecTimeout: in an Ordered container a spec's
		// timeout also bounds the BeforeAll that runs with the first spec,
		// which builds the image (its own 10-minute bound); under load that
		// took longer than a minute.
	}, NodeTimeout(time.Minute))

	It("gives a Guaranteed 1-CPU container an exclusive CPU, as the binary-started plugin does, and keeps itself shared", func(ctx SpecContext) {
		code, body, err := get(ctx, "/state")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusOK))
		var st observe.StateView
		Expect(json.Unmarshal(body, &st)).To(Succeed())
		reserved, err := cpuset.Parse(st.Reserved)
		Expect(err).NotTo(HaveOccurred())
		Expect(reserved.Size()).To(Equal(1), "reserved_cpu_count = 1 in the ConfigMap")
		// Before any exclusive CPU: the plugin's own container (Guaranteed
		// but fractional) and the Burstable one are on every CPU.
		Expect(CPUsOf(ctx, sharedBefore)).To(EqualCPUs(Host.CPUs))

		pinned := pods.RunWith(ctx, "image-pinned", framework.GuaranteedCPUs(1))
		pinnedCPUs := CPUsOf(ctx, pinned)
		Expect(pinnedCPUs).To(HaveCPUCount(1))
		Expect(pinnedCPUs).To(BeDisjointFrom(reserved))
		pool := Host.CPUs.Difference(pinnedCPUs)
		Expect(CPUsOf(ctx, sharedBefore)).To(EqualCPUs(pool), "the shared container did not shrink")
		own, err := framework.ReadCpuset(plugin.CgroupsPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(own.CPUs).To(EqualCPUs(pool), "the plugin's own 100m container must stay in the shared pool")

		// The state endpoint and the checkpoint on the host (the state
		// hostPath mount) both hold the assignment.
		Eventually(func(g Gomega) {
			_, body, err := get(ctx, "/state")
			g.Expect(err).NotTo(HaveOccurred())
			var st observe.StateView
			g.Expect(json.Unmarshal(body, &st)).To(Succeed())
			found := false
			for _, c := range st.Containers {
				if c.ID == pinned.ID {
					found = true
					g.Expect(c.Exclusive).To(BeTrue())
					g.Expect(c.CPUs).To(Equal(pinnedCPUs.String()))
				}
			}
			g.Expect(found).To(BeTrue(), "/state does not list %s: %s", pinned.ID, body)
		}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
		_, err = os.Stat(filepath.Join(stateDir, daemon.CheckpointName))
		Expect(err).NotTo(HaveOccurred(), "no checkpoint in the state directory mount")
		// The assignment is in the checkpoint or in a file written beside
		// it (the checkpoint may be written incrementally).
		files, err := os.ReadDir(stateDir)
		Expect(err).NotTo(HaveOccurred())
		var onDisk []string
		for _, f := range files {
			if b, err := os.ReadFile(filepath.Join(stateDir, f.Name())); err == nil && strings.Contains(string(b), pinned.Pod.Config.Metadata.Uid) {
				onDisk = append(onDisk, f.Name())
			}
		}
		Expect(onDisk).NotTo(BeEmpty(), "no file in the state directory mount %s names pod %s", stateDir, pinned.Pod.Config.Metadata.Uid)

		if peak, err := framework.CgroupFile("memory", plugin.CgroupsPath(), "memory.max_usage_in_bytes"); err == nil {
			GinkgoWriter.Printf("plugin container memory peak: %s bytes (limit %s)\n", peak, dep.ctr.Resources.Limits.Memory())
		}

		// Removing its pod gives the CPU back, here too.
		Expect(CRI.StopContainer(ctx, pinned)).To(Succeed())
		pods.Remove(ctx, pinned.Pod)
		Eventually(func(g Gomega) {
			g.Expect(CPUsOfG(g, ctx, sharedBefore)).To(EqualCPUs(Host.CPUs))
		}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
	}, NodeTimeout(2*time.Minute))
})
