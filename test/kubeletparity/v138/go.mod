module github.com/nri-cpualign/nri-cpualign/test/kubeletparity/v138

go 1.27.0

require (
	github.com/nri-cpualign/nri-cpualign v0.0.0
	k8s.io/kubernetes v1.38.0-beta.0
)

replace github.com/nri-cpualign/nri-cpualign => ../../..

// Not on the module proxy (new staging modules of 1.38): empty stand-ins;
// nothing the cm packages import is in them.
replace (
	k8s.io/apiextensions-api => ./stub/apiextensions-api
	k8s.io/ktesting => ./stub/ktesting
)

// v7.0.1, which the beta asks for, is not on the proxy.
replace sigs.k8s.io/structured-merge-diff/v7 => sigs.k8s.io/structured-merge-diff/v7 v7.0.0

replace k8s.io/api => k8s.io/api v0.38.0-beta.0
replace k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.38.0-beta.0
replace k8s.io/apimachinery => k8s.io/apimachinery v0.38.0-beta.0
replace k8s.io/apiserver => k8s.io/apiserver v0.38.0-beta.0
replace k8s.io/cli-runtime => k8s.io/cli-runtime v0.38.0-beta.0
replace k8s.io/client-go => k8s.io/client-go v0.38.0-beta.0
replace k8s.io/cloud-provider => k8s.io/cloud-provider v0.38.0-beta.0
replace k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.38.0-beta.0
replace k8s.io/code-generator => k8s.io/code-generator v0.38.0-beta.0
replace k8s.io/component-base => k8s.io/component-base v0.38.0-beta.0
replace k8s.io/component-helpers => k8s.io/component-helpers v0.38.0-beta.0
replace k8s.io/controller-manager => k8s.io/controller-manager v0.38.0-beta.0
replace k8s.io/cri-api => k8s.io/cri-api v0.38.0-beta.0
replace k8s.io/cri-client => k8s.io/cri-client v0.38.0-beta.0
replace k8s.io/cri-streaming => k8s.io/cri-streaming v0.38.0-beta.0
replace k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.38.0-beta.0
replace k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.38.0-beta.0
replace k8s.io/endpointslice => k8s.io/endpointslice v0.38.0-beta.0
replace k8s.io/externaljwt => k8s.io/externaljwt v0.38.0-beta.0
replace k8s.io/kms => k8s.io/kms v0.38.0-beta.0
replace k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.38.0-beta.0
replace k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.38.0-beta.0
replace k8s.io/kube-proxy => k8s.io/kube-proxy v0.38.0-beta.0
replace k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.38.0-beta.0
replace k8s.io/kubectl => k8s.io/kubectl v0.38.0-beta.0
replace k8s.io/kubelet => k8s.io/kubelet v0.38.0-beta.0
replace k8s.io/metrics => k8s.io/metrics v0.38.0-beta.0
replace k8s.io/mount-utils => k8s.io/mount-utils v0.38.0-beta.0
replace k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.38.0-beta.0
replace k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.38.0-beta.0
replace k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.38.0-beta.0
replace k8s.io/sample-controller => k8s.io/sample-controller v0.38.0-beta.0
replace k8s.io/streaming => k8s.io/streaming v0.38.0-beta.0
