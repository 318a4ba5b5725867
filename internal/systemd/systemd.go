// Package systemd changes the resources of the units systemd keeps for
// container scopes and pod slices, through systemd's D-Bus API, as the
// OCI runtime's systemd cgroup driver (runc) does. On a node whose
// container cgroups systemd manages, systemd holds each scope's
// AllowedCPUs / AllowedMemoryNodes and each slice's CPU quota, and writes
// them back into the cgroup files whenever it re-applies the unit
// (daemon-reload, daemon-reexec, a property change): a value the plugin
// wrote only into the files lasts until then. Setting the unit property
// first (runtime, as `systemctl set-property --runtime` does) makes
// systemd's record agree, and the file write after it takes effect even
// where systemd is too old to hold the property.
package systemd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/utils/cpuset"
)

// Unit properties (systemd.resource-control(5); D-Bus types in
// org.freedesktop.systemd1(5)).
const (
	// PropAllowedCPUs and PropAllowedMemoryNodes are "ay": a bitmask,
	// CPU (node) n in bit n%8 of byte n/8.
	PropAllowedCPUs        = "AllowedCPUs"
	PropAllowedMemoryNodes = "AllowedMemoryNodes"
	// PropCPUQuota is CPUQuota= as D-Bus carries it, "t": microseconds
	// of CPU time per second of wall time; USEC_INFINITY is no quota.
	PropCPUQuota = "CPUQuotaPerSecUSec"
)

// NoQuota is USEC_INFINITY, CPUQuotaPerSecUSec's "no quota" (what
// `systemctl set-property UNIT CPUQuota=` sends, and runc for quota -1).
const NoQuota = uint64(math.MaxUint64)

// MinCPUSetVersion is the first systemd release with AllowedCPUs and
// AllowedMemoryNodes (v244). runc sets them only from there on; an older
// systemd holds no cpuset, and a file write alone lasts.
const MinCPUSetVersion = 244

// ErrNoUnit means systemd has no such unit (not created yet, or gone):
// it holds nothing for it that a re-apply could bring back.
var ErrNoUnit = errors.New("systemd has no such unit")

// Bits encodes set as systemd's CPU (or NUMA node) bitmask property: byte
// i holds CPUs 8i..8i+7, lowest CPU in the lowest bit, no trailing zero
// bytes. An empty set is refused: systemd reads an empty mask as "no
// restriction" (every CPU), the opposite of what an empty cpuset means.
func Bits(set cpuset.CPUSet) ([]byte, error) {
	if set.IsEmpty() {
		return nil, errors.New("empty cpuset: systemd would read it as every CPU")
	}
	list := set.List()
	if list[0] < 0 {
		return nil, fmt.Errorf("negative CPU %d", list[0])
	}
	b := make([]byte, list[len(list)-1]/8+1)
	for _, c := range list {
		b[c/8] |= 1 << (c % 8)
	}
	return b, nil
}

// ParseBits is Bits' inverse (for tests and for reading a unit back).
func ParseBits(b []byte) cpuset.CPUSet {
	var cpus []int
	for i, x := range b {
		for bit := 0; bit < 8; bit++ {
			if x&(1<<bit) != 0 {
				cpus = append(cpus, i*8+bit)
			}
		}
	}
	return cpuset.New(cpus...)
}

// CPUSetProperties are the properties giving a scope cpus and, when not
// "", mems (cpuset lists as in cpuset.cpus).
func CPUSetProperties(cpus, mems string) ([]sd.Property, error) {
	var props []sd.Property
	for _, p := range []struct{ name, list string }{{PropAllowedCPUs, cpus}, {PropAllowedMemoryNodes, mems}} {
		if p.list == "" {
			continue
		}
		set, err := cpuset.Parse(p.list)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", p.name, p.list, err)
		}
		b, err := Bits(set)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", p.name, p.list, err)
		}
		props = append(props, sd.Property{Name: p.name, Value: dbus.MakeVariant(b)})
	}
	if len(props) == 0 {
		return nil, errors.New("no cpuset to set")
	}
	return props, nil
}

