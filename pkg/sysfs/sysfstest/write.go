package sysfstest

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// Write writes the fake sysfs tree of s under dir, which plays /sys. Like
// the kernel, it leaves offline CPUs out of every list and gives them no
// topology or cache directory (only cpuN/online = 0).
func Write(dir string, s Spec) error {
	files, err := Files(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Directories first, parents before children (sorted order), each with
	// one mkdir; then the files from a few goroutines. Creating files is
	// the whole cost of a big fixture on disk (thousands of them).
	dirSet := map[string]bool{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
		for d := path.Dir(name); d != "." && !dirSet[d]; d = path.Dir(d) {
			dirSet[d] = true
		}
	}
	dirs := slices.Sorted(maps.Keys(dirSet))
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	const workers = 4
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for i := w; i < len(names); i += workers {
				p := filepath.Join(dir, filepath.FromSlash(names[i]))
				if err := os.WriteFile(p, []byte(files[names[i]]), 0o644); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(w)
	}
	var first error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// FS returns the tree Write would write, as a read-only in-memory fs.FS
// for sysfs.ReadFS.
func FS(s Spec) (fs.FS, error) {
	files, err := Files(s)
	if err != nil {
		return nil, err
	}
	return newMemFS(files), nil
}

// Files returns the tree of s as file contents keyed by slash-separated
// path relative to the /sys root ("devices/system/cpu/online").
func Files(s Spec) (map[string]string, error) {
	lay, err := s.lay()
	if err != nil {
		return nil, err
	}
	w := make(writer, lay.numCPUs*24)
	online := func(cpus []int) cpuset.CPUSet {
		var on []int
		for _, cpu := range cpus {
			if !lay.offline[cpu] {
				on = append(on, cpu)
			}
		}
		return cpuset.New(on...)
	}
	// Lists shared by many CPUs are formatted once (a 256-CPU machine
	// would otherwise build 65536-element sets).
	listCache := map[string]string{}
	onlineList := func(key string, cpus []int) string {
		if l, ok := listCache[key]; ok {
			return l
		}
		l := online(cpus).String()
		listCache[key] = l
		return l
	}
	all := make([]int, lay.numCPUs)
	for i := range all {
		all[i] = i
	}
	bySocket := map[int][]int{}
	byNode := map[int][]int{}
	byL3 := map[int][]int{}
	for _, c := range lay.cores {
		bySocket[c.socket] = append(bySocket[c.socket], c.threads...)
		byNode[c.node] = append(byNode[c.node], c.threads...)
		byL3[c.l3] = append(byL3[c.l3], c.threads...)
	}

	cpuDir := "devices/system/cpu"
	w.file(path.Join(cpuDir, "online"), online(all).String())
	w.file(path.Join(cpuDir, "offline"), cpuset.New(slices.Sorted(maps.Keys(lay.offline))...).String())
	w.file(path.Join(cpuDir, "possible"), cpuset.New(all...).String())
	w.file(path.Join(cpuDir, "present"), cpuset.New(all...).String())
	w.file(path.Join(cpuDir, "isolated"), s.Isolated)

	for cpu := 0; cpu < lay.numCPUs; cpu++ {
		base := path.Join(cpuDir, "cpu"+strconv.Itoa(cpu))
		if lay.offline[cpu] {
			w.file(path.Join(base, "online"), "0")
			continue
		}
		c := lay.cores[lay.cpuCore[cpu]]
		siblings := onlineList("core"+strconv.Itoa(lay.cpuCore[cpu]), c.threads)
		td := path.Join(base, "topology")
		w.file(path.Join(td, "core_id"), strconv.Itoa(c.index))
		w.file(path.Join(td, "physical_package_id"), strconv.Itoa(c.socket))
		if !s.NoDieID {
			w.file(path.Join(td, "die_id"), "0")
		}
		w.file(path.Join(td, "thread_siblings_list"), siblings)
		// A private L1d (index0) and L2 (index2) make the reader pick the
		// level-3 entry by its level. Only the files the reader uses are
		// written: every file costs when a test writes big fixtures to disk.
		cd := path.Join(base, "cache")
		for _, lv := range []struct{ index, level int }{{0, 1}, {2, 2}} {
			id := path.Join(cd, "index"+strconv.Itoa(lv.index))
			w.file(path.Join(id, "level"), strconv.Itoa(lv.level))
			w.file(path.Join(id, "shared_cpu_list"), siblings)
		}
		if !s.NoL3 {
			id := path.Join(cd, "index3")
			w.file(path.Join(id, "level"), "3")
			if !s.NoL3ID {
				w.file(path.Join(id, "id"), strconv.Itoa(s.L3IDBase+c.l3))
			}
			w.file(path.Join(id, "shared_cpu_list"), onlineList("l3"+strconv.Itoa(c.l3), byL3[c.l3]))
		}
	}

	if !s.NoNodeDir {
		nodeDir := "devices/system/node"
		nodes := lay.cpuNodes + s.MemoryOnlyNodes
		mib := s.MemoryMiBPerNode
		if mib == 0 {
			mib = 16384
		}
		var ids []int
		for n := 0; n < nodes; n++ {
			ids = append(ids, n)
			nd := path.Join(nodeDir, "node"+strconv.Itoa(n))
			w.file(path.Join(nd, "cpulist"), online(byNode[n]).String())
			row := make([]string, nodes)
			for m := range row {
				row[m] = strconv.Itoa(s.distance(n, m))
			}
			w.file(path.Join(nd, "distance"), strings.Join(row, " "))
			kb := mib * 1024
			w.file(path.Join(nd, "meminfo"), fmt.Sprintf(
				"Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB\nNode %d MemUsed:        %d kB\n",
				n, kb, n, kb/2, n, kb-kb/2))
			for size, count := range s.Hugepages {
				w.file(path.Join(nd, "hugepages", "hugepages-"+strconv.Itoa(size)+"kB", "nr_hugepages"), strconv.Itoa(count))
			}
		}
		w.file(path.Join(nodeDir, "online"), cpuset.New(ids...).String())
		w.file(path.Join(nodeDir, "possible"), cpuset.New(ids...).String())
		w.file(path.Join(nodeDir, "has_cpu"), cpuset.New(ids[:lay.cpuNodes]...).String())
		w.file(path.Join(nodeDir, "has_memory"), cpuset.New(ids...).String())
	}
	return w, nil
}

// writer collects files; content gets the kernel's trailing newline.
type writer map[string]string

func (w writer) file(p, content string) { w[p] = content + "\n" }
