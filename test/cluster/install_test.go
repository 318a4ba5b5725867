//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// installer is one of the README's ways of installing the plugin: the
// kustomize manifests (kubectl apply -k) or the Helm chart. Each installs
// deploy/ (or the chart) with only the test runtime's NRI socket directory
// and a state directory of this run changed, changes the configuration
// the way its operator would, and uninstalls.
type installer interface {
	// name is how the specs' names call it.
	name() string
	// install creates the namespace, ConfigMap and DaemonSet.
	install(ctx context.Context, socketDir, stateDir string)
	// configure makes the plugin's config.toml doc and applies it; the
	// DaemonSet then rolls out by itself (the caller waits for it).
	configure(ctx context.Context, doc string)
	// uninstall removes everything it installed, waiting for it.
	uninstall(ctx context.Context)
}

// chosenInstaller is E2E_CLUSTER_INSTALL ("helm" or "kustomize"); by
// default the chart on containerd and the manifests on CRI-O, so that a
// run on both runtimes installs both ways.
func chosenInstaller() installer {
	switch v := os.Getenv("E2E_CLUSTER_INSTALL"); v {
	case "helm":
		return &helmInstaller{}
	case "kustomize":
		return &kustomizeInstaller{}
	case "":
		if os.Getenv("E2E_RUNTIME") == crio {
			return &kustomizeInstaller{}
		}
		return &helmInstaller{}
	default:
		panic(fmt.Sprintf("E2E_CLUSTER_INSTALL=%q: want helm or kustomize", v))
	}
}

// install is the installer of this run, chosen when the spec tree is built.
var install = chosenInstaller()

// kustomizeInstaller applies deploy/ through an overlay.
type kustomizeInstaller struct {
	overlay, base, socketDir, stateDir string
}

func (k *kustomizeInstaller) name() string { return "kubectl apply -k" }

// writeOverlay writes the overlay: deploy/ with the two host paths patched
// and, when doc is not "", config.toml replaced (as an operator's overlay
// would change the configuration).
func (k *kustomizeInstaller) writeOverlay(doc string) {
	GinkgoHelper()
	rel, err := filepath.Rel(k.overlay, k.base)
	Expect(err).NotTo(HaveOccurred())
	generator := ""
	if doc != "" {
		Expect(os.WriteFile(filepath.Join(k.overlay, "config.toml"), []byte(doc), 0o644)).To(Succeed())
		generator = `configMapGenerator:
  - name: nri-cpualign
    namespace: nri-cpualign
    behavior: replace
    files:
      - config.toml
`
	}
	Expect(os.WriteFile(filepath.Join(k.overlay, "kustomization.yaml"), []byte(fmt.Sprintf(`# Test-only differences from deploy/: the test runtime's NRI socket
# directory and a state directory of this run.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
%spatches:
  - patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata:
        name: nri-cpualign
        namespace: nri-cpualign
      spec:
        template:
          spec:
            volumes:
              - name: nri-socket
                hostPath:
                  path: %s
              - name: state
                hostPath:
                  path: %s
`, rel, generator, k.socketDir, k.stateDir)), 0o644)).To(Succeed())
}

func (k *kustomizeInstaller) install(ctx context.Context, socketDir, stateDir string) {
	GinkgoHelper()
	k.overlay, k.socketDir, k.stateDir = filepath.Join(Env.Dir, "overlay"), socketDir, stateDir
	Expect(os.MkdirAll(k.overlay, 0o755)).To(Succeed())
	base, err := filepath.Abs(filepath.Join(repoRoot, "deploy"))
	Expect(err).NotTo(HaveOccurred())
	k.base = base
	k.writeOverlay("")

	// The overlay changes the two host paths and nothing else.
	want := yamlDocs(Default, mustKubectl(ctx, "kustomize", base))
	got := yamlDocs(Default, mustKubectl(ctx, "kustomize", k.overlay))
	Expect(got).To(HaveLen(len(want)))
	for _, doc := range want {
		if doc["kind"] == "DaemonSet" {
			sortedVolumes(doc)
		}
	}
	for _, doc := range got {
		if doc["kind"] == "DaemonSet" {
			restoreHostPaths(doc, socketDir, stateDir)
		}
	}
	Expect(got).To(Equal(want), "the overlay changes more than the two host paths")

	out := mustKubectl(ctx, "apply", "-k", k.overlay)
	Expect(out).To(ContainSubstring("namespace/nri-cpualign"))
	Expect(out).To(MatchRegexp(`configmap/nri-cpualign-[a-z0-9]+ `))
	Expect(out).To(ContainSubstring("daemonset.apps/nri-cpualign"))
}

func (k *kustomizeInstaller) configure(ctx context.Context, doc string) {
	GinkgoHelper()
	k.writeOverlay(doc)
	mustKubectl(ctx, "apply", "-k", k.overlay)
}

