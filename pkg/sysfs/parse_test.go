package sysfs

import (
	"errors"
	"testing"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		in      string
		want    string // canonical list; "" = empty
		wantErr bool
	}{
		{"0-3,8,10-11\n", "0-3,8,10-11", false},
		{"  5 \n", "5", false},
		{"\n", "", false},
		{"", "", false},
		{"3,1,2", "1-3", false},
		{"65535", "65535", false},
		{"65536", "", true},
		{"0-99999999999", "", true},
		{"3-1", "", true},
		{"1,,2", "", true},
		{"1-", "", true},
		{"-1", "", true},
		{"+1", "", true},
		{"a", "", true},
		{"1 2", "", true},
		{"0-3:1/2", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseList(tc.in)
			if tc.wantErr {
				if err == nil || !errors.Is(err, ErrSyntax) {
					t.Fatalf("ParseList(%q) = %s, %v; want ErrSyntax", tc.in, got, err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseList(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int{"0\n": 0, " 17 ": 17, "-1\n": -1, "2147483647": 2147483647} {
		if got, err := ParseInt(in); err != nil || got != want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "x", "1.0", "0x10", "2147483648", "1 2"} {
		if got, err := ParseInt(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseInt(%q) = %d, %v; want ErrSyntax", in, got, err)
		}
	}
}

func TestParseDistances(t *testing.T) {
	got, err := ParseDistances("10 21  32\n")
	if err != nil || len(got) != 3 || got[0] != 10 || got[1] != 21 || got[2] != 32 {
		t.Fatalf("ParseDistances = %v, %v", got, err)
	}
	for _, in := range []string{"", "\n", "10 x", "10 -1", "10,21"} {
		if got, err := ParseDistances(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseDistances(%q) = %v, %v; want ErrSyntax", in, got, err)
		}
	}
}

func TestParseMemTotal(t *testing.T) {
	in := "Node 3 MemTotal:       32768 kB\nNode 3 MemFree:        100 kB\n"
	if got, err := ParseMemTotal(in, 3); err != nil || got != 32768*1024 {
		t.Fatalf("ParseMemTotal = %d, %v; want %d", got, err, 32768*1024)
	}
	bad := map[string]string{
		"wrong node":   "Node 2 MemTotal: 1 kB\n",
		"wrong unit":   "Node 3 MemTotal: 1 MB\n",
		"no number":    "Node 3 MemTotal: kB\n",
		"not a number": "Node 3 MemTotal: 1e3 kB\n",
		"overflow":     "Node 3 MemTotal: 18446744073709551615 kB\n",
		"no line":      "Node 3 MemFree: 1 kB\n",
		"empty":        "",
	}
	for name, in := range bad {
		if got, err := ParseMemTotal(in, 3); !errors.Is(err, ErrSyntax) {
			t.Errorf("%s: ParseMemTotal(%q) = %d, %v; want ErrSyntax", name, in, got, err)
		}
	}
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "1,,2", "65535", "3-1", "0-65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseList(s)
		if err != nil {
			return
		}
		// What parses must round-trip through the canonical form.
		again, err := ParseList(set.String())
		if err != nil || !again.Equals(set) {
			t.Fatalf("ParseList(%q) = %s does not round-trip: %s, %v", s, set, again, err)
		}
		for _, id := range set.UnsortedList() {
			if id < 0 || id > MaxCPUID {
				t.Fatalf("ParseList(%q) holds id %d", s, id)
			}
		}
	})
}

func FuzzParseMemTotal(f *testing.F) {
	f.Add("Node 0 MemTotal:       32768 kB\n", 0)
	f.Add("Node 1 MemTotal: x kB", 1)
	f.Fuzz(func(t *testing.T, s string, node int) {
		_, _ = ParseMemTotal(s, node) // must not panic
	})
}

func FuzzParseDistances(f *testing.F) {
	f.Add("10 21 21")
	f.Fuzz(func(t *testing.T, s string) {
		row, err := ParseDistances(s)
		if err == nil && len(row) == 0 {
			t.Fatalf("ParseDistances(%q) = empty row, nil error", s)
		}
	})
}
