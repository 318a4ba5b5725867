// Package kubever names the kubelet release whose resource-manager rules
// the engine follows (config key kubelet_version). The zero Version is the
// default, the newest release followed; older ones are kept so that an
// operator can compare what an upgrade moves (simulate --kubelet-version)
// and pin a node to the rules of the kubelet it still runs.
package kubever

import (
	"fmt"
	"strings"
)

// Version is a kubelet minor release whose CPU, topology and memory
// manager rules the engine follows.
type Version int

// The versions followed. V138 is the zero value: the default.
const (
	// V138 follows kubelet v1.38 (v1.38.0-beta.0's cm packages).
	V138 Version = iota
	// V137 follows kubelet v1.37.2.
	V137
)

// Default is the version followed when none is configured.
const Default = V138

// Accepted lists the accepted spellings, newest first.
const Accepted = "1.38, 1.37"

// String is the configuration spelling ("1.38").
func (v Version) String() string {
	switch v {
	case V138:
		return "1.38"
	case V137:
		return "1.37"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// Valid reports whether v is one of the versions followed.
func (v Version) Valid() bool { return v == V138 || v == V137 }

// AtLeast138 reports whether v follows the 1.38 rules.
func (v Version) AtLeast138() bool { return v == V138 }

// Parse reads a configuration value: "1.38" or "1.37" (a leading "v", a
// patch level and a pre-release are accepted: "v1.37.2", "1.38.0-beta.0").
// "" is Default.
func Parse(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if t == "" {
		return Default, nil
	}
	t, _, _ = strings.Cut(t, "-") // a pre-release: "1.38.0-beta.0"
	if parts := strings.Split(t, "."); len(parts) == 3 {
		t = parts[0] + "." + parts[1]
	}
	switch t {
	case "1.38":
		return V138, nil
	case "1.37":
		return V137, nil
	}
	return Default, fmt.Errorf("unknown kubelet version %q (want one of %s)", s, Accepted)
}