func (k *kustomizeInstaller) uninstall(ctx context.Context) {
	GinkgoHelper()
	mustKubectl(ctx, "delete", "-k", k.overlay, "--wait=true", "--timeout=90s")
}

// helmInstaller installs the chart as release nri-cpualign (its record in
// the default namespace; the chart creates the plugin's namespace).
type helmInstaller struct{ chart string }

const helmRelease = "nri-cpualign"

func (h *helmInstaller) name() string { return "helm install" }

// helm runs the test's helm against the cluster and returns its output.
func helm(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, Env.Helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+Env.Kubeconfig)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

func mustHelm(ctx context.Context, args ...string) string {
	GinkgoHelper()
	out, err := helm(ctx, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

func (h *helmInstaller) install(ctx context.Context, socketDir, stateDir string) {
	GinkgoHelper()
	chart, err := filepath.Abs(filepath.Join(repoRoot, "deploy/helm/nri-cpualign"))
	Expect(err).NotTo(HaveOccurred())
	h.chart = chart
	sets := []string{"--set", "hostPaths.nriSocketDir=" + socketDir, "--set", "hostPaths.stateDir=" + stateDir}

	// The values change the two host paths and nothing else.
	want := yamlDocs(Default, mustHelm(ctx, "template", helmRelease, chart))
	got := yamlDocs(Default, mustHelm(ctx, append([]string{"template", helmRelease, chart}, sets...)...))
	Expect(got).To(HaveLen(len(want)))
	for _, doc := range want {
		if doc["kind"] == "DaemonSet" {
			sortedVolumes(doc)
		}
	}
	for _, doc := range got {
		if doc["kind"] == "DaemonSet" {
			restoreHostPaths(doc, socketDir, stateDir)
		}
	}
	Expect(got).To(Equal(want), "the values change more than the two host paths")

	out := mustHelm(ctx, append([]string{"install", helmRelease, chart}, sets...)...)
	Expect(out).To(ContainSubstring("STATUS: deployed"))
	// NOTES.txt tells what to do next.
	Expect(out).To(ContainSubstring("kubectl label node NODE nri-cpualign/enabled=true"))
	Expect(out).To(ContainSubstring("Fail-closed"))
	Expect(mustKubectl(ctx, "-n", pluginNS, "get", "configmap,daemonset", "-o", "name")).To(And(
		ContainSubstring("configmap/nri-cpualign\n"), ContainSubstring("daemonset.apps/nri-cpualign\n")))
}

// configure sets the one value the configuration doc differs in from the
// chart's defaults: the specs change the reservation only.
func (h *helmInstaller) configure(ctx context.Context, doc string) {
	GinkgoHelper()
	set := "config.reserved_system_cpus="
	if v, ok := tomlString(doc, "reserved_system_cpus"); ok {
		set += strings.ReplaceAll(v, ",", `\,`)
	}
	// --wait does not wait for the new pod to be Ready with
	// maxUnavailable 1 on one node (Helm counts desired - maxUnavailable
	// Ready pods as enough): the caller waits with kubectl rollout status.
	out := mustHelm(ctx, "upgrade", helmRelease, h.chart, "--reuse-values", "--set", set, "--wait", "--timeout", "2m")
	Expect(out).To(ContainSubstring("STATUS: deployed"))
}

func (h *helmInstaller) uninstall(ctx context.Context) {
	GinkgoHelper()
	out := mustHelm(ctx, "uninstall", helmRelease, "--wait", "--timeout", "90s")
	Expect(out).To(ContainSubstring(`release "nri-cpualign" uninstalled`))
	_, err := helm(ctx, "status", helmRelease)
	Expect(err).To(MatchError(ContainSubstring("not found")))
}

// tomlString is the value of a top-level `key = "value"` line of doc.
func tomlString(doc, key string) (string, bool) {
	for _, l := range strings.Split(doc, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+" = "); ok {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// sortedVolumes sorts a rendered DaemonSet's volumes by name (a patch
// moves the patched ones first) and returns them.
func sortedVolumes(doc map[string]any) []any {
	spec := doc["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	vols := spec["volumes"].([]any)
	slices.SortFunc(vols, func(a, b any) int {
		return strings.Compare(a.(map[string]any)["name"].(string), b.(map[string]any)["name"].(string))
	})
	return vols
}

// restoreHostPaths checks that a rendered DaemonSet mounts the test's
// socket and state directories and puts deploy/'s paths back.
func restoreHostPaths(doc map[string]any, socketDir, stateDir string) {
	GinkgoHelper()
	for _, v := range sortedVolumes(doc) {
		v := v.(map[string]any)
		hp, ok := v["hostPath"].(map[string]any)
		if !ok {
			continue
		}
		switch v["name"] {
		case "nri-socket":
			Expect(hp["path"]).To(Equal(socketDir))
			hp["path"] = "/var/run/nri"
		case "state":
			Expect(hp["path"]).To(Equal(stateDir))
			hp["path"] = "/var/lib/nri-cpualign"
		}
	}
}
