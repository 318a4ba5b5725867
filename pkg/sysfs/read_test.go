package sysfs_test

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

func files(t *testing.T, name string) map[string]string {
	t.Helper()
	s, ok := sysfstest.Get(name)
	if !ok {
		t.Fatalf("no fixture %q", name)
	}
	f, err := sysfstest.Files(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func readMap(files map[string]string) (*topology.Topology, error) {
	m := fstest.MapFS{}
	for p, c := range files {
		m[p] = &fstest.MapFile{Data: []byte(c)}
	}
	return sysfs.ReadFS(m)
}

const (
	cpuDir  = "devices/system/cpu/"
	nodeDir = "devices/system/node/"
)

// badInput is a valid tree with one thing broken, and the error Read
// must return for it.
type badInput struct {
	name     string
	fixture  string
	mutate   func(f map[string]string)
	wantPath string   // FileError.Path
	wantIn   []string // substrings of Error()
	wantErr  error    // errors.Is target, nil = don't care
}

// badInputs are the cases of TestReadBadInput, also read from disk by
// TestReadDiskMatchesFS.
func badInputs() []badInput {
	return []badInput{
		{
			name: "missing online", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { delete(f, cpuDir+"online") },
			wantPath: cpuDir + "online", wantErr: fs.ErrNotExist,
		},
		{
			name: "garbage online", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"online"] = "0-x\n" },
			wantPath: cpuDir + "online", wantIn: []string{`"0-x\n"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "empty online", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"online"] = "\n" },
			wantPath: cpuDir + "online", wantIn: []string{"no online CPUs"}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "garbage core_id", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu1/topology/core_id"] = "one\n" },
			wantPath: cpuDir + "cpu1/topology/core_id", wantIn: []string{`"one\n"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "missing core_id", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { delete(f, cpuDir+"cpu2/topology/core_id") },
			wantPath: cpuDir + "cpu2/topology/core_id", wantErr: fs.ErrNotExist,
		},
		{
			name: "online cpu without topology dir", fixture: "ht-1s-4c",
			mutate: func(f map[string]string) {
				for p := range f {
					if strings.HasPrefix(p, cpuDir+"cpu5/topology/") {
						delete(f, p)
					}
				}
			},
			wantPath: cpuDir + "cpu5/topology", wantIn: []string{"cpu 5 is listed online but has no topology directory"},
		},
		{
			name: "online cpu offline per kernel", fixture: "offline-cpu",
			// online claims CPU 7, whose directory has no topology.
			mutate:   func(f map[string]string) { f[cpuDir+"online"] = "0-7\n" },
			wantPath: cpuDir + "cpu7/topology", wantIn: []string{"no topology directory"},
		},
		{
			name: "garbage package id", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu7/topology/physical_package_id"] = "1.5\n" },
			wantPath: cpuDir + "cpu7/topology/physical_package_id", wantIn: []string{`"1.5\n"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "huge core_id", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu0/topology/core_id"] = "99999999999999999999\n" },
			wantPath: cpuDir + "cpu0/topology/core_id", wantErr: sysfs.ErrSyntax,
		},
		{
			name: "negative core_id", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu0/topology/core_id"] = "-3\n" },
			wantPath: cpuDir + "cpu0/topology", wantIn: []string{"negative core_id -3"},
		},
		{
			name: "garbage die_id", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu3/topology/die_id"] = "\n" },
			wantPath: cpuDir + "cpu3/topology/die_id", wantErr: sysfs.ErrSyntax,
		},
		{
			name: "garbage isolated", fixture: "isolated",
			mutate:   func(f map[string]string) { f[cpuDir+"isolated"] = "2-3;6-7\n" },
			wantPath: cpuDir + "isolated", wantIn: []string{`"2-3;6-7\n"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "bad distance row", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node1/distance"] = "21 ten\n" },
			wantPath: nodeDir + "node1/distance", wantIn: []string{`"21 ten\n"`, `"ten"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "short distance row", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node0/distance"] = "10\n" },
			wantPath: nodeDir + "node0/distance", wantIn: []string{"1 distances for 2 nodes"}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "missing distance", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { delete(f, nodeDir+"node0/distance") },
			wantPath: nodeDir + "node0/distance", wantErr: fs.ErrNotExist,
		},
		{
			name: "meminfo without MemTotal", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node1/meminfo"] = "Node 1 MemFree: 5 kB\n" },
			wantPath: nodeDir + "node1/meminfo", wantIn: []string{`no "Node 1 MemTotal:" line`, "MemFree"}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "meminfo bad size", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node0/meminfo"] = "Node 0 MemTotal:  lots kB\n" },
			wantPath: nodeDir + "node0/meminfo", wantIn: []string{`"lots"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "meminfo of another node", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node1/meminfo"] = "Node 0 MemTotal:  1024 kB\n" },
			wantPath: nodeDir + "node1/meminfo", wantErr: sysfs.ErrSyntax,
		},
		{
			name: "missing cpulist", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { delete(f, nodeDir+"node1/cpulist") },
			wantPath: nodeDir + "node1/cpulist", wantErr: fs.ErrNotExist,
		},
		{
			name: "cpu in no node", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node1/cpulist"] = "6-11,18-22\n" },
			wantPath: nodeDir[:len(nodeDir)-1], wantIn: []string{"online cpu 23 is in no node"},
		},
		{
			name: "cpu in two nodes", fixture: "ht-2s-6c",
			mutate:   func(f map[string]string) { f[nodeDir+"node1/cpulist"] = "5-11,18-23\n" },
			wantPath: nodeDir + "node1/cpulist", wantIn: []string{"cpu 5 is also listed by node0"},
		},
		{
			name: "NUMA id too big", fixture: "ht-1s-4c",
			mutate: func(f map[string]string) {
				for _, n := range []string{"cpulist", "distance", "meminfo"} {
					f[nodeDir+"node64/"+n] = f[nodeDir+"node0/"+n]
				}
			},
			wantPath: nodeDir + "node64", wantIn: []string{"NUMA node id 64 is not below 64"},
		},
		{
			name: "garbage cache level", fixture: "epyc-7702p-nosmt",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu8/cache/index2/level"] = "L1\n" },
			wantPath: cpuDir + "cpu8/cache/index2/level", wantIn: []string{`"L1\n"`}, wantErr: sysfs.ErrSyntax,
		},
		{
			name: "garbage L3 id", fixture: "epyc-7702p-nosmt",
			mutate:   func(f map[string]string) { f[cpuDir+"cpu8/cache/index3/id"] = "0x2\n" },
			wantPath: cpuDir + "cpu8/cache/index3/id", wantErr: sysfs.ErrSyntax,
		},
		{
			name: "missing L3 shared_cpu_list", fixture: "epyc-7702p-nosmt",
			mutate:   func(f map[string]string) { delete(f, cpuDir+"cpu8/cache/index3/shared_cpu_list") },
			wantPath: cpuDir + "cpu8/cache/index3/shared_cpu_list", wantErr: fs.ErrNotExist,
		},
		{
			name: "oversized file", fixture: "ht-1s-4c",
			mutate:   func(f map[string]string) { f[cpuDir+"isolated"] = strings.Repeat("1,", 40000) + "1\n" },
			wantPath: cpuDir + "isolated", wantIn: []string{"larger than"}, wantErr: sysfs.ErrSyntax,
		},
	}
}

// TestReadBadInput breaks one thing in a valid tree and checks the error
// names the file, carries the content, and has the right cause.
func TestReadBadInput(t *testing.T) {
	for _, tc := range badInputs() {
		t.Run(tc.name, func(t *testing.T) {
			f := files(t, tc.fixture)
			tc.mutate(f)
			topo, err := readMap(f)
			if err == nil {
				t.Fatalf("ReadFS = %d CPUs, nil error; want an error", topo.NumCPUs())
			}
			var fe *sysfs.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *sysfs.FileError", err, err)
			}
			if fe.Path != tc.wantPath {
				t.Errorf("Path = %q, want %q (error: %v)", fe.Path, tc.wantPath, err)
			}
			if !strings.Contains(err.Error(), tc.wantPath) {
				t.Errorf("error %q does not name %q", err, tc.wantPath)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v is not %v", err, tc.wantErr)
			}
			if fe.Reason() != "TopologyDiscoveryError" {
				t.Errorf("Reason() = %q", fe.Reason())
			}
		})
	}
}

// TestReadDiskErrors checks Read on a real directory: full paths in errors,
// an unreadable "file" (a directory in its place), a missing root.
func TestReadDiskErrors(t *testing.T) {
	t.Run("directory instead of file", func(t *testing.T) {
		root := t.TempDir()
		if err := sysfstest.WriteNamed(root, "ht-1s-4c"); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, "devices/system/cpu/cpu3/topology/core_id")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := sysfs.Read(root)
		var fe *sysfs.FileError
		if !errors.As(err, &fe) || fe.Path != p {
			t.Fatalf("Read = %v, want a FileError for %s", err, p)
		}
	})
	t.Run("missing root", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "nothing")
		_, err := sysfs.Read(root)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "devices/system/cpu/online")) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Read = %v, want not-exist naming %s/devices/system/cpu/online", err, root)
		}
	})
	t.Run("empty root", func(t *testing.T) {
		if _, err := sysfs.Read(""); err == nil {
			t.Fatal("Read(\"\") = nil error")
		}
	})
}

