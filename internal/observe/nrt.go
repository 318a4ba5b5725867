package observe

import (
	"errors"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/nrtexport"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
)

// NewNRTExporter returns the NodeResourceTopology exporter when cfg turns
// it on (nil otherwise): a read-only user of the ledger's view, kicked by
// every commit. A missing node name or an unusable kubeconfig is a
// configuration error.
func NewNRTExporter(cfg config.Config, view func() ledger.View, log *logrus.Logger) (*nrtexport.Exporter, error) {
	if cfg.NodeResourceTopology != config.NRTOn {
		return nil, nil
	}
	node := cfg.NodeNameOrEnv()
	if node == "" {
		return nil, cfg.KeyError(config.KeyNodeName, "",
			`node_resource_topology = "on" needs the node's name: set node_name, or NODE_NAME in the environment (the DaemonSet sets it from spec.nodeName)`)
	}
	var client *nrtexport.Client
	var err error
	if cfg.Kubeconfig != "" {
		client, err = nrtexport.FromKubeconfig(cfg.Kubeconfig)
	} else {
		client, err = nrtexport.InCluster()
	}
	if err != nil {
		return nil, cfg.KeyError(config.KeyKubeconfig, cfg.Kubeconfig, err.Error())
	}
	return nrtexport.New(client, func() (nrt.Object, error) { return NRTObject(view(), node) },
		log.WithField("component", "node-resource-topology")), nil
}

// NRTObject is the node's NodeResourceTopology for a ledger view.
func NRTObject(v ledger.View, node string) (nrt.Object, error) {
	if v.Engine == nil {
		return nrt.Object{}, errors.New("no valid policy configuration yet")
	}
	maxNodes := 0
	if _, ok := v.Cfg.TopologyManagerPolicyOptions[hints.OptMaxAllowableNUMANodes]; ok {
		if o, err := hints.ParseOptions(v.Cfg.TopologyManagerPolicyOptions); err == nil {
			maxNodes = o.MaxAllowableNUMANodes
		}
	}
	return nrt.Build(nrt.Input{
		Node:                  node,
		Topology:              v.Topo,
		Reserved:              v.Engine.Reserved(),
		Exclusive:             nrt.ExclusiveCPUs(v.St.Alloc.Assignments),
		TopologyManagerPolicy: v.Cfg.TopologyManagerPolicy,
		TopologyManagerScope:  v.Cfg.TopologyManagerScope,
		MaxNUMANodes:          maxNodes,
		Memory:                nrtMemory(memoryView(v.Engine, v.St)),
	})
}

// nrtMemory turns the memory manager's tables into the zones' memory and
// hugepage rows: capacity the node's total, allocatable what Guaranteed
// containers may take, available what they have left. Nil (each zone then
// reports its MemTotal) under memory_manager_policy None.
func nrtMemory(rows []MemoryView) map[int][]nrt.Resource {
	if rows == nil {
		return nil
	}
	m := make(map[int][]nrt.Resource)
	for _, r := range rows {
		m[r.NUMANode] = append(m[r.NUMANode], nrt.Resource{Name: r.Resource,
			Capacity: int64(r.Total), Allocatable: int64(r.Allocatable), Available: int64(r.Free)})
	}
	return m
}
