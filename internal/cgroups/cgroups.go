// Package cgroups reads and writes the cpuset files of containers'
// cgroups under a cgroup root, for cgroup v1 (the cpuset hierarchy under
// <root>/cpuset) and v2 (the unified hierarchy at <root>). It is the only
// place the daemon touches cgroups.
package cgroups

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/eintr"
)

// ErrGone means the container's cgroup does not exist: not yet (the OCI
// runtime has not created it) or any more (the container went away).
var ErrGone = errors.New("cgroup is gone")

// Root is a cgroup root with its detected version.
type Root struct {
	root    string
	unified bool
}

// New detects the cgroup version of root: on the host's own root with
// cgroups.Mode, elsewhere (a mounted host root, tests) by the unified
// hierarchy's cgroup.controllers file.
func New(root string) Root {
	if filepath.Clean(root) == "/sys/fs/cgroup" {
		return Root{root: root, unified: cgroups.Mode() == cgroups.Unified}
	}
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return Root{root: root, unified: err == nil}
}

// Unified reports whether the root is a cgroup v2 hierarchy.
func (r Root) Unified() bool { return r.unified }

// Dir is the cgroup directory holding the cpuset files of cgroupsPath as
// NRI reports it: a path ("/kubepods/pod<uid>/<id>", cgroupfs driver) or
// "slice:prefix:name" (systemd driver). The result always stays under the
// root.
func (r Root) Dir(cgroupsPath string) (string, error) {
	p := cgroupsPath
	if slice, unit, ok := systemdForm(p); ok {
		p = ExpandSlice(slice) + "/" + unit
	}
	if p == "" {
		return "", errors.New("no cgroups path")
	}
	p = filepath.Clean("/" + p)
	if r.unified {
		return filepath.Join(r.root, p), nil
	}
	return cgroup1.NewCpuset(r.root).Path(p), nil
}

// systemdForm splits a cgroupsPath in the systemd driver's form
// "slice:prefix:name" into its slice and the scope unit the OCI runtime
// creates for the container, "prefix-name.scope".
func systemdForm(cgroupsPath string) (slice, unit string, ok bool) {
	if strings.Count(cgroupsPath, ":") != 2 || strings.HasPrefix(cgroupsPath, "/") {
		return "", "", false
	}
	parts := strings.SplitN(cgroupsPath, ":", 3)
	return parts[0], parts[1] + "-" + parts[2] + ".scope", true
}

// ScopeUnit is the systemd unit of a container whose cgroupsPath is in the
// systemd driver's form: containerd's
// "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>" is
// "cri-containerd-<id>.scope", CRI-O's "…:crio:<id>" "crio-<id>.scope".
// ok is false for a cgroupfs path.
func ScopeUnit(cgroupsPath string) (unit string, ok bool) {
	_, unit, ok = systemdForm(cgroupsPath)
	return unit, ok
}

// SystemdManaged reports whether systemd runs this cgroup v2 hierarchy:
// its own init.scope (PID 1's) is at the root, or, on the host's own
// root, /run/systemd/system exists (sd_booted(3)). It does not depend on
// the kubelet: its kubepods.slice may not exist yet when the plugin
// starts. Where systemd runs the hierarchy, the runtime's systemd cgroup
// driver makes every container a scope whose AllowedCPUs and
// AllowedMemoryNodes systemd keeps and writes again whenever it
// re-applies the unit (daemon-reload), undoing a cpuset written only into
// the files; a container's cgroupsPath in the form "slice:prefix:name"
// says for sure that its runtime uses that driver. Under cgroup v1
// systemd does not manage the cpuset controller.
func (r Root) SystemdManaged() bool {
	if !r.unified {
		return false
	}
	isDir := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	}
	if isDir(filepath.Join(r.root, "init.scope")) || isDir(filepath.Join(r.root, "kubepods.slice")) {
		return true
	}
	return filepath.Clean(r.root) == "/sys/fs/cgroup" && isDir("/run/systemd/system")
}

