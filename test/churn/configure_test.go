//go:build testhooks

package churn

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// The runtime's plugin configuration (docs/configuration.md, "A
// pre-registered plugin"). NRI hands one only to a plugin it launches, so
// the churn sends it through the Configure handler (daemon.Handlers), as
// the runtime does when it connects a plugin that was started with
// --config. What the documentation promises there:
//   - the policy keys, the log keys and reconcile_period apply; state_dir,
//     sysfs_root, procfs_root, cgroup_root and metrics_address stay as
//     started (a different value is logged and ignored);
//   - shared_pool_updates is fixed as started: a configuration asking for
//     another value is refused, and the former "after-answer" is refused
//     with an error naming "direct";
//   - a configuration that does not load is refused.
//
// The churn sends the setup's own policy keys (a configuration that moves
// the reserved CPUs or the options reconciles the state under a new
// engine: the engine's and the daemon's unit tests cover that), so in
// every case the running configuration and the state stay exactly as
// they were.

// configKind is one runtime configuration the churn sends.
type configKind struct {
	name    string
	refused bool
	// errHas is text a refusal must contain ("" for any).
	errHas string
	doc    func(c *churn) string
}

var configKinds = []configKind{
	{name: "same-policy-other-process-keys", doc: func(c *churn) string {
		// Every key that applies at any time, set to what runs, and every
		// process-level key set to something else.
		return c.withTopKeys(fmt.Sprintf(`reconcile_period = "0"
log_level = %q
log_format = %q
state_dir = %q
sysfs_root = "/nonexistent/sys"
procfs_root = "/nonexistent/proc"
cgroup_root = "/nonexistent/cgroup"
metrics_address = "127.0.0.1:1"
`, c.cfg.LogLevel, c.cfg.LogFormat, c.stateDir+"-elsewhere"))
	}},
	{name: "other-shared-pool-updates", refused: true, errHas: config.KeySharedPoolUpdates, doc: func(c *churn) string {
		other := config.SharedUpdatesInAnswer
		if c.d.Config().SharedPoolUpdates == other {
			other = config.SharedUpdatesDirect
		}
		return c.withTopKeys(fmt.Sprintf("shared_pool_updates = %q\n", other))
	}},
	{name: "after-answer", refused: true, errHas: config.SharedUpdatesDirect, doc: func(c *churn) string {
		return c.withTopKeys("shared_pool_updates = \"after-answer\"\n")
	}},
	{name: "unloadable", refused: true, doc: func(c *churn) string {
		return c.withTopKeys("cpu_manager_policy = \"dynamic\"\n")
	}},
}

var sharedUpdatesLine = regexp.MustCompile(`(?m)^shared_pool_updates = .*\n`)

// withTopKeys is the setup's configuration with top, top-level keys,
// first (before any table) and in place of its own shared_pool_updates
// when top sets one.
func (c *churn) withTopKeys(top string) string {
	doc := c.s.toml
	if strings.Contains(top, "shared_pool_updates") {
		doc = sharedUpdatesLine.ReplaceAllString(doc, "")
	}
	if strings.Contains(top, "cpu_manager_policy =") {
		doc = regexp.MustCompile(`(?m)^cpu_manager_policy = .*\n`).ReplaceAllString(doc, "")
	}
	return top + doc
}

// opConfigure sends one of configKinds and checks that the running
// configuration, the state and every container's CPUs are unchanged, and
// that it was refused exactly when the documentation says.
func (c *churn) opConfigure() {
	c.settle()
	k := configKinds[c.rng.Intn(len(configKinds))]
	doc := k.doc(c)
	before := c.d.Config().Summary()
	e0, st0 := c.d.EngineState()
	shared0, asg0 := e0.SharedPool(st0).CPUSet(), assignmentsString(st0.Alloc.Assignments)
	_, err := c.d.Handlers().Configure(context.Background(), doc, c.rtName, c.rtVersion)
	c.ops["configure"]++
	c.faults["runtime-config:"+k.name]++
	c.record("configure from the runtime: %s -> %v", k.name, err)
	switch {
	case k.refused && err == nil:
		c.fail("the runtime's configuration %s was taken; it must be refused:\n%s", k.name, doc)
	case !k.refused && err != nil:
		c.fail("the runtime's configuration %s was refused: %v\n%s", k.name, err, doc)
	case err != nil && !strings.Contains(err.Error(), k.errHas):
		c.fail("the runtime's configuration %s was refused without naming %q: %v", k.name, k.errHas, err)
	}
	if after := c.d.Config().Summary(); after != before {
		c.fail("the runtime's configuration %s changed the running one:\nbefore %s\nafter  %s", k.name, before, after)
	}
	e, st := c.d.EngineState()
	if shared, asg := e.SharedPool(st).CPUSet(), assignmentsString(st.Alloc.Assignments); !sameSet(shared, shared0) || asg != asg0 {
		c.fail("the runtime's configuration %s (the running policy) moved CPUs: shared %s -> %s, assignments\n%s\n->\n%s", k.name, shared0, shared, asg0, asg)
	}
	c.check(true)
}

// assignmentsString lists assignments in a stable order.
func assignmentsString[S fmt.Stringer](m map[string]map[string]S) string {
	var b strings.Builder
	for _, pod := range slices.Sorted(maps.Keys(m)) {
		for _, name := range slices.Sorted(maps.Keys(m[pod])) {
			fmt.Fprintf(&b, "%s/%s=%s ", pod, name, m[pod][name])
		}
	}
	return b.String()
}
