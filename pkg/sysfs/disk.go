package sysfs

import (
	"io/fs"
	"os"
	"syscall"

	"github.com/nri-cpualign/nri-cpualign/pkg/eintr"
)

// diskFS is os.DirFS(root) with a cheaper way to read a whole small file.
// Discovery reads about 2,000 files on a 256-CPU machine; os.Open registers
// each with the runtime's poller (an epoll_ctl that fails for a regular
// file and four fcntl calls around it), so a file cost nine system calls.
// readFile costs four: open, read, the read that sees the end, close;
// readDirNames the same for a directory.
type diskFS struct {
	fs.FS
	// dir is the root ending in a slash, the prefix of every path.
	dir string
}

func newDiskFS(root string) diskFS {
	dir := root
	if dir[len(dir)-1] != '/' {
		dir += "/"
	}
	return diskFS{FS: os.DirFS(root), dir: dir}
}

// open opens name (a valid fs path, slash-separated) for reading.
func (d diskFS) open(name string, flags int) (int, error) {
	p := d.dir + name
	return eintr.Retry(func() (int, error) { return syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC|flags, 0) })
}

// readFile appends the content of name (a valid fs path, slash-separated)
// to buf[:0], reading at most limit bytes. Errors are the system call's
// errno, as os.Open and (*os.File).Read report them inside their
// *fs.PathError.
func (d diskFS) readFile(name string, buf []byte, limit int) ([]byte, error) {
	fd, err := d.open(name, 0)
	if err != nil {
		return buf[:0], err
	}
	defer syscall.Close(fd)
	buf = buf[:0]
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := eintr.Retry(func() (int, error) { return syscall.Read(fd, buf[len(buf):min(cap(buf), limit)]) })
		switch {
		case err != nil:
			return buf, err
		case n == 0:
			// A short read is not the end: sysfs hands out binary
			// attributes (node cpulists) a page at a time.
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}

// readDirNames lists the entries of directory name, unsorted, reading
// them in buf (at least a page). Errors are the system call's errno, as
// for readFile.
func (d diskFS) readDirNames(name string, buf []byte) ([]string, error) {
	fd, err := d.open(name, syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var names []string
	for {
		n, err := eintr.Retry(func() (int, error) { return syscall.ReadDirent(fd, buf) })
		switch {
		case err != nil:
			return nil, err
		case n <= 0:
			return names, nil
		}
		// ParseDirent leaves out "." and "..", as os.ReadDir does.
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
}
