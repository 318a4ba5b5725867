//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

var _ = Describe("EPYC 7702P SMT (epyc-7702p-smt), restricted, strict-align-cpus-by-uncorecache = exclusive", Ordered, func() {
	// 128 CPUs, core k = {k, k+64}; L3 g = cores 4g..4g+3 = CPUs
	// 4g..4g+3,64+4g..64+4g+3 (16 caches of 8). Core 0 (CPUs 0,64)
	// reserved, so L3 0 has 6 assignable CPUs. One NUMA node. Under
	// "exclusive" no two exclusive containers share a cache; a cache's
	// leftover CPUs stay shared (README, strict uncore alignment).
	var (
		f      *FixtureDaemon
		placed []Placement
		b      Placement
	)
	BeforeAll(func(ctx SpecContext) {
		f = StartFixtureDaemon(ctx, "epyc-7702p-smt", `
cpu_manager_policy = "static"
reserved_system_cpus = "0,64"
topology_manager_policy = "restricted"
[cpu_manager_policy_options]
strict-align-cpus-by-uncorecache = "exclusive"
`)
		_, web, err := f.Place(ctx, "web", burstable)
		Expect(err).NotTo(HaveOccurred())
		Expect(web.CPUs).To(EqualCPUs(f.All))
	})

	It("puts 4 CPUs in the most-used cache that holds them", func(ctx SpecContext) {
		// L3 0 (6 assignable) is the best fit; whole cores 1 and 2.
		_, a := f.ExpectPlaced(ctx, "a", 4, "1-2,65-66", "0")
		placed = append(placed, a)
		f.ExpectShared("web", placed...)
	})

	It("gives the next container a cache of its own", func(ctx SpecContext) {
		// L3 0 is a's: L3 1, whole cores 4 and 5.
		_, b = f.ExpectPlaced(ctx, "b", 4, "4-5,68-69", "0")
		placed = append(placed, b)
		f.ExpectShared("web", placed...)
	})

	It("gives 12 CPUs one whole free cache and part of one more", func(ctx SpecContext) {
		// Whole free L3 2 (8-11,72-75), then 4 from the best fit of the
		// caches nobody uses: L3 3, cores 12 and 13.
		_, c := f.ExpectPlaced(ctx, "c", 12, "8-13,72-77", "0")
		placed = append(placed, c)
		_, d := f.ExpectPlaced(ctx, "d", 2, "16,80", "0")
		placed = append(placed, d)
		// L3 5-15 are the whole free caches left: 88 CPUs.
		_, e := f.ExpectPlaced(ctx, "e", 88, "20-63,84-127", "0")
		placed = append(placed, e)
		// The caches' leftovers (3,67; 6-7,70-71; 14-15,78-79;
		// 17-19,81-83) and the reserved core stay shared.
		f.ExpectShared("web", placed...)
	})

	It("refuses a container no cache can take with UncoreCacheAlignmentError", func(ctx SpecContext) {
		// 14 CPUs are still shared, but every cache has an exclusive user.
		_, _, err := f.Place(ctx, "late", framework.GuaranteedCPUs(2))
		Expect(err).To(MatchError(ContainSubstring("UncoreCacheAlignmentError: requested 2 CPUs do not fit in one uncore cache no other exclusive container uses")))
		f.ExpectShared("web", placed...)
	})

	It("hands a freed cache to the next container", func(ctx SpecContext) {
		f.EndPod(ctx, b)
		// L3 1 is nobody's again: its first whole core, 4.
		_, g := f.ExpectPlaced(ctx, "g", 2, "4,68", "0")
		rest := []Placement{g}
		for _, p := range placed {
			if p.Container != b.Container {
				rest = append(rest, p)
			}
		}
		f.ExpectShared("web", rest...)
	})
})
