package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// buffered makes writeJournal's journals write through the page cache
// and fdatasync (the fallback where O_DIRECT is refused).
var buffered bool

// writeJournal creates a journal of size bytes in dir holding payloads
// numbered from next, and returns it with the file's bytes.
func writeJournal(t testing.TB, dir string, size int64, next uint64, payloads ...string) (*Journal, []byte) {
	t.Helper()
	j, err := CreateJournal(dir, "state.json", size, next)
	if err != nil {
		t.Fatal(err)
	}
	if buffered && j.direct != nil {
		j.direct.Close()
		j.direct = nil
	}
	for _, p := range payloads {
		if err := j.Append([]byte(p)); err != nil {
			t.Fatalf("Append(%q): %v", p, err)
		}
	}
	raw, err := os.ReadFile(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	return j, raw
}

func texts(recs []JournalRecord) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%d:%s ", r.Seq, r.Payload)
	}
	return b.String()
}

// Both ways of writing a record: direct and synchronous where the file
// system has it (ext4 here), written and fdatasynced where it has not
// (tmpfs).
func TestJournalAppendReplay(t *testing.T) {
	dirs := map[string]string{"temp dir": t.TempDir()}
	if shm, err := os.MkdirTemp("/dev/shm", "journal-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs["tmpfs"] = shm
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) { testJournalAppendReplay(t, dir) })
	}
	buffered = true
	defer func() { buffered = false }()
	t.Run("buffered", func(t *testing.T) { testJournalAppendReplay(t, t.TempDir()) })
}

