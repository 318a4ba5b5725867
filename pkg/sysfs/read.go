// Package sysfs reads a machine's CPU topology from a sysfs tree and turns
// it into a *topology.Topology the way the kubelet (through cAdvisor) sees
// it, so nri-cpualign places CPUs exactly where the kubelet's static CPU
// manager would.
//
// The sysfs root is always a parameter (the directory that plays /sys), never
// a package variable: tests and `nri-cpualign topology --sysfs-root` point it
// at fixture trees written by pkg/sysfs/sysfstest.
//
// Discovery rules (the kubelet's, through cAdvisor's topology discovery):
//   - Offline CPUs are not part of the machine; every list read is cut down
//     to devices/system/cpu/online.
//   - The NUMA node of a CPU is the nodeM directory whose cpulist holds it.
//     Without devices/system/node every CPU is on node 0.
//   - Cores are the CPUs sharing (NUMA node, physical_package_id, core_id),
//     as cAdvisor groups them; a core's id is its lowest logical CPU id,
//     not core_id, which repeats across sockets. thread_siblings_list is
//     only checked: where it disagrees (odd firmware, some VMs), or cannot
//     be read, the kubelet still runs on core_id, and so does discovery,
//     with a Warning naming the files.
//   - The uncore (L3) id of a core is the id of the level-3 cache of its
//     lowest thread, except when that cache is shared by exactly
//     (cores of the NUMA node × threads of this core) CPUs: cAdvisor then
//     files it as a node-level cache and the kubelet falls back to the
//     socket id. A core without an L3 also gets its socket id. When an L3
//     has no id file, L3 groups are told apart by shared_cpu_list.
//
// Bad input is an error (*FileError) that names the file and its content;
// Read never panics. Disagreements the kubelet runs with are Warnings
// (ReadWithWarnings), for the caller to log.
package sysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// maxFileBytes caps how much of one sysfs file is read; the biggest real
// ones (meminfo, long lists) are a few kB.
const maxFileBytes = 64 << 10

// FileError is a sysfs file that could not be read or did not parse.
type FileError struct {
	// Path is the full path of the file (or directory).
	Path string
	// Content is the (possibly shortened) content that did not parse; empty
	// when the file could not be read.
	Content string
	// Err is the underlying error (fs.ErrNotExist, ErrSyntax, ...).
	Err error
}

// Error names the file, the problem and the content.
func (e *FileError) Error() string {
	if e.Content == "" && !errors.Is(e.Err, ErrSyntax) {
		return fmt.Sprintf("sysfs: %s: %v", e.Path, e.Err)
	}
	c := e.Content
	if len(c) > 120 {
		c = c[:120] + "..."
	}
	return fmt.Sprintf("sysfs: %s: %v (content %q)", e.Path, e.Err, c)
}

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

// Reason is the stable reason word of discovery errors.
func (e *FileError) Reason() string { return "TopologyDiscoveryError" }

// numbered reports the N of a directory name prefix<N> (node3, index2);
// ok is false for other names. N must be a plain decimal number.
func numbered(name, prefix string) (n int, ok bool, err error) {
	digits, found := strings.CutPrefix(name, prefix)
	if !found || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(digits)
	if err != nil || n > 1<<20 {
		return 0, false, fmt.Errorf("directory number %q out of range: %w", digits, ErrSyntax)
	}
	return n, true, nil
}

// reader carries the tree through one Read; it holds no state between
// Reads. Paths inside fsys are slash-separated and relative; errors show
// them joined to prefix (the root directory given to Read).
type reader struct {
	fsys   fs.FS
	prefix string
	warns  *[]Warning
	// buf is the scratch space a diskFS reads files into.
	buf *[]byte
}

// Warning is a disagreement in the tree that discovery resolved the way
// the kubelet's discovery (cAdvisor) does, so it keeps running.
type Warning struct {
	// Files are the files that disagree, named as errors name them.
	Files []string
	// Msg says what disagrees and what discovery did.
	Msg string
}

// String is the message followed by the files.
func (w Warning) String() string { return w.Msg + " (files: " + strings.Join(w.Files, ", ") + ")" }

// warn records a warning about files (paths inside fsys).
func (r reader) warn(msg string, files ...string) {
	shown := make([]string, len(files))
	for i, f := range files {
		shown[i] = r.show(f)
	}
	*r.warns = append(*r.warns, Warning{Files: shown, Msg: msg})
}

