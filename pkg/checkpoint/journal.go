package checkpoint

// The journal makes a decision durable with one fdatasync instead of the
// snapshot's two fsyncs (file, then directory after the rename). Records
// are appended to a file that was filled with zeros when it was created,
// so an append overwrites blocks that are already allocated and written
// and fdatasync has no metadata to flush. When the file is full the
// caller writes a snapshot (which names the journal and the last record it
// includes) and starts again at the file's first record slot, overwriting
// what is there: sequence numbers never go back, so a record left from an
// earlier pass is told apart by its number.
//
// Where the file system allows it, records are written through a second
// descriptor opened O_DIRECT|O_DSYNC: the write is durable when it
// returns, without the page cache's writeback before the flush (on this
// project's VM disk 150-170 µs instead of 210-290 µs for write +
// fdatasync). Elsewhere (tmpfs refuses O_DIRECT) and after any refusal of
// a direct write, a record is written and fdatasynced.
//
// Layout: block 0 (512 bytes) is the header
//
//	"nri-cpualign journal 1\n" id "\n" ... crc32c(header[:508]) at 508
//
// and every record starts on a 512-byte boundary:
//
//	magic "NCJ1" | length uint32 | seq uint64 | crc32c(seq, payload) uint32 | payload
//
// (little endian). Replay reads records from block 1 while each is intact
// and numbered one more than the last. Where that stops, a record that is
// intact and numbered higher further on means a record the caller was told
// was durable is damaged: *CorruptError. Otherwise what follows is a torn
// last record (written, never acknowledged) or the remains of an earlier
// pass, and is ignored.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"github.com/nri-cpualign/nri-cpualign/pkg/eintr"
)

const (
	journalBlock   = 512
	journalHdrLen  = 20
	journalMagic   = "NCJ1"
	journalTitle   = "nri-cpualign journal 1\n"
	journalCRCAt   = journalBlock - 4
	maxRecordBytes = 64 << 20 // a sanity bound on a record's length field
)

// DefaultJournalSize is the journal file's size: about 8,000 decisions of
// one block between two snapshots.
const DefaultJournalSize = 4 << 20

// ErrJournalFull is returned by Append when the record does not fit in
// the rest of the file: the caller writes a snapshot and calls Rewind.
var ErrJournalFull = errors.New("checkpoint: journal full")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Journal is an open journal file. Not safe for concurrent use.
type Journal struct {
	f      *os.File
	direct *os.File // O_DIRECT|O_DSYNC, nil when refused
	buf    []byte   // where records are assembled (see block)
	path   string
	id     string
	size   int64
	off    int64  // where the next record goes
	next   uint64 // the next record's sequence number
}

// JournalRecord is one replayed record.
type JournalRecord struct {
	Seq     uint64
	Payload []byte
}

// TornTail describes what Replay ignored after the last intact record
// when it looks like an interrupted append: a record header numbered one
// more than the last record but not intact. Nil when the journal ends
// cleanly.
type TornTail struct {
	Offset int64
	Seq    uint64
}

// JournalPath is the journal's path for a checkpoint named name in dir.
func JournalPath(dir, name string) string { return filepath.Join(dir, name+".journal") }

// CreateJournal writes a new journal file of size bytes (zeros after the
// header; at least two blocks) with a fresh random id, replacing any
// journal at the same path atomically, and opens it for appending records
// numbered from next. It costs the size in writes and two fsyncs: it runs
// when there is no usable journal, not per decision.
func CreateJournal(dir, name string, size int64, next uint64) (*Journal, error) {
	if size < 2*journalBlock {
		size = 2 * journalBlock
	}
	size -= size % journalBlock
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("checkpoint: journal id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: create state dir: %w", err)
	}
	path := JournalPath(dir, name)
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("checkpoint: %s is a symbolic link; refusing to replace it (remove it or choose another state_dir)", path)
	}
	hdr := make([]byte, journalBlock)
	copy(hdr, journalTitle+id+"\n")
	binary.LittleEndian.PutUint32(hdr[journalCRCAt:], crc32.Checksum(hdr[:journalCRCAt], castagnoli))
	zeros := make([]byte, 64<<10)
	doc := [][]byte{hdr}
	for left := size - journalBlock; left > 0; left -= int64(len(zeros)) {
		doc = append(doc, zeros[:min(left, int64(len(zeros)))])
	}
	if err := writeAtomic(dir, path, "."+name+".journal.tmp-*", doc); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	j := &Journal{f: f, path: path, id: id, size: size, off: journalBlock, next: next}
	j.openDirect()
	return j, nil
}

// ID is the journal's id, which the snapshot names.
func (j *Journal) ID() string { return j.id }

