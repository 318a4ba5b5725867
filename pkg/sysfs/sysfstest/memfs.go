package sysfstest

import (
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// memFS is a read-only in-memory fs.FS with an index of directory entries:
// fstest.MapFS rescans every file for each directory lookup, which made
// reading a 256-CPU fixture cost 80 ms.
type memFS struct {
	files map[string]string
	dirs  map[string][]fs.DirEntry // dir -> sorted entries ("." is the root)
}

var (
	_ fs.ReadDirFS  = (*memFS)(nil)
	_ fs.StatFS     = (*memFS)(nil)
	_ fs.ReadFileFS = (*memFS)(nil)
)

func newMemFS(files map[string]string) *memFS {
	m := &memFS{files: files, dirs: map[string][]fs.DirEntry{".": nil}}
	for p, c := range files {
		dir := path.Dir(p)
		_, known := m.dirs[dir]
		m.dirs[dir] = append(m.dirs[dir], entry{name: path.Base(p), size: int64(len(c))})
		// Register each new directory in its parent, up to the first one
		// already known.
		for !known {
			parent := path.Dir(dir)
			_, known = m.dirs[parent]
			m.dirs[parent] = append(m.dirs[parent], entry{name: path.Base(dir), dir: true})
			dir = parent
		}
	}
	for d := range m.dirs {
		sort.Slice(m.dirs[d], func(i, j int) bool { return m.dirs[d][i].Name() < m.dirs[d][j].Name() })
	}
	return m
}

func (m *memFS) lookup(op, name string) (entry, error) {
	if !fs.ValidPath(name) {
		return entry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if c, ok := m.files[name]; ok {
		return entry{name: path.Base(name), size: int64(len(c))}, nil
	}
	if _, ok := m.dirs[name]; ok {
		return entry{name: path.Base(name), dir: true}, nil
	}
	return entry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// Open opens a file or directory.
func (m *memFS) Open(name string) (fs.File, error) {
	e, err := m.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if e.dir {
		return &memDir{entry: e, entries: m.dirs[name]}, nil
	}
	return &memFile{entry: e, r: strings.NewReader(m.files[name])}, nil
}

// ReadDir lists a directory, sorted by name.
func (m *memFS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := m.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if !e.dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	return append([]fs.DirEntry(nil), m.dirs[name]...), nil
}

// Stat describes a file or directory.
func (m *memFS) Stat(name string) (fs.FileInfo, error) {
	e, err := m.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// ReadFile returns a file's content.
func (m *memFS) ReadFile(name string) ([]byte, error) {
	e, err := m.lookup("read", name)
	if err != nil {
		return nil, err
	}
	if e.dir {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrInvalid}
	}
	return []byte(m.files[name]), nil
}

// entry is both the fs.DirEntry and the fs.FileInfo of a node.
type entry struct {
	name string
	dir  bool
	size int64
}

func (e entry) Name() string               { return e.name }
func (e entry) IsDir() bool                { return e.dir }
func (e entry) Type() fs.FileMode          { return e.Mode().Type() }
func (e entry) Info() (fs.FileInfo, error) { return e, nil }
func (e entry) Size() int64                { return e.size }
func (e entry) ModTime() time.Time         { return time.Time{} }
func (e entry) Sys() any                   { return nil }
func (e entry) Mode() fs.FileMode {
	if e.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

type memFile struct {
	entry
	r *strings.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.entry, nil }
func (f *memFile) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *memFile) Close() error               { return nil }

type memDir struct {
	entry
	entries []fs.DirEntry
	off     int
}

func (d *memDir) Stat() (fs.FileInfo, error) { return d.entry, nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: fs.ErrInvalid}
}
func (d *memDir) Close() error { return nil }

// ReadDir implements fs.ReadDirFile.
func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return append([]fs.DirEntry(nil), rest...), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.off += n
	return append([]fs.DirEntry(nil), rest[:n]...), nil
}
