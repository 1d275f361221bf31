package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/swap"
)

// disable-swap turns swap off and comments the fstab line; a re-run
// changes nothing; reset's restore-swap puts the line back.
func TestDisableAndRestoreSwap(t *testing.T) {
	root := t.TempDir()
	l, err := layout.New(root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	swaps := "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 8188 0 -2\n"
	if err := os.WriteFile(filepath.Join(proc, "swaps"), []byte(swaps), 0o444); err != nil {
		t.Fatal(err)
	}
	fstab := "UUID=abc / ext4 defaults 0 1\n/swapfile none swap sw 0 0\n"
	p := filepath.Join(root, "etc/fstab")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(fstab), 0o644); err != nil {
		t.Fatal(err)
	}
	var ran []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, name+" "+strings.Join(args, " "))
		if name == "swapoff" {
			// What the kernel does: /proc/swaps lists none.
			_ = os.WriteFile(filepath.Join(proc, "swaps"), []byte("Filename\tType\tSize\tUsed\tPriority\n"), 0o444)
		}
		return nil, nil
	}
	h := Host{Layout: l, ProcDir: proc, Exec: run, Tracker: NewTracker(l)}
	res, err := DisableSwap(h).Do(context.Background())
	if err != nil || !res.Changed || !strings.Contains(res.Detail, "1 /etc/fstab line(s) commented") {
		t.Fatalf("disable-swap: %+v %v", res, err)
	}
	if strings.Join(ran, ";") != "swapoff -a" {
		t.Errorf("ran %q", ran)
	}
	if got, _ := os.ReadFile(p); !strings.Contains(string(got), swap.Marker+"/swapfile none swap sw 0 0\n") {
		t.Errorf("fstab:\n%s", got)
	}
	if res, err := DisableSwap(h).Do(context.Background()); err != nil || res.Changed {
		t.Errorf("re-run: %+v %v", res, err)
	}
	res, err = RestoreSwap(l, run).Do(context.Background())
	if err != nil || !res.Changed {
		t.Fatalf("restore-swap: %+v %v", res, err)
	}
	if got, _ := os.ReadFile(p); string(got) != fstab {
		t.Errorf("fstab after restore:\n%s", got)
	}
	if res, err := RestoreSwap(l, run).Do(context.Background()); err != nil || res.Changed {
		t.Errorf("second restore: %+v %v", res, err)
	}
}
