package nrtexport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
)

// apiServer is a TLS server that takes server-side apply requests for
// NodeResourceTopology objects and records their token and object.
type apiServer struct {
	*httptest.Server
	tokens []string
	objs   []nrt.Object
	status int    // answer, 200 unless set
	answer string // body of a non-200 answer
}

func newAPIServer(t *testing.T) *apiServer {
	s := &apiServer{status: http.StatusOK}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1" ||
			r.URL.Query().Get("fieldManager") != "nri-cpualign" || r.URL.Query().Get("force") != "true" ||
			r.Header.Get("Content-Type") != "application/apply-patch+yaml" {
			http.Error(w, fmt.Sprintf("unexpected %s %s (%s)", r.Method, r.URL, r.Header.Get("Content-Type")), http.StatusBadRequest)
			return
		}
		var obj nrt.Object
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.tokens = append(s.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		s.objs = append(s.objs, obj)
		w.WriteHeader(s.status)
		_, _ = io.WriteString(w, s.answer)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

var object = nrt.Object{APIVersion: nrt.APIVersion, Kind: nrt.Kind, Metadata: nrt.Metadata{Name: "worker-1"},
	Zones: []nrt.Zone{{Name: "node-0", Type: "Node", Resources: []nrt.Resource{{Name: "cpu", Capacity: 2, Allocatable: 2, Available: 1}}}}}

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKubeconfigTokenAndCAData(t *testing.T) {
	s := newAPIServer(t)
	dir := t.TempDir()
	kc := writeFile(t, dir, "kc", fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: ctx
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: ctx
  context: {cluster: c, user: u}
clusters:
- name: c
  cluster:
    server: %s/
    certificate-authority-data: %s
users:
- name: u
  user:
    token: secret-1
`, s.URL, base64.StdEncoding.EncodeToString(s.caPEM())))
	c, err := FromKubeconfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(context.Background(), object); err != nil {
		t.Fatal(err)
	}
	if len(s.objs) != 1 || s.tokens[0] != "secret-1" || s.objs[0].Zones[0].Resources[0].Available != 1 {
		t.Errorf("server saw tokens %q objects %+v", s.tokens, s.objs)
	}
}

// A CA file relative to the kubeconfig's directory, and a token file.
func TestKubeconfigFiles(t *testing.T) {
	s := newAPIServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "ca.crt", string(s.caPEM()))
	writeFile(t, dir, "tok", "secret-2\n")
	kc := writeFile(t, dir, "kc", fmt.Sprintf(`current-context: ctx
contexts: [{name: ctx, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: %q, certificate-authority: ca.crt}}]
users: [{name: u, user: {tokenFile: tok}}]
`, s.URL))
	c, err := FromKubeconfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(context.Background(), object); err != nil {
		t.Fatal(err)
	}
	if len(s.tokens) != 1 || s.tokens[0] != "secret-2" {
		t.Errorf("tokens %q, want [secret-2]", s.tokens)
	}
}

// The API server's refusal comes back with its status and message.
func TestApplyError(t *testing.T) {
	s := newAPIServer(t)
	s.status = http.StatusForbidden
	s.answer = `{"kind":"Status","message":"noderesourcetopologies.topology.node.k8s.io \"worker-1\" is forbidden: User cannot patch"}`
	dir := t.TempDir()
	writeFile(t, dir, "ca.crt", string(s.caPEM()))
	writeFile(t, dir, "token", "sa-token")
	host, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	c, err := inCluster(host, port, dir)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Apply(context.Background(), object)
	want := `apply NodeResourceTopology worker-1: 403 Forbidden: noderesourcetopologies.topology.node.k8s.io "worker-1" is forbidden: User cannot patch`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

// In a pod the token is read for every request: a rotated token is used.
func TestInClusterTokenRotation(t *testing.T) {
	s := newAPIServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "ca.crt", string(s.caPEM()))
	writeFile(t, dir, "token", "old")
	host, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	c, err := inCluster(host, port, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(context.Background(), object); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "token", "new")
	if err := c.Apply(context.Background(), object); err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.tokens, ",") != "old,new" {
		t.Errorf("tokens %q, want old then new", s.tokens)
	}
}

// A server whose certificate the CA does not sign is refused.
func TestUnknownCA(t *testing.T) {
	s := newAPIServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "ca.crt", string(otherCA(t)))
	writeFile(t, dir, "token", "t")
	host, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	c, err := inCluster(host, port, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(context.Background(), object); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("error %v, want a certificate error", err)
	}
	if len(s.objs) != 0 {
		t.Errorf("the server got %d objects over an unverified connection", len(s.objs))
	}
}

// otherCA is a self-signed CA certificate that signed nothing
// (httptest's servers all share one certificate).
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, doc, want string }{
		{"no context", "clusters: []\n", "no current-context"},
		{"unknown context", "current-context: x\n", `current-context "x" is not among its contexts`},
		{"unknown cluster", "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n", `cluster "c" of context "x" is not among its clusters`},
		{"no server", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {}}]\n", `cluster "c" has no server`},
		{"missing CA file", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'https://h', certificate-authority: nope.crt}}]\n", "certificate-authority: open " + filepath.Join(dir, "nope.crt")},
		{"bad CA", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: " + base64.StdEncoding.EncodeToString([]byte("junk")) + "}}]\n", "no PEM certificate"},
		{"unknown user", "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n", `user "u" of context "x" is not among its users`},
		{"not YAML", "current-context: [\n", "kubeconfig " + filepath.Join(dir, "not YAML")},
	} {
		p := writeFile(t, dir, tc.name, tc.doc)
		if _, err := FromKubeconfig(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := FromKubeconfig(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("absent kubeconfig: error %v", err)
	}
	if _, err := inCluster("", "443", dir); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("in-cluster without env: %v", err)
	}
	if _, err := inCluster("h", "443", dir); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Errorf("in-cluster without CA: %v", err)
	}
}
