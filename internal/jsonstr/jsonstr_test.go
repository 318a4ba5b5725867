package jsonstr

import (
	"encoding/json"
	"testing"
)

// Append writes what json.Marshal writes, for plain and escaped strings.
func TestAppendMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "0-3,8-11", "/kubepods/pod1/abc", `a"b`, `c\d`, "<&>", "tab\there", "ünïcode", "\x7f", "\u2028"} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(Append([]byte("x"), s)); got != "x"+string(want) {
			t.Errorf("Append(%q) = %s, want x%s", s, got, want)
		}
	}
}

func FuzzAppend(f *testing.F) {
	f.Add("0-3")
	f.Add("<\"\\>")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Append(nil, s); string(got) != string(want) {
			t.Errorf("Append(%q) = %s, want %s", s, got, want)
		}
	})
}
