package hostos

import "strings"

// Family groups distributions that the agent sets up the same way.
type Family string

const (
	FamilyACL          Family = "acl"
	FamilyFlatcar      Family = "flatcar"
	FamilyAzureLinux   Family = "azurelinux"
	FamilyUbuntu       Family = "ubuntu"
	FamilyDebian       Family = "debian"
	FamilyRHEL         Family = "rhel" // RHEL, AlmaLinux, Rocky, CentOS Stream, Oracle Linux
	FamilyFedoraCoreOS Family = "fedora-coreos"
	FamilyUnknown      Family = "unknown"
)

// rhelIDs are matched by ID only. ID_LIKE="rhel" is deliberately not
// enough: a derivative we have never seen may differ in exactly the places
// that matter (SELinux policy, package names), and reporting it as unknown
// is more honest than guessing; the capability probes still run.
var rhelIDs = map[string]bool{
	"rhel": true, "almalinux": true, "rocky": true, "centos": true, "ol": true,
}

// Classify maps os-release to a family. Matching is case-insensitive
// because some images ship upper-case values despite os-release(5).
func Classify(o *OSRelease) Family {
	if o == nil {
		return FamilyUnknown
	}
	id := strings.ToLower(o.ID)
	variant := strings.ToLower(o.VariantID)
	like := map[string]bool{}
	for _, l := range o.IDLike {
		like[strings.ToLower(l)] = true
	}

	// ACL first: its os-release has said ID=azurelinux (with the variant
	// telling it apart), and an ACL host classified as Azure Linux would be
	// offered tdnf and a writable /usr it does not have. ACL is built from
	// Flatcar, hence the flatcar/azurelinux cross-references in ID_LIKE;
	// no Azure Linux 3 image carries ID_LIKE=flatcar.
	switch {
	case variant == "azurecontainerlinux",
		id == "acl", id == "azurecontainerlinux",
		id == "flatcar" && like["azurelinux"],
		id == "azurelinux" && like["flatcar"]:
		return FamilyACL
	}

	switch {
	case id == "flatcar":
		// Flatcar says ID_LIKE=coreos (Container Linux by CoreOS, its
		// ancestor), which is not Fedora CoreOS.
		return FamilyFlatcar
	case id == "fedora" && variant == "coreos":
		return FamilyFedoraCoreOS
	case id == "azurelinux", id == "mariner":
		// Azure Linux 2.0 is CBL-Mariner and still says ID=mariner.
		return FamilyAzureLinux
	case id == "ubuntu":
		return FamilyUbuntu
	case id == "debian":
		return FamilyDebian
	case rhelIDs[id]:
		return FamilyRHEL
	}
	return FamilyUnknown
}

// Supported reports whether the agent knows how to set up this family.
// Which versions of it are supported is preflight's business, not this.
func (f Family) Supported() bool {
	switch f {
	case FamilyACL, FamilyFlatcar, FamilyAzureLinux, FamilyUbuntu, FamilyDebian, FamilyRHEL, FamilyFedoraCoreOS:
		return true
	}
	return false
}

// ImageBased reports whether the family ships /usr as an immutable image
// with no package manager, so required tools must already be on the host.
// It is for messages only: what is actually read-only is probed.
func (f Family) ImageBased() bool {
	switch f {
	case FamilyACL, FamilyFlatcar, FamilyFedoraCoreOS:
		return true
	}
	return false
}

// Describe returns the name a person would use for the family.
func (f Family) Describe() string {
	switch f {
	case FamilyACL:
		return "Azure Container Linux"
	case FamilyFlatcar:
		return "Flatcar Container Linux"
	case FamilyAzureLinux:
		return "Azure Linux"
	case FamilyUbuntu:
		return "Ubuntu"
	case FamilyDebian:
		return "Debian"
	case FamilyRHEL:
		return "Red Hat Enterprise Linux family"
	case FamilyFedoraCoreOS:
		return "Fedora CoreOS"
	}
	return "unknown distribution"
}
