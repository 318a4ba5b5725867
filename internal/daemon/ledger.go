package daemon

import (
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
)

// The ledger (internal/ledger) owns the policy state; the daemon's code
// knows its values by these names.
type (
	ctrRecord    = ledger.Record
	ctrEdit      = ledger.Edit
	indexChange  = ledger.IndexChange
	podContainer = ledger.PodContainer
	shrink       = ledger.Shrink
	ledgerView   = ledger.View
)

// DeviceView is one device of a container in ContainerView (ledger.DeviceView).
type DeviceView = ledger.DeviceView

// stampOf formats t as ctrRecord.Since.
var stampOf = ledger.StampOf