// TestReadTolerated covers input that older kernels produce and Read
// accepts: no die_id, no node directory, package id -1, no isolated file.
func TestReadTolerated(t *testing.T) {
	t.Run("no die_id", func(t *testing.T) {
		topo := sysfstest.LoadSpec(t, sysfstest.Spec{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 2, NoDieID: true})
		for _, c := range topo.Details() {
			if c.Die != 0 {
				t.Errorf("cpu %d die = %d, want 0", c.CPU, c.Die)
			}
		}
	})
	t.Run("no node directory", func(t *testing.T) {
		// Two sockets but no NUMA in the kernel: one node 0 with all 8 CPUs.
		topo := sysfstest.LoadSpec(t, sysfstest.Spec{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 2, NoNodeDir: true})
		if got := topo.NUMANodes(); len(got) != 1 || got[0] != 0 || topo.CPUsInNUMANodes(0).Size() != 8 {
			t.Errorf("NUMANodes() = %v with %s, want [0] with 8 CPUs", got, topo.CPUsInNUMANodes(0))
		}
		if len(topo.MemoryNodes()) != 0 || len(topo.Distances()) != 0 {
			t.Errorf("memory %v, distances %v; want none", topo.MemoryNodes(), topo.Distances())
		}
	})
	t.Run("package id -1 and no isolated file", func(t *testing.T) {
		f := files(t, "ht-1s-4c")
		for p := range f {
			if strings.HasSuffix(p, "/physical_package_id") {
				f[p] = "-1\n"
			}
		}
		delete(f, cpuDir+"isolated")
		topo, err := readMap(f)
		if err != nil {
			t.Fatal(err)
		}
		if topo.NumSockets() != 1 || topo.Sockets()[0] != 0 || !topo.Isolated().IsEmpty() {
			t.Errorf("sockets %v, isolated %s; want [0] and none", topo.Sockets(), topo.Isolated())
		}
	})
	t.Run("offline cpu listed in node and siblings", func(t *testing.T) {
		// Some kernels keep an offline CPU in node cpulists; it is ignored.
		f := files(t, "offline-cpu")
		f[nodeDir+"node0/cpulist"] = "0-7\n"
		f[cpuDir+"cpu3/topology/thread_siblings_list"] = "3,7\n"
		topo, err := readMap(f)
		if err != nil {
			t.Fatal(err)
		}
		if topo.NumCPUs() != 7 || topo.Siblings(3).Size() != 1 {
			t.Errorf("%d CPUs, Siblings(3) = %s; want 7 and {3}", topo.NumCPUs(), topo.Siblings(3))
		}
	})
}

// FuzzReadFS replaces the content of one file of a small fixture with
// arbitrary bytes: Read must return a topology or an error, never panic.
func FuzzReadFS(f *testing.F) {
	f.Add(uint16(0), "0-3")
	f.Add(uint16(7), "x")
	f.Add(uint16(40), "10 21 99")
	f.Fuzz(func(t *testing.T, pick uint16, content string) {
		s, _ := sysfstest.Get("memory-only-node")
		fs, err := sysfstest.Files(s)
		if err != nil {
			t.Fatal(err)
		}
		names := slices.Sorted(maps.Keys(fs))
		fs[names[int(pick)%len(names)]] = content
		topo, err := readMap(fs)
		if err == nil && topo.NumCPUs() == 0 {
			t.Fatal("nil error with no CPUs")
		}
	})
}
