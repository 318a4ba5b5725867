package kubever

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Version{
		"": V138, "1.38": V138, "v1.38": V138, "1.38.0-beta.0": V138,
		"1.37": V137, " 1.37 ": V137, "v1.37.2": V137,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1.36", "1.39", "138", "1", "latest", "1.37.2.1"} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), Accepted) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", in, err, Accepted)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, v := range []Version{V137, V138} {
		if got, err := Parse(v.String()); err != nil || got != v || !v.Valid() {
			t.Errorf("%v: Parse(String()) = %v, %v", v, got, err)
		}
	}
	if Version(0) != Default || Default != V138 {
		t.Errorf("the zero Version must be the default, 1.38")
	}
	if Version(7).Valid() || Version(7).String() != "Version(7)" {
		t.Errorf("Version(7): Valid %t, String %q", Version(7).Valid(), Version(7).String())
	}
}
