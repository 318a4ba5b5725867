package nrtexport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
)

// FieldManager is the server-side apply field manager the plugin writes as.
const FieldManager = "nri-cpualign"

// Client writes NodeResourceTopology objects to an API server with
// server-side apply: one PATCH creates the object or replaces the fields
// the plugin owns, with no read before and no conflict on resourceVersion.
// It is a small REST client rather than client-go: it makes one kind of
// request, and authenticates with a bearer token or a client certificate.
type Client struct {
	server string
	hc     *http.Client
	// token returns the bearer token ("" for none); read per request,
	// since projected service-account tokens are rotated on disk.
	token func() (string, error)
}

// Apply creates or updates obj.
func (c *Client) Apply(ctx context.Context, obj nrt.Object) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	u := fmt.Sprintf("%s/apis/%s/%s/%s/%s?fieldManager=%s&force=true", c.server, nrt.Group, nrt.Version, nrt.Plural,
		url.PathEscape(obj.Metadata.Name), FieldManager)
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	// JSON is YAML: the apply content type takes either.
	req.Header.Set("Content-Type", "application/apply-patch+yaml")
	req.Header.Set("Accept", "application/json")
	tok, err := c.token()
	if err != nil {
		return err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(msg, &st) == nil && st.Message != "" {
		return fmt.Errorf("apply %s %s: %s: %s", nrt.Kind, obj.Metadata.Name, resp.Status, st.Message)
	}
	return fmt.Errorf("apply %s %s: %s: %s", nrt.Kind, obj.Metadata.Name, resp.Status, strings.TrimSpace(string(msg)))
}

// The service account's files in a pod.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InCluster is the client of a pod: the API server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the service
// account's token and CA.
func InCluster() (*Client, error) {
	return inCluster(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), serviceAccountDir)
}

func inCluster(host, port, saDir string) (*Client, error) {
	if host == "" || port == "" {
		return nil, errors.New("in-cluster API server: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set " +
			"(not in a pod? set kubeconfig)")
	}
	caFile, tokenFile := filepath.Join(saDir, "ca.crt"), filepath.Join(saDir, "token")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("in-cluster API server: %w (is automountServiceAccountToken on?)", err)
	}
	tlsCfg, err := tlsConfig(ca, caFile, false, "")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("in-cluster API server: %w", err)
	}
	return &Client{server: "https://" + net.JoinHostPort(host, port), hc: httpClient(tlsCfg), token: tokenFrom(tokenFile)}, nil
}

// kubeconfig is the part of a kubeconfig file the client reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                string `json:"server"`
			CertificateAuthority  string `json:"certificate-authority"`
			CAData                []byte `json:"certificate-authority-data"`
			InsecureSkipTLSVerify bool   `json:"insecure-skip-tls-verify"`
			TLSServerName         string `json:"tls-server-name"`
		} `json:"cluster"`
	} `json:"clusters"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         []byte `json:"client-key-data"`
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
		} `json:"user"`
	} `json:"users"`
}

// FromKubeconfig is the client of a kubeconfig file's current context:
// its cluster's server and CA, its user's client certificate or token.
// Relative file names are relative to the kubeconfig's directory.
func FromKubeconfig(path string) (*Client, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("kubeconfig %s: %s", path, fmt.Sprintf(format, args...))
	}
	if kc.CurrentContext == "" {
		return nil, bad("no current-context")
	}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return nil, bad("current-context %q is not among its contexts", kc.CurrentContext)
	}
	dir := filepath.Dir(path)
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	readOr := func(data []byte, file, what string) ([]byte, error) {
		if len(data) > 0 || file == "" {
			return data, nil
		}
		b, err := os.ReadFile(abs(file))
		if err != nil {
			return nil, bad("%s: %v", what, err)
		}
		return b, nil
	}
	c := &Client{token: func() (string, error) { return "", nil }}
	var tlsCfg *tls.Config
	found = false
	for _, cl := range kc.Clusters {
		if cl.Name != clusterName {
			continue
		}
		found = true
		if cl.Cluster.Server == "" {
			return nil, bad("cluster %q has no server", clusterName)
		}
		c.server = strings.TrimRight(cl.Cluster.Server, "/")
		ca, err := readOr(cl.Cluster.CAData, cl.Cluster.CertificateAuthority, "certificate-authority")
		if err != nil {
			return nil, err
		}
		if tlsCfg, err = tlsConfig(ca, "cluster "+clusterName, cl.Cluster.InsecureSkipTLSVerify, cl.Cluster.TLSServerName); err != nil {
			return nil, bad("%v", err)
		}
	}
	if !found {
		return nil, bad("cluster %q of context %q is not among its clusters", clusterName, kc.CurrentContext)
	}
	found = false
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		found = true
		cert, err := readOr(u.User.ClientCertificateData, u.User.ClientCertificate, "client-certificate")
		if err != nil {
			return nil, err
		}
		key, err := readOr(u.User.ClientKeyData, u.User.ClientKey, "client-key")
		if err != nil {
			return nil, err
		}
		if len(cert) > 0 || len(key) > 0 {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return nil, bad("user %q: client certificate: %v", userName, err)
			}
			tlsCfg.Certificates = []tls.Certificate{pair}
		}
		switch {
		case u.User.Token != "":
			tok := u.User.Token
			c.token = func() (string, error) { return tok, nil }
		case u.User.TokenFile != "":
			c.token = tokenFrom(abs(u.User.TokenFile))
		}
	}
	if !found && userName != "" {
		return nil, bad("user %q of context %q is not among its users", userName, kc.CurrentContext)
	}
	c.hc = httpClient(tlsCfg)
	return c, nil
}

func tlsConfig(ca []byte, what string, insecure bool, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure, ServerName: serverName} //nolint:gosec // the kubeconfig asks for it
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s: no PEM certificate in the certificate authority", what)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func httpClient(tlsCfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 1,
	}}
}

func tokenFrom(file string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("bearer token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
}
