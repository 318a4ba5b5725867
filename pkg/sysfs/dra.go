package sysfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// KEP-5304 (DRA device attributes downward API) has the kubelet plugin
// framework write one metadata file per claim request and driver and
// bind-mount it into the container at
// /var/run/dra-device-attributes/<claim>/<request>/<driver>-metadata.json.
// Its shape (metadata.resource.k8s.io/v1alpha1, kind DeviceMetadata):
//
//	{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
//	 "metadata": {"name": "<claim>", "namespace": "...", ...},
//	 "requests": [{"name": "<request>", "devices": [
//	   {"name": "gpu-0", "driver": "gpu.example.com", "pool": "...",
//	    "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:86:00.0"},
//	                   "resource.kubernetes.io/numaNode": {"int": 1}, ...}}]}]}
//
// Attribute values are resource.k8s.io DeviceAttributes: one of "int",
// "bool", "string", "version".

// DRAMetadataDir is where KEP-5304 mounts the metadata in a container.
const DRAMetadataDir = "/var/run/dra-device-attributes"

// MaxDRAMetadataSize bounds what is read of one metadata file.
const MaxDRAMetadataSize = 64 << 10

// maxDRADevices bounds the devices taken from one metadata file.
const maxDRADevices = 64

// The standard attributes read (KEP-4381 pciBusID, KEP-6072 numaNode),
// under the domain the Kubernetes project reserves; the KEP's example
// spells it resource.k8s.io, which is accepted too.
var (
	draPCIAttrs  = []string{"resource.kubernetes.io/pciBusID", "resource.k8s.io/pciBusID"}
	draNUMAAttrs = []string{"resource.kubernetes.io/numaNode", "resource.k8s.io/numaNode"}
)

// DRADevice is one device of a DRA metadata file and its locality.
type DRADevice struct {
	Claim, Request, Driver, Name string
	// PCI is its pciBusID (canonical form), "" when not published.
	PCI string
	// Node is its numaNode; HasNode is false when not published.
	Node    int
	HasNode bool
}

// String names the device as the log and /state show it.
func (d DRADevice) String() string {
	s := "DRA claim " + d.Claim + " request " + d.Request + " " + d.Driver + "/" + d.Name
	if d.PCI != "" {
		s += " " + d.PCI
	}
	return s
}

type draFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Requests []struct {
		Name    string `json:"name"`
		Devices []struct {
			Name       string                  `json:"name"`
			Driver     string                  `json:"driver"`
			Attributes map[string]draAttribute `json:"attributes"`
		} `json:"devices"`
	} `json:"requests"`
}

type draAttribute struct {
	Int    *int64  `json:"int"`
	String *string `json:"string"`
}

// ParseDRAMetadata reads the devices of a KEP-5304 metadata file and the
// pciBusID and numaNode each publishes. An empty file is no device (the
// framework mounts it before a driver that writes it late has); content
// that is no DeviceMetadata JSON, a pciBusID that is no PCI address or a
// numaNode outside 0-63 is an error saying what.
func ParseDRAMetadata(data []byte) ([]DRADevice, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var f draFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not DeviceMetadata JSON: %w", err)
	}
	if f.Kind != "DeviceMetadata" || !strings.HasPrefix(f.APIVersion, "metadata.resource.k8s.io/") {
		return nil, fmt.Errorf("apiVersion %q kind %q: want metadata.resource.k8s.io/* DeviceMetadata",
			shorten(f.APIVersion), shorten(f.Kind))
	}
	var out []DRADevice
	for _, r := range f.Requests {
		for _, d := range r.Devices {
			if len(out) == maxDRADevices {
				return nil, fmt.Errorf("more than %d devices", maxDRADevices)
			}
			dev := DRADevice{Claim: f.Metadata.Name, Request: r.Name, Driver: d.Driver, Name: d.Name}
			if s, ok := draString(d.Attributes, draPCIAttrs); ok {
				addr, err := ParsePCIAddress(s)
				if err != nil {
					return nil, fmt.Errorf("device %q: pciBusID: %w", shorten(d.Name), err)
				}
				dev.PCI = addr
			}
			if n, ok, err := draInt(d.Attributes, draNUMAAttrs); err != nil {
				return nil, fmt.Errorf("device %q: %w", shorten(d.Name), err)
			} else if ok {
				if n < 0 || n >= maxDeviceNUMANode {
					return nil, fmt.Errorf("device %q: numaNode %d: want 0-%d", shorten(d.Name), n, maxDeviceNUMANode-1)
				}
				dev.Node, dev.HasNode = int(n), true
			}
			out = append(out, dev)
		}
	}
	return out, nil
}

func draString(attrs map[string]draAttribute, names []string) (string, bool) {
	for _, n := range names {
		if a, ok := attrs[n]; ok && a.String != nil {
			return *a.String, true
		}
	}
	return "", false
}

func draInt(attrs map[string]draAttribute, names []string) (int64, bool, error) {
	for _, n := range names {
		a, ok := attrs[n]
		if !ok {
			continue
		}
		if a.Int == nil {
			return 0, false, errors.New(n + ": not an int attribute")
		}
		return *a.Int, true, nil
	}
	return 0, false, nil
}

// ReadDRAMetadata reads and parses the metadata file at p (a regular
// file of at most MaxDRAMetadataSize bytes); errors name the file.
func ReadDRAMetadata(p string) ([]DRADevice, error) {
	data, err := readBounded(p, MaxDRAMetadataSize)
	if err != nil {
		return nil, fmt.Errorf("DRA metadata: %w", err)
	}
	devs, err := ParseDRAMetadata(data)
	if err != nil {
		return nil, fmt.Errorf("DRA metadata %s: %w", p, err)
	}
	return devs, nil
}
