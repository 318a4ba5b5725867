// Command demo creates the `make demo` pods on the test containerd (one
// Guaranteed 1-CPU, one Burstable, one BestEffort), as the kubelet would, and
// prints where each container really runs: its CPUs read from inside the
// container, their NUMA nodes and L3 groups. `demo down` removes them.
//
// It reads the environment of ../shared/e2e/setup-containerd.sh; scripts/demo.sh
// and scripts/demo-down.sh run it.
//
//	demo up      remove any previous demo pods, create new ones, print the table
//	demo table   print the table for the running demo pods
//	demo down    remove the demo pods and their cgroups
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

const (
	demoLabel = "nri-cpualign-demo"
	qosLabel  = "nri-cpualign-demo.qos"
	namespace = "demo"
)

// demoPod is one pod of the demo and its single container's resources.
type demoPod struct {
	name string
	res  framework.Resources
}

func demoPods() []demoPod {
	return []demoPod{
		{"guaranteed-1cpu", framework.GuaranteedCPUs(1)},
		{"burstable", framework.Resources{CPURequestMilli: 250, CPULimitMilli: 500, MemLimit: 64 << 20}},
		{"besteffort", framework.Resources{}},
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: demo up|table|down")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(cmd string, out io.Writer) error {
	env, err := framework.LoadEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := framework.Dial(ctx, env.ContainerdAddress, env.TestImage)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "up":
		if err := down(ctx, c); err != nil {
			return err
		}
		if err := up(ctx, c); err != nil {
			return err
		}
		return table(ctx, c, out)
	case "table":
		return table(ctx, c, out)
	case "down":
		return down(ctx, c)
	}
	return fmt.Errorf("unknown command %q: want up, table or down", cmd)
}

func up(ctx context.Context, c *framework.Client) error {
	for i, d := range demoPods() {
		q := framework.PodQOS(d.res)
		p, err := c.RunPod(ctx, framework.PodSpec{
			Name:       d.name,
			Namespace:  namespace,
			UID:        fmt.Sprintf("demo-%d-%d", time.Now().UnixNano(), i),
			Containers: []framework.Resources{d.res},
			Labels:     map[string]string{demoLabel: "true", qosLabel: string(q)},
		})
		if err != nil {
			return err
		}
		if _, err := c.RunContainer(ctx, p, "app", d.res); err != nil {
			return err
		}
	}
	return nil
}

// down removes every pod carrying the demo label; the pod cgroup follows from
// the labels (QoS class and UID).
func down(ctx context.Context, c *framework.Client) error {
	pods, err := c.ListPods(ctx, map[string]string{demoLabel: "true"})
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		parent := framework.CgroupParent(framework.QOS(p.Labels[qosLabel]), p.GetMetadata().GetUid())
		if err := c.RemovePod(ctx, p.Id, parent); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func table(ctx context.Context, c *framework.Client, out io.Writer) error {
	host, err := framework.ReadHost("/sys")
	if err != nil {
		return err
	}
	pods, err := c.ListPods(ctx, map[string]string{demoLabel: "true"})
	if err != nil {
		return err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].GetMetadata().GetName() < pods[j].GetMetadata().GetName() })
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tQOS\tCONTAINER\tCPUS\tNUMA\tL3")
	for _, p := range pods {
		q := framework.QOS(p.Labels[qosLabel])
		pod := &framework.Pod{ID: p.Id, QOS: q}
		r, err := c.RT.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{PodSandboxId: p.Id}})
		if err != nil {
			return err
		}
		for _, ct := range r.Containers {
			cpus, err := c.CPUsAllowed(ctx, &framework.Container{ID: ct.Id, Name: ct.GetMetadata().GetName(), Pod: pod})
			if err != nil {
				return err
			}
			l3 := make([]string, 0, 1)
			for _, id := range host.L3Groups(cpus) {
				l3 = append(l3, fmt.Sprint(id))
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", namespace, p.GetMetadata().GetName(), q,
				ct.GetMetadata().GetName(), cpus, host.NUMANodes(cpus), strings.Join(l3, ","))
		}
	}
	return tw.Flush()
}
