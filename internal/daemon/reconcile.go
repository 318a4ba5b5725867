package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"
)

// cgroupReader reads a container's cpuset.cpus and cpuset.mems from its
// cgroup under a cgroup root, for cgroup v1 (the cpuset hierarchy under
// <root>/cpuset) and v2 (the unified hierarchy at <root>).
type cgroupReader struct {
	root    string
	unified bool
}

// newCgroupReader detects the cgroup version: on the host's own root with
// cgroups.Mode, elsewhere (a mounted host root, tests) by the unified
// hierarchy's cgroup.controllers file.
func newCgroupReader(root string) cgroupReader {
	if filepath.Clean(root) == "/sys/fs/cgroup" {
		return cgroupReader{root: root, unified: cgroups.Mode() == cgroups.Unified}
	}
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return cgroupReader{root: root, unified: err == nil}
}

// dir is the cgroup directory holding the cpuset files of cgroupsPath as
// NRI reports it: a path ("/kubepods/pod<uid>/<id>", cgroupfs driver) or
// "slice:prefix:name" (systemd driver). The result always stays under the
// root.
func (r cgroupReader) dir(cgroupsPath string) (string, error) {
	p := cgroupsPath
	if strings.Count(p, ":") == 2 && !strings.HasPrefix(p, "/") {
		parts := strings.SplitN(p, ":", 3)
		p = expandSlice(parts[0]) + "/" + parts[1] + "-" + parts[2] + ".scope"
	}
	if p == "" {
		return "", errors.New("no cgroups path")
	}
	p = filepath.Clean("/" + p)
	if r.unified {
		return filepath.Join(r.root, p), nil
	}
	return cgroup1.NewCpuset(r.root).Path(p), nil
}

// expandSlice turns a systemd slice name into its path:
// "kubepods-burstable-podX.slice" is
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podX.slice".
func expandSlice(slice string) string {
	if slice == "" || slice == "-.slice" {
		return ""
	}
	name := strings.TrimSuffix(slice, ".slice")
	var path, prefix string
	for _, part := range strings.Split(name, "-") {
		if prefix == "" {
			prefix = part
		} else {
			prefix += "-" + part
		}
		path += "/" + prefix + ".slice"
	}
	return path
}

// errCgroupGone means the container's cgroup no longer exists: the
// container went away between the event and the read.
var errCgroupGone = errors.New("cgroup is gone")

// read returns the cgroup's cpuset.cpus and cpuset.mems.
func (r cgroupReader) read(cgroupsPath string) (cpus, mems cpuset.CPUSet, err error) {
	dir, err := r.dir(cgroupsPath)
	if err != nil {
		return cpus, mems, err
	}
	readList := func(name string) (cpuset.CPUSet, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return cpuset.New(), errCgroupGone
		}
		if err != nil {
			return cpuset.New(), err
		}
		s, err := cpuset.Parse(strings.TrimSpace(string(b)))
		if err != nil {
			return cpuset.New(), fmt.Errorf("%s: %q: %w", filepath.Join(dir, name), strings.TrimSpace(string(b)), err)
		}
		return s, nil
	}
	if cpus, err = readList("cpuset.cpus"); err != nil {
		return cpus, mems, err
	}
	mems, err = readList("cpuset.mems")
	return cpus, mems, err
}

// kick wakes the update worker to push the shared pool to every
// shared-pool container (after an event that cannot return updates).
func (d *Daemon) kick() {
	d.kicks.ask() // before the wake-up, which the worker serves with it
	select {
	case d.kickC <- struct{}{}:
	default:
	}
}

// updateWorker pushes updates from outside any handler: on a kick, the
// shared pool to every shared-pool container; every reconcile_period, the
// right cpuset to every container whose cgroup drifted.
func (d *Daemon) updateWorker(ctx context.Context) {
	var (
		ticker *time.Ticker
		tick   <-chan time.Time
		period time.Duration
	)
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		// The runtime's Configure may change the period (pre-registered
		// plugin); it kicks the worker, which picks the new one up here.
		if p := time.Duration(d.Config().ReconcilePeriod); p != period {
			if ticker != nil {
				ticker.Stop()
				ticker, tick = nil, nil
			}
			if period = p; p > 0 {
				ticker = time.NewTicker(p)
				tick = ticker.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.kickC:
			upTo := d.kicks.upTo()
			d.mu.Lock()
			direct := d.direct()
			d.mu.Unlock()
			if direct {
				d.directPass()
			} else {
				d.pushShared()
			}
			d.kicks.serve(upTo)
		case <-tick:
			// cgroup_root may come with the runtime's Configure.
			d.reconcile(newCgroupReader(d.Config().CgroupRoot))
		}
	}
}

// pushShared sends the shared pool to every shared-pool container. If a
// handler changed the state while the updates were on their way, they may
// be stale: it runs again with the new state.
func (d *Daemon) pushShared() {
	d.mu.Lock()
	s := d.stub
	if s == nil || d.syncs == 0 {
		d.mu.Unlock()
		return
	}
	gen := d.gen
	updates := d.sharedUpdates("")
	d.mu.Unlock()
	if len(updates) == 0 {
		return
	}
	d.send(s, updates, gen, "pushing the shared pool to containers failed; the reconcile loop will retry")
}

// send pushes updates computed at generation gen, warning with failure when
// some did not apply. A handler that committed meanwhile may have made them
// stale: the worker then pushes the shared pool again from the new state.
func (d *Daemon) send(s stub.Stub, updates []*api.ContainerUpdate, gen uint64, failure string) {
	if failed, err := s.UpdateContainers(updates); err != nil || len(failed) > 0 {
		d.log.WithError(err).WithField("failed", len(failed)).Warn(failure)
	}
	d.mu.Lock()
	changed := d.gen != gen
	d.mu.Unlock()
	if changed {
		d.kick()
	}
}

