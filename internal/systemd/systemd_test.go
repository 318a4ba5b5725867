package systemd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/utils/cpuset"
)

// TestBits: the masks systemd reads for AllowedCPUs= (byte i holds CPUs
// 8i..8i+7, lowest CPU in the lowest bit), worked out by hand; the same
// bytes `systemctl show -p AllowedCPUs` prints back as the list, and
// runc's RangeToBits produces for these lists.
func TestBits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []byte
	}{
		{"0", []byte{0x01}},
		{"1", []byte{0x02}},
		{"0-1", []byte{0x03}},
		{"2-3", []byte{0x0c}},
		{"0-7", []byte{0xff}},
		{"4-7", []byte{0xf0}},
		{"8", []byte{0x00, 0x01}},
		{"0-15", []byte{0xff, 0xff}},
		{"2-7,10", []byte{0xfc, 0x04}},
		{"0-3,32-33", []byte{0x0f, 0, 0, 0, 0x03}},
		{"1,128-130", append(append([]byte{0x02}, make([]byte, 15)...), 0x07)},
	} {
		set, err := cpuset.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Bits(set)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("Bits(%s) = % x, want % x", tc.in, got, tc.want)
		}
		if back := ParseBits(got); !back.Equals(set) {
			t.Errorf("ParseBits(Bits(%s)) = %s", tc.in, back)
		}
	}
	if _, err := Bits(cpuset.New()); err == nil {
		t.Error("an empty cpuset encoded: systemd reads an empty mask as every CPU")
	}
}

