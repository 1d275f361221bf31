package image

import (
	"os"
	"path/filepath"
	"strings"
)

// When neither bootstrap.ociImage nor the offline bundle names a worker
// image, start uses the one upstream AKS Flex Node publishes for the
// host, chosen by upstream's rule (Azure/AKSFlexNode's agent, through
// Azure/unbounded's goal states), so that a host joins with what upstream
// would have given it:
//
//   - the distro from os-release: ID ubuntu with VERSION_ID 24.04 or
//     26.04 picks that Ubuntu image; ID azurelinux (or azlinux) with a
//     VERSION_ID starting with 3 picks Azure Linux 3; any other RPM-based
//     host (its ID or an ID_LIKE word is almalinux, amzn, azurelinux,
//     centos, fedora, ol, rhel, rocky, sles or suse) picks Azure Linux 3
//     too; everything else (Debian, Flatcar, an unreadable os-release)
//     picks Ubuntu 24.04;
//   - the -nvidia variant when the host has an NVIDIA device: a /dev
//     entry named nvidia* that is not a directory, or an entry in
//     /dev/nvidia-caps or /dev/nvidia-caps-imex-channels.
//
// The references are tags: preflight warns about that and names the
// digest each resolved to, to pin.

// Upstream's published worker images.
const (
	UpstreamUbuntu2404       = "ghcr.io/azure/agent-ubuntu2404:v20260619"
	UpstreamUbuntu2404Nvidia = "ghcr.io/azure/agent-ubuntu2404-nvidia:v20260619"
	UpstreamUbuntu2604       = "ghcr.io/azure/agent-ubuntu2604:v20260619"
	UpstreamUbuntu2604Nvidia = "ghcr.io/azure/agent-ubuntu2604-nvidia:v20260619"
	UpstreamAzureLinux3      = "ghcr.io/azure/agent-azlinux3:v20260619"
	UpstreamAzureLinux3Nvid  = "ghcr.io/azure/agent-azlinux3-nvidia:v20260626"
)

// Host distros upstream tells apart.
const (
	DistroUbuntu2404  = "ubuntu2404"
	DistroUbuntu2604  = "ubuntu2604"
	DistroAzureLinux3 = "azlinux3"
)

// UpstreamDefault is the image upstream picks for a host of distro (as
// HostDistro returns it; "" for any other) with or without an NVIDIA GPU.
func UpstreamDefault(distro string, nvidia bool) string {
	switch distro {
	case DistroUbuntu2604:
		if nvidia {
			return UpstreamUbuntu2604Nvidia
		}
		return UpstreamUbuntu2604
	case DistroAzureLinux3:
		if nvidia {
			return UpstreamAzureLinux3Nvid
		}
		return UpstreamAzureLinux3
	}
	if nvidia {
		return UpstreamUbuntu2404Nvidia
	}
	return UpstreamUbuntu2404
}

// HostDistro classifies a host by its os-release ID, VERSION_ID and
// ID_LIKE (values unquoted) the way upstream does: one of the Distro
// constants, or "" for a host upstream has no image of its own for.
func HostDistro(id, versionID, idLike string) string {
	id = normalizeID(id)
	switch id {
	case "ubuntu":
		switch {
		case strings.HasPrefix(versionID, "24.04"):
			return DistroUbuntu2404
		case strings.HasPrefix(versionID, "26.04"):
			return DistroUbuntu2604
		}
	case "azurelinux", "azlinux":
		if strings.HasPrefix(versionID, "3") {
			return DistroAzureLinux3
		}
	}
	if rpmBased(id) {
		return DistroAzureLinux3
	}
	for _, w := range strings.Fields(idLike) {
		if rpmBased(normalizeID(w)) {
			return DistroAzureLinux3
		}
	}
	return ""
}

func rpmBased(id string) bool {
	switch id {
	case "almalinux", "amzn", "azurelinux", "centos", "fedora", "ol", "rhel", "rocky", "sles", "suse":
		return true
	}
	return false
}

// normalizeID keeps the lower-cased letters and digits of an os-release
// ID.
func normalizeID(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// NvidiaGPU reports whether devDir (a host's /dev) has an NVIDIA device.
func NvidiaGPU(devDir string) bool {
	des, err := os.ReadDir(devDir)
	if err != nil {
		return false
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), "nvidia") && !de.IsDir() {
			return true
		}
	}
	for _, sub := range []string{"nvidia-caps", "nvidia-caps-imex-channels"} {
		des, err := os.ReadDir(filepath.Join(devDir, sub))
		if err != nil {
			continue
		}
		for _, de := range des {
			if !de.IsDir() {
				return true
			}
		}
	}
	return false
}