// drifted is one container whose cgroup differs from its assignment.
type drifted struct {
	rec                ctrRecord
	wantCPUs, haveCPUs cpuset.CPUSet
	wantMems, haveMems string
	updateMems         bool
}

// ReconcileNow compares every known container's cgroup cpuset with its
// assignment and restores the ones that differ with stub.UpdateContainers.
// A container whose cgroup is gone is skipped. It returns how many
// containers were restored. The daemon runs it every reconcile_period;
// it is exported for tests and tools.
func (d *Daemon) ReconcileNow() int { return d.reconcile(newCgroupReader(d.Config().CgroupRoot)) }

func (d *Daemon) reconcile(reader cgroupReader) int {
	d.mu.Lock()
	direct := d.direct()
	d.mu.Unlock()
	if direct {
		// Read and restore with no pass in between (direct.go).
		d.cgw.mu.Lock()
		defer d.cgw.mu.Unlock()
	}
	d.mu.Lock()
	s := d.stub
	if s == nil || d.syncs == 0 {
		d.mu.Unlock()
		return 0
	}
	gen := d.gen
	items := make([]wantedCPUs, 0, len(d.ctrs))
	for _, r := range d.ctrs {
		items = append(items, wantedCPUs{r, d.rightCPUs(r)})
	}
	d.mu.Unlock()
	sort.Slice(items, func(i, j int) bool { return items[i].rec.ID < items[j].rec.ID })

	found := d.findDrift(reader, items)
	if len(found) == 0 {
		return 0
	}
	// A handler committed a change while the cgroups were read: what was
	// read may predate it. Leave it to the next round.
	d.mu.Lock()
	stale := d.gen != gen || d.stub != s
	d.mu.Unlock()
	if stale {
		return 0
	}
	d.logDrift(found)
	d.metrics.drift.Add(float64(len(found)))
	if direct {
		d.restoreDirect(reader, found)
	} else {
		d.send(s, driftUpdates(found), gen, "reconcile: restoring cpusets failed; retrying next period")
	}
	return len(found)
}

// restoreDirect writes the drifted cgroups back (shared_pool_updates =
// "direct"); d.cgw.mu is held.
func (d *Daemon) restoreDirect(reader cgroupReader, found []drifted) {
	var failed []error
	for _, dr := range found {
		err := reader.writeCPUs(dr.rec.CgroupsPath, dr.wantCPUs.String())
		if err == nil && dr.updateMems {
			err = reader.writeMems(dr.rec.CgroupsPath, dr.wantMems)
		}
		if err != nil {
			if !errors.Is(err, errCgroupGone) {
				failed = append(failed, fmt.Errorf("container %s of pod %s: %w", dr.rec.Name, dr.rec.PodName, err))
			}
			continue
		}
		if !dr.rec.Exclusive {
			d.mu.Lock()
			if _, ok := d.ctrs[dr.rec.ID]; ok {
				d.noteAnswered(dr.rec.ID, dr.wantCPUs.String())
			}
			d.mu.Unlock()
		}
	}
	if len(failed) > 0 {
		d.log.WithError(errors.Join(failed...)).Warn("reconcile: restoring cpusets failed; retrying next period")
	}
}

// wantedCPUs is a known container and the cpuset it should have.
type wantedCPUs struct {
	rec  ctrRecord
	cpus cpuset.CPUSet
}

// findDrift reads the cgroups of items and returns those that differ
// from what they should have. A cgroup that is gone is skipped.
func (d *Daemon) findDrift(reader cgroupReader, items []wantedCPUs) []drifted {
	var found []drifted
	for _, it := range items {
		if it.rec.CgroupsPath == "" || it.cpus.IsEmpty() {
			continue // an empty cpuset is never applied (see emptypool.go)
		}
		cpus, mems, err := reader.read(it.rec.CgroupsPath)
		if errors.Is(err, errCgroupGone) {
			continue
		}
		if err != nil {
			d.log.WithError(err).WithField("container", it.rec.Name).Debug("reconcile: cannot read the cgroup")
			continue
		}
		dr := drifted{rec: it.rec, wantCPUs: it.cpus, haveCPUs: cpus, wantMems: it.rec.Mems, haveMems: mems.String()}
		if it.rec.Mems != "" && !sameList(it.rec.Mems, mems.String()) {
			dr.updateMems = true
		}
		if cpus.Equals(it.cpus) && !dr.updateMems {
			continue
		}
		found = append(found, dr)
	}
	return found
}

// logDrift logs each drifted container.
func (d *Daemon) logDrift(found []drifted) {
	for _, dr := range found {
		d.log.WithFields(logrus.Fields{
			"pod": dr.rec.PodName, "container": dr.rec.Name, "id": dr.rec.ID,
			"cpus": dr.wantCPUs.String(), "found_cpus": dr.haveCPUs.String(), "mems": dr.wantMems, "found_mems": dr.haveMems,
		}).Warn("cpuset drifted from the assignment; restoring it")
	}
}

// driftUpdates are the updates that restore the drifted containers
// through the runtime.
func driftUpdates(found []drifted) []*api.ContainerUpdate {
	updates := make([]*api.ContainerUpdate, 0, len(found))
	for _, dr := range found {
		u := &api.ContainerUpdate{}
		u.SetContainerId(dr.rec.ID)
		u.SetLinuxCPUSetCPUs(dr.wantCPUs.String())
		if dr.updateMems {
			u.SetLinuxCPUSetMems(dr.wantMems)
		}
		u.SetIgnoreFailure()
		updates = append(updates, u)
	}
	return updates
}
