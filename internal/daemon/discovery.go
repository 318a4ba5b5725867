package daemon

import (
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// logDiscoveryWarnings logs what sysfs discovery resolved the kubelet's
// way instead of refusing the machine (e.g. thread_siblings_list
// disagreeing with core_id), one warning each, naming the files.
func logDiscoveryWarnings(log *logrus.Logger, warns []sysfs.Warning) {
	for _, w := range warns {
		log.WithFields(logrus.Fields{"files": w.Files, "reason": "TopologyDiscoveryWarning"}).Warn(w.Msg)
	}
}
