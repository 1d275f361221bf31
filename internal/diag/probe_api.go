package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/node"
)

// apiProbe is what the API server says to the node's own credential:
// who it is, its Node and its Lease, and the server's clock.
type apiProbe struct {
	server string
	// credErr: the node's credential could not be loaded from the machine.
	credErr error

	ssrCode int
	ssrErr  error
	user    string
	groups  []string

	node     *corev1.Node
	nodeCode int
	nodeErr  error
	lease    *coordinationv1.Lease
	leaseErr error

	// date is the Date header of the answer that came back fastest, sent
	// and received when this host's clock said.
	date           time.Time
	sent, received time.Time
}

// maxAnswer bounds what is read of one answer.
const maxAnswer = 4 << 20

func (e *Env) apiServer(ctx context.Context) *apiProbe {
	e.once.api.Do(func() { e.apiRes = e.probeAPI(ctx) })
	return &e.apiRes
}

func (e *Env) probeAPI(ctx context.Context) apiProbe {
	var p apiProbe
	cfg, err := node.ClientConfig(e.Config, e.Layout, e.machineRoot())
	if err != nil {
		p.credErr = err
		return p
	}
	// A node that joined with an Azure identity has a client certificate
	// too (it TLS-bootstraps with the identity), and must be its Node.
	p.server = cfg.Host
	// debug's own bound per probe (Env.ProbeTimeout), not a named
	// policy: the command's overall budget is split between its probes.
	hc, err := kubeclient.HTTPClient(cfg, kubeclient.Policy{Timeout: e.probeTimeout()})
	if err != nil {
		p.credErr = err
		return p
	}
	call := func(method, path string, body []byte) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, p.server+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Content-Type", "application/json")
		sent := e.now()
		resp, err := hc.Do(req)
		if err != nil {
			if ue, ok := err.(*url.Error); ok {
				err = ue.Err
			}
			return 0, nil, err
		}
		defer resp.Body.Close()
		received := e.now()
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if d, derr := http.ParseTime(resp.Header.Get("Date")); derr == nil && (p.date.IsZero() || received.Sub(sent) < p.received.Sub(p.sent)) {
			p.date, p.sent, p.received = d, sent, received
		}
		return resp.StatusCode, data, err
	}

	var data []byte
	p.ssrCode, data, p.ssrErr = call(http.MethodPost, apiprobe.SelfSubjectReviewPath, []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if p.ssrErr == nil && p.ssrCode/100 == 2 {
		var review struct {
			Status struct {
				UserInfo apiprobe.UserInfo `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal(data, &review); err != nil {
			p.ssrErr = fmt.Errorf("its SelfSubjectReview answer does not parse: %w", err)
		}
		p.user, p.groups = review.Status.UserInfo.Username, review.Status.UserInfo.Groups
	}
	if p.ssrErr != nil {
		// Unreachable: the other calls would say the same, slower.
		p.nodeErr, p.leaseErr = p.ssrErr, p.ssrErr
		return p
	}
	name := e.nodeName()
	var code int
	if p.nodeCode, data, p.nodeErr = call(http.MethodGet, "/api/v1/nodes/"+name, nil); p.nodeErr == nil {
		p.node, p.nodeErr = decode[corev1.Node](p.nodeCode, data)
	}
	if code, data, p.leaseErr = call(http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+name, nil); p.leaseErr == nil {
		p.lease, p.leaseErr = decode[coordinationv1.Lease](code, data)
	}
	return p
}

// decode reads a 200 answer as a T; another status is an error with the
// server's message.
func decode[T any](code int, data []byte) (*T, error) {
	if code != http.StatusOK {
		var st struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &st)
		return nil, fmt.Errorf("%d %s: %s", code, http.StatusText(code), st.Message)
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
