//go:build testhooks

package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// pathPackages are the daemon's packages (docs/architecture.md's boxes):
// the files counted are theirs.
var pathPackages = []string{"adapter", "applier", "daemon", "ledger", "persist", "request", "observe"}

// Issue 42's bound: a Guaranteed CreateContainer crosses at most 8 files
// of the daemon's packages. RemovePodSandbox is held to the same.
const maxFiles = 8

// TestEventPaths builds this command with atomic coverage counters over
// the daemon's packages, runs it under each shared_pool_updates mode and
// counts the files each measured event ran statements in.
func TestEventPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon with coverage counters")
	}
	goTool := goCommand(t)
	bin := filepath.Join(t.TempDir(), "paths")
	var cover []string
	for _, p := range pathPackages {
		cover = append(cover, "github.com/nri-cpualign/nri-cpualign/internal/"+p)
	}
	// The main package too: only an instrumented main package registers
	// the counters' meta-data at start-up.
	cover = append(cover, "github.com/nri-cpualign/nri-cpualign/test/paths")
	build := exec.Command(goTool, "build", "-tags", "testhooks", "-cover", "-covermode=atomic", "-coverpkg="+strings.Join(cover, ","), "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, mode := range []string{"direct", "in-answer"} {
		t.Run(mode, func(t *testing.T) {
			out := t.TempDir()
			run := exec.Command(bin, "-mode", mode, "-out", out)
			if b, err := run.CombinedOutput(); err != nil {
				t.Fatalf("paths -mode %s: %v\n%s", mode, err, b)
			}
			for _, ev := range []struct{ name, dir string }{
				{"a Guaranteed CreateContainer", "create"},
				{"RemovePodSandbox", "removepod"},
			} {
				files := crossed(t, goTool, filepath.Join(out, ev.dir))
				t.Logf("%s (%s) crosses %d files:\n  %s", ev.name, mode, len(files), strings.Join(files, "\n  "))
				// Counters that saw nothing would pass any bound.
				if !hasPrefix(files, "adapter/") || !hasPrefix(files, "ledger/") {
					t.Fatalf("%s (%s): no adapter or ledger file among %v: the counters did not record the event", ev.name, mode, files)
				}
				if len(files) > maxFiles {
					t.Errorf("%s (%s) crosses %d files of the daemon's packages, more than %d", ev.name, mode, len(files), maxFiles)
				}
			}
		})
	}
}

// crossed lists the files of pathPackages that ran statements in the
// coverage data under dir, as package/file.go, sorted.
func crossed(t *testing.T, goTool, dir string) []string {
	t.Helper()
	txt := filepath.Join(t.TempDir(), "cover.txt")
	if b, err := exec.Command(goTool, "tool", "covdata", "textfmt", "-i="+dir, "-o="+txt).CombinedOutput(); err != nil {
		t.Fatalf("go tool covdata: %v\n%s", err, b)
	}
	f, err := os.Open(txt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ran := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// import/path/file.go:line.col,line.col statements count
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		if n, err := strconv.Atoi(fields[2]); err != nil || n == 0 {
			continue
		}
		file, _, _ := strings.Cut(fields[0], ":")
		for _, p := range pathPackages {
			if filepath.Dir(file) == "github.com/nri-cpualign/nri-cpualign/internal/"+p {
				ran[p+"/"+filepath.Base(file)] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	files := make([]string, 0, len(ran))
	for f := range ran {
		files = append(files, f)
	}
	sort.Strings(files)
	return files
}

func hasPrefix(files []string, prefix string) bool {
	for _, f := range files {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}

// goCommand is the go command on PATH, which builds this test (the
// Makefile's and the README's).
func goCommand(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to build the measured daemon: %v", err)
	}
	return p
}
