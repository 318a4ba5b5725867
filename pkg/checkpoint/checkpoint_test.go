package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type payload struct {
	Shared  string            `json:"shared"`
	Entries map[string]string `json:"entries"`
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "nested")
	f := New(dir, "cpualign.json")
	in := payload{Shared: "0-1,8-9", Entries: map[string]string{"pod1/ctr": "2-5"}}
	if err := f.Save(in); err != nil {
		t.Fatalf("Save: %v", err)
	}
	var out payload
	if err := f.Load(&out); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("Load = %+v, want %+v", out, in)
	}
	// The document carries the version and the sha256 of the compact data.
	raw, err := os.ReadFile(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	wantSum := sum(`{"shared":"0-1,8-9","entries":{"pod1/ctr":"2-5"}}`)
	if !strings.Contains(string(raw), `"version": 1`) || !strings.Contains(string(raw), wantSum) {
		t.Errorf("file lacks version 1 or checksum %s:\n%s", wantSum, raw)
	}
	// Overwriting replaces the content.
	in.Shared = "0-15"
	if err := f.Save(in); err != nil {
		t.Fatal(err)
	}
	if err := f.Load(&out); err != nil || out.Shared != "0-15" {
		t.Errorf("after second Save: %+v, %v", out, err)
	}
	// No temporary file is left behind.
	left, _ := filepath.Glob(filepath.Join(dir, ".cpualign.json.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f := New(dir, "cpualign.json")
	if err := f.Save(payload{Shared: "0"}); err != nil {
		t.Fatal(err)
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v, want 0700", di.Mode().Perm())
	}
	fi, err := os.Stat(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestNotFound(t *testing.T) {
	f := New(t.TempDir(), "cpualign.json")
	var p payload
	if err := f.Load(&p); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load of missing file = %v, want ErrNotFound", err)
	}
	if _, err := f.SetAside(); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetAside of missing file = %v, want ErrNotFound", err)
	}
}

func TestCorrupt(t *testing.T) {
	good := `{"shared":"0-3","entries":{}}`
	for _, tc := range []struct {
		name   string
		doc    string
		reason string
	}{
		{"empty", "", "empty file"},
		{"garbage", "\x00\x01binary", "not a valid checkpoint document"},
		{"truncated", `{"version":1,"checksum":"` + sum(good) + `","data":{"shared":"0-3","ent`, "truncated"},
		{"unknown version", `{"version":3,"checksum":"` + sum(good) + `","data":` + good + `}`, "unknown version 3"},
		{"version missing", `{"checksum":"` + sum(good) + `","data":` + good + `}`, "unknown version 0"},
		{"checksum mismatch", `{"version":1,"checksum":"` + sum(good) + `","data":{"shared":"0-7","entries":{}}}`, "checksum mismatch"},
		{"checksum without prefix", `{"version":1,"checksum":"abc","data":` + good + `}`, `checksum "abc"`},
		{"no data", `{"version":1,"checksum":"` + sum("null") + `","data":null}`, "no data"},
		{"unknown envelope field", `{"version":1,"checksum":"` + sum(good) + `","data":` + good + `,"extra":1}`, "unknown field"},
		{"trailing data", `{"version":1,"checksum":"` + sum(good) + `","data":` + good + `} {}`, "trailing data"},
		{"data of wrong shape", `{"version":1,"checksum":"` + sum(`{"shared":5}`) + `","data":{"shared":5}}`, "does not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(t.TempDir(), "cpualign.json")
			if err := os.WriteFile(f.Path(), []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var p payload
			err := f.Load(&p)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Load = %v (%T), want *CorruptError", err, err)
			}
			if ce.Path != f.Path() || !strings.Contains(ce.Reason, tc.reason) {
				t.Errorf("CorruptError{%q, %q}, want path %q and reason containing %q", ce.Path, ce.Reason, f.Path(), tc.reason)
			}
			if !strings.Contains(err.Error(), f.Path()) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// A document reformatted by hand (indentation changed) still verifies: the
// checksum is over the compact data.
func TestChecksumIgnoresWhitespace(t *testing.T) {
	f := New(t.TempDir(), "cpualign.json")
	doc := "{\"version\":1,\"checksum\":\"" + sum(`{"shared":"0-3","entries":{"a":"1"}}`) + "\",\n\"data\": {\n  \"shared\": \"0-3\",\n  \"entries\": {\"a\": \"1\"}\n}}\n"
	if err := os.WriteFile(f.Path(), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var p payload
	if err := f.Load(&p); err != nil || p.Shared != "0-3" || p.Entries["a"] != "1" {
		t.Errorf("Load = %+v, %v", p, err)
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := New(dir, "cpualign.json")
	if err := os.Symlink(target, f.Path()); err != nil {
		t.Fatal(err)
	}
	var p payload
	var ce *CorruptError
	if err := f.Load(&p); !errors.As(err, &ce) || !strings.Contains(ce.Reason, "symbolic link") {
		t.Errorf("Load through symlink = %v, want CorruptError about the symlink", err)
	}
	if err := f.Save(payload{Shared: "0"}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Save over symlink = %v, want refusal", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("symlink target changed to %q", b)
	}
	// Setting the link aside moves the link, not its target.
	aside, err := f.SetAside()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(aside); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("set-aside %s is not the symlink: %v", aside, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("symlink target changed to %q", b)
	}
	if err := f.Save(payload{Shared: "0"}); err != nil {
		t.Errorf("Save after setting the link aside: %v", err)
	}
}

func TestSetAside(t *testing.T) {
	dir := t.TempDir()
	f := New(dir, "cpualign.json")
	for i, content := range []string{"first bad", "second bad"} {
		if err := os.WriteFile(f.Path(), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := f.SetAside()
		if err != nil {
			t.Fatal(err)
		}
		want := f.Path() + ".corrupt-" + string(rune('1'+i))
		if got != want {
			t.Errorf("SetAside = %q, want %q", got, want)
		}
		// Nothing is deleted: the bad content is kept for inspection.
		if b, err := os.ReadFile(got); err != nil || string(b) != content {
			t.Errorf("%s holds %q, %v; want %q", got, b, err, content)
		}
		if _, err := os.Lstat(f.Path()); !os.IsNotExist(err) {
			t.Errorf("checkpoint still present after SetAside: %v", err)
		}
	}
}

func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	f := New(dir, "cpualign.json")
	stale := filepath.Join(dir, ".cpualign.json.tmp-123")
	other := filepath.Join(dir, ".other.tmp-1")
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.RemoveStaleTemps(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp not removed")
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("unrelated file removed: %v", err)
	}
}

func TestLock(t *testing.T) {
	f := New(filepath.Join(t.TempDir(), "s"), "cpualign.json")
	unlock, err := f.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(f.Dir(), "cpualign.json").Lock(); err == nil || !strings.Contains(err.Error(), "another nri-cpualign") {
		t.Errorf("second Lock = %v, want 'locked' error", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	unlock2, err := f.Lock()
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
}

func TestSaveUnencodable(t *testing.T) {
	f := New(t.TempDir(), "cpualign.json")
	if err := f.Save(map[string]any{"c": make(chan int)}); err == nil {
		t.Error("Save of a channel succeeded")
	}
	if _, err := os.Stat(f.Path()); !os.IsNotExist(err) {
		t.Error("a failed Save left a file")
	}
}
