package sysfstest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// TestWriteMatchesFiles checks that the tree on disk is exactly Files (what
// Load reads from memory) and that reading either gives the same topology.
func TestWriteMatchesFiles(t *testing.T) {
	for _, name := range []string{"ht-2s-6c", "offline-cpu", "memory-only-node", "i7-12850hx", "graviton3"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteNamed(dir, name); err != nil {
				t.Fatal(err)
			}
			s, _ := Get(name)
			want, err := Files(s)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(p)
				rel, _ := filepath.Rel(dir, p)
				got[filepath.ToSlash(rel)] = string(b)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("disk tree (%d files) differs from Files (%d files)", len(got), len(want))
			}
			onDisk, err := sysfs.Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			inMem := Load(t, name)
			if !reflect.DeepEqual(onDisk.Details(), inMem.Details()) || !reflect.DeepEqual(onDisk.Distances(), inMem.Distances()) {
				t.Errorf("Read(disk) and Load disagree")
			}
		})
	}
}

func TestUnknownFixture(t *testing.T) {
	if err := WriteNamed(t.TempDir(), "no-such-machine"); err == nil {
		t.Error("WriteNamed(no-such-machine) = nil, want an error")
	}
	if _, ok := Get("no-such-machine"); ok {
		t.Error("Get(no-such-machine) ok")
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
	}{
		{"no sockets", Spec{CoresPerSocket: 4}},
		{"no cores", Spec{Sockets: 1}},
		{"numa does not divide", Spec{Sockets: 1, CoresPerSocket: 6, NUMAPerSocket: 4}},
		{"l3 does not divide", Spec{Sockets: 1, CoresPerSocket: 6, CoresPerL3: 4}},
		{"distance rows", Spec{Sockets: 2, CoresPerSocket: 2, Distances: [][]int{{10}}}},
		{"offline out of range", Spec{Sockets: 1, CoresPerSocket: 2, Offline: []int{2}}},
		{"all offline", Spec{Sockets: 1, CoresPerSocket: 2, Offline: []int{0, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Files(tc.spec); err == nil {
				t.Errorf("Files(%+v) = nil error", tc.spec)
			}
		})
	}
}

// TestMemFS runs the standard fs.FS conformance checks on the in-memory
// tree Load reads.
func TestMemFS(t *testing.T) {
	s, _ := Get("offline-cpu")
	fsys, err := FS(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(fsys, "devices/system/cpu/online", "devices/system/cpu/cpu7/online",
		"devices/system/node/node0/meminfo", "devices/system/cpu/cpu0/cache/index3/shared_cpu_list"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(fsys, "devices/system/cpu/cpu7/topology"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("offline cpu7 has a topology directory (err %v)", err)
	}
}
