package machine

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/hostos"
	aflayout "github.com/Azure/aks-flex-node/internal/layout"
)

// ServiceName is the systemd unit that runs machine name.
func ServiceName(name string) string { return aflayout.MachineUnit(name) }

// Options shape the machine's settings.
type Options struct {
	// AdditionalHostDevices are host device nodes (bootstrap.additionalHostDevices)
	// bound into the machine and allowed by its device cgroup.
	AdditionalHostDevices []string
	// Binds are host directories bound into the machine (the agent's lib
	// dir and the identity dir when the node joins with an Azure
	// identity). Binds apply when the machine boots.
	Binds []Bind
	// CgroupMode is the host's cgroup layout, hostos.CgroupV2,
	// hostos.CgroupHybrid or hostos.CgroupV1 (see HostCgroupMode). The
	// machine must use the host's mode: with the wrong one the node
	// registers but every pod fails.
	CgroupMode string
}

// Validate checks what is interpolated into the unit files.
func (o Options) Validate() error {
	switch o.CgroupMode {
	case hostos.CgroupV2, hostos.CgroupHybrid, hostos.CgroupV1:
	default:
		return fmt.Errorf("cgroup mode %q: want %s, %s or %s (detect it with HostCgroupMode)", o.CgroupMode, hostos.CgroupV2, hostos.CgroupHybrid, hostos.CgroupV1)
	}
	for i, d := range o.AdditionalHostDevices {
		if err := validDevice(d); err != nil {
			return fmt.Errorf("bootstrap.additionalHostDevices[%d]: %w", i, err)
		}
	}
	for _, b := range o.Binds {
		for _, p := range []string{b.Source, b.Dest} {
			if err := validBindPath(p); err != nil {
				return fmt.Errorf("bind %s:%s: %w", b.Source, b.Dest, err)
			}
		}
	}
	return nil
}

// Bind is a host path bound into the machine at Dest.
type Bind struct {
	Source, Dest string
	ReadOnly     bool
}

// validBindPath keeps bind paths to what validDevice allows, anywhere.
func validBindPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%q must be an absolute, clean path", p)
	}
	return validDevice("/dev" + p)
}

// validDevice keeps device paths to characters that mean nothing to
// systemd's parsers: no whitespace (list separator), ':' (Bind= source:dest),
// '%' (specifiers) or quotes.
func validDevice(d string) error {
	if !strings.HasPrefix(d, "/dev/") || path.Clean(d) != d {
		return fmt.Errorf("%q must be a clean path under /dev/", d)
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '/', c == '.', c == '_', c == '-', c == '+':
		default:
			return fmt.Errorf("%q: character %q at offset %d is not allowed in a device path", d, c, i)
		}
	}
	return nil
}

// HostCgroupMode reads the running host's cgroup layout from its mount
// table. It needs the live host: under another root there is no mount
// table to read, and the caller must say which mode the target host uses.
func HostCgroupMode(root string) (string, error) {
	ms, err := (&hostos.Prober{Root: root}).Mounts()
	if err != nil {
		return "", fmt.Errorf("detect cgroup mode: %w", err)
	}
	mode := hostos.CgroupMode(ms)
	if mode == "" {
		return "", fmt.Errorf("detect cgroup mode: no cgroup filesystem mounted at /sys/fs/cgroup")
	}
	return mode, nil
}

// NspawnFile renders /etc/systemd/nspawn/<name>.nspawn. Each setting was
// shown necessary for a kubelet and containerd inside the machine:
// Capability=all (the kubelet needs at least CAP_SYSLOG for /dev/kmsg),
// SystemCallFilter=@keyring bpf (runc joins a session keyring and, on
// cgroup v2, loads its device filter as BPF), Bind=/dev/kmsg (the
// kubelet's OOM watcher reads it),
// PrivateUsers=no (containerd manages real uids), and VirtualEthernet=no:
// the machine shares the host's network, so the node IP is the host's.
func NspawnFile(o Options) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	b, err := genfile.Render(genfile.NspawnSettings, struct {
		Devices []string
		Binds   []Bind
	}{o.AdditionalHostDevices, o.Binds})
	if err != nil {
		return "", fmt.Errorf("render .nspawn file: %w", err)
	}
	return string(b), nil
}

// DropIn renders the systemd-nspawn@<name>.service drop-in. The cgroup
// hierarchy follows o.CgroupMode (v2 unified, v1 and hybrid legacy), which
// must be known: left out, nspawn would pick one, and the wrong one fails
// every pod. API_VFS_WRITABLE=network lets the kubelet and CNI write
// /proc/sys/net; DeviceAllow admits /dev/kmsg and the additional devices
// to the unit's device cgroup.
func DropIn(o Options) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	unified := "0"
	if o.CgroupMode == hostos.CgroupV2 {
		unified = "1"
	}
	b, err := genfile.Render(genfile.NspawnDropIn, struct {
		UnifiedHierarchy string
		Devices          []string
	}{unified, o.AdditionalHostDevices})
	if err != nil {
		return "", fmt.Errorf("render systemd-nspawn@.service drop-in: %w", err)
	}
	return string(b), nil
}

// WriteFiles writes machine name's .nspawn file and service drop-in on
// l's root, atomically and only when their content changes. When it reports
// changed, the caller runs systemctl daemon-reload before starting the
// machine.
func WriteFiles(l aflayout.Layout, name string, o Options) (changed bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	for _, f := range []struct {
		path   string
		render func(Options) (string, error)
	}{
		{l.NspawnFile(name), NspawnFile},
		{l.MachineDropIn(name), DropIn},
	} {
		data, err := f.render(o)
		if err != nil {
			return changed, err
		}
		c, err := fsutil.WriteFile(l.OnRoot(f.path), []byte(data), 0o644)
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return changed, nil
}

// Remove deletes machine name's rootfs, settings file, drop-in, image
// record and any tree a crashed Provision left. It is safe to run twice
// and after a half-finished start; the machine must be stopped first.
func Remove(l aflayout.Layout, name string) (changed bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if err := removeLeftovers(l, name); err != nil {
		return false, err
	}
	dir := Dir(l, name)
	if _, err := os.Lstat(dir); err == nil {
		// Its hard links to the layer cache go with it: see Provision.
		cache, ids := newLayerCache(l, nil), layerIDs(l, name)
		if err := cache.dropChanged(ids); err != nil {
			return false, err
		}
		if err := os.RemoveAll(dir); err != nil {
			return false, fmt.Errorf("remove %s: %w", dir, err)
		}
		changed = true
		if err := cache.restamp(ids); err != nil {
			return changed, fmt.Errorf("layer cache: %w", err)
		}
	}
	dropIn := l.OnRoot(l.MachineDropIn(name))
	for _, p := range []string{l.OnRoot(l.NspawnFile(name)), dropIn, recordPath(l, name), layersRecord(l, name)} {
		removed, err := fsutil.RemoveIfExists(p)
		if err != nil {
			return changed, fmt.Errorf("remove %s: %w", p, err)
		}
		changed = changed || removed
	}
	// The drop-in directory goes too when nothing else lives in it.
	d := filepath.Dir(dropIn)
	if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
		if err := os.Remove(d); err != nil {
			return changed, fmt.Errorf("remove %s: %w", d, err)
		}
		changed = true
	}
	return changed, nil
}
