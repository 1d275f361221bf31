package fleet

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func TestRecordRoundTripsAtMode0600(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rollout.json")
	if _, err := LoadRecord(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadRecord of nothing = %v, want fs.ErrNotExist", err)
	}
	want := Record{Rollout: "r1", UID: "u1", Generation: 3, Phase: PhaseUpdating, Step: "soak", Slot: "r1-slot-0",
		Since: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC), CordonedBefore: true,
		Applied: &AppliedRelease{Rollout: "r1", Generation: 3, Release: v1alpha1.Release{KubernetesVersion: "v1.35.4"}, At: time.Date(2026, 12, 6, 7, 1, 0, 0, time.UTC)}}
	if err := SaveRecord(p, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadRecord(p)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("LoadRecord = %+v, %v; want %+v", got, err, want)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRecord(p); err == nil {
		t.Fatal("a truncated record loaded")
	}
}

func TestOverlaySetsOnlyTheReleaseFieldsAndNamesThem(t *testing.T) {
	file := &config.Config{}
	file.Components.Kubernetes = "1.34.2"
	file.Bootstrap.OCIImage = "registry.test/worker:a"
	file.Bootstrap.OfflineArtifacts.Source = "oci://registry.test/bundle:a"
	a := &AppliedRelease{Rollout: "r1", Generation: 2, Release: v1alpha1.Release{KubernetesVersion: "v1.35.4"}}
	got, src := a.Overlay(file)
	if got.Components.Kubernetes != "1.35.4" || got.Bootstrap.OCIImage != "registry.test/worker:a" ||
		got.Bootstrap.OfflineArtifacts.Source != "oci://registry.test/bundle:a" {
		t.Fatalf("overlay = %+v %+v", got.Components, got.Bootstrap)
	}
	if file.Components.Kubernetes != "1.34.2" {
		t.Fatal("Overlay changed the file's config")
	}
	if want := []Source{{"components.kubernetes", "rollout r1 generation 2"}}; !reflect.DeepEqual(src, want) {
		t.Fatalf("sources = %v, want %v", src, want)
	}
	img := "registry.test/worker@sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	a.Release = v1alpha1.Release{WorkerImage: img, Artifacts: "oci://registry.test/bundle:b"}
	got, src = a.Overlay(file)
	if got.Bootstrap.OCIImage != img || got.Bootstrap.OfflineArtifacts.Source != "oci://registry.test/bundle:b" || got.Components.Kubernetes != "1.34.2" || len(src) != 2 {
		t.Fatalf("overlay = %+v %+v, sources %v", got.Components, got.Bootstrap, src)
	}
	var none *AppliedRelease
	if got, src := none.Overlay(file); got != file || src != nil {
		t.Fatal("a nil release changed the config")
	}
}
