package controlplane

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestOptionsDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		opts      Options
		wantBind  string
		wantError string
	}{
		{name: "loopback", opts: Options{}, wantBind: "127.0.0.1"},
		{name: "advertise", opts: Options{AdvertiseAddress: "10.0.0.5"}, wantBind: "10.0.0.5"},
		{name: "wildcard", opts: Options{AdvertiseAddress: "10.0.0.5", BindAddress: "0.0.0.0"}, wantBind: "0.0.0.0"},
		{name: "mismatch", opts: Options{AdvertiseAddress: "10.0.0.5", BindAddress: "127.0.0.1"}, wantError: "does not cover"},
		{name: "bad advertise", opts: Options{AdvertiseAddress: "node1"}, wantError: "not an IP address"},
		{name: "no bin dir", opts: Options{BinDir: "-"}, wantError: "BinDir is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			if o.BinDir == "" {
				o.BinDir = "/nonexistent"
			} else if o.BinDir == "-" {
				o.BinDir = ""
			}
			o.WorkDir = t.TempDir()
			err := o.defaults()
			if c.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantError) {
					t.Fatalf("error = %v, want one containing %q", err, c.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.BindAddress != c.wantBind {
				t.Errorf("BindAddress = %q, want %q", o.BindAddress, c.wantBind)
			}
		})
	}
}

// A start that cannot run its first component fails with the path it
// looked at and leaves nothing running.
func TestStartMissingBinary(t *testing.T) {
	var failureLog bytes.Buffer
	bin := t.TempDir()
	cp, err := Start(context.Background(), Options{BinDir: bin, WorkDir: t.TempDir(), Logf: t.Logf, FailureLog: &failureLog})
	if err == nil {
		_ = cp.Stop()
		t.Fatal("Start succeeded without binaries")
	}
	if !strings.Contains(err.Error(), bin+"/etcd") || !strings.Contains(err.Error(), "build-k8s.sh") {
		t.Errorf("error does not name the missing binary and the fix: %v", err)
	}
}
