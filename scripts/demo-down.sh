#!/usr/bin/env bash
# demo-down.sh - `make demo-down`: remove the demo pods, stop the demo's
# nri-cpualign and tear the test containerd down.
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
check_prereqs

exec 9>/tmp/nri-cpualign-e2e.lock
flock 9

if [ -s "$E2E_RUN/env" ] && [ -x "$DEMO_TOOL" ]; then
	# shellcheck disable=SC1091
	source "$E2E_RUN/env"
	"$DEMO_TOOL" down || log "removing the demo pods failed; teardown removes what is left"
fi
stop_demo_plugin
teardown_containerd
rm -rf "$DEMO_RUN"
log "demo stopped"
