// Package checkpoint keeps one JSON document on disk so that the daemon's
// state survives restarts. The file is
//
//	{"version": 1, "checksum": "sha256:<hex>", "data": {...}}
//
// where the checksum is over the compact JSON bytes of data. Writes are
// atomic (temporary file in the same directory, fsync, rename, fsync of the
// directory), so a crash leaves either the old or the new document, never a
// mix. The payload's shape is the caller's: Save and Load take any value
// that encoding/json handles. journal.go adds an append-only journal of
// records that completes a snapshot (one fdatasync per record).
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Version is the envelope version of a snapshot that holds the whole
// state. Bump it only together with a migration of the old format and a
// golden file for it.
const Version = 1

// VersionJournal is the envelope of a snapshot that a journal completes
// (the same document; its data names the journal). Builds from before
// the journal refuse it as an unknown version, and so set it aside and
// rebuild from the runtime, rather than read a state that lacks the
// journal's decisions.
const VersionJournal = 2

const checksumPrefix = "sha256:"

// ErrNotFound is returned by Load when there is no checkpoint file: a first
// start.
var ErrNotFound = errors.New("checkpoint: not found")

// CorruptError is a checkpoint file that cannot be trusted: not JSON,
// truncated, of an unknown version, with a wrong checksum, or not a regular
// file. The caller sets it aside (SetAside) and rebuilds its state.
type CorruptError struct {
	Path   string
	Reason string
}

// Error names the file and why it cannot be trusted.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint %s is corrupt: %s", e.Path, e.Reason)
}

// envelope is the file's top level.
type envelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// File is one checkpoint file, Dir/Name. It is not safe for concurrent use;
// the daemon calls it under its state lock.
type File struct {
	dir, name string
}

// New returns the checkpoint file name in dir. Nothing is created until
// Save.
func New(dir, name string) *File { return &File{dir: dir, name: name} }

// Path is the checkpoint file's path.
func (f *File) Path() string { return filepath.Join(f.dir, f.name) }

// Dir is the directory holding the checkpoint.
func (f *File) Dir() string { return f.dir }

// Save writes data atomically. The directory is created with mode 0700 if
// missing, the file has mode 0600. A checkpoint path that is a symbolic
// link is refused: the state file must be ours, not a pointer elsewhere.
func (f *File) Save(data any) error {
	// json.Marshal's output is compact already (it compacts what
	// Marshalers return too): these are the bytes the checksum covers.
	payload, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("checkpoint: encode payload: %w", err)
	}
	return f.SaveCompact(payload)
}

// SaveCompact is Save for a payload the caller has encoded: payload must be
// compact JSON (as json.Marshal writes it), since the checksum covers the
// payload as Load compacts it. The envelope is written around it by hand:
// re-encoding the payload as a RawMessage, indented, cost more than
// marshalling it.
func (f *File) SaveCompact(payload []byte) error { return f.SaveCompactVersion(payload, Version) }

// SaveCompactVersion is SaveCompact with the envelope version given
// (Version or VersionJournal).
func (f *File) SaveCompactVersion(payload []byte, version int) error {
	sum := sha256.Sum256(payload)
	// Written in three parts rather than copied into one buffer: with 500
	// containers the payload is ~100 KB.
	head := fmt.Appendf(nil, "{\n  \"version\": %d,\n  \"checksum\": \"%s%s\",\n  \"data\": ", version, checksumPrefix, hex.EncodeToString(sum[:]))
	doc := [][]byte{head, payload, []byte("\n}\n")}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: create state dir: %w", err)
	}
	path := f.Path()
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("checkpoint: %s is a symbolic link; refusing to replace it (remove it or choose another state_dir)", path)
	}
	return writeAtomic(f.dir, path, "."+f.name+".tmp-*", doc)
}

