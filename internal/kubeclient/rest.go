package kubeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// codecs is the scheme's serializers and the query-parameter codec, made
// on first use (not at process start: see the package comment).
var codecs = sync.OnceValues(func() (serializer.CodecFactory, runtime.ParameterCodec) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kubeclient scheme: %v", err)) // a programming error
		}
	}
	// The options types (GetOptions, ListOptions…) as the server's
	// unversioned query parameters, as client-go's scheme has them.
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s), runtime.NewParameterCodec(s)
})

// newForConfig returns a client for the server and credential cfg names
// (a copy New made). One HTTP client and one rate limiter serve both
// groups, as in client-go's clientset.
func newForConfig(cfg rest.Config) (Interface, error) {
	if cfg.RateLimiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps, burst = rest.DefaultQPS, rest.DefaultBurst
		}
		if qps > 0 {
			cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, max(burst, 1))
		}
	}
	hc, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, err
	}
	core, err := restFor(cfg, corev1.SchemeGroupVersion, "/api", hc)
	if err != nil {
		return nil, err
	}
	policy, err := restFor(cfg, policyv1.SchemeGroupVersion, "/apis", hc)
	if err != nil {
		return nil, err
	}
	_, pc := codecs()
	return &client{core: core, policy: policy, params: pc}, nil
}

// restFor is the REST client of one group version; cfg is a copy.
func restFor(cfg rest.Config, gv schema.GroupVersion, apiPath string, hc *http.Client) (*rest.RESTClient, error) {
	cf, _ := codecs()
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = cf.WithoutConversion()
	return rest.RESTClientForConfigAndClient(&cfg, hc)
}

type client struct {
	core, policy *rest.RESTClient
	params       runtime.ParameterCodec
}

func (c *client) CoreV1() CoreV1          { return c }
func (c *client) PolicyV1() PolicyV1      { return c }
func (c *client) Discovery() Discovery    { return c }
func (c *client) Nodes() Nodes            { return nodes{c} }
func (c *client) Pods(ns string) Pods     { return pods{c, ns} }
func (c *client) Events(ns string) Events { return events{c, ns} }
func (c *client) Evictions(ns string) Evictions {
	return evictions{c}
}

// ServerVersion is GET /version, as client-go's discovery reads it.
func (c *client) ServerVersion() (*version.Info, error) {
	body, err := c.core.Get().AbsPath("/version").Do(context.Background()).Raw()
	if err != nil {
		return nil, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("the server's version: %w", err)
	}
	return &info, nil
}

// timeout is a list's or watch's server-side bound as the request's own.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

type nodes struct{ c *client }

func (n nodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := n.c.core.Get().Resource("nodes").Name(name).VersionedParams(&opts, n.c.params).Do(ctx).Into(out)
	return out, err
}

func (n nodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := n.c.core.Get().Resource("nodes").VersionedParams(&opts, n.c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (n nodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return n.c.core.Get().Resource("nodes").VersionedParams(&opts, n.c.params).Timeout(timeout(opts)).Watch(ctx)
}

func (n nodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := n.c.core.Patch(pt).Resource("nodes").Name(name).SubResource(sub...).VersionedParams(&opts, n.c.params).Body(data).Do(ctx).Into(out)
	return out, err
}

type pods struct {
	c  *client
	ns string
}

func (p pods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := p.c.core.Get().Namespace(p.ns).Resource("pods").VersionedParams(&opts, p.c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

type events struct {
	c  *client
	ns string
}

func (e events) Create(ctx context.Context, ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.c.core.Post().Namespace(e.ns).Resource("events").VersionedParams(&opts, e.c.params).Body(ev).Do(ctx).Into(out)
	return out, err
}

func (e events) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.c.core.Patch(pt).Namespace(e.ns).Resource("events").Name(name).SubResource(sub...).VersionedParams(&opts, e.c.params).Body(data).Do(ctx).Into(out)
	return out, err
}

type evictions struct{ c *client }

// Evict posts the Eviction to its Pod's eviction subresource (a core
// path, a policy/v1 body), as client-go does; the namespace is the
// Eviction's own.
func (v evictions) Evict(ctx context.Context, e *policyv1.Eviction) error {
	return v.c.policy.Post().AbsPath("/api/v1").Namespace(e.Namespace).Resource("pods").Name(e.Name).SubResource("eviction").Body(e).Do(ctx).Error()
}
