package preflight

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/Azure/aks-flex-node/internal/transport"
)

const testDigest = "sha256:0486331f5da2a861b8b53b2671cad8938ce259ea6e46ca1cc4645be8bcbc5572"

func TestWorkerImage(t *testing.T) {
	refusal := func(host string) error {
		return fmt.Errorf("Get \"https://%s/v2/\": tls: first record does not look like a TLS handshake; %w", host,
			&transport.RefusedError{URL: "http://" + host + "/v2/", Scheme: "http", Host: host, OptIn: imagePlainHTTPKey})
	}
	for _, tc := range []struct {
		name     string
		image    string
		resolved ResolvedImage
		err      error
		sev      Severity
		want     []string
	}{
		{"unset", "", ResolvedImage{}, nil, SeverityError, []string{"bootstrap.ociImage is not set", "@sha256:"}},
		{"by tag", "registry.example/aks/node:v1", ResolvedImage{Digest: testDigest, ByTag: true, Repository: "registry.example/aks/node"}, nil,
			SeverityWarning, []string{"tag only", testDigest, "registry.example/aks/node@" + testDigest}},
		{"pinned", "registry.example/aks/node@" + testDigest, ResolvedImage{Digest: testDigest, Repository: "registry.example/aks/node"}, nil,
			SeverityOK, []string{"resolves to " + testDigest}},
		{"loopback", "127.0.0.1:5000/aks/node@" + testDigest, ResolvedImage{Digest: testDigest, PlainHTTP: "loopback"}, nil,
			SeverityOK, []string{"on loopback"}},
		{"opted in", "10.1.2.3:5000/aks/node@" + testDigest, ResolvedImage{Digest: testDigest, PlainHTTP: imagePlainHTTPKey}, nil,
			SeverityOK, []string{"allowed by bootstrap.ociImagePlainHTTP"}},
		{"plain http refused", "10.1.2.3:5000/aks/node:v1", ResolvedImage{}, refusal("10.1.2.3:5000"),
			SeverityError, []string{"does not resolve", "refusing plain HTTP to 10.1.2.3:5000", "https", "set bootstrap.ociImagePlainHTTP to true"}},
		{"redirect refused", "10.1.2.3:5000/aks/node:v1", ResolvedImage{}, refusal("blobs.example:80"),
			SeverityError, []string{"sends the download to plain HTTP on blobs.example:80"}},
		{"unreachable", "registry.example/aks/node:v1", ResolvedImage{}, errors.New("dial tcp: connection refused"),
			SeverityError, []string{"connection refused", "reachable"}},
		{"wrong arch", "registry.example/aks/node@" + testDigest, ResolvedImage{Digest: testDigest, Platform: "linux/arm64", WantPlatform: "linux/amd64"}, nil,
			SeverityError, []string{"is for linux/arm64; this host runs linux/amd64", "image build --arch"}},
		{"contract miss", "registry.example/aks/node@" + testDigest, ResolvedImage{Digest: testDigest, Platform: "linux/amd64", WantPlatform: "linux/amd64", Contract: 12,
			Misses: []string{"iptables: none of iptables, nft in /usr/sbin"}}, nil,
			SeverityError, []string{"does not meet the worker image contract: iptables: none of iptables, nft", "image build --spec examples/worker-image/bookworm.json"}},
		{"contract met", "registry.example/aks/node@" + testDigest, ResolvedImage{Digest: testDigest, Platform: "linux/amd64", WantPlatform: "linux/amd64", Contract: 12, Cached: true}, nil,
			SeverityOK, []string{"meets the worker image contract (12 items, checked on the cached layers)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			if tc.image != "" {
				h.set("bootstrap.ociImage", tc.image)
			}
			env := h.env()
			var asked string
			env.ResolveImage = func(_ context.Context, ref string) (ResolvedImage, error) {
				asked = ref
				return tc.resolved, tc.err
			}
			r := runNamed(t, env, NameWorkerImage)
			want(t, r, tc.sev, tc.want...)
			if tc.image != "" && asked != tc.image {
				t.Errorf("resolved %q, want %q", asked, tc.image)
			}
		})
	}
}

// Without a resolver (unit callers) a set image is not probed.
func TestWorkerImageWithoutResolver(t *testing.T) {
	h := newHost(t)
	h.set("bootstrap.ociImage", "registry.example/aks/node:v1")
	want(t, h.run(NameWorkerImage), SeverityOK, "resolved when the machine is provisioned")
}

// The image start would choose when bootstrap.ociImage is empty is the
// one checked, and the message says where it came from.
func TestWorkerImageChosen(t *testing.T) {
	h := newHost(t)
	env := h.env()
	env.ChooseImage = func(context.Context) (string, string, error) {
		return "oci-layout:///b/images/worker@" + testDigest, "the offline bundle", nil
	}
	var asked string
	env.ResolveImage = func(_ context.Context, ref string) (ResolvedImage, error) {
		asked = ref
		return ResolvedImage{Digest: testDigest, Platform: "linux/amd64", WantPlatform: "linux/amd64", Contract: 12}, nil
	}
	want(t, runNamed(t, env, NameWorkerImage), SeverityOK, "(from the offline bundle) resolves to "+testDigest)
	if asked != "oci-layout:///b/images/worker@"+testDigest {
		t.Errorf("resolved %q", asked)
	}
	env.ChooseImage = func(context.Context) (string, string, error) { return "", "", errors.New("bundle unreachable") }
	want(t, runNamed(t, env, NameWorkerImage), SeverityError, "worker image: bundle unreachable")
}