// Path is the journal file's path.
func (j *Journal) Path() string { return j.path }

// Next is the sequence number the next appended record gets.
func (j *Journal) Next() uint64 { return j.next }

// Offset is where the next record goes.
func (j *Journal) Offset() int64 { return j.off }

// Size is the journal file's size.
func (j *Journal) Size() int64 { return j.size }

// Close closes the file.
func (j *Journal) Close() error {
	if j.direct != nil {
		j.direct.Close()
		j.direct = nil
	}
	return j.f.Close()
}

// openDirect opens the descriptor for direct, synchronous writes, if the
// file system has them.
func (j *Journal) openDirect() {
	f, err := os.OpenFile(j.path, os.O_RDWR|syscall.O_DIRECT|syscall.O_DSYNC|syscall.O_NOFOLLOW, 0)
	if err == nil {
		j.direct = f
	}
}

// block returns n bytes of the journal's buffer, starting on a
// 512-byte boundary in memory (O_DIRECT wants the memory aligned too).
// The record is assembled there: no copy, no allocation per append.
func (j *Journal) block(n int) []byte {
	if cap(j.buf) < n+journalBlock {
		j.buf = make([]byte, 2*n+journalBlock)
	}
	j.buf = j.buf[:cap(j.buf)]
	at := (journalBlock - int(uintptr(unsafe.Pointer(unsafe.SliceData(j.buf)))%journalBlock)) % journalBlock
	return j.buf[at : at+n]
}

// writeDirect writes rec at off through the direct descriptor; false when
// the file system refused it (alignment, no O_DIRECT): the caller falls
// back to the page cache and stops trying.
func (j *Journal) writeDirect(rec []byte, off int64) (bool, error) {
	_, err := j.direct.WriteAt(rec, off)
	if errors.Is(err, syscall.EINVAL) {
		j.direct.Close()
		j.direct = nil
		return false, nil
	}
	return true, err
}

// Rewind makes the next record go to the first record slot, after a
// snapshot holding every record so far was made durable.
func (j *Journal) Rewind() { j.off = journalBlock }

// Append writes payload as the record numbered Next and makes it durable
// (one fdatasync). ErrJournalFull: nothing was written. On any other
// error the journal must not be appended to again (what reached the disk
// is unknown); the caller writes a snapshot with a new journal.
func (j *Journal) Append(payload []byte) error {
	n := int64(journalHdrLen + len(payload))
	n += (journalBlock - n%journalBlock) % journalBlock
	if len(payload) > maxRecordBytes || j.off+n > j.size {
		return ErrJournalFull
	}
	rec := j.block(int(n))
	copy(rec, journalMagic)
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(rec[8:], j.next)
	binary.LittleEndian.PutUint32(rec[16:], recordCRC(rec[8:16], payload))
	copy(rec[journalHdrLen:], payload)
	// The rest of the last block is zeroed: what an earlier pass left
	// there must not look like the start of a record to a later reader.
	clear(rec[journalHdrLen+len(payload):])
	if j.direct != nil {
		done, err := j.writeDirect(rec, j.off)
		if err != nil {
			return fmt.Errorf("checkpoint: write %s: %w", j.path, err)
		}
		if done {
			j.off += n
			j.next++
			return nil
		}
	}
	if _, err := j.f.WriteAt(rec, j.off); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", j.path, err)
	}
	if err := fdatasync(j.f); err != nil {
		return fmt.Errorf("checkpoint: fdatasync %s: %w", j.path, err)
	}
	j.off += n
	j.next++
	return nil
}

func fdatasync(f *os.File) error {
	_, err := eintr.Retry(func() (int, error) { return 0, syscall.Fdatasync(int(f.Fd())) })
	return err
}

func recordCRC(seq, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(seq, castagnoli), castagnoli, payload)
}

// OpenJournal reads the journal for a checkpoint named name in dir and
// returns the records numbered after base, in order, when the journal's
// id is id. It returns ErrNotFound when there is no journal file,
// *CorruptError when the file is not this journal (another id, a bad
// header, a symbolic link) or a record before the tail is damaged or
// missing. The returned Journal appends after everything the file holds
// (the caller rewinds it after its next snapshot).
func OpenJournal(dir, name, id string, base uint64) (*Journal, []JournalRecord, *TornTail, error) {
	path := JournalPath(dir, name)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, nil, &CorruptError{Path: path, Reason: "not a regular file"}
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("checkpoint: read %s: %w", path, err)
	}
	r := ReplayJournal(raw, base)
	if r.Problem == "" && r.ID != id {
		r.Problem = fmt.Sprintf("journal id %q, the snapshot names %q", r.ID, id)
	}
	if r.Problem != "" {
		f.Close()
		return nil, nil, nil, &CorruptError{Path: path, Reason: r.Problem}
	}
	size := int64(len(raw)) - int64(len(raw))%journalBlock
	j := &Journal{f: f, path: path, id: r.ID, size: size, off: r.End, next: r.Last + 1}
	j.openDirect()
	return j, r.Records, r.Torn, nil
}