// NoQuotaProperty lifts a unit's CPU quota.
func NoQuotaProperty() sd.Property {
	return sd.Property{Name: PropCPUQuota, Value: dbus.MakeVariant(NoQuota)}
}

// ScopeUnit is the unit of a container whose cgroupsPath is in the
// systemd driver's form "slice:prefix:name", named as runc names it:
// "prefix-name.scope" (containerd "cri-containerd-<id>.scope", CRI-O
// "crio-<id>.scope"), or name itself when it is a slice. ok is false for
// any other form (a cgroupfs path).
func ScopeUnit(cgroupsPath string) (unit string, ok bool) {
	_, prefix, name, ok := split(cgroupsPath)
	if !ok {
		return "", false
	}
	if strings.HasSuffix(name, ".slice") {
		return name, true
	}
	if prefix == "" {
		return name + ".scope", true
	}
	return prefix + "-" + name + ".scope", true
}

// SliceUnit is the slice holding the container of a systemd-form
// cgroupsPath: its pod's slice under the kubelet.
func SliceUnit(cgroupsPath string) (unit string, ok bool) {
	slice, _, _, ok := split(cgroupsPath)
	if !ok || !strings.HasSuffix(slice, ".slice") {
		return "", false
	}
	return slice, true
}

// IsSystemdPath reports whether cgroupsPath is in the systemd driver's
// form: the runtime's cgroups are systemd units.
func IsSystemdPath(cgroupsPath string) bool {
	_, ok := ScopeUnit(cgroupsPath)
	return ok
}

func split(p string) (slice, prefix, name string, ok bool) {
	if strings.HasPrefix(p, "/") || strings.Count(p, ":") != 2 {
		return "", "", "", false
	}
	parts := strings.SplitN(p, ":", 3)
	if parts[2] == "" || strings.ContainsRune(p, '/') {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// Manager is what the daemon asks of systemd; Client implements it over
// D-Bus, tests record the calls.
type Manager interface {
	// SetCPUSet gives a scope unit cpus and, when not "", mems.
	// ErrNoUnit when systemd has no such unit.
	SetCPUSet(ctx context.Context, unit, cpus, mems string) error
	// LiftQuota sets a slice unit's CPU quota to none. ErrNoUnit when
	// systemd has no such unit.
	LiftQuota(ctx context.Context, unit string) error
	// QuotaLifted reports whether systemd holds no CPU quota for a slice.
	QuotaLifted(ctx context.Context, unit string) (bool, error)
	// Version is systemd's major version (0 when unknown).
	Version() int
}

// bus is what a Client asks of its connection; *sd.Conn has it, and
// tests give a fake that fails as a closed connection does.
type bus interface {
	GetManagerProperty(prop string) (string, error)
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, properties ...sd.Property) error
	GetUnitTypePropertyContext(ctx context.Context, unit, unitType, propertyName string) (*sd.Property, error)
	Close()
}

// Client is a Manager over the system bus (or, for root, systemd's
// private socket, as go-systemd's NewWithContext falls back to). It
// reconnects once when the bus connection was closed (dbus restarted).
//
// godbus closes a connection when the context it was dialed with ends,
// so a connection is dialed with a context of its own (life), ended only
// by Close or a reconnect; the caller's context bounds the dial alone.
// Dialed with the caller's, every connection died as its first call
// returned, and the next call raced the close ("use of closed network
// connection").
type Client struct {
	dial func(ctx context.Context) (bus, error)
	mu   sync.Mutex
	conn bus
	end  context.CancelFunc // ends conn's life
	ver  int
}

// Dial connects to systemd and reads its version: an error means the
// plugin cannot reach systemd (no bus socket mounted, no permission).
func Dial(ctx context.Context) (*Client, error) {
	c := &Client{dial: dialBus}
	if _, err := c.get(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func dialBus(ctx context.Context) (bus, error) {
	conn, err := sd.NewWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Version is systemd's major version, read at connection.
func (c *Client) Version() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ver
}

// Close drops the connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(c.conn)
}

// drop closes conn if it is still the client's; c.mu is held.
func (c *Client) drop(conn bus) {
	if c.conn == nil || c.conn != conn {
		return
	}
	c.conn.Close()
	c.end()
	c.conn, c.end = nil, nil
}

func (c *Client) get(ctx context.Context) (bus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	life, end := context.WithCancel(context.Background())
	// Until systemd has answered, ctx's end ends the connection too (a
	// hung bus must not hold c.mu past the caller's deadline).
	stop := context.AfterFunc(ctx, end)
	conn, err := c.dial(life)
	if err != nil {
		stop()
		end()
		return nil, fmt.Errorf("connect to systemd over D-Bus: %w", err)
	}
	v, err := conn.GetManagerProperty("Version")
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		conn.Close()
		end()
		return nil, fmt.Errorf("read systemd's version over D-Bus: %w", err)
	}
	c.conn, c.end, c.ver = conn, end, ParseVersion(v)
	return conn, nil
}

// call runs op on the connection, once more on a new one if the first was
// closed under it.
func (c *Client) call(ctx context.Context, op func(bus) error) error {
	for try := 0; ; try++ {
		conn, err := c.get(ctx)
		if err != nil {
			return err
		}
		err = op(conn)
		if err == nil || try > 0 || !closed(err) {
			return noUnit(err)
		}
		c.mu.Lock()
		c.drop(conn)
		c.mu.Unlock()
	}
}

// closed tells a connection that is gone (dbus or systemd restarted, the
// socket shut) from an error systemd answered: godbus reports the first
// as ErrClosed once it noticed, as the socket's read error before.
func closed(err error) bool {
	return errors.Is(err, dbus.ErrClosed) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}

// Transient reports whether err is a call that may well succeed if made
// again: it ran out of time (systemd busy, a daemon-reload under way) or
// found the bus connection closed (dbus or systemd restarted; the next
// call dials again). An error systemd answered (access denied, no such
// property) is not.
func Transient(err error) bool {
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || closed(err))
}

