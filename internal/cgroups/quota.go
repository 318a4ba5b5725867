package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// The CFS quota files: cgroup v1 cpu.cfs_quota_us (-1 = no quota), cgroup
// v2 cpu.max ("max PERIOD" = no quota; writing "max" alone keeps the
// period).
const (
	quotaFileV1  = "cpu.cfs_quota_us"
	quotaFileV2  = "cpu.max"
	unlimitedV1  = "-1"
	unlimitedMax = "max"
)

// PodCgroupsPath is the cgroups path of the pod cgroup that holds a
// container, from the container's cgroups path as NRI reports it: the
// parent directory in the cgroupfs form ("/kubepods/burstable/pod<uid>/<id>"
// gives "/kubepods/burstable/pod<uid>"), the slice in the systemd form
// ("kubepods-burstable-pod<uid>.slice:cri-containerd:<id>" gives
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice").
// Only a cgroup the kubelet made for a pod (named pod<uid>, or a
// kubepods-...-pod<uid>.slice) is returned: anything else is an error, so
// that a container outside the kubelet's hierarchy never has its parent's
// quota changed.
func PodCgroupsPath(ctrCgroupsPath string) (string, error) {
	p := ctrCgroupsPath
	if p == "" {
		return "", errors.New("no cgroups path")
	}
	if strings.Count(p, ":") == 2 && !strings.HasPrefix(p, "/") {
		slice, _, _ := strings.Cut(p, ":")
		last := slice[strings.LastIndexByte(slice, '-')+1:]
		if !strings.HasPrefix(slice, "kubepods-") || !strings.HasSuffix(slice, ".slice") || !strings.HasPrefix(last, "pod") || last == "pod.slice" {
			return "", fmt.Errorf("cgroups path %q: slice %q is not a kubelet pod slice (kubepods-...-pod<uid>.slice)", ctrCgroupsPath, slice)
		}
		return ExpandSlice(slice), nil
	}
	dir := filepath.Dir(filepath.Clean("/" + p))
	if base := filepath.Base(dir); !strings.HasPrefix(base, "pod") || base == "pod" {
		return "", fmt.Errorf("cgroups path %q: parent %q is not a kubelet pod cgroup (pod<uid>)", ctrCgroupsPath, dir)
	}
	return dir, nil
}

// cpuDir is the directory of cgroupsPath (a plain path, as PodCgroupsPath
// returns) in the hierarchy holding the CFS quota: cpu (v1) or the unified
// one (v2). The result stays under the root.
func (r Root) cpuDir(cgroupsPath string) string {
	p := filepath.Clean("/" + cgroupsPath)
	if r.unified {
		return filepath.Join(r.root, p)
	}
	return cgroup1.NewCpu(r.root).Path(p)
}

// QuotaUnlimited reports whether the cgroup at cgroupsPath (a plain path)
// runs without a CFS quota; ErrGone when it does not exist.
func (r Root) QuotaUnlimited(cgroupsPath string) (bool, error) {
	dir := r.cpuDir(cgroupsPath)
	name := quotaFileV1
	if r.unified {
		name = quotaFileV2
	}
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, ErrGone
	}
	if err != nil {
		return false, err
	}
	s := strings.TrimSpace(string(b))
	if r.unified {
		quota, _, _ := strings.Cut(s, " ")
		if quota == unlimitedMax {
			return true, nil
		}
		if _, err := strconv.ParseUint(quota, 10, 64); err != nil {
			return false, fmt.Errorf("%s: %q is not \"max\" or a number", path, s)
		}
		return false, nil
	}
	q, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not a number", path, s)
	}
	return q < 0, nil
}

// RemoveQuota lifts the CFS quota of the cgroup at cgroupsPath (a plain
// path); ErrGone when it does not exist.
func (r Root) RemoveQuota(cgroupsPath string) error {
	if r.unified {
		return writeAt(filepath.Join(r.cpuDir(cgroupsPath), quotaFileV2), unlimitedMax)
	}
	return writeAt(filepath.Join(r.cpuDir(cgroupsPath), quotaFileV1), unlimitedV1)
}
