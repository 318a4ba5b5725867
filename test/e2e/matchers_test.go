//go:build e2e

package e2e

import (
	"github.com/onsi/gomega/gcustom"
	"github.com/onsi/gomega/types"
	"k8s.io/utils/cpuset"
)

// The cpuset matchers assert properties of a container's CPUs (count,
// exclusivity, containment) rather than predicting CPU ids, except where the
// machine leaves a single answer (EqualCPUs of a pool computed from Host).

// EqualCPUs succeeds when the actual cpuset.CPUSet equals want.
func EqualCPUs(want cpuset.CPUSet) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(got cpuset.CPUSet) (bool, error) {
		return got.Equals(want), nil
	}).WithTemplate("Expected CPUs {{.Actual.String}} {{.To}} equal {{.Data.String}}", want)
}

// HaveCPUCount succeeds when the actual cpuset.CPUSet has n CPUs.
func HaveCPUCount(n int) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(got cpuset.CPUSet) (bool, error) {
		return got.Size() == n, nil
	}).WithTemplate("Expected CPUs {{.Actual.String}} {{.To}} number {{.Data}}", n)
}

// BeDisjointFrom succeeds when the actual cpuset.CPUSet shares no CPU with other.
func BeDisjointFrom(other cpuset.CPUSet) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(got cpuset.CPUSet) (bool, error) {
		return got.Intersection(other).IsEmpty(), nil
	}).WithTemplate("Expected CPUs {{.Actual.String}} {{.To}} be disjoint from {{.Data.String}}", other)
}

// BeSubsetOfCPUs succeeds when every actual CPU is in of.
func BeSubsetOfCPUs(of cpuset.CPUSet) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(got cpuset.CPUSet) (bool, error) {
		return got.IsSubsetOf(of), nil
	}).WithTemplate("Expected CPUs {{.Actual.String}} {{.To}} be a subset of {{.Data.String}}", of)
}

// BeSupersetOf succeeds when the actual set holds every element of sub (for
// CPU sets and memory node sets alike).
func BeSupersetOf(sub cpuset.CPUSet) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(got cpuset.CPUSet) (bool, error) {
		return sub.IsSubsetOf(got), nil
	}).WithTemplate("Expected {{.Actual.String}} {{.To}} contain all of {{.Data.String}}", sub)
}
