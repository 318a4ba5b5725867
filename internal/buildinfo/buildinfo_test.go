package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/nri-cpualign/nri-cpualign", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "github.com/containerd/ttrpc", Version: "v1.2.7"},
			{Path: "github.com/containerd/nri", Version: "v0.12.5"},
		},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-25T10:00:00Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	dirty := &debug.BuildInfo{Main: vcs.Main, Deps: vcs.Deps, Settings: append(append([]debug.BuildSetting{}, vcs.Settings[:3]...),
		debug.BuildSetting{Key: "vcs.modified", Value: "true"})}
	released := &debug.BuildInfo{Main: debug.Module{Path: vcs.Main.Path, Version: "v0.3.0"},
		Deps: []*debug.Module{{Path: "github.com/containerd/nri", Version: "v0.12.5",
			Replace: &debug.Module{Path: "../nri", Version: ""}}}}
	for _, tc := range []struct {
		name              string
		ver, rev, date    string
		bi                *debug.BuildInfo
		wantVer, wantRev  string
		wantDate, wantNRI string
	}{
		{"stamped wins over vcs", "v0.3.0-2-gabcdef0", "abcdef0123", "2026-11-24T09:00:00Z", vcs,
			"v0.3.0-2-gabcdef0", "abcdef0123", "2026-11-24T09:00:00Z", "v0.12.5"},
		{"plain go build in a checkout", "", "", "", vcs,
			"dev", "0123456789abcdef0123456789abcdef01234567", "2026-11-25T10:00:00Z", "v0.12.5"},
		{"uncommitted changes", "", "", "", dirty,
			"dev", "0123456789abcdef0123456789abcdef01234567-dirty", "2026-11-25T10:00:00Z", "v0.12.5"},
		{"go install module@version, replaced nri", "", "", "", released,
			"v0.3.0", Unknown, Unknown, "../nri "},
		{"no build info", "", "", "", nil, "dev", Unknown, Unknown, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ver, tc.rev, tc.date, tc.bi)
			want := Info{Version: tc.wantVer, Revision: tc.wantRev, Date: tc.wantDate, GoVersion: runtime.Version(),
				NRIModule: tc.wantNRI, NRIProtocol: "nri.pkg.api.v1alpha1"}
			if got != want {
				t.Errorf("resolve = %+v\nwant       %+v", got, want)
			}
		})
	}
}

func TestMetricLabels(t *testing.T) {
	i := Read()
	v, r, g := MetricLabels()
	if v != i.Version || r != i.Revision || g != runtime.Version() {
		t.Errorf("MetricLabels = %q %q %q, want %q %q %q", v, r, g, i.Version, i.Revision, runtime.Version())
	}
	if v == "" || r == "" {
		t.Error("an empty label value")
	}
}