// TestCPUSetProperties: the properties and D-Bus signatures runc sends
// for a scope's cpuset ("ay"), mems only when given; bad lists refused.
func TestCPUSetProperties(t *testing.T) {
	props, err := CPUSetProperties("2-3", "1")
	if err != nil {
		t.Fatal(err)
	}
	if len(props) != 2 || props[0].Name != "AllowedCPUs" || props[1].Name != "AllowedMemoryNodes" {
		t.Fatalf("properties %v", props)
	}
	for i, want := range [][]byte{{0x0c}, {0x02}} {
		if sig := props[i].Value.Signature().String(); sig != "ay" {
			t.Errorf("%s has D-Bus type %s, want ay", props[i].Name, sig)
		}
		if got, _ := props[i].Value.Value().([]byte); !bytes.Equal(got, want) {
			t.Errorf("%s = % x, want % x", props[i].Name, got, want)
		}
	}
	if props, err := CPUSetProperties("0-1", ""); err != nil || len(props) != 1 {
		t.Errorf("cpus only: %v, %v", props, err)
	}
	for _, bad := range [][2]string{{"", ""}, {"1-", ""}, {"0", "x"}, {"3-2", ""}} {
		if _, err := CPUSetProperties(bad[0], bad[1]); err == nil {
			t.Errorf("CPUSetProperties(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestSetUnitPropertiesSignature: the arguments go on the wire as
// systemd's SetUnitProperties(in s name, in b runtime, in a(sv)
// properties) declares them, and the encoded message decodes back to the
// same bytes.
func TestSetUnitPropertiesSignature(t *testing.T) {
	props, err := CPUSetProperties("0-1,6", "1")
	if err != nil {
		t.Fatal(err)
	}
	props = append(props, NoQuotaProperty())
	if sig := dbus.SignatureOf("crio-x.scope", true, props).String(); sig != "sba(sv)" {
		t.Errorf("signature %s, want sba(sv)", sig)
	}
	msg := &dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:        dbus.MakeVariant(dbus.ObjectPath("/org/freedesktop/systemd1")),
		dbus.FieldInterface:   dbus.MakeVariant("org.freedesktop.systemd1.Manager"),
		dbus.FieldMember:      dbus.MakeVariant("SetUnitProperties"),
		dbus.FieldDestination: dbus.MakeVariant("org.freedesktop.systemd1"),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf("crio-x.scope", true, props)),
	}, Body: []any{"crio-x.scope", true, props}}
	var buf bytes.Buffer
	if err := msg.EncodeTo(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	back, err := dbus.DecodeMessage(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var (
		name    string
		runtime bool
		got     []struct {
			Name  string
			Value dbus.Variant
		}
	)
	if err := dbus.Store(back.Body, &name, &runtime, &got); err != nil {
		t.Fatal(err)
	}
	if name != "crio-x.scope" || !runtime || len(got) != 3 {
		t.Fatalf("decoded %q %v %v", name, runtime, got)
	}
	if b, _ := got[0].Value.Value().([]byte); got[0].Name != "AllowedCPUs" || !bytes.Equal(b, []byte{0x43}) {
		t.Errorf("%s = % x, want AllowedCPUs 43 (CPUs 0, 1, 6)", got[0].Name, b)
	}
	if v := got[2].Value.Value(); got[2].Name != "CPUQuotaPerSecUSec" || v != uint64(math.MaxUint64) {
		t.Errorf("%s = %v", got[2].Name, v)
	}
}

// TestNoQuotaProperty: CPUQuota= lifted is CPUQuotaPerSecUSec =
// USEC_INFINITY, a "t".
func TestNoQuotaProperty(t *testing.T) {
	p := NoQuotaProperty()
	if p.Name != "CPUQuotaPerSecUSec" || p.Value.Signature().String() != "t" || p.Value.Value() != uint64(math.MaxUint64) {
		t.Errorf("property %s = %v (%s)", p.Name, p.Value, p.Value.Signature())
	}
}

// TestUnits: the scope and slice names runc's systemd driver uses for a
// cgroupsPath "slice:prefix:name"; cgroupfs paths have none.
func TestUnits(t *testing.T) {
	for _, tc := range []struct{ path, scope, slice string }{
		{"kubepods-besteffort-podu.slice:cri-containerd:abc", "cri-containerd-abc.scope", "kubepods-besteffort-podu.slice"},
		{"kubepods-podv.slice:crio:def", "crio-def.scope", "kubepods-podv.slice"},
		{"system.slice:docker:x", "docker-x.scope", "system.slice"},
		{"kubepods.slice::mine.slice", "mine.slice", "kubepods.slice"},
		{"kubepods.slice::bare", "bare.scope", "kubepods.slice"},
		{"/kubepods/burstable/podu/abc", "", ""},
		{"", "", ""},
		{"a:b", "", ""},
		{"a.slice:b:", "", ""},
		{"a.slice:b:../../x", "", ""},
	} {
		scope, ok := ScopeUnit(tc.path)
		if scope != tc.scope || ok != (tc.scope != "") {
			t.Errorf("ScopeUnit(%q) = %q, %v; want %q", tc.path, scope, ok, tc.scope)
		}
		if IsSystemdPath(tc.path) != (tc.scope != "") {
			t.Errorf("IsSystemdPath(%q) = %v", tc.path, IsSystemdPath(tc.path))
		}
		slice, ok := SliceUnit(tc.path)
		if slice != tc.slice || ok != (tc.slice != "") {
			t.Errorf("SliceUnit(%q) = %q, %v; want %q", tc.path, slice, ok, tc.slice)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]int{`"252.22-1~deb12u1"`: 252, "257": 257, "v245": 0, "": 0, `"244.3"`: 244} {
		if got := ParseVersion(in); got != want {
			t.Errorf("ParseVersion(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestNoUnit(t *testing.T) {
	err := noUnit(fmt.Errorf("call: %w", dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit x.scope not found."}}))
	if !errors.Is(err, ErrNoUnit) {
		t.Errorf("NoSuchUnit: %v", err)
	}
	if err := noUnit(dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}); errors.Is(err, ErrNoUnit) {
		t.Errorf("AccessDenied is no missing unit: %v", err)
	}
	if noUnit(nil) != nil {
		t.Error("nil")
	}
}

// TestTransient: a call that timed out or found the connection closed
// may be made again; an answer from systemd, or a missing unit, is final.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", fmt.Errorf("systemd unit x.scope: %w", context.DeadlineExceeded), true},
		{"closed", fmt.Errorf("call: %w", dbus.ErrClosed), true},
		{"socket read", &net.OpError{Op: "read", Net: "unix", Err: net.ErrClosed}, true},
		{"access denied", dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}, false},
		{"no unit", noUnit(dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit"}), false},
		{"canceled", context.Canceled, false},
		{"nil", nil, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// fakeBus fails as a godbus connection does: once the context it was
// dialed with ends, godbus closes it, and a call racing that close sees
// the socket's read error; once it has noticed, ErrClosed.
type fakeBus struct {
	life   context.Context
	gone   atomic.Bool // the bus went away (dbus restarted)
	closed atomic.Bool // Close was called
	sets   atomic.Int32
}

func (f *fakeBus) err() error {
	switch {
	case f.gone.Load() || f.closed.Load():
		return dbus.ErrClosed
	case f.life.Err() != nil:
		return &net.OpError{Op: "read", Net: "unix", Err: net.ErrClosed}
	}
	return nil
}

func (f *fakeBus) GetManagerProperty(string) (string, error) {
	if err := f.err(); err != nil {
		return "", err
	}
	return `"252.22-1~deb12u1"`, nil
}

func (f *fakeBus) SetUnitPropertiesContext(context.Context, string, bool, ...sd.Property) error {
	if err := f.err(); err != nil {
		return err
	}
	f.sets.Add(1)
	return nil
}

func (f *fakeBus) GetUnitTypePropertyContext(context.Context, string, string, string) (*sd.Property, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return &sd.Property{Name: PropCPUQuota, Value: dbus.MakeVariant(NoQuota)}, nil
}

func (f *fakeBus) Close() { f.closed.Store(true) }

// fakeDialer hands out fakeBus connections and keeps them.
type fakeDialer struct {
	mu    sync.Mutex
	conns []*fakeBus
}

func (d *fakeDialer) dial(ctx context.Context) (bus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := &fakeBus{life: ctx}
	d.conns = append(d.conns, b)
	return b, nil
}

func (d *fakeDialer) all() []*fakeBus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*fakeBus(nil), d.conns...)
}

// TestClientConnectionOutlivesCalls: one connection serves every call,
// each made under a context that ends when the call returns, as the
// daemon's are (a 1 s timeout per write). The connection's life is not
// the dialing call's: with the caller's context, godbus closed it as the
// first call returned, and the next write failed on the closed socket
// (seen in the VM as "read unix @->/run/dbus/system_bus_socket: use of
// closed network connection").
func TestClientConnectionOutlivesCalls(t *testing.T) {
	d := &fakeDialer{}
	c := &Client{dial: d.dial}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if _, err := c.get(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if c.Version() != 252 {
		t.Errorf("version %d, want 252", c.Version())
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.SetCPUSet(ctx, "crio-x.scope", "0,2-7", "")
		cancel()
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	ctx, cancel = context.WithCancel(context.Background())
	lifted, err := c.QuotaLifted(ctx, "kubepods-podu.slice")
	cancel()
	if err != nil || !lifted {
		t.Errorf("QuotaLifted: %v, %v", lifted, err)
	}
	conns := d.all()
	if len(conns) != 1 || conns[0].sets.Load() != 3 {
		t.Fatalf("%d connections dialed (want 1), writes on the first %d (want 3)", len(conns), conns[0].sets.Load())
	}
	c.Close()
	if conns[0].life.Err() == nil || !conns[0].closed.Load() {
		t.Error("Close left the connection open")
	}
}

// TestClientRedials: a connection that went away (dbus restarted) is
// dropped and a call goes through on a new one, once; the old one is
// closed and its life ended.
func TestClientRedials(t *testing.T) {
	d := &fakeDialer{}
	c := &Client{dial: d.dial}
	ctx := context.Background()
	if err := c.LiftQuota(ctx, "kubepods-podu.slice"); err != nil {
		t.Fatal(err)
	}
	first := d.all()[0]
	first.gone.Store(true)
	if err := c.SetCPUSet(ctx, "crio-x.scope", "1", "0"); err != nil {
		t.Fatalf("write after the bus went away: %v", err)
	}
	conns := d.all()
	if len(conns) != 2 || conns[1].sets.Load() != 1 {
		t.Fatalf("%d connections, want 2 with the write on the second", len(conns))
	}
	if !first.closed.Load() || first.life.Err() == nil {
		t.Error("the gone connection was not closed")
	}
	// Both gone: one retry only, and the error says what happened.
	conns[1].gone.Store(true)
	d.mu.Lock()
	c.dial = func(ctx context.Context) (bus, error) {
		b := &fakeBus{life: ctx}
		b.gone.Store(true)
		return b, nil
	}
	d.mu.Unlock()
	if err := c.SetCPUSet(ctx, "crio-x.scope", "1", ""); err == nil {
		t.Error("no error with the bus gone")
	}
}

// TestClientDialBounded: a bus that never answers is given up at the
// caller's deadline, and the connection is not kept.
func TestClientDialBounded(t *testing.T) {
	hung := func(ctx context.Context) (bus, error) {
		<-ctx.Done() // ends when the caller's context does
		return nil, ctx.Err()
	}
	c := &Client{dial: hung}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.get(ctx); err == nil {
		t.Fatal("a hung bus was reported as connected")
	}
	if c.conn != nil {
		t.Error("a failed connection was kept")
	}
}
