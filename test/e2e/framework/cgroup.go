package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/utils/cpuset"
)

// CgroupRoot is where the cgroup v1 hierarchies are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// CgroupFile reads a file of a cgroup in one v1 hierarchy, e.g.
// ("cpuset", "/kubepods/pod<uid>/<id>", "cpuset.cpus"), trimmed.
func CgroupFile(controller, cgroupPath, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(CgroupRoot, controller, cgroupPath, file))
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

// ReadCpuset reads cpuset.cpus and cpuset.mems of a cgroup.
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
		s, err := cpuset.Parse(v)
		if err != nil {
			return Cpuset{}, fmt.Errorf("%s of %s = %q: %w", f.name, cgroupPath, v, err)
		}
		*f.dst = s
	}
	return out, nil
}