// show is the path of a file as the operator knows it.
func (r reader) show(p string) string {
	if r.prefix == "" {
		return p
	}
	return filepath.Join(r.prefix, filepath.FromSlash(p))
}

// readFile reads a small sysfs file; a missing or unreadable one is a
// *FileError.
func (r reader) readFile(p string) (string, error) {
	var data []byte
	var err error
	if d, ok := r.fsys.(diskFS); ok {
		*r.buf, err = d.readFile(p, *r.buf, maxFileBytes+1)
		data = *r.buf
	} else {
		data, err = readAll(r.fsys, p)
	}
	if err != nil {
		return "", &FileError{Path: p, Err: unwrapPathError(err)}
	}
	if len(data) > maxFileBytes {
		return "", &FileError{Path: p, Content: string(data[:120]), Err: fmt.Errorf("file larger than %d bytes: %w", maxFileBytes, ErrSyntax)}
	}
	return string(data), nil
}

// readAll reads at most maxFileBytes+1 bytes of p in fsys.
func readAll(fsys fs.FS, p string) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxFileBytes+1))
}

// unwrapPathError drops the *fs.PathError layer: FileError already names the
// path.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (r reader) readList(p string) (cpuset.CPUSet, error) {
	s, err := r.readFile(p)
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	set, err := ParseList(s)
	if err != nil {
		return cpuset.CPUSet{}, &FileError{Path: p, Content: s, Err: err}
	}
	return set, nil
}

func (r reader) readInt(p string) (int, error) {
	s, err := r.readFile(p)
	if err != nil {
		return 0, err
	}
	n, err := ParseInt(s)
	if err != nil {
		return 0, &FileError{Path: p, Content: s, Err: err}
	}
	return n, nil
}

