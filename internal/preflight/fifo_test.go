package preflight

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Issue 13, defect 9: a named pipe as a bundle's manifest.json hung the
// artifact-sources check (and so preflight and start). It is an error
// naming the file, at once.
func TestArtifactSourcesFIFOManifest(t *testing.T) {
	h := newHost(t)
	bundle := "var/lib/aks-flex-node/bundles/k8s-1.35.0"
	h.mkdir(bundle)
	h.set("bootstrap.offlineArtifacts.source", "/"+bundle)
	if err := syscall.Mkfifo(filepath.Join(h.root, bundle, "manifest.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 1)
	go func() { done <- h.run(NameArtifactSources) }()
	select {
	case r := <-done:
		want(t, r, SeverityError, "/"+bundle, "manifest.json", "not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("artifact-sources blocked on a named pipe for 10s")
	}
}
