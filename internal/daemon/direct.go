package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/eintr"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// Under shared_pool_updates = "direct" the daemon writes the shared pool
// into the shared-pool containers' cgroups itself instead of asking the
// runtime to. The runtime applies a plugin's updates one OCI runtime
// update at a time (runc update: ~10 ms each on containerd and CRI-O), and
// containerd holds its NRI lock meanwhile, so with 50 shared containers
// every exclusive admission cost the new container's start ~0.6 s
// (in-answer), or left its CPUs shared for as long (after-answer). One
// cpuset.cpus write is ~20 µs.
//
// When: a pass starts right after the answer that changed the pool (the
// update worker is kicked), so it overlaps the OCI runtime's create. A new
// exclusive container's StartContainer waits until a pass has written the
// state it was admitted in (running one itself if none has), so its CPUs
// are in no shared-pool container's cgroup when it starts.
//
// Containers being created: a shared-pool container answered with an
// older pool may not have its cgroup yet when a pass comes (the write
// finds nothing), or the OCI runtime may write the answered pool after the
// pass did. Its own StartContainer therefore reads its cgroup and writes
// the current pool if it differs; until then only the OCI runtime's init
// runs in it.
//
// The runtime's record: the runtime still believes a shared-pool container
// has the cpuset it was created with (what crictl inspect shows). Nothing
// the runtime does re-applies it on its own: a CRI resize reaches the
// plugin's UpdateContainer, and kubelet resizes carry no cpuset. Another
// NRI plugin's update of such a container may carry the old value; the
// reconcile loop restores it within reconcile_period.

// cgroupWrites is what the daemon knows of the cgroups it wrote.
type cgroupWrites struct {
	// mu serializes every cgroup write of the daemon (passes, the start
	// check, the reconcile loop): each computes what to write after taking
	// it, so the last write is always of the newest state.
	mu sync.Mutex
	// Under the daemon's mu:
	// written is the cpuset.cpus each shared-pool container's cgroup holds
	// as far as the daemon knows (answered at its creation, or written).
	written map[string]string
	// done is the generation (Daemon.gen) of the newest state a pass wrote
	// to every shared-pool cgroup there was.
	done uint64
}

// direct reports whether the daemon writes shared-pool cgroups itself.
// d.mu is held.
func (d *Daemon) direct() bool { return d.cfg.SharedPoolUpdates == config.SharedUpdatesDirect }

// cgroups reads and writes the cgroups under cgroup_root. d.mu is held.
func (d *Daemon) cgroups() cgroupReader { return newCgroupReader(d.cfg.CgroupRoot) }

// noteAnswered records the cpuset a shared-pool container was created
// with. d.mu is held.
func (d *Daemon) noteAnswered(id, cpus string) {
	if d.cgw.written == nil {
		d.cgw.written = map[string]string{}
	}
	d.cgw.written[id] = cpus
}

// directTarget is one shared-pool cgroup a pass writes.
type directTarget struct {
	id, name, pod, path string
}

// directPass writes the shared pool into every shared-pool container's
// cgroup that does not hold it yet, until a pass ends with no newer state
// committed meanwhile. A cgroup that does not exist (yet, or any more) is
// skipped: see the container's start check.
func (d *Daemon) directPass() {
	d.cgw.mu.Lock()
	defer d.cgw.mu.Unlock()
	for {
		d.mu.Lock()
		if d.engine == nil || !d.direct() || d.syncs == 0 {
			d.mu.Unlock()
			return
		}
		cg := d.cgroups()
		gen := d.gen
		mask := d.engine.SharedMask(d.st)
		shared := mask.String()
		var todo []directTarget
		for id := range d.cgw.written {
			if _, ok := d.ctrs[id]; !ok {
				delete(d.cgw.written, id)
			}
		}
		if !mask.IsEmpty() { // never an empty cpuset (see emptypool.go)
			for id, r := range d.ctrs {
				if !r.Exclusive && r.CgroupsPath != "" && d.cgw.written[id] != shared {
					todo = append(todo, directTarget{id: id, name: r.Name, pod: r.PodName, path: r.CgroupsPath})
				}
			}
		}
		d.mu.Unlock()

		var wrote []string
		var failed []error
		for _, t := range todo {
			err := cg.writeCPUs(t.path, shared)
			switch {
			case err == nil:
				wrote = append(wrote, t.id)
			case !errors.Is(err, errCgroupGone):
				failed = append(failed, fmt.Errorf("container %s of pod %s: %w", t.name, t.pod, err))
			}
		}

		d.mu.Lock()
		for _, id := range wrote {
			if _, ok := d.ctrs[id]; ok {
				d.noteAnswered(id, shared)
			}
		}
		caughtUp := d.gen == gen
		if caughtUp && gen > d.cgw.done {
			d.cgw.done = gen
		}
		d.mu.Unlock()
		if len(failed) > 0 {
			d.log.WithError(errors.Join(failed...)).WithFields(logrus.Fields{"cpus": shared, "failed": len(failed)}).
				Warn("writing the shared pool into cgroups failed; the reconcile loop retries")
		}
		if len(wrote) > 0 {
			d.log.WithFields(logrus.Fields{"cpus": shared, "containers": len(wrote)}).Debug("shared pool written into cgroups")
		}
		if caughtUp {
			return
		}
	}
}

// directStart is StartContainer's part under shared_pool_updates =
// "direct": every state committed so far is written before the container
// starts (a pass runs here if the worker's has not yet), and a shared-pool
// container's own cgroup is checked, since the OCI runtime wrote it with
// the pool of its answer.
func (d *Daemon) directStart(id string) {
	d.mu.Lock()
	if d.engine == nil || !d.direct() {
		d.mu.Unlock()
		return
	}
	behind := d.cgw.done < d.gen
	r, known := d.ctrs[id]
	d.mu.Unlock()
	if behind {
		d.directPass()
	}
	if known && !r.Exclusive && r.CgroupsPath != "" {
		d.directCheck(id)
	}
}