// exists reports whether p exists; errors other than "does not exist" are
// returned so an unreadable tree is not mistaken for an absent one.
func (r reader) exists(p string) (bool, error) {
	_, err := fs.Stat(r.fsys, p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, &FileError{Path: p, Err: unwrapPathError(err)}
}

// numberedDirs lists the entries of dir named prefix<N>, sorted by N. A
// missing dir gives ok=false.
func (r reader) numberedDirs(dir, prefix string) (ids []int, ok bool, err error) {
	names, err := r.readDirNames(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, &FileError{Path: dir, Err: unwrapPathError(err)}
	}
	// The first name that does not parse is the error, in name order as
	// fs.ReadDir lists them.
	slices.Sort(names)
	for _, name := range names {
		n, match, err := numbered(name, prefix)
		if err != nil {
			return nil, false, &FileError{Path: path.Join(dir, name), Err: err}
		}
		if match {
			ids = append(ids, n)
		}
	}
	sort.Ints(ids)
	return ids, true, nil
}

// readDirNames lists the names in dir.
func (r reader) readDirNames(dir string) ([]string, error) {
	if d, ok := r.fsys.(diskFS); ok {
		*r.buf = slices.Grow((*r.buf)[:0], 4096)
		return d.readDirNames(dir, (*r.buf)[:cap(*r.buf)])
	}
	entries, err := fs.ReadDir(r.fsys, dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// cpuRecord is what sysfs says about one online CPU.
type cpuRecord struct {
	cpu      int
	coreID   int
	socket   int
	die      int
	node     int
	siblings cpuset.CPUSet // online thread siblings; unknown unless siblOK
	siblOK   bool
	siblFile string
	coreFile string
}

// l3Record is the level-3 cache seen by a core's lowest thread.
type l3Record struct {
	present bool
	hasID   bool
	id      int
	shared  cpuset.CPUSet
}

// Read discovers the topology under root (the directory that plays /sys:
// it holds devices/system/cpu and devices/system/node). See the package
// documentation for the rules. Errors name files by their full path.
func Read(root string) (*topology.Topology, error) {
	t, _, err := ReadWithWarnings(root)
	return t, err
}

// ReadWithWarnings is Read that also returns the disagreements discovery
// resolved as the kubelet does (see Warning), for the caller to log.
func ReadWithWarnings(root string) (*topology.Topology, []Warning, error) {
	if root == "" {
		return nil, nil, fmt.Errorf("sysfs: empty sysfs root")
	}
	return reader{fsys: newDiskFS(root), prefix: root}.read()
}

// ReadFS is Read on a tree held in fsys (paths relative to the /sys root,
// such as "devices/system/cpu/online"); errors name files by those relative
// paths. Tests read generated trees from memory through it.
func ReadFS(fsys fs.FS) (*topology.Topology, error) {
	t, _, err := ReadFSWithWarnings(fsys)
	return t, err
}

// ReadFSWithWarnings is ReadFS that also returns the warnings.
func ReadFSWithWarnings(fsys fs.FS) (*topology.Topology, []Warning, error) {
	return reader{fsys: fsys}.read()
}

func (r reader) read() (*topology.Topology, []Warning, error) {
	var warns []Warning
	r.warns = &warns
	buf := make([]byte, 0, 4096)
	r.buf = &buf
	t, err := r.discover()
	var fe *FileError
	if errors.As(err, &fe) {
		fe.Path = r.show(fe.Path)
	}
	if err != nil {
		return t, nil, err
	}
	return t, warns, nil
}

func (r reader) discover() (*topology.Topology, error) {
	cpuDir := "devices/system/cpu"

	online, err := r.readList(path.Join(cpuDir, "online"))
	if err != nil {
		return nil, err
	}
	if online.IsEmpty() {
		p := path.Join(cpuDir, "online")
		return nil, &FileError{Path: p, Content: "", Err: fmt.Errorf("no online CPUs: %w", ErrSyntax)}
	}

	isolated, err := r.readIsolated(path.Join(cpuDir, "isolated"))
	if err != nil {
		return nil, err
	}

	nodes, err := r.readNodes(online)
	if err != nil {
		return nil, err
	}

	records := make(map[int]*cpuRecord, online.Size())
	for _, cpu := range online.List() {
		rec, err := r.readCPU(cpuDir, cpu, online)
		if err != nil {
			return nil, err
		}
		node, ok := nodes.cpuNode[cpu]
		if !ok {
			return nil, &FileError{Path: nodes.dir, Err: fmt.Errorf("online cpu %d is in no node*/cpulist", cpu)}
		}
		rec.node = node
		records[cpu] = rec
	}

	cores := r.groupCores(records)

	infos, err := r.assignL3(cpuDir, records, cores)
	if err != nil {
		return nil, err
	}

	t, err := topology.New(topology.Machine{
		CPUs:        infos,
		Distances:   nodes.distances,
		MemoryBytes: nodes.memory,
		Isolated:    isolated,
	})
	if err != nil {
		return nil, fmt.Errorf("sysfs: %s: %w", r.show("devices/system"), err)
	}
	return t, nil
}

// readIsolated reads the isolcpus list; the file is missing on kernels
// before 4.2, which is read as "nothing isolated".
func (r reader) readIsolated(p string) (cpuset.CPUSet, error) {
	ok, err := r.exists(p)
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	if !ok {
		return cpuset.New(), nil
	}
	return r.readList(p)
}

// nodeInfo is what devices/system/node says.
type nodeInfo struct {
	dir       string
	cpuNode   map[int]int
	distances map[int]map[int]int
	memory    map[int]uint64
}

func (r reader) readNodes(online cpuset.CPUSet) (nodeInfo, error) {
	ni := nodeInfo{dir: "devices/system/node", cpuNode: map[int]int{}}
	ids, ok, err := r.numberedDirs(ni.dir, "node")
	if err != nil {
		return ni, err
	}
	if !ok || len(ids) == 0 {
		// A kernel built without NUMA: one node 0 holding every CPU, with
		// no distances and no per-node memory to report.
		for _, cpu := range online.List() {
			ni.cpuNode[cpu] = 0
		}
		return ni, nil
	}
	ni.distances = make(map[int]map[int]int, len(ids))
	ni.memory = make(map[int]uint64, len(ids))
	if last := ids[len(ids)-1]; last >= MaxNUMANodes {
		return ni, &FileError{Path: path.Join(ni.dir, "node"+strconv.Itoa(last)),
			Err: fmt.Errorf("NUMA node id %d is not below %d, the most a NUMA mask holds", last, MaxNUMANodes)}
	}
	for _, id := range ids {
		dir := path.Join(ni.dir, "node"+strconv.Itoa(id))
		cpus, err := r.readList(path.Join(dir, "cpulist"))
		if err != nil {
			return ni, err
		}
		for _, cpu := range cpus.Intersection(online).List() {
			if prev, dup := ni.cpuNode[cpu]; dup {
				return ni, &FileError{Path: path.Join(dir, "cpulist"), Content: cpus.String(),
					Err: fmt.Errorf("cpu %d is also listed by node%d", cpu, prev)}
			}
			ni.cpuNode[cpu] = id
		}

		p := path.Join(dir, "distance")
		s, err := r.readFile(p)
		if err != nil {
			return ni, err
		}
		row, err := ParseDistances(s)
		if err != nil {
			return ni, &FileError{Path: p, Content: s, Err: err}
		}
		if len(row) != len(ids) {
			return ni, &FileError{Path: p, Content: s, Err: fmt.Errorf("%d distances for %d nodes: %w", len(row), len(ids), ErrSyntax)}
		}
		ni.distances[id] = make(map[int]int, len(ids))
		for i, d := range row {
			// The row is indexed by node order, not node id: node ids
			// may have gaps.
			ni.distances[id][ids[i]] = d
		}

		p = path.Join(dir, "meminfo")
		if s, err = r.readFile(p); err != nil {
			return ni, err
		}
		mem, err := ParseMemTotal(s, id)
		if err != nil {
			return ni, &FileError{Path: p, Content: firstLines(s, 2), Err: err}
		}
		ni.memory[id] = mem
	}
	return ni, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func (r reader) readCPU(cpuDir string, cpu int, online cpuset.CPUSet) (*cpuRecord, error) {
	// Paths are concatenated: every part is clean, and path.Join's
	// cleaning was a tenth of the user time of reading a big machine.
	topoDir := cpuDir + "/cpu" + strconv.Itoa(cpu) + "/topology"
	rec := &cpuRecord{cpu: cpu}
	var err error
	rec.coreFile = topoDir + "/core_id"
	if rec.coreID, err = r.readInt(rec.coreFile); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// Tell "no topology at all" (an online CPU the kernel did not
		// describe) from a single missing file.
		if ok, serr := r.exists(topoDir); serr != nil {
			return nil, serr
		} else if !ok {
			return nil, &FileError{Path: topoDir, Err: fmt.Errorf("cpu %d is listed online but has no topology directory", cpu)}
		}
		return nil, err
	}
	p := topoDir + "/physical_package_id"
	if rec.socket, err = r.readInt(p); err != nil {
		return nil, err
	}
	if rec.socket == -1 {
		// Older arm64 kernels without firmware package information report
		// -1: the whole machine is one package.
		rec.socket = 0
	}
	if rec.socket < 0 || rec.coreID < 0 {
		return nil, &FileError{Path: topoDir, Err: fmt.Errorf("cpu %d: negative core_id %d or physical_package_id %d", cpu, rec.coreID, rec.socket)}
	}
	// die_id exists since Linux 5.2; before, every package has one die.
	// Read rather than looked up first: a stat costs as much as the read.
	p = topoDir + "/die_id"
	if rec.die, err = r.readInt(p); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		rec.die = 0
	}
	if rec.die < 0 {
		rec.die = 0
	}
	// cAdvisor does not read thread_siblings_list: an unreadable one is
	// a warning, and groupCores compares the readable ones.
	rec.siblFile = topoDir + "/thread_siblings_list"
	sib, err := r.readList(rec.siblFile)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			fe.Path = r.show(fe.Path)
		}
		r.warn(fmt.Sprintf("cpu %d: thread siblings unknown (%v); its core follows core_id and physical_package_id, as the kubelet's", cpu, err), rec.siblFile)
		return rec, nil
	}
	rec.siblings, rec.siblOK = sib.Intersection(online), true
	return rec, nil
}

