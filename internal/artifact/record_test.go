package artifact

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/task"
)

// recordStager is a Stager for dir's bundle on a root with a state dir,
// as start has one (the node lock makes it).
func recordStager(t *testing.T, root string) *Stager {
	t.Helper()
	s := testStager(t, "", nil)
	if root != "" {
		s.Layout = s.Layout.WithRoot(root)
	}
	if err := os.MkdirAll(s.Layout.OnRoot(s.Layout.StateDir()), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// hashedBy is how many bytes f hashed.
func hashedBy(f func()) int64 {
	before := BytesHashed()
	f()
	return BytesHashed() - before
}

// A bundle is hashed once; a later process finds its record and hashes
// nothing; a byte changed in place with size and mtime restored is
// caught, named, and its record dropped.
func TestVerificationRecord(t *testing.T) {
	ctx := context.Background()
	dir := builtBundle(t)
	s := recordStager(t, "")
	root := s.Layout.Root()
	var v Verification
	var err error
	if n := hashedBy(func() { v, err = s.VerifyQuick(ctx, dir) }); err != nil || !v.Now || n == 0 {
		t.Fatalf("first verify: %+v %v, %d bytes hashed", v, err, n)
	}
	recs, _ := filepath.Glob(s.Layout.OnRoot(s.Layout.StateDir() + "/" + RecordDir + "/*.json"))
	if len(recs) != 1 {
		t.Fatalf("records %v, want one", recs)
	}
	if fi, err := os.Stat(recs[0]); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("record mode %v %v, want 0644", fi.Mode(), err)
	}

	again := recordStager(t, root) // another process, the same host
	var v2 Verification
	if n := hashedBy(func() { v2, err = again.VerifyQuick(ctx, dir) }); err != nil || v2.Now || !v2.Since.Equal(v.Since) || n != 0 {
		t.Fatalf("unchanged bundle: %+v %v, %d bytes hashed; want the first verification's time and 0 bytes", v2, err, n)
	}
	if got := v2.String(); !strings.HasPrefix(got, "verified (unchanged since ") {
		t.Errorf("String() = %q", got)
	}
	// Other versions asked for are compared with the recorded manifest,
	// without hashing.
	other := recordStager(t, root)
	other.Want.Kubernetes = "1.34.0"
	if n := hashedBy(func() { _, err = other.VerifyQuick(ctx, dir) }); err == nil || !strings.Contains(err.Error(), "manifest kubernetes") || n != 0 {
		t.Errorf("other version: %v, %d bytes hashed", err, n)
	}

	kubelet := filepath.Join(dir, BundlePaths(testComponents, runtime.GOARCH)[Kubelet])
	fi, err := os.Stat(kubelet)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(kubelet)
	b[0] ^= 1
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	f, err := os.OpenFile(kubelet, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b[:1], 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(kubelet, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	third := recordStager(t, root)
	if n := hashedBy(func() { _, err = third.VerifyQuick(ctx, dir) }); err == nil || !strings.Contains(err.Error(), kubelet+": sha256") || n == 0 {
		t.Fatalf("tampered kubelet: %v, %d bytes hashed; want it hashed and named", err, n)
	}
	if recs, _ := filepath.Glob(s.Layout.OnRoot(s.Layout.StateDir() + "/" + RecordDir + "/*.json")); len(recs) != 0 {
		t.Errorf("record of a bundle that does not verify kept: %v", recs)
	}
}

// Without a state dir (`artifacts verify --quick` on a host start never
// ran on) the bundle is verified and nothing is written.
func TestVerificationRecordNoStateDir(t *testing.T) {
	s := testStager(t, "", nil)
	v, err := s.VerifyQuick(context.Background(), builtBundle(t))
	if err != nil || !v.Now {
		t.Fatalf("%+v %v", v, err)
	}
	if _, err := os.Stat(s.Layout.OnRoot(s.Layout.StateDir())); !os.IsNotExist(err) {
		t.Errorf("state dir made: %v", err)
	}
}

// A bundle reached through a link is one bundle: preflight opens it by
// its resolved path and staging by the configured one, and neither hashes
// it again once the other did (issue 20: a linked bundle dir was hashed
// by preflight on every converged run).
func TestVerificationRecordThroughLink(t *testing.T) {
	ctx := context.Background()
	dir := builtBundle(t)
	link := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	s := recordStager(t, "")
	if _, err := s.VerifyQuick(ctx, dir); err != nil { // preflight: resolved
		t.Fatal(err)
	}
	var err error
	if n := hashedBy(func() { err = s.Verify(ctx, link) }); err != nil || n != 0 { // stage: as configured
		t.Errorf("same process through the link: %v, %d bytes hashed", err, n)
	}
	next := recordStager(t, s.Layout.Root())
	var v Verification
	if n := hashedBy(func() { v, err = next.VerifyQuick(ctx, link) }); err != nil || v.Now || n != 0 {
		t.Errorf("next process through the link: %+v %v, %d bytes hashed", v, err, n)
	}
	// Installed from the dir, the bundle named by its link is installed
	// already: nothing is hashed to compare installed files.
	if err := os.MkdirAll(s.MachineRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Install(ctx, dir); err != nil {
		t.Fatal(err)
	}
	third := recordStager(t, s.Layout.Root())
	third.MachineRoot = s.MachineRoot
	var res task.Result
	if n := hashedBy(func() { res, err = third.Install(ctx, link) }); err != nil || res.Changed || n != 0 {
		t.Errorf("install through the link: %+v %v, %d bytes hashed", res, err, n)
	}
}

// Preflight's check saves no record, even with a state dir there: a start
// it refuses must leave the host as it was. The stage that runs once
// preflight passed saves the record the check earned, without hashing
// again.
func TestCheckQuickWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := builtBundle(t)
	s := recordStager(t, "")
	if v, err := s.CheckQuick(ctx, dir); err != nil || !v.Now {
		t.Fatalf("check: %+v %v", v, err)
	}
	records := s.Layout.OnRoot(s.Layout.StateDir() + "/" + RecordDir)
	if _, err := os.Stat(records); !os.IsNotExist(err) {
		t.Fatalf("preflight's check wrote %s (%v)", records, err)
	}
	if n := hashedBy(func() {
		if err := s.Verify(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("the stage after the check hashed %d bytes again", n)
	}
	if recs, _ := filepath.Glob(records + "/*.json"); len(recs) != 1 {
		t.Errorf("records after the stage: %v, want one", recs)
	}
}
