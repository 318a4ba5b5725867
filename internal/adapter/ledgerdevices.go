package adapter

import (
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
)

// deviceViews is the ledger's copy of located devices (for /state):
// internal/request knows nothing of the ledger.
func deviceViews(devs []request.Device) []ledger.DeviceView {
	out := make([]ledger.DeviceView, len(devs))
	for i, d := range devs {
		out[i] = ledger.DeviceView(d)
	}
	return out
}

// devicesOf is ledger.devices after a Synchronize: the located devices
// of the live containers the index keeps.
func devicesOf(in syncInput, records map[string]ledger.Record) map[string][]ledger.DeviceView {
	out := map[string][]ledger.DeviceView{}
	for _, c := range in.Ctrs {
		if _, ok := records[c.ID]; ok && len(c.Devices.Devices) > 0 {
			out[c.ID] = deviceViews(c.Devices.Devices)
		}
	}
	return out
}
