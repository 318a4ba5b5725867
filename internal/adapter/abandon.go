package adapter

import (
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
)

// A container the plugin placed in CreateContainer can die before it ever
// runs: the OCI runtime fails after the plugin's answer (a command missing
// from the image, a bad mount). Neither runtime tells plugins reliably:
// CRI-O runs `runc create` inside CreateContainer and, when it fails,
// sends no StopContainer or RemoveContainer at all; containerd runs it at
// StartContainer, before the NRI StartContainer event, and sends nothing
// either until the kubelet removes the dead container. As under the
// kubelet, whose assignment of such a container lives as long as its pod,
// its CPUs stay with its pod and name: the kubelet's retry (same pod and
// name, a new ID) takes the dead attempt's place and gets exactly them,
// and the pod's end releases them (RemovePodSandbox, StopPodSandbox, or
// Synchronize not finding the pod). The ledger remembers which containers
// were placed and have not started (not stored: Synchronize rebuilds it
// from the runtime) only to tell such a dead attempt from a restart.

// reasonNeverStarted is the reason word logged for a dead attempt.
const reasonNeverStarted = "ContainerNeverStarted"

// logAbandoned writes the one line and counts the metric for a container
// that never started and was replaced by its pod's retry.
func (p *plugin) logAbandoned(r ledger.Record, cpus, why, msg string) {
	d := p.d
	d.Metrics.abandoned.Inc()
	d.Log.WithFields(logrus.Fields{
		"pod": r.PodName, "container": r.Name, "id": r.ID, "cpus": cpus, "exclusive": r.Exclusive,
		"reason": reasonNeverStarted, "detail": why,
	}).Warn(msg)
}
