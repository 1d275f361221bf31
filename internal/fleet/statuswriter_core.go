package fleet

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// coreCodecs is core/v1 alone, made on first use, for the status
// writer's Events (the reason store.go's codecs give: no
// generated clientset, nothing registered at process start).
var coreCodecs = sync.OnceValues(func() (serializer.CodecFactory, runtime.ParameterCodec) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("fleet core scheme: %v", err)) // a programming error
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s), runtime.NewParameterCodec(s)
})

// coreClient is the one core/v1 call the status writer makes: create
// Events (it reads the Nodes from the process's informer).
type coreClient struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
}

func newCoreClient(c *rest.Config, hc *http.Client) (*coreClient, error) {
	cf, pc := coreCodecs()
	rc, err := restClientOf(c, hc, corev1.SchemeGroupVersion, "/api", cf)
	if err != nil {
		return nil, fmt.Errorf("core client: %w", err)
	}
	return &coreClient{rc: rc, params: pc}, nil
}

// listTimeout bounds one list of the informer; watchSlack bounds a
// watch beyond the server's own timeoutSeconds, so a connection that
// stalls is given up and the informer opens the next.
const (
	listTimeout = 60 * time.Second
	watchSlack  = 30 * time.Second
)

// rolloutsListWatch is Rollouts.ListWatch with each request bounded.
func (w *StatusWriter) rolloutsListWatch() cache.ListerWatcher {
	return plainList{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			ctx, cancel := context.WithTimeout(ctx, listTimeout)
			defer cancel()
			return w.rollouts.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return boundedWatch(ctx, opts, func(ctx context.Context) (watch.Interface, error) { return w.rollouts.Watch(ctx, opts) })
		},
	}}
}

// createEvent creates ev in its namespace.
func (c *coreClient) createEvent(ctx context.Context, ev *corev1.Event) error {
	return c.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// boundedWatch opens a watch whose context ends watchSlack after the
// server's timeoutSeconds, released when the informer stops the watch.
func boundedWatch(ctx context.Context, opts metav1.ListOptions, open func(context.Context) (watch.Interface, error)) (watch.Interface, error) {
	bound := watchSlack
	if opts.TimeoutSeconds != nil {
		bound += time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	w, err := open(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return stopWatch{w, cancel}, nil
}

type stopWatch struct {
	watch.Interface
	cancel context.CancelFunc
}

func (w stopWatch) Stop() {
	w.Interface.Stop()
	w.cancel()
}

// plainList keeps an informer's first request a plain list at
// resourceVersion "0", which every API server answers from its watch
// cache, rather than client-go's streaming list (WatchListClient), which
// needs the server's WatchList feature and falls back to that list where
// it is off (as the daemon's Node cache does).
type plainList struct{ *cache.ListWatch }

func (plainList) IsWatchListSemanticsUnSupported() bool { return true }
