// Package buildinfo says which nri-cpualign a binary is: its version, git
// revision and build date (stamped by the linker), the Go toolchain, and
// the NRI module and protocol it speaks. `nri-cpualign version` prints it,
// `run` logs it at start, and the nri_cpualign_build_info metric carries
// its labels.
//
// make build, make image and the Dockerfile stamp the three variables
// below with
//
//	-ldflags "-X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.version=v0.3.0
//	          -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.revision=<commit>
//	          -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.date=<RFC 3339>"
//
// A plain `go build` or `go install module@version` leaves them empty;
// Read then falls back to what the Go toolchain recorded in the binary
// (the module version, vcs.revision and vcs.time), so that such a binary
// still names its commit.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/containerd/nri/pkg/api"
)

// Set by the linker (-X); see the package comment.
var (
	version  string
	revision string
	date     string
)

// Unknown is the value of a field nothing recorded.
const Unknown = "unknown"

// nriModule is the module whose version is the plugin's NRI library.
const nriModule = "github.com/containerd/nri"

// Info describes one binary. The JSON names are those of
// `nri-cpualign version -o json`.
type Info struct {
	Version  string `json:"version"`  // release tag or git describe; "dev" when unstamped
	Revision string `json:"revision"` // full git commit, Unknown when not recorded
	// Date is the build's date, RFC 3339 in UTC. make build and make
	// image use the commit's time (SOURCE_DATE_EPOCH), so that one commit
	// always builds the same binary.
	Date      string `json:"date"`
	GoVersion string `json:"go"`
	// NRIModule is the version of github.com/containerd/nri compiled in,
	// the library that implements the runtime protocol; NRIProtocol is the
	// protobuf package of that protocol (nri.pkg.api.v1alpha1), what a
	// runtime must speak to talk to the plugin.
	NRIModule   string `json:"nri_module"`
	NRIProtocol string `json:"nri_protocol"`
}

// Read returns the binary's Info: the linker-stamped values where set,
// else those the Go toolchain recorded.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, revision, date, bi)
}

// resolve is Read with its inputs passed in, for tests. bi may be nil
// (a binary built without module support).
func resolve(ver, rev, built string, bi *debug.BuildInfo) Info {
	info := Info{
		Version:     ver,
		Revision:    rev,
		Date:        built,
		GoVersion:   runtime.Version(),
		NRIModule:   Unknown,
		NRIProtocol: string(api.File_pkg_api_api_proto.Package()),
	}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		var vcsRev, vcsTime string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Revision == "" && vcsRev != "" {
			info.Revision = vcsRev
			if modified {
				info.Revision += "-dirty"
			}
		}
		if info.Date == "" {
			info.Date = vcsTime
		}
		for _, m := range bi.Deps {
			if m.Path != nriModule {
				continue
			}
			info.NRIModule = m.Version
			if m.Replace != nil {
				info.NRIModule = m.Replace.Path + " " + m.Replace.Version
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Revision == "" {
		info.Revision = Unknown
	}
	if info.Date == "" {
		info.Date = Unknown
	}
	return info
}

// MetricLabels returns the label values of nri_cpualign_build_info, in the
// order of the label names version, revision and go.
func MetricLabels() (version, revision, goVersion string) {
	i := Read()
	return i.Version, i.Revision, i.GoVersion
}

// LogFields are the start-up log line's fields.
func (i Info) LogFields() map[string]any {
	return map[string]any{
		"version": i.Version, "revision": i.Revision, "build_date": i.Date,
		"go": i.GoVersion, "nri": i.NRIModule, "nri_protocol": i.NRIProtocol,
	}
}
