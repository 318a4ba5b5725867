package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

func TestRunUsageErrors(t *testing.T) {
	sysfs := t.TempDir()
	if err := sysfstest.WriteNamed(sysfs, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	cfgDir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(cfgDir, name)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"-h"}, exitOK, "usage: nri-cpualign run"},
		{"unknown flag", []string{"--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{"extra argument", []string{"extra"}, exitUsage, `unexpected argument "extra"`},
		{"config file error", []string{"--config", write("bad.toml", "log_level = \"debug\"\nreserved_cpu_cout = 2\n")}, exitUsage,
			`bad.toml line 2: key "reserved_cpu_cout": unknown key`},
		{"missing config file", []string{"--config", filepath.Join(cfgDir, "missing.toml")}, exitUsage, "missing.toml"},
		{"static without reservation", []string{"--sysfs-root", sysfs, "--state-dir", t.TempDir()}, exitUsage,
			"reserved_system_cpus or reserved_cpu_count"},
		{"bad flag value", []string{"--log-format", "xml"}, exitUsage, `key "log_format": bad value "xml"`},
		{"bad reconcile period flag", []string{"--reconcile-period", "often"}, exitUsage, `--reconcile-period: bad value "often"`},
		{"bad sysfs", []string{"--config", write("ok.toml", "reserved_cpu_count = 1\n"), "--sysfs-root", t.TempDir(), "--state-dir", t.TempDir()}, exitUsage,
			"read topology"},
		{"require-healthz, metrics off in the file", []string{"--require-healthz", "--config", write("nometrics.toml", "reserved_cpu_count = 1\nmetrics_address = \"\"\n")}, exitUsage,
			`nri-cpualign run: --require-healthz: config ` + filepath.Join(cfgDir, "nometrics.toml") + ` line 2: key "metrics_address": empty: metrics are off, so /healthz is not served`},
		{"require-healthz, metrics off by flag", []string{"--require-healthz", "--metrics-address", "off"}, exitUsage,
			`nri-cpualign run: --require-healthz: --metrics-address "off": metrics are off, so /healthz is not served`},
		// With an address the check passes and start-up goes on, here to
		// the topology, which it cannot read.
		{"require-healthz, flag overrides an empty file", []string{"--require-healthz", "--config", write("nometrics2.toml", "reserved_cpu_count = 1\nmetrics_address = \"\"\n"),
			"--metrics-address", "127.0.0.1:0", "--sysfs-root", t.TempDir(), "--state-dir", t.TempDir()}, exitUsage, "read topology"},
		{"require-healthz with the default address", []string{"--require-healthz", "--config", write("ok2.toml", "reserved_cpu_count = 1\n"),
			"--sysfs-root", t.TempDir(), "--state-dir", t.TempDir()}, exitUsage, "read topology"},
		{"reserved offline", []string{"--config", write("off.toml", "reserved_system_cpus = \"0,99\"\n"), "--sysfs-root", sysfs, "--state-dir", t.TempDir()}, exitUsage,
			`off.toml line 1: key "reserved_system_cpus"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runDaemon(context.Background(), tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, errb.String())
			}
			if tc.code == exitUsage && strings.Contains(strings.Join(tc.args, " "), "--require-healthz") && tc.want == "read topology" &&
				strings.Contains(errb.String(), "require-healthz") {
				t.Errorf("--require-healthz refused a configuration with metrics on:\n%s", errb.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the daemon's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunConnects runs the daemon from flags against NRI's runtime side on
// a fixture machine and stops it with the context, as SIGTERM would.
func TestRunConnects(t *testing.T) {
	sysfs := t.TempDir()
	if err := sysfstest.WriteNamed(sysfs, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nri-run-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "nri.sock")
	r, err := adaptation.New("test-runtime", "v0", func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}, func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	},
		adaptation.WithSocketPath(sock), adaptation.WithPluginPath(filepath.Join(dir, "p")), adaptation.WithPluginConfigPath(filepath.Join(dir, "c")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()

	// A cgroup v1 layout of its own, never the host's /sys/fs/cgroup: on a
	// cgroup v2 host with systemd as PID 1 the daemon would see systemd
	// there and dial the host's system bus.
	cgroupRoot := filepath.Join(dir, "cgroup")
	if err := os.MkdirAll(filepath.Join(cgroupRoot, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "cfg.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("reserved_cpu_count = 2\nmetrics_address = \"127.0.0.1:0\"\ncgroup_root = %q\n", cgroupRoot)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runDaemon(ctx, []string{"--config", cfg, "--socket-path", sock, "--sysfs-root", sysfs, "--state-dir", filepath.Join(dir, "state"),
			"--log-format", "json"}, &bytes.Buffer{}, &stderr)
	}()
	// The runtime also calls its sync function once at start-up, before any
	// plugin connects; wait for the daemon's own log line instead.
	deadline := time.After(10 * time.Second)
	for !strings.Contains(stderr.String(), "synchronized with the runtime") {
		select {
		case code := <-done:
			t.Fatalf("run exited %d before synchronizing:\n%s", code, stderr.String())
		case <-deadline:
			t.Fatalf("no Synchronize:\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d after cancel:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
	logs := stderr.String()
	// Start-up logs the topology and the effective configuration (JSON,
	// as asked); reserved_cpu_count 2 on ht-1s-4c is core 0 = {0,4}.
	for _, want := range []string{`"msg":"nri-cpualign starting"`, `"nri_protocol":"nri.pkg.api.v1alpha1"`, `"msg":"detected CPU topology"`, `"num_cpus":8`, `"msg":"effective configuration"`, `"reserved":"0,4"`,
		`"msg":"synchronized with the runtime"`, `serving /metrics`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "cpualign_state.json")); err != nil {
		t.Errorf("no checkpoint written: %v", err)
	}
}

// TestPreRegisteredPlugin lets NRI's runtime side launch the real binary
// from its plugin directory, as containerd does for pre-registered
// plugins: no flags, a connected socket in the environment, and the whole
// configuration from <plugin config dir>/90-cpualign.conf via Configure.
func TestPreRegisteredPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir, err := os.MkdirTemp("", "nri-prereg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sysfs := filepath.Join(dir, "sys")
	if err := sysfstest.WriteNamed(sysfs, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	plugins, confd := filepath.Join(dir, "plugins"), filepath.Join(dir, "conf.d")
	for _, d := range []string{plugins, confd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("go", "build", "-o", filepath.Join(plugins, "90-cpualign"), ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	stateDir := filepath.Join(dir, "state")
	conf := fmt.Sprintf("reserved_cpu_count = 2\nstate_dir = %q\nsysfs_root = %q\ncgroup_root = %q\nmetrics_address = \"\"\n",
		stateDir, sysfs, filepath.Join(dir, "cgroup"))
	if err := os.WriteFile(filepath.Join(confd, "90-cpualign.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := adaptation.New("test-runtime", "v0", func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}, func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	},
		adaptation.WithSocketPath(filepath.Join(dir, "nri.sock")), adaptation.WithPluginPath(plugins), adaptation.WithPluginConfigPath(confd))
	if err != nil {
		t.Fatal(err)
	}
	// Start launches the plugin and waits for it to register.
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()

	pod := &api.PodSandbox{Id: "sb", Uid: "u1", Name: "p", Namespace: "ns", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/podu1"}}
	ctr := &api.Container{Id: "c1", PodSandboxId: "sb", Name: "app", Linux: &api.LinuxContainer{
		CgroupsPath: "/kubepods/podu1/c1",
		Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: &api.OptionalUInt64{Value: 2048},
			Quota: &api.OptionalInt64{Value: 200000}, Period: &api.OptionalUInt64{Value: 100000}}}}}
	resp, err := r.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		t.Fatal(err)
	}
	// reserved_cpu_count = 2 on ht-1s-4c reserves core 0 = {0,4}; 2 CPUs
	// are the next whole core, {1,5}.
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "1,5" {
		t.Errorf("adjusted cpus %q, want 1,5", got)
	}
	// The state_dir of the runtime's configuration holds the checkpoint.
	if _, err := os.Stat(filepath.Join(stateDir, "cpualign_state.json")); err != nil {
		t.Errorf("no checkpoint in the configured state_dir: %v", err)
	}
}
