package applier

import "testing"

// TestSupportOf: the runtimes of docs/runtimes.md's table, with the
// versions their Configure gives (containerd built with go install says
// "2.3.7+unknown"; NRI v0.12.0 and later send their own version, v0.11.0
// does not and the stub infers one, wrongly past the end of its table).
func TestSupportOf(t *testing.T) {
	for _, tc := range []struct {
		name, runtime, version, nri string
		unsolicited, noValidator    bool
	}{
		{"containerd 2.4.2", "containerd", "v2.4.2", "v0.12.3", true, false},
		{"containerd 2.4 built with go install", "containerd", "2.4.2+unknown", "v0.12.3", true, false},
		{"containerd 2.5", "containerd", "v2.5.0", "v0.13.0", true, false},
		{"containerd 2.4 rc", "containerd", "v2.4.0-rc.1", "v0.12.3", false, false},
		{"containerd 2.3.7", "containerd", "v2.3.7", "v0.12.0", false, false},
		{"containerd 2.2.9, NRI inferred", "containerd", "2.2.9+unknown", "v0.11.0", false, false},
		{"containerd 2.2.0", "containerd", "v2.2.0", "v0.10.0", false, false},
		{"containerd 2.1", "containerd", "v2.1.4", "v0.8.0", false, true},
		// The stub's inference reads a release past its table as the
		// newest it knows: containerd's own version decides.
		{"containerd 2.4.2, NRI inferred wrongly", "containerd", "v2.4.2", "v0.11.0", true, false},
		{"CRI-O 1.37 dev build", "cri-o", "1.37.0", "v0.12.0", false, false},
		{"CRI-O with a fixed NRI", "cri-o", "1.38.0", "v0.12.3", true, false},
		{"CRI-O with a pseudo-version after v0.12.0", "cri-o", "1.38.0", "v0.12.1-0.20260301000000-abcdef012345", false, false},
		{"CRI-O with NRI unknown", "cri-o", "1.36.0", "0.0.0-unknown", false, false},
		{"CRI-O 1.33", "cri-o", "1.33.2", "v0.9.1-0.20250219030224-e597e7849f24", false, true},
		{"unknown runtime", "other", "v9", "", false, false},
		{"containerd without a version", "containerd", "", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := SupportOf(tc.runtime, tc.version, tc.nri)
			if rs.unsolicited != tc.unsolicited || rs.noValidator != tc.noValidator {
				t.Errorf("SupportOf(%q, %q, %q) = unsolicited %v noValidator %v, want %v %v",
					tc.runtime, tc.version, tc.nri, rs.unsolicited, rs.noValidator, tc.unsolicited, tc.noValidator)
			}
		})
	}
}