// Replay is what ReplayJournal found in a journal file.
type Replay struct {
	ID      string
	Records []JournalRecord // numbered base+1, base+2, ... from the first slot
	Torn    *TornTail
	Last    uint64 // the last record's number (base with none)
	End     int64  // the offset after the last record
	Problem string // non-empty: the file cannot be trusted
}

// ReplayJournal parses a journal file's bytes, reading the records
// numbered after base. It never panics, whatever the input
// (FuzzReplayJournal).
func ReplayJournal(raw []byte, base uint64) Replay {
	bad := func(format string, a ...any) Replay { return Replay{Problem: fmt.Sprintf(format, a...)} }
	if len(raw) < journalBlock {
		return bad("%d bytes, shorter than the %d-byte header", len(raw), journalBlock)
	}
	hdr := raw[:journalBlock]
	if crc32.Checksum(hdr[:journalCRCAt], castagnoli) != binary.LittleEndian.Uint32(hdr[journalCRCAt:]) {
		return bad("header checksum mismatch")
	}
	rest, ok := bytes.CutPrefix(hdr[:journalCRCAt], []byte(journalTitle))
	if !ok {
		return bad("not a journal of this format (bad title line)")
	}
	nl := bytes.IndexByte(rest, '\n')
	if nl < 0 {
		return bad("header has no id line")
	}
	r := Replay{ID: string(rest[:nl]), Last: base, End: journalBlock}
	for prev := uint64(0); ; {
		seq, payload, n, ok := recordAt(raw, r.End)
		if ok && seq <= base && seq > prev && len(r.Records) == 0 {
			// A snapshot written since holds it (the crash came before
			// the first append after it).
			prev = seq
			r.End += n
			continue
		}
		if !ok || seq != r.Last+1 {
			if ok && seq > r.Last+1 {
				return bad("record %d at offset %d follows record %d: records are missing", seq, r.End, r.Last)
			}
			if !ok && headerSeq(raw, r.End) == r.Last+1 {
				r.Torn = &TornTail{Offset: r.End, Seq: r.Last + 1}
			}
			break
		}
		r.Records = append(r.Records, JournalRecord{Seq: seq, Payload: payload})
		r.Last = seq
		r.End += n
	}
	// Nothing intact and numbered later may follow: that would be an
	// acknowledged record lost in between.
	for o := r.End + journalBlock; o+journalHdrLen <= int64(len(raw)); o += journalBlock {
		if seq, _, _, ok := recordAt(raw, o); ok && seq > r.Last {
			return bad("record %d at offset %d is intact but the records before it end at %d (offset %d): a record in between is damaged", seq, o, r.Last, r.End)
		}
	}
	return r
}

// recordAt parses the record at off: its number, payload and the bytes it
// takes (whole blocks); ok is false unless it is intact.
func recordAt(raw []byte, off int64) (seq uint64, payload []byte, n int64, ok bool) {
	if off+journalHdrLen > int64(len(raw)) || string(raw[off:off+4]) != journalMagic {
		return 0, nil, 0, false
	}
	l := int64(binary.LittleEndian.Uint32(raw[off+4:]))
	if l > maxRecordBytes || off+journalHdrLen+l > int64(len(raw)) {
		return 0, nil, 0, false
	}
	seq = binary.LittleEndian.Uint64(raw[off+8:])
	payload = raw[off+journalHdrLen : off+journalHdrLen+l]
	if recordCRC(raw[off+8:off+16], payload) != binary.LittleEndian.Uint32(raw[off+16:]) {
		return 0, nil, 0, false
	}
	n = journalHdrLen + l
	return seq, payload, n + (journalBlock-n%journalBlock)%journalBlock, true
}

// headerSeq is the sequence number in a record header at off, intact or
// not (0 when there is no header).
func headerSeq(raw []byte, off int64) uint64 {
	if off+journalHdrLen > int64(len(raw)) || string(raw[off:off+4]) != journalMagic {
		return 0
	}
	return binary.LittleEndian.Uint64(raw[off+8:])
}

// SetAsideJournal renames the journal to <name>.journal.corrupt-<n>, as
// SetAside does for the snapshot.
func SetAsideJournal(dir, name string) (string, error) {
	return New(dir, name+".journal").SetAside()
}
