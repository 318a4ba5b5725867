package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
)

// NodeMemory is what one NUMA node holds for the memory manager: its
// MemTotal and its hugepage pools.
type NodeMemory struct {
	ID int
	// MemTotal is node<ID>/meminfo's MemTotal in bytes (the hugepage
	// pools included, as the kernel counts them).
	MemTotal uint64
	// Hugepages maps a page size in bytes to the pages of that size the
	// node holds (hugepages/hugepages-<kB>kB/nr_hugepages); empty when
	// the node has no hugepages directory.
	Hugepages map[uint64]uint64
}

// ReadMemory reads every NUMA node's MemTotal and hugepage pools under
// root (the directory that plays /sys), ascending by node id. A node
// without a hugepages directory (a kernel without hugetlbfs) has no
// pools; a tree without devices/system/node is an error, since the memory
// manager accounts per node. Errors name the file.
func ReadMemory(root string) ([]NodeMemory, error) {
	if root == "" {
		return nil, fmt.Errorf("sysfs: empty sysfs root")
	}
	buf := make([]byte, 0, 4096)
	r := reader{fsys: newDiskFS(root), prefix: root, buf: &buf}
	nodes, err := r.readMemory()
	var fe *FileError
	if errors.As(err, &fe) {
		fe.Path = r.show(fe.Path)
	}
	return nodes, err
}

// ReadMemoryFS is ReadMemory on a tree held in fsys.
func ReadMemoryFS(fsys fs.FS) ([]NodeMemory, error) {
	buf := make([]byte, 0, 4096)
	return reader{fsys: fsys, buf: &buf}.readMemory()
}

func (r reader) readMemory() ([]NodeMemory, error) {
	dir := "devices/system/node"
	ids, ok, err := r.numberedDirs(dir, "node")
	if err != nil {
		return nil, err
	}
	if !ok || len(ids) == 0 {
		return nil, &FileError{Path: dir, Err: fmt.Errorf("no NUMA nodes: per-node memory is unknown")}
	}
	out := make([]NodeMemory, 0, len(ids))
	for _, id := range ids {
		nd := path.Join(dir, "node"+strconv.Itoa(id))
		p := path.Join(nd, "meminfo")
		s, err := r.readFile(p)
		if err != nil {
			return nil, err
		}
		mem, err := ParseMemTotal(s, id)
		if err != nil {
			return nil, &FileError{Path: p, Content: firstLines(s, 2), Err: err}
		}
		pools, err := r.readHugepages(path.Join(nd, "hugepages"))
		if err != nil {
			return nil, err
		}
		out = append(out, NodeMemory{ID: id, MemTotal: mem, Hugepages: pools})
	}
	return out, nil
}

// readHugepages reads the pools of one node: every hugepages-<kB>kB
// directory's nr_hugepages. A missing dir is no pools.
func (r reader) readHugepages(dir string) (map[uint64]uint64, error) {
	pools := map[uint64]uint64{}
	names, err := r.readDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return pools, nil
	}
	if err != nil {
		return nil, &FileError{Path: dir, Err: unwrapPathError(err)}
	}
	slices.Sort(names)
	for _, name := range names {
		size, ok, err := ParseHugepageDir(name)
		if err != nil {
			return nil, &FileError{Path: path.Join(dir, name), Err: err}
		}
		if !ok {
			continue
		}
		p := path.Join(dir, name, "nr_hugepages")
		s, err := r.readFile(p)
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, &FileError{Path: p, Content: s, Err: fmt.Errorf("not a page count: %w", ErrSyntax)}
		}
		pools[size] = n
	}
	return pools, nil
}

// ParseHugepageDir reads the page size in bytes from a hugepage pool
// directory name ("hugepages-2048kB"); ok is false for other names.
func ParseHugepageDir(name string) (size uint64, ok bool, err error) {
	digits, found := strings.CutPrefix(name, "hugepages-")
	if !found {
		return 0, false, nil
	}
	digits, found = strings.CutSuffix(digits, "kB")
	if !found || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false, fmt.Errorf("hugepage directory %q: want hugepages-<n>kB: %w", name, ErrSyntax)
	}
	kb, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || kb == 0 || kb > 1<<40 {
		return 0, false, fmt.Errorf("hugepage directory %q: page size out of range: %w", name, ErrSyntax)
	}
	return kb * 1024, true, nil
}

// Capacities converts nodes to the memory manager's machine description.
func Capacities(nodes []NodeMemory) []memorymanager.NodeCapacity {
	out := make([]memorymanager.NodeCapacity, len(nodes))
	for i, n := range nodes {
		out[i] = memorymanager.NodeCapacity{ID: n.ID, Memory: n.MemTotal, Hugepages: n.Hugepages}
	}
	return out
}
