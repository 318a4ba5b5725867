package bench

import (
	"context"
	"errors"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
)

// Floor is the plugin of the NRI floor (BenchmarkNRIFloor, and ownproc's
// -plugin floor): it decides nothing and answers every CreateContainer
// with the same cpuset.cpus and cpuset.mems, after one durable append of
// a one-block record to its journal when it has one, as the daemon's
// store pays per durable event.
type Floor struct {
	j       *checkpoint.Journal
	payload []byte
}

// NewFloor returns a floor plugin; with journalDir set it appends to a
// journal created there (close it with Close).
func NewFloor(journalDir string) (*Floor, error) {
	p := &Floor{payload: make([]byte, 400)}
	if journalDir != "" {
		j, err := checkpoint.CreateJournal(journalDir, "floor", checkpoint.DefaultJournalSize, 1)
		if err != nil {
			return nil, err
		}
		p.j = j
	}
	return p, nil
}

// CreateContainer is NRI's CreateContainer: the fixed answer, after the
// append.
func (p *Floor) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.j != nil {
		err := p.j.Append(p.payload)
		if errors.Is(err, checkpoint.ErrJournalFull) {
			p.j.Rewind()
			err = p.j.Append(p.payload)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxCPUSetCPUs("2-3")
	adj.SetLinuxCPUSetMems("0")
	return adj, nil, nil
}

// Close closes the journal, if any.
func (p *Floor) Close() error {
	if p.j == nil {
		return nil
	}
	return p.j.Close()
}