// noUnit maps systemd's "no such unit" (NoSuchUnit; a transient scope
// not loaded: LoadFailed) to ErrNoUnit.
func noUnit(err error) error {
	var de dbus.Error
	if errors.As(err, &de) && (de.Name == "org.freedesktop.systemd1.NoSuchUnit" || de.Name == "org.freedesktop.systemd1.LoadFailed") {
		return fmt.Errorf("%w: %v", ErrNoUnit, err)
	}
	return err
}

// SetCPUSet implements Manager. Before systemd 244 there is no such
// property and nothing is sent.
func (c *Client) SetCPUSet(ctx context.Context, unit, cpus, mems string) error {
	props, err := CPUSetProperties(cpus, mems)
	if err != nil {
		return err
	}
	return c.call(ctx, func(conn bus) error {
		if v := c.Version(); v > 0 && v < MinCPUSetVersion {
			return nil
		}
		return conn.SetUnitPropertiesContext(ctx, unit, true, props...)
	})
}

// LiftQuota implements Manager.
func (c *Client) LiftQuota(ctx context.Context, unit string) error {
	return c.call(ctx, func(conn bus) error {
		return conn.SetUnitPropertiesContext(ctx, unit, true, NoQuotaProperty())
	})
}

// QuotaLifted implements Manager.
func (c *Client) QuotaLifted(ctx context.Context, unit string) (bool, error) {
	var lifted bool
	err := c.call(ctx, func(conn bus) error {
		p, err := conn.GetUnitTypePropertyContext(ctx, unit, "Slice", PropCPUQuota)
		if err != nil {
			return err
		}
		v, ok := p.Value.Value().(uint64)
		if !ok {
			return fmt.Errorf("%s of %s: %s is not a uint64", PropCPUQuota, unit, p.Value.Signature())
		}
		lifted = v == NoQuota
		return nil
	})
	return lifted, err
}

// ParseVersion is the major version of systemd's Version property
// ("252.22-1~deb12u1", quoted or not; 0 when it has none).
func ParseVersion(s string) int {
	s = strings.Trim(s, "\" ")
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	v, err := strconv.Atoi(s[:end])
	if err != nil {
		return 0
	}
	return v
}
