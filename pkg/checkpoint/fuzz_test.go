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
