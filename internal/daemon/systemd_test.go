package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// unifiedRoot is a fake cgroup v2 root holding dirs.
func unifiedRoot(t *testing.T, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// entriesAt are the log lines at level that name key in their "key" field.
func entriesAt(hook *logtest.Hook, level logrus.Level) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == level && e.Data["key"] == config.KeySharedPoolUpdates {
			out = append(out, e)
		}
	}
	return out
}

// TestSystemdDriverFallsBackToInAnswer: on cgroup v2 with the kubelet's
// systemd slice, the default mode falls back to in-answer with an info
// line (systemd would undo direct writes); direct asked for in so many
// words is kept, with a warning; without the slice direct is kept
// silently.
func TestSystemdDriverFallsBackToInAnswer(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	for _, tc := range []struct {
		name, extra, want string
		dirs              []string
		level             logrus.Level // of the one line naming the key; 0: none
	}{
		{"systemd default", "", config.SharedUpdatesInAnswer, []string{"kubepods.slice/kubepods-burstable.slice", "init.scope"}, logrus.InfoLevel},
		{"systemd explicit direct", "shared_pool_updates = \"direct\"\n", config.SharedUpdatesDirect, []string{"kubepods.slice"}, logrus.WarnLevel},
		{"cgroupfs default", "", config.SharedUpdatesDirect, []string{"kubepods/burstable", "init.scope"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := unifiedRoot(t, tc.dirs...)
			cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\nmetrics_address = \"\"\ncgroup_root = \"" + root + "\"\n" + tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			log, hook := logtest.NewNullLogger()
			d, err := New(cfg, WithTopology(topo), WithLogger(log))
			if err != nil {
				t.Fatal(err)
			}
			if got, mode := d.Config().SharedPoolUpdates, d.applier().mode(); got != tc.want || mode != tc.want {
				t.Errorf("shared_pool_updates %q, applier %q; want %q", got, mode, tc.want)
			}
			var lines []*logrus.Entry
			for _, lv := range []logrus.Level{logrus.InfoLevel, logrus.WarnLevel} {
				lines = append(lines, entriesAt(hook, lv)...)
			}
			switch {
			case tc.level == 0 && len(lines) != 0:
				t.Errorf("log line about shared_pool_updates without systemd: %q", lines[0].Message)
			case tc.level != 0 && (len(lines) != 1 || lines[0].Level != tc.level || !strings.Contains(lines[0].Message, "systemd")):
				t.Errorf("want one %s line about systemd naming shared_pool_updates, got %d: %v", tc.level, len(lines), lines)
			}
		})
	}
}

// TestDirectWarnsOnSystemdScopes: a direct applier on cgroup v2 that sees
// a container cgroup in the systemd driver's form (the plugin started
// before the kubelet made its slice) warns once, naming the scope unit;
// cgroupfs paths and cgroup v1 never warn.
func TestDirectWarnsOnSystemdScopes(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	for _, tc := range []struct {
		name  string
		root  func(t *testing.T) string
		paths []string
		unit  string // "" when no warning is wanted
	}{
		{"v2 systemd scopes", func(t *testing.T) string { return unifiedRoot(t) },
			[]string{"/kubepods/burstable/podu/abc", "kubepods-burstable-podu.slice:cri-containerd:abc", "kubepods-podv.slice:crio:def"},
			"cri-containerd-abc.scope"},
		{"v2 cgroupfs", func(t *testing.T) string { return unifiedRoot(t) }, []string{"/kubepods/burstable/podu/abc"}, ""},
		{"v1 systemd scopes", func(t *testing.T) string {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "cpuset"), 0o755); err != nil {
				t.Fatal(err)
			}
			return root
		}, []string{"kubepods-podv.slice:crio:def"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\nmetrics_address = \"\"\ncgroup_root = \"" + tc.root(t) + "\"\n"))
			if err != nil {
				t.Fatal(err)
			}
			log, hook := logtest.NewNullLogger()
			d, err := New(cfg, WithTopology(topo), WithLogger(log))
			if err != nil {
				t.Fatal(err)
			}
			a, ok := d.applier().(*direct)
			if !ok {
				t.Fatalf("applier %q, want direct", d.applier().mode())
			}
			for _, p := range tc.paths {
				a.watchSystemd(p)
			}
			warned := entriesAt(hook, logrus.WarnLevel)
			switch {
			case tc.unit == "" && len(warned) != 0:
				t.Errorf("warned without systemd scopes on v2: %q", warned[0].Message)
			case tc.unit != "" && (len(warned) != 1 || warned[0].Data["unit"] != tc.unit):
				t.Errorf("want one warning naming %s, got %v", tc.unit, warned)
			}
		})
	}
}
