package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLoad writes arbitrary bytes as the checkpoint file and loads it. Load
// must never panic; anything it cannot trust must be a *CorruptError that
// names the file; what it accepts must survive Save/Load unchanged. Seeds:
// testdata/fuzz/FuzzLoad and a valid file written by Save.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	good := New(dir, "seed.json")
	if err := good.Save(map[string]any{"engine": map[string]any{"shared": "0-3", "assignments": map[string]any{"p": map[string]any{"c": "4-7"}}}}); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(good.Path())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(`{"version":2,"checksum":"sha256:00","data":{}}`))
	f.Add([]byte(`{"version":1,"checksum":"md5:00","data":null}`))
	f.Add([]byte(`{"version":1,"checksum":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","data":{}} trailing`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		dir := t.TempDir()
		cf := New(dir, "state.json")
		if err := os.WriteFile(cf.Path(), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		var v any
		err := cf.Load(&v)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Load(%q) = %T %v, want *CorruptError", raw, err, err)
			}
			if ce.Path != cf.Path() || ce.Reason == "" {
				t.Fatalf("Load(%q): error %q does not name the file %s and the fault", raw, err, cf.Path())
			}
			return
		}
		// Accepted: saving it again gives the same value back.
		again := New(filepath.Join(dir, "again"), "state.json")
		if err := again.Save(v); err != nil {
			t.Fatalf("Save of a loaded value %v: %v", v, err)
		}
		var w any
		if err := again.Load(&w); err != nil {
			t.Fatalf("Load after Save: %v", err)
		}
		if !reflect.DeepEqual(v, w) {
			t.Fatalf("round trip changed the payload: %v -> %v", v, w)
		}
	})
}

// FuzzReplayJournal replays arbitrary bytes as a journal. It must never
// panic; what it accepts is records numbered base+1, base+2, ... in
// order, and replaying the file cut right after those records, or with
// what follows them overwritten by zeros, gives the same records (a torn
// or stale tail never changes what came before). Seeds: a journal of
// three records, cut, flipped and with garbage at the tail.
func FuzzReplayJournal(f *testing.F) {
	j, err := CreateJournal(f.TempDir(), "seed.json", 8*journalBlock, 3)
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"{}", `{"a":1}`, string(make([]byte, 700))} {
		if err := j.Append([]byte(p)); err != nil {
			f.Fatal(err)
		}
	}
	j.Close()
	raw, err := os.ReadFile(j.Path())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw, uint64(2))
	f.Add(raw[:3*journalBlock+7], uint64(2))
	f.Add(raw, uint64(3))
	flip := append([]byte(nil), raw...)
	flip[journalBlock+journalHdrLen] ^= 4
	f.Add(flip, uint64(2))
	f.Add(append(raw[:2*journalBlock:2*journalBlock], "NCJ1garbage garbage garbage"...), uint64(2))
	f.Fuzz(func(t *testing.T, raw []byte, base uint64) {
		if base > 1<<62 {
			base %= 1 << 62
		}
		r := ReplayJournal(raw, base)
		if r.Problem != "" {
			return
		}
		for i, rec := range r.Records {
			if rec.Seq != base+uint64(i)+1 {
				t.Fatalf("record %d numbered %d, want %d", i, rec.Seq, base+uint64(i)+1)
			}
		}
		// The last record's padding may run past a cut file.
		if r.End >= int64(len(raw))+journalBlock || r.End%journalBlock != 0 {
			t.Fatalf("end %d past the %d bytes or not on a block", r.End, len(raw))
		}
		end := min(r.End, int64(len(raw)))
		for _, tail := range [][]byte{raw[:end], append(append([]byte(nil), raw[:end]...), make([]byte, int64(len(raw))-end)...)} {
			again := ReplayJournal(tail, base)
			if again.Problem != "" || len(again.Records) != len(r.Records) {
				t.Fatalf("the records alone: %d records, problem %q; want the %d records", len(again.Records), again.Problem, len(r.Records))
			}
			for i := range again.Records {
				if string(again.Records[i].Payload) != string(r.Records[i].Payload) {
					t.Fatalf("record %d changed without its tail", again.Records[i].Seq)
				}
			}
		}
	})
}
