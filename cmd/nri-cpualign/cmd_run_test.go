package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"

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

	cfg := filepath.Join(dir, "cfg.toml")
	if err := os.WriteFile(cfg, []byte("reserved_cpu_count = 2\nmetrics_address = \"127.0.0.1:0\"\n"), 0o600); err != nil {
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
	for _, want := range []string{`"msg":"detected CPU topology"`, `"num_cpus":8`, `"msg":"effective configuration"`, `"reserved":"0,4"`,
		`"msg":"synchronized with the runtime"`, `serving /metrics`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "cpualign_state.json")); err != nil {
		t.Errorf("no checkpoint written: %v", err)
	}
}