func writeAtomic(dir, path, pattern string, doc [][]byte) (err error) {
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp already uses 0600; Chmod keeps it so under any umask or
	// future change of CreateTemp.
	if err = tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, part := range doc {
		if _, err = tmp.Write(part); err != nil {
			return fmt.Errorf("checkpoint: write %s: %w", tmp.Name(), err)
		}
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("checkpoint: fsync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("checkpoint: close %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// The rename is durable only once the directory entry is.
	if err = syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: fsync dir %s: %w", dir, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Load reads the checkpoint into v. It returns ErrNotFound when there is no
// file and *CorruptError when the file cannot be trusted; other errors
// (e.g. permission denied) are returned as they are.
func (f *File) Load(v any) error {
	path := f.Path()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return &CorruptError{Path: path, Reason: "a symbolic link, not a regular file; refusing to follow it"}
	}
	if !fi.Mode().IsRegular() {
		return &CorruptError{Path: path, Reason: "not a regular file"}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return &CorruptError{Path: path, Reason: "empty file"}
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return &CorruptError{Path: path, Reason: "not a valid checkpoint document (truncated?): " + err.Error()}
	}
	if dec.More() {
		return &CorruptError{Path: path, Reason: "trailing data after the document"}
	}
	if env.Version != Version && env.Version != VersionJournal {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("unknown version %d (this build reads versions %d and %d)", env.Version, Version, VersionJournal)}
	}
	want, ok := strings.CutPrefix(env.Checksum, checksumPrefix)
	if !ok {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("checksum %q is not %s<hex>", env.Checksum, checksumPrefix)}
	}
	if len(env.Data) == 0 || string(env.Data) == "null" {
		return &CorruptError{Path: path, Reason: "no data"}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.Data); err != nil {
		return &CorruptError{Path: path, Reason: "data: " + err.Error()}
	}
	sum := sha256.Sum256(compact.Bytes())
	if got := hex.EncodeToString(sum[:]); got != strings.ToLower(want) {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("checksum mismatch: file says %s%s, data hashes to %s%s", checksumPrefix, want, checksumPrefix, got)}
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		return &CorruptError{Path: path, Reason: "data does not fit the state: " + err.Error()}
	}
	return nil
}

// SetAside renames the checkpoint file to <name>.corrupt-<n> (the first
// unused n from 1) so that an operator can inspect it; it never deletes
// anything. It returns the new path; with no file it returns "" and
// ErrNotFound.
func (f *File) SetAside() (string, error) {
	path := f.Path()
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "", ErrNotFound
	}
	for n := 1; n < 10000; n++ {
		dst := path + ".corrupt-" + strconv.Itoa(n)
		if _, err := os.Lstat(dst); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		// Link then remove rather than Rename: Rename would silently
		// replace a file that appeared at dst in between.
		if err := os.Link(path, dst); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			// Linking a symlink or across odd filesystems may fail;
			// fall back to a rename (dst did not exist a moment ago).
			if err := os.Rename(path, dst); err != nil {
				return "", fmt.Errorf("checkpoint: set aside %s: %w", path, err)
			}
		} else if err := os.Remove(path); err != nil {
			return "", fmt.Errorf("checkpoint: set aside %s: %w", path, err)
		}
		if err := syncDir(f.dir); err != nil {
			return "", fmt.Errorf("checkpoint: fsync dir %s: %w", f.dir, err)
		}
		return dst, nil
	}
	return "", fmt.Errorf("checkpoint: set aside %s: too many .corrupt-N files; clean up %s", path, f.dir)
}

// RemoveStaleTemps deletes temporary files a crash left between create and
// rename. Only files matching this checkpoint's own temporary-name pattern
// are touched.
func (f *File) RemoveStaleTemps() error {
	matches, err := filepath.Glob(filepath.Join(f.dir, "."+f.name+".tmp-*"))
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// CreateJournal's temporary file.
	journals, _ := filepath.Glob(filepath.Join(f.dir, "."+f.name+".journal.tmp-*"))
	matches = append(matches, journals...)
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lock takes an exclusive, non-blocking lock on <dir>/<name>.lock so that
// two daemons never write the same state. It creates dir (0700) if needed.
// The lock lasts until unlock is called or the process exits.
func (f *File) Lock() (unlock func() error, err error) {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: create state dir: %w", err)
	}
	path := f.Path() + ".lock"
	lf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: lock: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("checkpoint: %s is locked: another nri-cpualign is running with state_dir %s", path, f.dir)
		}
		return nil, fmt.Errorf("checkpoint: lock %s: %w", path, err)
	}
	return lf.Close, nil
}
