package sysfs_test

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// errAny marks the cases that must fail.
var errAny = errors.New("any error")

// mapFS holds a tree in memory.
func mapFS(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for p, c := range files {
		m[p] = &fstest.MapFile{Data: []byte(c)}
	}
	return m
}

// diskTree is a tree written once under root, which a case changes and
// then puts back: creating a file costs about a millisecond on a slow VM.
type diskTree struct {
	root  string
	files map[string]string
}

// newDiskTree writes files under a directory of parent's, which outlives
// t (a subtest).
func newDiskTree(t, parent *testing.T, files map[string]string) *diskTree {
	t.Helper()
	d := &diskTree{root: parent.TempDir(), files: map[string]string{}}
	d.apply(t, files)
	return d
}

// apply makes the tree on disk hold files (paths relative to root) and
// no other file or directory.
func (d *diskTree) apply(t *testing.T, files map[string]string) {
	t.Helper()
	for p := range d.files {
		if _, keep := files[p]; !keep {
			full := filepath.Join(d.root, filepath.FromSlash(p))
			if err := os.Remove(full); err != nil {
				t.Fatal(err)
			}
			delete(d.files, p)
			// Directories left empty go too, as in a tree written anew
			// (a removal fails on the first that is not empty).
			for dir := filepath.Dir(full); dir != d.root && os.Remove(dir) == nil; dir = filepath.Dir(dir) {
			}
		}
	}
	made := map[string]bool{}
	for p, c := range files {
		if old, ok := d.files[p]; ok && old == c {
			continue
		}
		full := filepath.Join(d.root, filepath.FromSlash(p))
		if dir := filepath.Dir(full); !made[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			made[dir] = true
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		d.files[p] = c
	}
}

// TestReadDiskMatchesFS reads the same trees from disk (Read, which reads
// files with its own system calls) and from memory (ReadFS, through
// io/fs): the same topology and warnings, or the same error for the same
// file and content. Only a missing file's message differs, as the two
// file systems word it. Unbroken trees are compared by TestWriteMatchesFiles
// in sysfstest.
func TestReadDiskMatchesFS(t *testing.T) {
	cases := badInputs()
	for i := range cases {
		cases[i].wantErr = errAny // every one of them is an error
	}
	const limit = 64 << 10 // the most Read reads of a file
	big := strings.Repeat("1,", limit/2-1) + "1\n"
	cases = append(cases,
		badInput{name: "no die_id", fixture: "ht-1s-4c", mutate: func(f map[string]string) {
			for p := range f {
				if strings.HasSuffix(p, "/die_id") {
					delete(f, p)
				}
			}
		}},
		badInput{name: "negative die_id", fixture: "ht-1s-4c", mutate: func(f map[string]string) { f[cpuDir+"cpu1/topology/die_id"] = "-1\n" }},
		badInput{name: "no L3 id", fixture: "ht-2s-6c", mutate: func(f map[string]string) {
			for p := range f {
				if strings.HasSuffix(p, "/index3/id") {
					delete(f, p)
				}
			}
		}},
		badInput{name: "negative L3 id", fixture: "ht-2s-6c", mutate: func(f map[string]string) { f[cpuDir+"cpu8/cache/index3/id"] = "-2\n" }},
		badInput{name: "isolated at the size limit", fixture: "ht-1s-4c", mutate: func(f map[string]string) { f[cpuDir+"isolated"] = big }},
		badInput{name: "isolated one byte over", fixture: "ht-1s-4c", mutate: func(f map[string]string) { f[cpuDir+"isolated"] = big + " " }},
		badInput{name: "cache directory is a file", fixture: "ht-2s-6c", wantErr: errAny, mutate: func(f map[string]string) {
			for p := range f {
				if strings.HasPrefix(p, cpuDir+"cpu2/cache/") {
					delete(f, p)
				}
			}
			f[cpuDir+"cpu2/cache"] = "index0\n"
		}},
		badInput{name: "node number out of range", fixture: "ht-2s-6c", wantErr: errAny, mutate: func(f map[string]string) {
			f[nodeDir+"node99999999/cpulist"] = "\n"
			f[nodeDir+"node3x/cpulist"] = "\n"
		}},
		badInput{name: "thread siblings disagree", fixture: "ht-2s-6c", mutate: func(f map[string]string) {
			f[cpuDir+"cpu0/topology/thread_siblings_list"] = "0\n"
			f[cpuDir+"cpu1/topology/thread_siblings_list"] = "1-x\n"
		}},
	)
	// Where the two file systems word an error differently, what Read
	// said before it made its own system calls (os.ReadDir's getdents).
	diskWording := map[string]string{"cache directory is a file": "not a directory"}
	trees := map[string]*diskTree{}
	parent := t
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := files(t, tc.fixture)
			tree := trees[tc.fixture]
			if tree == nil {
				tree = newDiskTree(t, parent, f)
				trees[tc.fixture] = tree
			}
			orig := maps.Clone(f)
			tc.mutate(f)
			tree.apply(t, f)
			defer tree.apply(t, orig)
			root := tree.root
			memTopo, memWarns, memErr := sysfs.ReadFSWithWarnings(mapFS(f))
			diskTopo, diskWarns, diskErr := sysfs.ReadWithWarnings(root)
			if tc.wantErr == errAny && memErr == nil {
				t.Fatal("ReadFS: nil error")
			}
			if (memErr == nil) != (diskErr == nil) {
				t.Fatalf("ReadFS error %v, Read error %v", memErr, diskErr)
			}
			if memErr != nil {
				var mfe, dfe *sysfs.FileError
				if errors.As(memErr, &mfe) != errors.As(diskErr, &dfe) {
					t.Fatalf("ReadFS error %v (%T), Read error %v (%T)", memErr, memErr, diskErr, diskErr)
				}
				if mfe == nil {
					if want := strings.ReplaceAll(memErr.Error(), "devices/system", filepath.Join(root, "devices/system")); diskErr.Error() != want {
						t.Errorf("Read error %q, want %q", diskErr, want)
					}
					return
				}
				if want := filepath.Join(root, mfe.Path); dfe.Path != want || dfe.Content != mfe.Content {
					t.Errorf("Read error path %q content %q, want %q %q", dfe.Path, dfe.Content, want, mfe.Content)
				}
				if want, ok := diskWording[tc.name]; ok {
					if dfe.Err.Error() != want {
						t.Errorf("Read error %v, want %v", dfe.Err, want)
					}
				} else if errors.Is(mfe, fs.ErrNotExist) {
					if !errors.Is(dfe, fs.ErrNotExist) {
						t.Errorf("Read error %v is not fs.ErrNotExist", dfe)
					}
				} else if dfe.Err.Error() != mfe.Err.Error() {
					t.Errorf("Read error %v, want %v", dfe.Err, mfe.Err)
				}
				return
			}
			if !reflect.DeepEqual(diskTopo.Details(), memTopo.Details()) || !diskTopo.Isolated().Equals(memTopo.Isolated()) ||
				!reflect.DeepEqual(diskTopo.Distances(), memTopo.Distances()) {
				t.Errorf("Read and ReadFS disagree on the topology")
			}
			if strings.Contains(tc.name, "disagree") && len(memWarns) == 0 {
				t.Fatal("no warnings to compare")
			}
			if len(diskWarns) != len(memWarns) {
				t.Fatalf("Read warnings %v, ReadFS warnings %v", diskWarns, memWarns)
			}
			for i, mw := range memWarns {
				mw.Msg = strings.ReplaceAll(mw.Msg, "devices/system", filepath.Join(root, "devices/system"))
				for j := range mw.Files {
					mw.Files[j] = filepath.Join(root, mw.Files[j])
				}
				if !reflect.DeepEqual(diskWarns[i], mw) {
					t.Errorf("Read warning %v, want %v", diskWarns[i], mw)
				}
			}
		})
	}
}

// A root given with a trailing slash reads the same tree, and errors name
// files as for the root without it.
func TestReadRootTrailingSlash(t *testing.T) {
	f := files(t, "ht-1s-4c")
	tree := newDiskTree(t, t, f)
	want, err := sysfs.Read(tree.root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sysfs.Read(tree.root + "/")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Details(), want.Details()) {
		t.Errorf("Read(%q) and Read(%q) disagree", tree.root+"/", tree.root)
	}
	delete(f, cpuDir+"cpu2/topology/core_id")
	tree.apply(t, f)
	_, err = sysfs.Read(tree.root + "/")
	var fe *sysfs.FileError
	if p := filepath.Join(tree.root, cpuDir+"cpu2/topology/core_id"); !errors.As(err, &fe) || fe.Path != p {
		t.Errorf("Read(%q) = %v, want a FileError for %s", tree.root+"/", err, p)
	}
}
