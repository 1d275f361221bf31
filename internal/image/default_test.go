package image

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUpstreamDefault is upstream's rule, distros x GPU present/absent.
func TestUpstreamDefault(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		id, versionID, idLike string
		want, wantGPU         string
	}{
		{"ubuntu 24.04", "ubuntu", "24.04", "debian", UpstreamUbuntu2404, UpstreamUbuntu2404Nvidia},
		{"ubuntu 26.04", "ubuntu", "26.04", "debian", UpstreamUbuntu2604, UpstreamUbuntu2604Nvidia},
		{"ubuntu 22.04 falls back to 24.04", "ubuntu", "22.04", "debian", UpstreamUbuntu2404, UpstreamUbuntu2404Nvidia},
		{"azure linux 3", "azurelinux", "3.0", "", UpstreamAzureLinux3, UpstreamAzureLinux3Nvid},
		{"azure linux quoted", `"AzureLinux"`, "3.0", "", UpstreamAzureLinux3, UpstreamAzureLinux3Nvid},
		{"mariner 2 is rpm-based", "mariner", "2.0", "fedora", UpstreamAzureLinux3, UpstreamAzureLinux3Nvid},
		{"rhel 9", "rhel", "9.4", "fedora", UpstreamAzureLinux3, UpstreamAzureLinux3Nvid},
		{"rocky 9 by its ID", "rocky", "9.3", "rhel centos fedora", UpstreamAzureLinux3, UpstreamAzureLinux3Nvid},
		{"oracle", "ol", "9.3", "fedora", UpstreamAzureLinux3, UpstreamAzureLinux3Nvid},
		{"debian", "debian", "12", "", UpstreamUbuntu2404, UpstreamUbuntu2404Nvidia},
		{"flatcar", "flatcar", "3975.2.0", "coreos", UpstreamUbuntu2404, UpstreamUbuntu2404Nvidia},
		{"unknown", "", "", "", UpstreamUbuntu2404, UpstreamUbuntu2404Nvidia},
	} {
		d := HostDistro(tc.id, tc.versionID, tc.idLike)
		if got := UpstreamDefault(d, false); got != tc.want {
			t.Errorf("%s: %s (distro %q), want %s", tc.name, got, d, tc.want)
		}
		if got := UpstreamDefault(d, true); got != tc.wantGPU {
			t.Errorf("%s with a GPU: %s, want %s", tc.name, got, tc.wantGPU)
		}
	}
}

func TestNvidiaGPU(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		dirs  []string
		want  bool
	}{
		{"none", []string{"null", "kmsg"}, []string{"dri"}, false},
		{"a GPU device", []string{"nvidia0", "nvidiactl"}, nil, true},
		{"caps only", nil, []string{"nvidia-caps/nvidia-cap1"}, true},
		{"empty caps dir", nil, []string{"nvidia-caps/"}, false},
	} {
		dev := t.TempDir()
		for _, f := range tc.files {
			os.WriteFile(filepath.Join(dev, f), nil, 0o600)
		}
		for _, d := range tc.dirs {
			p := filepath.Join(dev, d)
			if d[len(d)-1] == '/' {
				os.MkdirAll(p, 0o755)
				continue
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, nil, 0o600)
		}
		if got := NvidiaGPU(dev); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
