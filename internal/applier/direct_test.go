package applier

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
)

// TestPassFiles: the passes hold a container's cpuset.cpus open after
// its first write, up to their limit (the containers past it are written
// by path, and still written); a cgroup gone under an open file, a
// record gone and the worker's end each close what was held.
func TestPassFiles(t *testing.T) {
	root := t.TempDir()
	paths := map[string]string{"a": "/kubepods/poda/a", "b": "/kubepods/podb/b"}
	mk := func(id string) {
		t.Helper()
		dir := filepath.Join(root, "cpuset", paths[id])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte("0-7\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(id string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, "cpuset", paths[id], "cpuset.cpus"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	mk("a")
	mk("b")
	a := &direct{updater: newUpdater(nil, nil, nil, cgroups.New(root), logrus.New()), files: map[string]cgroupFile{}, limit: 1}
	write := func(id, cpus string) error {
		return a.writeTarget(target{id: id, name: id, pod: "pod" + id, path: paths[id], cpus: cpus})
	}
	held := func() (n int) {
		for _, f := range a.files {
			if f.f.Open() {
				n++
			}
		}
		return n
	}

	for _, id := range []string{"a", "b"} {
		if err := write(id, "2-3"); err != nil {
			t.Fatal(err)
		}
		if got := read(id); got != "2-3" {
			t.Errorf("%s's cpuset.cpus %q, want 2-3", id, got)
		}
	}
	if !a.files["a"].f.Open() || a.files["b"].f.Open() || a.open != 1 {
		t.Fatalf("limit 1: a open %v, b open %v, count %d; want a held, b by path, 1", a.files["a"].f.Open(), a.files["b"].f.Open(), a.open)
	}
	if err := write("b", "4"); err != nil || read("b") != "4" {
		t.Errorf("past the limit: %v, file %q, want 4", err, read("b"))
	}

	if err := os.RemoveAll(filepath.Join(root, "cpuset", paths["a"])); err != nil {
		t.Fatal(err)
	}
	if err := write("a", "5"); !errors.Is(err, cgroups.ErrGone) {
		t.Fatalf("a's cgroup gone: %v, want ErrGone", err)
	}
	if a.open != 0 || held() != 0 {
		t.Fatalf("after ErrGone: count %d, %d held; want 0", a.open, held())
	}
	if err := write("b", "6"); err != nil || !a.files["b"].f.Open() || a.open != 1 {
		t.Fatalf("b once a's file closed: %v, open %v, count %d; want held, 1", err, a.files["b"].f.Open(), a.open)
	}
	a.dropFile("b")
	if a.open != 0 || len(a.files) != 1 {
		t.Fatalf("after b's record went: count %d, %d files; want 0 and a's", a.open, len(a.files))
	}
	mk("a")
	if err := write("a", "7"); err != nil || read("a") != "7" || a.open != 1 {
		t.Fatalf("a's cgroup made again: %v, file %q, count %d; want 7, 1", err, read("a"), a.open)
	}
	a.closeFiles()
	if a.open != 0 || held() != 0 || len(a.files) != 0 {
		t.Fatalf("after the worker's end: count %d, %d held, %d files; want none", a.open, held(), len(a.files))
	}

	// openLimit under soft file limits set here, the hard one unchanged
	// (the values past it are skipped).
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Errorf("restoring the file limit: %v", err)
		}
	}()
	for _, c := range []struct {
		soft uint64
		want int
	}{{1000, 250}, {16384, 4096}, {16387, 4096}, {20000, 4096}} {
		if c.soft > rl.Max {
			continue
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: c.soft, Max: rl.Max}); err != nil {
			t.Fatal(err)
		}
		if got := openLimit(); got != c.want {
			t.Errorf("openLimit() = %d under a file limit of %d, want %d", got, c.soft, c.want)
		}
	}
}
