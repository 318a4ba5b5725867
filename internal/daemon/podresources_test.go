package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres/podrestest"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
)

// fakeKubelet serves PodResources on a short socket path (unix socket
// paths are limited to 108 bytes).
func fakeKubelet(t *testing.T) (*podrestest.Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	return podrestest.Start(t, sock), sock
}

// entriesWith are the entries whose message contains msg.
func entriesWith(h *logtest.Hook, msg string) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range h.AllEntries() {
		if strings.Contains(e.Message, msg) {
			out = append(out, e)
		}
	}
	return out
}

// TestPodResourcesDeviceHints: on ht-2s-6c (NUMA 0 = CPUs 0-5,12-17,
// NUMA 1 = 6-11,18-23, core k = {k, k+12}; reserved 0,12) under
// single-numa-node, with the devices only the kubelet's PodResources
// knows (the containers carry no device node and no variable):
//   - a device without TopologyInfo gives no hint: node 0's lowest free
//     core, 1 = {1,13}, as a container without devices gets
//     (TestDeviceHintPullsCPUsToItsNode);
//   - a GPU on node 1 pulls the container there: core 6 = {6,18}; /state
//     and the decision's line name it;
//   - GPUs on nodes 0 and 1: TopologyAffinityError;
//   - a pod the kubelet does not know (NotFound): no hint, one warning.
func TestPodResourcesDeviceHints(t *testing.T) {
	srv, sock := fakeKubelet(t)
	srv.Set("default", "notopo", "c", podrestest.Device{Resource: "example.com/fpga", IDs: []string{"fpga0"}})
	srv.Set("default", "gpu", "c", podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-8f2c"}, NUMA: []int64{1}})
	srv.Set("default", "gpu", "sidecar", podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-0a1b"}, NUMA: []int64{0}})
	srv.Set("default", "span", "c",
		podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-0a1b"}, NUMA: []int64{0}},
		podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-8f2c"}, NUMA: []int64{1}})

	rt := startRuntime(t)
	// A generous bound: this test is about the answer, not its speed
	// (TestPodResourcesTimeout is about that).
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\npod_resources_socket = %q\npod_resources_timeout = \"1s\"\n", sock))
	log, hook := hookedLogger(t)
	r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"), WithLogger(log))

	notopo, _, err := rt.create(rt.addPod(podSpec{uid: "notopo", name: "notopo", qos: "guaranteed"}), "c", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(notopo); got != "1,13" {
		t.Errorf("a device without topology: got %q, want 1,13", got)
	}

	gpu, _, err := rt.create(rt.addPod(podSpec{uid: "gpu", name: "gpu", qos: "guaranteed"}), "c", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(gpu); got != "6,18" {
		t.Errorf("a GPU on node 1: got %q, want 6,18", got)
	}
	want := []ledger.DeviceView{{Device: "nvidia.com/gpu GPU-8f2c via PodResources", NUMA: []int{1}}}
	if got := stateDevices(t, r.d, "gpu"); !sameDevices(got, want) {
		t.Errorf("/state devices: got %+v, want %+v", got, want)
	}
	admitted := entriesWith(hook, "container admitted")
	if len(admitted) != 2 {
		t.Fatalf("%d admitted lines, want 2", len(admitted))
	}
	if _, ok := admitted[0].Data["pod_resources"]; ok {
		t.Errorf("the device without topology is named on the decision's line: %v", admitted[0].Data)
	}
	if got := fmt.Sprint(admitted[1].Data["pod_resources"]); got != "[nvidia.com/gpu GPU-8f2c via PodResources numa 1]" {
		t.Errorf("the decision's line: pod_resources = %s", got)
	}

	_, _, err = rt.create(rt.addPod(podSpec{uid: "span", name: "span", qos: "guaranteed"}), "c", 2000, 2000)
	if err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
		t.Errorf("GPUs on nodes 0 and 1: err = %v, want TopologyAffinityError", err)
	}

	for _, name := range []string{"unknown1", "unknown2"} {
		c, _, err := rt.create(rt.addPod(podSpec{uid: name, name: name, qos: "guaranteed"}), "c", 1000, 1000)
		if err != nil {
			t.Fatalf("a pod the kubelet does not know: %v", err)
		}
		if got := rt.cpus(c); got == "" {
			t.Errorf("%s has no cpuset", name)
		}
	}
	if w := entriesWith(hook, "kubelet PodResources: Get failed;"); len(w) != 1 || w[0].Level != logrus.WarnLevel {
		t.Errorf("%d warnings for the pods the kubelet does not know, want 1 (one a minute)", len(w))
	}
	if n := srv.Gets.Load(); n != 5 {
		t.Errorf("the kubelet got %d calls, want 5 (one per container)", n)
	}
}

// TestPodResourcesTimeout: a kubelet that does not answer holds a
// container for pod_resources_timeout (the default, 5 ms) and no more:
// the container is admitted without the device's hint (node 0's core 1,
// not the GPU's node 1), with a warning naming the bound.
func TestPodResourcesTimeout(t *testing.T) {
	srv, sock := fakeKubelet(t)
	srv.Set("default", "gpu", "c", podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-8f2c"}, NUMA: []int64{1}})
	srv.Hold()
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\npod_resources_socket = %q\n", sock))
	log, hook := hookedLogger(t)
	startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"), WithLogger(log))

	c, _, err := rt.create(rt.addPod(podSpec{uid: "gpu", name: "gpu", qos: "guaranteed"}), "c", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "1,13" {
		t.Errorf("no answer in time: got %q, want 1,13 (no device hint)", got)
	}
	w := entriesWith(hook, "no answer within pod_resources_timeout")
	if len(w) != 1 || w[0].Data["timeout"] != "5ms" {
		t.Errorf("warnings: %d, want 1 with timeout=5ms", len(w))
	}
}

// TestPodResourcesNoSocket: with no kubelet socket every container is
// admitted (no device hint) and the plugin warns once, not per container.
func TestPodResourcesNoSocket(t *testing.T) {
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\npod_resources_socket = %q\n",
		filepath.Join(t.TempDir(), "absent.sock")))
	log, hook := hookedLogger(t)
	startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"), WithLogger(log))
	for _, name := range []string{"a", "b"} {
		if _, _, err := rt.create(rt.addPod(podSpec{uid: name, name: name, qos: "guaranteed"}), "c", 1000, 1000); err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
	}
	if w := entriesWith(hook, "kubelet PodResources: no socket"); len(w) != 1 {
		t.Errorf("%d no-socket warnings, want 1", len(w))
	}
}

// TestPodResourcesNotAsked: pod_resources = false, or a topology manager
// that consults no provider, asks the kubelet nothing.
func TestPodResourcesNotAsked(t *testing.T) {
	for _, extra := range []string{
		"topology_manager_policy = \"single-numa-node\"\npod_resources = false\n",
		"topology_manager_policy = \"none\"\n",
	} {
		srv, sock := fakeKubelet(t)
		srv.Set("default", "gpu", "c", podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-8f2c"}, NUMA: []int64{1}})
		rt := startRuntime(t)
		cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\npod_resources_socket = %q\n%s", sock, extra))
		r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))
		c, _, err := rt.create(rt.addPod(podSpec{uid: "gpu", name: "gpu", qos: "guaranteed"}), "c", 2000, 2000)
		if err != nil {
			t.Fatal(err)
		}
		if got := rt.cpus(c); got != "1,13" || srv.Gets.Load() != 0 {
			t.Errorf("%q: got %q after %d calls, want 1,13 and none", extra, got, srv.Gets.Load())
		}
		r.stop(t)
	}
}
