package hostos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClassifyTestdata(t *testing.T) {
	want := map[string]Family{
		"acl-azurelinux-variant":      FamilyACL,
		"acl-azurelinux-like-flatcar": FamilyACL,
		"acl-flatcar-like-azurelinux": FamilyACL,
		"acl-flatcar-variant":         FamilyACL,
		"acl-id-acl":                  FamilyACL,
		"acl-id-azurecontainerlinux":  FamilyACL,
		"flatcar":                     FamilyFlatcar,
		"ubuntu-22.04":                FamilyUbuntu,
		"ubuntu-24.04":                FamilyUbuntu,
		"azurelinux-3.0":              FamilyAzureLinux,
		"mariner-2.0":                 FamilyAzureLinux,
		"rhel-9":                      FamilyRHEL,
		"rocky-9":                     FamilyRHEL,
		"almalinux-9":                 FamilyRHEL,
		"centos-stream-9":             FamilyRHEL,
		"oracle-9":                    FamilyRHEL,
		"debian-12":                   FamilyDebian,
		"fedora-coreos":               FamilyFedoraCoreOS,
		"fedora-40":                   FamilyUnknown,
	}
	files, err := filepath.Glob("testdata/os-release/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(want) {
		t.Errorf("testdata has %d files, table has %d: keep them in step", len(files), len(want))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			fam, ok := want[name]
			if !ok {
				t.Fatalf("no expectation for %s", name)
			}
			r, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			o, err := ParseOSRelease(r)
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Warnings) != 0 {
				t.Errorf("real-world file gave warnings: %q", o.Warnings)
			}
			if o.ID == "" || o.PrettyName == "" {
				t.Errorf("ID or PRETTY_NAME missing: %+v", o)
			}
			if got := Classify(o); got != fam {
				t.Errorf("Classify = %q, want %q", got, fam)
			}
		})
	}
}

func TestClassifyForms(t *testing.T) {
	tests := []struct {
		in   string
		want Family
	}{
		{"ID=azurelinux\nVARIANT_ID=azurecontainerlinux", FamilyACL},
		{"ID=somethingelse\nVARIANT_ID=azurecontainerlinux", FamilyACL},
		{`ID="AZURELINUX"` + "\n" + `VARIANT_ID="AzureContainerLinux"`, FamilyACL},
		{"ID=acl", FamilyACL},
		{"ID=azurecontainerlinux", FamilyACL},
		{"ID=flatcar\nID_LIKE=azurelinux", FamilyACL},
		{"ID=azurelinux\nID_LIKE=\"flatcar coreos\"", FamilyACL},
		{"ID=flatcar\nID_LIKE=coreos", FamilyFlatcar},
		{"ID=flatcar", FamilyFlatcar},
		{"ID=fedora\nVARIANT_ID=coreos", FamilyFedoraCoreOS},
		{"ID=fedora", FamilyUnknown},
		{"ID=azurelinux\nVARIANT_ID=osguard", FamilyAzureLinux},
		{"ID=linuxmint\nID_LIKE=\"ubuntu debian\"", FamilyUnknown},
		{"ID=eurolinux\nID_LIKE=\"rhel fedora centos\"", FamilyUnknown},
		{"", FamilyUnknown},
	}
	for _, tc := range tests {
		o, err := ParseOSRelease(strings.NewReader(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if got := Classify(o); got != tc.want {
			t.Errorf("Classify(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if Classify(nil) != FamilyUnknown {
		t.Error("Classify(nil) must be unknown")
	}
}

func TestFamilyProperties(t *testing.T) {
	all := []Family{FamilyACL, FamilyFlatcar, FamilyAzureLinux, FamilyUbuntu, FamilyDebian, FamilyRHEL, FamilyFedoraCoreOS}
	for _, f := range all {
		if !f.Supported() {
			t.Errorf("%s: want supported", f)
		}
		if f.Describe() == FamilyUnknown.Describe() {
			t.Errorf("%s: no description", f)
		}
		wantImage := f == FamilyACL || f == FamilyFlatcar || f == FamilyFedoraCoreOS
		if f.ImageBased() != wantImage {
			t.Errorf("%s: ImageBased = %v", f, f.ImageBased())
		}
	}
	if FamilyUnknown.Supported() || Family("arch").Supported() {
		t.Error("unknown families must not be supported")
	}
	if FamilyACL.Describe() != "Azure Container Linux" {
		t.Errorf("ACL describes as %q", FamilyACL.Describe())
	}
}
