package lifecycle

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// reset --keep-image-cache keeps the bundle start pulled from a registry
// and its verification record: the next start checks the registry's
// digest against it and pulls and hashes nothing (and what else start
// tracked goes). A plain reset removes
// both, and leaves no state dir behind.
func TestResetKeepsStagedBundleWithImageCache(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	src := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/bundles:k8s-" + stageComponents.Kubernetes
	if _, err := (artifact.Registry{PlainHTTP: true}).Push(ctx, smallBundleAt(t, filepath.Join(t.TempDir(), "b")), src); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	stage := func(wantPulled bool) string {
		t.Helper()
		s := testStart(t, root, src, nil)
		s.opts.Config.Bootstrap.OfflineArtifacts.PlainHTTP = true
		s.stager.PlainHTTP = true
		hashed := artifact.BytesHashed()
		st := task.NewOutput[artifact.Staged]("stage-node-components")
		res, err := StageNodeComponents(s.Stager(), st).Do(ctx)
		if err != nil || res.Changed != wantPulled {
			t.Fatalf("stage: %+v %v, want changed=%t", res, err, wantPulled)
		}
		if n := artifact.BytesHashed() - hashed; !wantPulled && n != 0 {
			t.Errorf("stage of a kept bundle hashed %d bytes, want 0", n)
		}
		got, _ := st.Get()
		return got.Dir
	}
	dir := stage(true)
	l := testStart(t, root, src, nil).opts.Layout
	records := l.OnRoot(l.StateDir() + "/" + artifact.RecordDir)
	if recs, _ := filepath.Glob(records + "/*.json"); len(recs) != 1 {
		t.Fatalf("records after the pull: %v", recs)
	}
	quiet := slog.New(slog.DiscardHandler)
	if _, err := RemoveTrackedPaths(l, quiet, true).Do(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, artifact.ManifestName)); err != nil {
		t.Fatalf("staged bundle not kept: %v", err)
	}
	if _, err := os.Stat(l.OnRoot(l.StateDir() + "/" + state.TrackerFile)); err == nil {
		t.Errorf("%s kept", state.TrackerFile)
	}
	if got := stage(false); got != dir {
		t.Errorf("staged again at %s, was %s", got, dir)
	}
	if _, err := RemoveTrackedPaths(l, quiet, false).Do(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.OnRoot(l.StateDir())); !os.IsNotExist(err) {
		t.Errorf("state dir left by a plain reset: %v", err)
	}
}
