package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/podres"
)

// CgroupRoot is where the cgroups are mounted: the v1 hierarchies below it
// (cpuset/, cpu/, ...), or the cgroup v2 unified tree itself.
const CgroupRoot = "/sys/fs/cgroup"

// Unified reports whether this node runs cgroup v2 alone (the unified tree
// at CgroupRoot, which has cgroup.controllers), read from the node once.
var Unified = func() bool {
	_, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers"))
	return err == nil
}()

// CgroupDir is the directory of cgroupPath (relative to a hierarchy's root)
// for controller: CgroupRoot/controller/cgroupPath on cgroup v1,
// CgroupRoot/cgroupPath on cgroup v2, where every controller shares one tree.
func CgroupDir(controller, cgroupPath string) string {
	if Unified {
		return filepath.Join(CgroupRoot, cgroupPath)
	}
	return filepath.Join(CgroupRoot, controller, cgroupPath)
}

// CgroupFile reads a file of a cgroup, e.g. ("cpuset",
// "/kubepods/pod<uid>/<id>", "cpuset.cpus"), trimmed. The file name is the
// node's own (cpu.cfs_quota_us on v1, cpu.max on v2).
func CgroupFile(controller, cgroupPath, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(CgroupDir(controller, cgroupPath), file))
	if err != nil {
		return "", fmt.Errorf("read cgroup file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Cpuset is a container's cpuset cgroup on the host.
type Cpuset struct {
	CPUs cpuset.CPUSet // cpuset.cpus
	Mems cpuset.CPUSet // cpuset.mems (memory node ids, in the same list format)
}

// ReadCpuset reads cpuset.cpus and cpuset.mems of a cgroup. On cgroup v2 an
// empty file means the cgroup takes its parent's set, and the set in force
// is then the .effective file's.
func ReadCpuset(cgroupPath string) (Cpuset, error) {
	var out Cpuset
	for _, f := range []struct {
		name string
		dst  *cpuset.CPUSet
	}{{"cpuset.cpus", &out.CPUs}, {"cpuset.mems", &out.Mems}} {
		v, err := CgroupFile("cpuset", cgroupPath, f.name)
		if err != nil {
			return Cpuset{}, err
		}
		if v == "" && Unified {
			if v, err = CgroupFile("cpuset", cgroupPath, f.name+".effective"); err != nil {
				return Cpuset{}, err
			}
		}
		s, err := cpuset.Parse(v)
		if err != nil {
			return Cpuset{}, fmt.Errorf("%s of %s = %q: %w", f.name, cgroupPath, v, err)
		}
		*f.dst = s
	}
	return out, nil
}

// CgroupDriver is how the runtime and the kubelet name and make cgroups.
type CgroupDriver string

// The two cgroup drivers.
const (
	// Cgroupfs: cgroups are directories the runtime makes itself
	// (/kubepods/burstable/pod<uid>/<id>).
	Cgroupfs CgroupDriver = "cgroupfs"
	// Systemd: pods are slices and containers transient scopes of systemd
	// (/kubepods.slice/kubepods-burstable.slice/
	// kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope).
	Systemd CgroupDriver = "systemd"
)

// PodSlice is the kubelet's systemd slice name of a pod (what it sends as
// the CRI cgroup parent): kubepods[-<qos>]-pod<uid>.slice, with the uid's
// dashes written as underscores (systemd reads a dash as nesting).
func PodSlice(q QOS, uid string) string { return podres.PodSlice(q, uid) }

// SlicePath expands a systemd slice name into its cgroup path, as systemd
// and runc's systemd driver do: a-b-c.slice lives in
// /a.slice/a-b.slice/a-b-c.slice. A path (starting with /) is returned as is.
func SlicePath(slice string) string {
	if strings.HasPrefix(slice, "/") || !strings.HasSuffix(slice, ".slice") {
		return slice
	}
	name := strings.TrimSuffix(slice, ".slice")
	var path, prefix string
	for _, part := range strings.Split(name, "-") {
		prefix += part
		path += "/" + prefix + ".slice"
		prefix += "-"
	}
	return path
}
