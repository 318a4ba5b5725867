package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The command list as help must print it, one line each.
var helpCommands = `Commands:
  run       run the NRI plugin (what the DaemonSet and the runtime start)
  status    show a running plugin's shared pool, reserved CPUs and pinned containers
  topology  print the CPU topology the plugin sees
  simulate  what-if placement on a (fake) sysfs tree, JSON Lines in and out
  version   print the version, git revision, build date, Go and NRI versions
  help      print this help
`

func noEnv(string) string { return "" }

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		onStdout   bool // the help goes to stdout (asked for) or stderr (a usage error)
		wantInHelp string
	}{
		{"bare, at a terminal", nil, exitUsage, false, "NRI_PLUGIN_SOCKET"},
		{"help", []string{"help"}, exitOK, true, "NRI_PLUGIN_SOCKET"},
		{"-h", []string{"-h"}, exitOK, true, "NRI_PLUGIN_SOCKET"},
		{"--help", []string{"--help"}, exitOK, true, "NRI_PLUGIN_SOCKET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatchEnv(tc.args, noEnv, strings.NewReader(""), &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			help, other := out.String(), errb.String()
			if !tc.onStdout {
				help, other = other, help
			}
			if !strings.Contains(help, helpCommands) || !strings.Contains(help, tc.wantInHelp) {
				t.Errorf("help lacks the command list or %q:\n%s", tc.wantInHelp, help)
			}
			if other != "" {
				t.Errorf("unexpected output on the other stream: %q", other)
			}
		})
	}
}

func TestSubcommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want []string // on stderr
	}{
		{[]string{"run", "-h"}, exitOK, []string{"usage: nri-cpualign run", "-require-healthz", "-metrics-address"}},
		{[]string{"status", "-h"}, exitOK, []string{"usage: nri-cpualign status", "-address string", `(default "127.0.0.1:9464")`, "-sysfs-root", "-o string"}},
		{[]string{"version", "--help"}, exitOK, []string{"usage: nri-cpualign version", "-output string"}},
		{[]string{"topology", "-h"}, exitOK, []string{"-sysfs-root", "-output"}},
		{[]string{"simulate", "-h"}, exitOK, []string{"-sysfs-root", "-config"}},
		{[]string{"status", "-o", "yaml"}, exitUsage, []string{`nri-cpualign status: --output "yaml": want text or json`}},
		{[]string{"status", "extra"}, exitUsage, []string{`nri-cpualign status: unexpected argument "extra"`}},
		{[]string{"version", "-o", "xml"}, exitUsage, []string{`nri-cpualign version: --output "xml": want text or json`}},
		{[]string{"--config", "/etc/x.toml"}, exitUsage, []string{`nri-cpualign: flag --config before a command: flags follow the command, e.g. "nri-cpualign run --config"`}},
		{[]string{"stats"}, exitUsage, []string{`nri-cpualign: unknown command "stats"; "nri-cpualign help" lists the commands`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatchEnv(tc.args, noEnv, strings.NewReader(""), &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
		})
	}
}

// TestVersionStamped builds the binary the way make build stamps it and
// checks that version prints the stamped values and the NRI module go.mod
// requires.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/containerd/nri (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod requires no github.com/containerd/nri")
	}
	nri := string(m[1])
	bin := filepath.Join(t.TempDir(), "nri-cpualign")
	const bi = "github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
	ldflags := "-X " + bi + ".version=v9.8.7-3-gabcdef0 -X " + bi + ".revision=abcdef0123456789abcdef0123456789abcdef01 -X " + bi + ".date=2026-11-25T10:11:12Z"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	want := "nri-cpualign v9.8.7-3-gabcdef0\n" +
		"  revision:     abcdef0123456789abcdef0123456789abcdef01\n" +
		"  build date:   2026-11-25T10:11:12Z\n" +
		"  go:           " + runtime.Version() + "\n" +
		"  nri module:   " + nri + "\n" +
		"  nri protocol: nri.pkg.api.v1alpha1\n"
	if string(out) != want {
		t.Errorf("version printed\n%s\nwant\n%s", out, want)
	}
	out, err = exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("version -o json: %v", err)
	}
	var doc map[string]string
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	wantDoc := map[string]string{"version": "v9.8.7-3-gabcdef0", "revision": "abcdef0123456789abcdef0123456789abcdef01",
		"date": "2026-11-25T10:11:12Z", "go": runtime.Version(), "nri_module": nri, "nri_protocol": "nri.pkg.api.v1alpha1"}
	if len(doc) != len(wantDoc) {
		t.Errorf("version -o json = %v, want %v", doc, wantDoc)
	}
	for k, v := range wantDoc {
		if doc[k] != v {
			t.Errorf("version -o json: %s = %q, want %q", k, doc[k], v)
		}
	}
}