// coreKey identifies a core as cAdvisor does: core_id and package within a
// NUMA node.
type coreKey struct{ node, socket, coreID int }

// groupCores groups the CPUs into cores as cAdvisor does, by coreKey, and
// returns the cores' CPU sets keyed by core id (lowest thread). A core
// whose CPUs' thread_siblings_list says otherwise (a CPU not among its own
// siblings included) keeps the coreKey grouping, with one warning naming
// the core_id files of the core and the disagreeing siblings files.
func (r reader) groupCores(records map[int]*cpuRecord) map[int]cpuset.CPUSet {
	groups := map[coreKey][]int{}
	for cpu, rec := range records {
		k := coreKey{rec.node, rec.socket, rec.coreID}
		groups[k] = append(groups[k], cpu)
	}
	cores := make(map[int]cpuset.CPUSet, len(groups))
	for _, cpus := range groups {
		set := cpuset.New(cpus...)
		cores[set.List()[0]] = set
	}
	// Warnings in core order, so that a log reads the same every start.
	for _, id := range slices.Sorted(maps.Keys(cores)) {
		set := cores[id]
		var files, says []string
		for _, cpu := range set.List() {
			rec := records[cpu]
			files = append(files, rec.coreFile)
			if rec.siblOK && !rec.siblings.Equals(set) {
				says = append(says, fmt.Sprintf("cpu %d: %q", cpu, rec.siblings.String()))
			}
		}
		if len(says) == 0 {
			continue
		}
		for _, cpu := range set.List() {
			if rec := records[cpu]; rec.siblOK && !rec.siblings.Equals(set) {
				files = append(files, rec.siblFile)
			}
		}
		rec := records[id]
		r.warn(fmt.Sprintf("CPUs %s share core_id %d on package %d, node %d, but thread_siblings_list disagrees (%s); "+
			"the core is %s, by core_id and physical_package_id, as the kubelet's discovery (cAdvisor) has it",
			set, rec.coreID, rec.socket, rec.node, strings.Join(says, ", "), set), files...)
	}
	return cores
}

