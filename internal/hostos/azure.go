package hostos

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// AzureAssetTag is the SMBIOS chassis asset tag every Azure VM carries.
// cloud-init's Azure data source and the Azure Linux agent tell an Azure
// VM from other Hyper-V guests by it: the system vendor ("Microsoft
// Corporation") is the same on any Hyper-V host, on-prem included.
const AzureAssetTag = "7783-7084-3265-9085-8269-3286-77"

// chassisAssetTag is where the kernel exposes the SMBIOS chassis asset tag.
const chassisAssetTag = "/sys/class/dmi/id/chassis_asset_tag"

// AzureVM says whether this host is an Azure VM and what showed it.
type AzureVM struct {
	Azure bool
	// Evidence names the file read and what it held, or why it could not
	// be read, for a preflight line.
	Evidence string
}

// DetectAzureVM reads the chassis asset tag under root, locally: IMDS,
// the other way to ask, waits for a timeout on every host that is not in
// Azure (most of this product's hosts), while the tag is one small read.
// A host without DMI (some hypervisors, containers) is not an Azure VM:
// every Azure VM has it.
func DetectAzureVM(root string) AzureVM {
	p, err := fsroot.Resolve(root, chassisAssetTag)
	if err != nil {
		return AzureVM{Evidence: fmt.Sprintf("%s: %v", chassisAssetTag, err)}
	}
	f, err := openRegular(p)
	if errors.Is(err, fs.ErrNotExist) {
		return AzureVM{Evidence: chassisAssetTag + " absent (no DMI)"}
	}
	if err != nil {
		return AzureVM{Evidence: fmt.Sprintf("%s unreadable: %v", chassisAssetTag, err)}
	}
	defer f.Close()
	// The tag is one short line; read no more than that.
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 128), 128)
	tag := ""
	if sc.Scan() {
		tag = strings.TrimSpace(sc.Text())
	}
	if tag == AzureAssetTag {
		return AzureVM{Azure: true, Evidence: fmt.Sprintf("%s is Azure's (%s)", chassisAssetTag, tag)}
	}
	if tag == "" {
		return AzureVM{Evidence: chassisAssetTag + " is empty"}
	}
	return AzureVM{Evidence: fmt.Sprintf("%s is %q, not Azure's", chassisAssetTag, tag)}
}