// ExpandSlice turns a systemd slice name into its path:
// "kubepods-burstable-podX.slice" is
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podX.slice".
func ExpandSlice(slice string) string {
	if slice == "" || slice == "-.slice" {
		return ""
	}
	name := strings.TrimSuffix(slice, ".slice")
	var path, prefix string
	for _, part := range strings.Split(name, "-") {
		if prefix == "" {
			prefix = part
		} else {
			prefix += "-" + part
		}
		path += "/" + prefix + ".slice"
	}
	return path
}

// Read returns the cgroup's cpuset.cpus and cpuset.mems; ErrGone when the
// cgroup does not exist.
func (r Root) Read(cgroupsPath string) (cpus, mems cpuset.CPUSet, err error) {
	dir, err := r.Dir(cgroupsPath)
	if err != nil {
		return cpus, mems, err
	}
	readList := func(name string) (cpuset.CPUSet, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return cpuset.New(), ErrGone
		}
		if err != nil {
			return cpuset.New(), err
		}
		s, err := cpuset.Parse(strings.TrimSpace(string(b)))
		if err != nil {
			return cpuset.New(), fmt.Errorf("%s: %q: %w", filepath.Join(dir, name), strings.TrimSpace(string(b)), err)
		}
		return s, nil
	}
	if cpus, err = readList("cpuset.cpus"); err != nil {
		return cpus, mems, err
	}
	mems, err = readList("cpuset.mems")
	return cpus, mems, err
}

// WriteCPUs writes cpus into the cgroup's cpuset.cpus; ErrGone when the
// cgroup does not exist.
func (r Root) WriteCPUs(cgroupsPath, cpus string) error {
	return r.writeFile(cgroupsPath, "cpuset.cpus", cpus)
}

// WriteMems writes mems into the cgroup's cpuset.mems; ErrGone when the
// cgroup does not exist.
func (r Root) WriteMems(cgroupsPath, mems string) error {
	return r.writeFile(cgroupsPath, "cpuset.mems", mems)
}

func (r Root) writeFile(cgroupsPath, name, value string) error {
	dir, err := r.Dir(cgroupsPath)
	if err != nil {
		return err
	}
	return writeAt(filepath.Join(dir, name), value)
}

// writeAt writes value into the cgroup file at path; ErrGone when it does
// not exist.
func writeAt(path, value string) error {
	// No O_CREATE: a cgroup file that is not there is a cgroup that is
	// gone. O_TRUNC as a shell redirection does (cgroupfs ignores it; a
	// plain file, as in tests, needs it). Plain system calls rather than
	// os.File: a pass writes every shared-pool cgroup, and os.OpenFile's
	// non-blocking set-up and poller registration cost as much again as
	// the three calls.
	fd, err := eintr.Retry(func() (int, error) {
		return syscall.Open(path, syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
	})
	if err == syscall.ENOENT {
		return ErrGone
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, werr := eintr.Retry(func() (int, error) { return syscall.Write(fd, []byte(value)) })
	cerr := syscall.Close(fd)
	switch {
	case werr != nil:
		return fmt.Errorf("write %q to %s: %w", value, path, werr)
	case n != len(value):
		return fmt.Errorf("write %q to %s: %w", value, path, io.ErrShortWrite)
	case cerr != nil:
		return &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}

// CpusetRoot is the directory under which the cpuset files of every
// cgroup are: the cpuset hierarchy (v1) or the unified one (v2).
func (r Root) CpusetRoot() string {
	if r.unified {
		return r.root
	}
	return filepath.Join(r.root, "cpuset")
}

// Writable reports why the cpuset hierarchy's file system cannot be
// written: it is missing or mounted read-only. Not access(2): a cgroup v1
// hierarchy's root directory is r-x for everyone, and the DaemonSet's
// root without capabilities still writes the cgroup files it owns.
func (r Root) Writable() error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.CpusetRoot(), &st); err != nil {
		return err
	}
	if st.Flags&stRdonly != 0 {
		return syscall.EROFS
	}
	return nil
}

// stRdonly is ST_RDONLY of statfs(2)'s f_flags.
const stRdonly = 0x1
