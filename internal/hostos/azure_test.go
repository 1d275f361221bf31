package hostos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDetectAzureVM(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tag   *string
		azure bool
		says  string
	}{
		{"azure", ptr(AzureAssetTag + "\n"), true, "Azure's"},
		{"hyper-v on-prem", ptr("None\n"), false, `"None", not Azure's`},
		{"empty", ptr(""), false, "is empty"},
		{"no dmi", nil, false, "absent (no DMI)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.tag != nil {
				p := filepath.Join(root, chassisAssetTag)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(*tc.tag), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			got := DetectAzureVM(root)
			if got.Azure != tc.azure || !strings.Contains(got.Evidence, tc.says) {
				t.Errorf("DetectAzureVM = %+v, want Azure=%v and evidence with %q", got, tc.azure, tc.says)
			}
		})
	}
}

// A named pipe where the tag should be must not block the check.
func TestDetectAzureVMNotRegular(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, chassisAssetTag), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := DetectAzureVM(root); got.Azure || !strings.Contains(got.Evidence, "not a regular file") {
		t.Errorf("a directory as the tag: %+v", got)
	}
}

func ptr(s string) *string { return &s }
