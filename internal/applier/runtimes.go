package applier

import (
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
)

// RuntimeSupport is what the plugin may rely on from the runtime it is
// connected to, decided at Configure from what the protocol tells: the
// runtime's name and version, and the NRI version its adaptation was
// built with (docs/runtimes.md has the table and where each fact comes
// from).
type RuntimeSupport struct {
	name, version string
	// nri is the runtime's NRI version as the stub has it: sent in
	// Configure by NRI v0.12.0 and later, else inferred by the stub from
	// the runtime's name and version, else "" or "0.0.0-unknown".
	nri string
	// nriKnown: nri was read as a release.
	nriKnown bool
	// unsolicited: the plugin may call stub.UpdateContainers on its own
	// (the in-answer worker's pushes, the reconcile loop's repairs).
	// False where that can deadlock the runtime (containerd#13733): NRI's
	// adaptation before v0.12.1 takes its own lock for a plugin's
	// UpdateContainers and then, in the runtime's update callback
	// (containerd's and CRI-O's updateFromPlugin), the runtime's NRI lock,
	// while every CRI call that reaches NRI takes the runtime's NRI lock
	// first and then the adaptation's. Two goroutines taking the same two
	// locks in opposite order: when a CRI call (an
	// UpdateContainerResources, a StopPodSandbox) takes the runtime's lock
	// between the two steps of the plugin's update, both wait for ever,
	// and every later CRI call that reaches NRI queues behind them.
	unsolicited bool
	// noValidator: the runtime's NRI is known to lack the default
	// validator (before NRI v0.10.0: containerd 2.1 and older), with which
	// a node requires this plugin for every container (fail closed).
	noValidator bool
}

// semver is a release as numbers; pre says it had a pre-release suffix
// ("-rc.1", or a Go pseudo-version "-0.2026...-abcdef" of a commit after
// the release before it), which orders it before the release itself.
type semver struct {
	n   [3]int
	pre bool
}

// parseSemver reads "v2.3.7", "2.3.7+unknown" (containerd built with go
// install), "v0.12.1-rc.1". Build metadata ("+...") is ignored.
func parseSemver(s string) (semver, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	s, _, _ = strings.Cut(s, "+")
	s, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return semver{}, false
	}
	v := semver{pre: hasPre && pre != ""}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return semver{}, false
		}
		v.n[i] = n
	}
	return v, true
}

// atLeast reports v >= the release o (a pre-release of o is older).
func (v semver) atLeast(o [3]int) bool {
	for i := range v.n {
		if v.n[i] != o[i] {
			return v.n[i] > o[i]
		}
	}
	return !v.pre
}

// unknownNRI is what NRI's stub reports when it cannot tell.
const unknownNRI = "0.0.0-unknown"

// SupportOf is what a runtime supports, from its name and version and the
// NRI version the stub has for it. A runtime whose NRI is not known is
// taken to have the deadlock: the plugin then sends no
// unsolicited update, which costs latency, never correctness.
//
// Where the versions come from (read in each release's go.mod and
// pkg/adaptation/adaptation.go): containerd 2.2.0 vendors NRI v0.10.0,
// 2.2.1-2.2.9 v0.11.0, 2.3.x v0.12.0 (all of which lock in
// updateContainers), 2.4.x v0.12.3 (which does not: v0.12.1,
// containerd/nri#299). NRI v0.12.0 and later send their version in
// Configure; for v0.11.0 and older the stub infers it from the runtime's
// version where its table knows it. The CRI-O 1.37 development build the
// suites run vendors v0.12.0 and sends it.
func SupportOf(name, ver, nri string) RuntimeSupport {
	rs := RuntimeSupport{name: name, version: ver, nri: nri}
	// containerd: its release says which NRI it vendors (each minor one
	// NRI minor). Its release first, because the stub's inference for a
	// runtime that does not send its NRI version stops at the newest
	// release its table knows (containerd 2.4.2 would read as v0.11.0).
	if v, ok := parseSemver(ver); ok && strings.EqualFold(name, "containerd") {
		rs.nriKnown = true
		rs.unsolicited = v.atLeast([3]int{2, 4, 0})
		rs.noValidator = !v.atLeast([3]int{2, 2, 0})
		return rs
	}
	if v, ok := parseSemver(nri); ok && nri != unknownNRI {
		rs.nriKnown = true
		rs.unsolicited = v.atLeast([3]int{0, 12, 1})
		rs.noValidator = !v.atLeast([3]int{0, 10, 0})
	}
	return rs
}

// fields are the log fields naming the runtime.
func (rs RuntimeSupport) fields() logrus.Fields {
	return logrus.Fields{"runtime": rs.name, "runtime_version": rs.version, "runtime_nri": rs.nri}
}

// LogSupport says at Configure what works differently on this runtime:
// one warning per feature that is off, one info line otherwise.
func (rs RuntimeSupport) LogSupport(log *logrus.Logger, mode string) {
	f := rs.fields()
	f["shared_pool_updates"] = mode
	if rs.unsolicited {
		log.WithFields(f).Info("this runtime's NRI takes unsolicited container updates without deadlocking (NRI v0.12.1 or later)")
	} else {
		why := "this runtime's NRI (before v0.12.1) can deadlock when a plugin updates containers on its own while a CRI call " +
			"is in flight (containerd#13733)"
		if !rs.nriKnown {
			why = "the runtime's NRI version is not known, so the plugin takes it to have containerd#13733's deadlock"
		}
		log.WithFields(f).Warn(why + ": the plugin sends no unsolicited container update; under shared_pool_updates = \"in-answer\" " +
			"the CPUs a removed pod or a downsize gives back, and the reconcile loop's repairs, reach the containers with the next " +
			"CreateContainer, StopContainer or UpdateContainer answer instead (nri_cpualign_updates_deferred_total counts them); " +
			"\"direct\" writes the cgroups itself and is not affected")
	}
	if rs.noValidator {
		log.WithFields(rs.fields()).Warn("this runtime's NRI (before v0.10.0) has no default validator: the node cannot require " +
			"this plugin for every container (fail closed), so containers start without exclusive CPUs while the plugin is down")
	}
}
