//go:build testhooks

package churn

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

const secTOML = "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n"

// The state directory is created 0700 and the checkpoint 0600, even under
// a permissive umask: the state says which containers run where.
func TestStateFileModes(t *testing.T) {
	old := syscall.Umask(0) // the most permissive umask; no test here runs in parallel
	defer syscall.Umask(old)
	c := newChurn(t, setup{name: "modes", fixture: "ht-1s-4c", toml: secTOML}, 1, 0)
	p := c.newPod(framework.Guaranteed)
	c.qos[p.Id] = framework.Guaranteed
	if err := c.rt.RunPod(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if c.create(p, "c", framework.GuaranteedCPUs(2)) == nil {
		t.Fatal("admission failed")
	}
	for _, tc := range []struct {
		path string
		want os.FileMode
	}{
		{c.stateDir, 0o700},
		{filepath.Join(c.stateDir, daemon.CheckpointName), 0o600},
	} {
		fi, err := os.Lstat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != tc.want {
			t.Errorf("%s has mode %o, want %o", tc.path, got, tc.want)
		}
	}
}

// A checkpoint path that is a symbolic link is refused, never followed:
// the link is set aside (not its target), the target is neither read into
// the state nor overwritten, and the plugin goes on with a regular file.
func TestSymlinkedCheckpointRefused(t *testing.T) {
	c := newChurn(t, setup{name: "symlink", fixture: "ht-1s-4c", toml: secTOML}, 1, 0)
	c.stopDaemon()
	path := filepath.Join(c.stateDir, daemon.CheckpointName)
	target := filepath.Join(t.TempDir(), "elsewhere")
	const content = "do not touch\n"
	if err := os.WriteFile(target, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	c.startDaemon()
	p := c.newPod(framework.Guaranteed)
	c.qos[p.Id] = framework.Guaranteed
	if err := c.rt.RunPod(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if c.create(p, "c", framework.GuaranteedCPUs(2)) == nil {
		t.Fatal("admission failed")
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != content {
		t.Errorf("symlink target changed: %q, %v", b, err)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("checkpoint after refusing the link: %v, %v; want a regular file", fi, err)
	}
	aside, err := os.Lstat(path + ".corrupt-1")
	if err != nil || aside.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was not set aside as %s.corrupt-1: %v", path, err)
	}
	if err := c.verify(); err != nil {
		t.Error(err)
	}
}

// The metrics and /state listener defaults to the loopback interface, and
// the daemon logs the address it actually listens on.
func TestMetricsListenerLocalByDefault(t *testing.T) {
	host, _, err := net.SplitHostPort(config.Default().MetricsAddress)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("default metrics_address %q is not a loopback address", config.Default().MetricsAddress)
	}

	// Port 0: the log must say which port was taken.
	c := newChurn(t, setup{name: "metrics", fixture: "ht-1s-4c", toml: secTOML + "metrics_address = \"127.0.0.1:0\"\n"}, 1, 0)
	re := regexp.MustCompile(`serving /metrics.*address="?(127\.0\.0\.1:[1-9][0-9]*)`)
	var addr string
	deadline := time.Now().Add(5 * time.Second)
	for addr == "" && time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(c.logs.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("no log line with the listening address:\n%s", c.logs)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("logged address %s does not answer: %v", addr, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz on %s: %d %s", addr, resp.StatusCode, b)
	}
}

// Device hints read only sysfs entries derived from a device's major and
// minor numbers, never the container's device path: the path here is a
// FIFO, which would block any reader forever (the runtime's 2 s request
// timeout would then drop the plugin's answer). A dev/ link leading out of
// the devices tree is refused, and the container admitted without a hint.
//
// Machine ht-2s-6c: NUMA node 0 = CPUs 0-5,12-17, node 1 = 6-11,18-23,
// siblings N and N+12; reserved_cpu_count = 2 reserves core 0 = {0,12}.
// With its device on node 1 a 2-CPU container gets the lowest core of node
// 1, {6,18}; without a hint the lowest free core, {1,13}.
func TestDeviceHintsReadOnlySysfs(t *testing.T) {
	sys := t.TempDir()
	files := map[string]string{
		"devices/pci0000:80/numa_node":           "1\n",
		"devices/pci0000:80/0000:80:01.0/dev":    "240:0\n",
		"devices/pci0000:80/0000:80:01.0/uevent": "",
	}
	for p, content := range files {
		full := filepath.Join(sys, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(sys, "dev/char"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"dev/char/240:0": "../../devices/pci0000:80/0000:80:01.0",
		"dev/char/241:0": "/",
	} {
		if err := os.Symlink(target, filepath.Join(sys, link)); err != nil {
			t.Fatal(err)
		}
	}
	fifo := filepath.Join(t.TempDir(), "evil")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newChurn(t, setup{name: "devices", fixture: "ht-2s-6c", toml: "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\n" +
		"topology_manager_policy = \"restricted\"\nsysfs_root = \"" + sys + "\"\n"}, 1, 0)
	for _, tc := range []struct {
		name  string
		major int64
		want  string
	}{
		{"on-node-1", 240, "6,18"},
		{"link-outside", 241, "1,13"},
	} {
		p := c.newPod(framework.Guaranteed)
		if err := c.rt.RunPod(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		ct := c.rt.NewContainer(p, tc.name, framework.GuaranteedCPUs(2))
		ct.Linux.Devices = []*api.LinuxDevice{{Path: fifo, Type: "c", Major: tc.major, Minor: 0}}
		_, err := c.rt.CreateContainer(context.Background(), p, ct)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cpus := ct.Linux.Resources.Cpu.Cpus; cpus != tc.want {
			t.Errorf("%s: cpus %q, want %s", tc.name, cpus, tc.want)
		}
	}
	if err := c.verify(); err != nil {
		t.Error(err)
	}
}
