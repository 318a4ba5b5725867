package cgroups

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nri-cpualign/nri-cpualign/pkg/eintr"
)

// CPUsFile is one cgroup's cpuset.cpus for a writer that writes it again
// and again (the direct applier's passes write every shared-pool
// container's at each change of the pool). The path is resolved once,
// and the file can stay open between writes: resolving the path at each
// write made most of a pass's garbage, and the open and close were two of
// its three system calls per container (their path walks also left the
// caches cold for the next NRI answer). A cgroup file system does not
// keep a removed cgroup for an open file: its writes fail with ENODEV,
// reported as ErrGone.
type CPUsFile struct {
	path string
	f    *os.File // nil when not open
	// plain: not on a cgroup file system (tests' fake trees). A write
	// truncates, and a file no longer linked is a cgroup gone, as
	// cgroupfs would say.
	plain bool
}

// CPUsFile resolves the cgroup's cpuset.cpus; nothing is opened.
func (r Root) CPUsFile(cgroupsPath string) (*CPUsFile, error) {
	dir, err := r.Dir(cgroupsPath)
	if err != nil {
		return nil, err
	}
	return &CPUsFile{path: filepath.Join(dir, "cpuset.cpus")}, nil
}

// Path is the file's path.
func (c *CPUsFile) Path() string { return c.path }

// Open reports whether the file is held open.
func (c *CPUsFile) Open() bool { return c.f != nil }

// Write writes cpus into the file; ErrGone when the cgroup does not
// exist. With keep, a file not open yet is opened and stays open for the
// next writes; without, a file not open is written by path, as
// Root.WriteCPUs does. After ErrGone or any other failure the file is
// closed: a cgroup made again at the same path is opened afresh.
func (c *CPUsFile) Write(cpus string, keep bool) error {
	if c.f == nil && !keep {
		return writeAt(c.path, cpus)
	}
	if c.f == nil {
		if err := c.open(); err != nil {
			return err
		}
	}
	err := c.write(cpus)
	if err != nil {
		c.Close()
	}
	return err
}

func (c *CPUsFile) open() error {
	// No O_CREATE: a cgroup file that is not there is a cgroup that is
	// gone. os.NewFile rather than os.OpenFile: a blocking descriptor
	// stays out of the runtime's poller (kernfs files answer poll, and
	// hundreds would sit in its epoll set for nothing).
	fd, err := eintr.Retry(func() (int, error) {
		return syscall.Open(c.path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	})
	if err == syscall.ENOENT {
		return ErrGone
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: c.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), c.path)
	var st syscall.Statfs_t
	if _, err := eintr.Retry(func() (int, error) { return 0, syscall.Fstatfs(int(f.Fd()), &st) }); err != nil {
		f.Close()
		return &fs.PathError{Op: "statfs", Path: c.path, Err: err}
	}
	c.f, c.plain = f, st.Type != cgroupMagic && st.Type != cgroup2Magic
	return nil
}

// The f_type of statfs(2) on cgroup v1 and v2 file systems.
const (
	cgroupMagic  = 0x27e0eb
	cgroup2Magic = 0x63677270
)

func (c *CPUsFile) write(cpus string) error {
	size := int64(-1) // a plain file's length before the write
	if c.plain {
		var st syscall.Stat_t
		if _, err := eintr.Retry(func() (int, error) { return 0, syscall.Fstat(int(c.f.Fd()), &st) }); err != nil {
			return &fs.PathError{Op: "stat", Path: c.path, Err: err}
		}
		if st.Nlink == 0 {
			return ErrGone
		}
		size = st.Size
	}
	n, err := c.f.WriteAt([]byte(cpus), 0)
	switch {
	case errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENOENT):
		return ErrGone
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("write %q to %s: %w", cpus, c.path, err)
	case n != len(cpus):
		return fmt.Errorf("write %q to %s: %w", cpus, c.path, io.ErrShortWrite)
	}
	// Only a shorter value leaves bytes of the old one to cut: the
	// truncate was a third system call per file of every pass.
	if c.plain && int64(len(cpus)) < size {
		return c.f.Truncate(int64(len(cpus)))
	}
	return nil
}

// Close closes the file if it is open; the next Write opens it again.
func (c *CPUsFile) Close() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}