// assignL3 reads the L3 of each core's lowest thread and applies the
// kubelet's uncore rules; it returns the finished per-CPU records.
func (r reader) assignL3(cpuDir string, records map[int]*cpuRecord, cores map[int]cpuset.CPUSet) ([]topology.CPUInfo, error) {
	coresPerNode := map[int]int{}
	for core := range cores {
		coresPerNode[records[core].node]++
	}
	l3s := make(map[int]l3Record, len(cores))
	anyMissingID := false
	for core := range cores {
		l3, err := r.readL3(cpuDir + "/cpu" + strconv.Itoa(core) + "/cache")
		if err != nil {
			return nil, err
		}
		if l3.present && !l3.hasID {
			anyMissingID = true
		}
		l3s[core] = l3
	}
	if anyMissingID {
		// Without ids, an L3 is known by the CPUs sharing it: number the
		// distinct shared_cpu_lists in the order of their lowest CPU.
		byLowest := map[int]bool{}
		for _, l3 := range l3s {
			if l3.present {
				byLowest[l3.shared.List()[0]] = true
			}
		}
		lows := slices.Sorted(maps.Keys(byLowest))
		ordinal := make(map[int]int, len(lows))
		for i, low := range lows {
			ordinal[low] = i
		}
		for core, l3 := range l3s {
			if l3.present {
				l3.id = ordinal[l3.shared.List()[0]]
				l3s[core] = l3
			}
		}
	}

	infos := make([]topology.CPUInfo, 0, len(records))
	for core, threads := range cores {
		rec := records[core]
		uncore := rec.socket
		if l3 := l3s[core]; l3.present {
			nodeLevel := l3.shared.Size() == coresPerNode[rec.node]*threads.Size()
			if !nodeLevel {
				uncore = l3.id
			}
		}
		for _, cpu := range threads.List() {
			t := records[cpu]
			infos = append(infos, topology.CPUInfo{
				CPU: cpu, Core: core, SysfsCoreID: t.coreID, Socket: t.socket,
				Die: t.die, NUMA: t.node, L3: uncore,
			})
		}
	}
	return infos, nil
}

// readL3 finds the first index* directory with level 3. A CPU without a
// cache directory, or without a level-3 cache, has no L3.
func (r reader) readL3(cacheDir string) (l3Record, error) {
	idx, ok, err := r.numberedDirs(cacheDir, "index")
	if err != nil || !ok {
		return l3Record{}, err
	}
	for _, i := range idx {
		dir := cacheDir + "/index" + strconv.Itoa(i)
		level, err := r.readInt(dir + "/level")
		if err != nil {
			return l3Record{}, err
		}
		if level != 3 {
			continue
		}
		l3 := l3Record{present: true}
		if l3.shared, err = r.readList(dir + "/shared_cpu_list"); err != nil {
			return l3Record{}, err
		}
		if l3.shared.IsEmpty() {
			p := dir + "/shared_cpu_list"
			return l3Record{}, &FileError{Path: p, Err: fmt.Errorf("L3 shared by no CPU: %w", ErrSyntax)}
		}
		// No id file: the L3 is known by its shared_cpu_list (assignL3).
		p := dir + "/id"
		s, err := r.readFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return l3, nil
		}
		if err != nil {
			return l3Record{}, err
		}
		if l3.id, err = ParseInt(s); err != nil {
			return l3Record{}, &FileError{Path: p, Content: s, Err: err}
		}
		if l3.id < 0 {
			return l3Record{}, &FileError{Path: p, Content: s, Err: fmt.Errorf("negative cache id: %w", ErrSyntax)}
		}
		l3.hasID = true
		return l3, nil
	}
	return l3Record{}, nil
}