func testJournalAppendReplay(t *testing.T, dir string) {
	big := strings.Repeat("x", 700) // two blocks
	j, raw := writeJournal(t, dir, 8*journalBlock, 5, "a", big, "c")
	defer j.Close()
	t.Logf("direct writes: %v", j.direct != nil)
	// c was assembled where big was: the rest of its block must be zeros.
	if tail := raw[4*journalBlock+journalHdrLen+1 : 5*journalBlock]; !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Errorf("the block of record c holds %q after its payload, want zeros", bytes.Trim(tail, "\x00"))
	}
	fi, err := os.Stat(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 8*journalBlock || fi.Mode().Perm() != 0o600 {
		t.Errorf("journal is %d bytes mode %v, want %d bytes 0600 (preallocated)", fi.Size(), fi.Mode().Perm(), 8*journalBlock)
	}
	j2, recs, torn, err := OpenJournal(dir, "state.json", j.ID(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if got, want := texts(recs), "5:a 6:"+big+" 7:c "; got != want {
		t.Errorf("replay = %q, want %q", got, want)
	}
	if torn != nil || j2.Next() != 8 {
		t.Errorf("torn %+v next %d, want none and 8", torn, j2.Next())
	}
	// Records the snapshot already holds are skipped: base 6 gives 7 only.
	r := ReplayJournal(mustRead(t, j.Path()), 6)
	if r.Problem != "" || texts(r.Records) != "7:c " {
		t.Errorf("replay after 6 = %q (%s), want 7:c", texts(r.Records), r.Problem)
	}
	// Header, a, two blocks of big, c: 5 blocks; 3 left, a 4-block record
	// does not fit and nothing is written.
	if err := j.Append([]byte(strings.Repeat("y", 3*journalBlock))); !errors.Is(err, ErrJournalFull) {
		t.Errorf("Append past the end = %v, want ErrJournalFull", err)
	}
	if err := j.Append([]byte("d")); err != nil {
		t.Fatal(err)
	}
	if r := ReplayJournal(mustRead(t, j.Path()), 4); texts(r.Records) != "5:a 6:"+big+" 7:c 8:d " {
		t.Errorf("after the refused append: %q", texts(r.Records))
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// After a snapshot the journal is rewound: new records overwrite the old
// pass, whose remains (lower numbers) end the replay without an error.
func TestJournalRewind(t *testing.T) {
	dir := t.TempDir()
	j, _ := writeJournal(t, dir, 16*journalBlock, 1, "a", strings.Repeat("b", 1200), "c", "d")
	j.Rewind() // a snapshot holds 1-4
	for _, p := range []string{"e", "f"} {
		if err := j.Append([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	r := ReplayJournal(mustRead(t, j.Path()), 4)
	if r.Problem != "" || texts(r.Records) != "5:e 6:f " || r.Torn != nil {
		t.Errorf("replay = %q torn %+v problem %q, want 5:e 6:f", texts(r.Records), r.Torn, r.Problem)
	}
	// Before the first append after the rewind, the old pass is all
	// there and none of it is after the snapshot's 4.
	j2, _ := writeJournal(t, t.TempDir(), 16*journalBlock, 1, "a", "b")
	j2.Close()
	if r := ReplayJournal(mustRead(t, j2.Path()), 2); r.Problem != "" || len(r.Records) != 0 {
		t.Errorf("stale pass: %q %q, want nothing", texts(r.Records), r.Problem)
	}
}

// A torn last record (an append cut short: never acknowledged) and garbage
// after the last record are dropped; the records before survive.
func TestJournalTornTail(t *testing.T) {
	j, raw := writeJournal(t, t.TempDir(), 8*journalBlock, 1, "a", "b", strings.Repeat("c", 600))
	j.Close()
	third := int64(3 * journalBlock)
	for n := third + 1; n < third+journalHdrLen+600; n += 97 {
		cut := append([]byte(nil), raw[:n]...)
		r := ReplayJournal(cut, 0)
		if r.Problem != "" || texts(r.Records) != "1:a 2:b " {
			t.Fatalf("cut at %d: %q %q, want 1:a 2:b", n, texts(r.Records), r.Problem)
		}
		if n >= third+16 && (r.Torn == nil || r.Torn.Seq != 3 || r.Torn.Offset != third) {
			t.Errorf("cut at %d: torn = %+v, want record 3 at %d", n, r.Torn, third)
		}
	}
	// The same record with its payload's last byte flipped (a sector of it
	// never written) and random-looking garbage after the records.
	flip := append([]byte(nil), raw...)
	flip[third+journalHdrLen+599] ^= 0xff
	if r := ReplayJournal(flip, 0); r.Problem != "" || texts(r.Records) != "1:a 2:b " || r.Torn == nil {
		t.Errorf("flipped tail: %q torn %+v %q", texts(r.Records), r.Torn, r.Problem)
	}
	garbage := append([]byte(nil), raw...)
	for i := 5 * journalBlock; i < len(garbage); i++ {
		garbage[i] = byte(i*7 + 3)
	}
	if r := ReplayJournal(garbage, 0); r.Problem != "" || len(r.Records) != 3 {
		t.Errorf("garbage tail: %q %q, want 3 records", texts(r.Records), r.Problem)
	}
}

// Damage before the tail (an acknowledged record lost with later ones
// intact), a gap in the numbers, another journal's id, a bad header: the
// journal cannot be trusted.
func TestJournalCorrupt(t *testing.T) {
	dir := t.TempDir()
	j, raw := writeJournal(t, dir, 8*journalBlock, 1, "a", "b", "c")
	j.Close()
	mid := append([]byte(nil), raw...)
	mid[2*journalBlock+journalHdrLen] ^= 1 // b's payload
	if r := ReplayJournal(mid, 0); !strings.Contains(r.Problem, "record 3") {
		t.Errorf("damaged middle record: problem %q, want record 3 named", r.Problem)
	}
	if r := ReplayJournal(raw, 5); r.Problem != "" || len(r.Records) != 0 {
		t.Errorf("base past every record: %q %q", texts(r.Records), r.Problem)
	}
	gap := append([]byte(nil), raw...)
	copy(gap[journalBlock:], raw[2*journalBlock:3*journalBlock]) // 2 where 1 was
	if r := ReplayJournal(gap, 0); !strings.Contains(r.Problem, "missing") {
		t.Errorf("gap: problem %q", r.Problem)
	}
	hdr := append([]byte(nil), raw...)
	hdr[3] ^= 1
	if r := ReplayJournal(hdr, 0); !strings.Contains(r.Problem, "header") {
		t.Errorf("bad header: problem %q", r.Problem)
	}
	if r := ReplayJournal(raw[:100], 0); r.Problem == "" {
		t.Error("a 100-byte journal was accepted")
	}
	_, _, _, err := OpenJournal(dir, "state.json", "another-id", 0)
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "another-id") {
		t.Errorf("OpenJournal with another id = %v, want a CorruptError naming it", err)
	}
	if _, _, _, err := OpenJournal(t.TempDir(), "state.json", "x", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenJournal with no file = %v, want ErrNotFound", err)
	}
	aside, err := SetAsideJournal(dir, "state.json")
	if err != nil || !strings.HasSuffix(aside, "state.json.journal.corrupt-1") {
		t.Errorf("SetAsideJournal = %q, %v", aside, err)
	}
}
