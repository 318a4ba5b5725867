package applier

import (
	"sync"

	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
)

// Connection is the current NRI connection, nil between connections,
// and what its runtime supports (set at Configure, which comes before
// Synchronize and before any update the plugin sends). Its mutex is a
// leaf: taken under the ledger's lock or alone.
type Connection struct {
	mu      sync.Mutex
	s       stub.Stub
	runtime RuntimeSupport
}

// SetRuntime records the runtime the connection's Configure named.
func (c *Connection) SetRuntime(rs RuntimeSupport) {
	c.mu.Lock()
	c.runtime = rs
	c.mu.Unlock()
}

// unsolicited reports whether the plugin may call stub.UpdateContainers
// on its own on this connection: never before a Configure said which
// runtime it is (SupportOf's zero value says no).
func (c *Connection) unsolicited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runtime.unsolicited
}

// runtimeFields are the log fields naming the connection's runtime.
func (c *Connection) runtimeFields() logrus.Fields {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runtime.fields()
}

func (c *Connection) Get() stub.Stub {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

func (c *Connection) Set(s stub.Stub) {
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
}