// directCheck writes the current shared pool into a shared-pool
// container's cgroup if it holds something else.
func (d *Daemon) directCheck(id string) {
	d.cgw.mu.Lock()
	defer d.cgw.mu.Unlock()
	d.mu.Lock()
	cg := d.cgroups()
	r, ok := d.ctrs[id]
	mask := d.engine.SharedMask(d.st)
	d.mu.Unlock()
	if !ok || r.Exclusive || mask.IsEmpty() {
		return
	}
	have, _, err := cg.read(r.CgroupsPath)
	if err != nil {
		if !errors.Is(err, errCgroupGone) {
			d.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name}).Warn("cannot read the cgroup of a starting container")
		}
		return
	}
	shared := mask.String()
	if have.String() != shared {
		if err := cg.writeCPUs(r.CgroupsPath, shared); err != nil {
			d.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "cpus": shared}).
				Warn("cannot write the shared pool into a starting container's cgroup; the reconcile loop retries")
			return
		}
		d.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "cpus": shared, "found_cpus": have.String()}).
			Debug("starting container created with an older shared pool: written")
	}
	d.mu.Lock()
	if _, ok := d.ctrs[id]; ok {
		d.noteAnswered(id, shared)
	}
	d.mu.Unlock()
}

// writeCPUs writes cpus into the cgroup's cpuset.cpus; errCgroupGone when
// the cgroup does not exist.
func (r cgroupReader) writeCPUs(cgroupsPath, cpus string) error {
	return r.writeFile(cgroupsPath, "cpuset.cpus", cpus)
}

// writeMems writes mems into the cgroup's cpuset.mems.
func (r cgroupReader) writeMems(cgroupsPath, mems string) error {
	return r.writeFile(cgroupsPath, "cpuset.mems", mems)
}

func (r cgroupReader) writeFile(cgroupsPath, name, value string) error {
	dir, err := r.dir(cgroupsPath)
	if err != nil {
		return err
	}
	// No O_CREATE: a cgroup file that is not there is a cgroup that is
	// gone. O_TRUNC as a shell redirection does (cgroupfs ignores it; a
	// plain file, as in tests, needs it). Plain system calls rather than
	// os.File: a pass writes every shared-pool cgroup, and os.OpenFile's
	// non-blocking set-up and poller registration made each write cost
	// about twice its three system calls.
	path := filepath.Join(dir, name)
	fd, err := eintr.Retry(func() (int, error) {
		return syscall.Open(path, syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
	})
	if err == syscall.ENOENT {
		return errCgroupGone
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, werr := eintr.Retry(func() (int, error) { return syscall.Write(fd, []byte(value)) })
	cerr := syscall.Close(fd)
	switch {
	case werr != nil:
		return fmt.Errorf("write %q to %s: %w", value, path, werr)
	case n != len(value):
		return fmt.Errorf("write %q to %s: %w", value, path, io.ErrShortWrite)
	case cerr != nil:
		return &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}

// cpusetRoot is the directory under which the cpuset files of every cgroup
// are: the cpuset hierarchy (v1) or the unified one (v2).
func (r cgroupReader) cpusetRoot() string {
	if r.unified {
		return r.root
	}
	return filepath.Join(r.root, "cpuset")
}

// checkDirect makes sure shared_pool_updates = "direct" can write the
// cgroups: a configuration that sets it refuses to start when cgroup_root's
// cpuset hierarchy is not writable (a read-only mount); the default falls
// back to "in-answer" with a warning, so that a deployment that mounts the
// cgroups read-only keeps working.
func checkDirect(cfg *config.Config, log *logrus.Logger) error {
	if cfg.SharedPoolUpdates != config.SharedUpdatesDirect {
		return nil
	}
	dir := newCgroupReader(cfg.CgroupRoot).cpusetRoot()
	err := mountWritable(dir)
	if err == nil {
		return nil
	}
	if cfg.Line(config.KeySharedPoolUpdates) > 0 {
		return cfg.KeyError(config.KeySharedPoolUpdates, cfg.SharedPoolUpdates,
			fmt.Sprintf("the plugin writes the shared-pool containers' cgroups itself and cannot write %s (%v): "+
				"mount the host's cgroups read-write at cgroup_root, or set shared_pool_updates = %q",
				dir, err, config.SharedUpdatesInAnswer))
	}
	log.WithFields(logrus.Fields{"key": config.KeySharedPoolUpdates, "cgroup_root": cfg.CgroupRoot, "error": err.Error(),
		"using": config.SharedUpdatesInAnswer}).
		Warn("cannot write the cgroups for the default shared_pool_updates = \"direct\"; the runtime applies the shared pool instead " +
			"(each exclusive admission then waits for one OCI runtime update per shared-pool container); mount cgroup_root read-write")
	cfg.SharedPoolUpdates = config.SharedUpdatesInAnswer
	return nil
}

// mountWritable reports why dir's file system cannot be written: it is
// missing or mounted read-only. Not access(2): a cgroup v1 hierarchy's root
// directory is r-x for everyone, and the DaemonSet's root without
// capabilities still writes the cgroup files it owns.
func mountWritable(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Flags&stRdonly != 0 {
		return syscall.EROFS
	}
	return nil
}

// stRdonly is ST_RDONLY of statfs(2)'s f_flags.
const stRdonly = 0x1
