package hints

// InitContainer is one init container of a pod, in start order, for
// EffectiveRequest.
type InitContainer struct {
	Request int64
	// Restartable marks a sidecar (restartPolicy: Always): it keeps running
	// beside the later init containers and the app containers.
	Restartable bool
}

// EffectiveRequest returns a pod's effective request of one resource, the
// amount hint providers size the pod-scope hints by (KEP-693): the larger of
// the highest request of any init container and the sum of the app
// containers' requests. Sidecars count the way Kubernetes counts them: a
// sidecar keeps its request for the rest of the pod's life, so it adds to
// every later init container and to the app containers' sum.
//
// KEP-693's example: init containers 2 and 2 CPUs, app containers 2 and 1
// CPUs: max(2, 2+1) = 3.
func EffectiveRequest(inits []InitContainer, apps []int64) int64 {
	var sidecars, initMax int64
	for _, c := range inits {
		if c.Restartable {
			sidecars += c.Request
			initMax = max(initMax, sidecars)
			continue
		}
		initMax = max(initMax, sidecars+c.Request)
	}
	sum := sidecars
	for _, r := range apps {
		sum += r
	}
	return max(initMax, sum)
}
