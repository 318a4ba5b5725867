package systemd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

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
