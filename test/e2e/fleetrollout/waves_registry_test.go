package fleetrollout

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// servedBytes is what the site registry sent one host: body bytes of
// blobs (bundle files, image layers and configs) and of manifests, and
// how many requests of each kind. A fleet rollback must pull nothing.
type servedBytes struct {
	blobBytes, manifestBytes, blobRequests, manifestRequests atomic.Int64
}

// served is a snapshot of a servedBytes.
type served struct {
	BlobBytes, ManifestBytes, BlobRequests, ManifestRequests int64
}

func (s served) String() string {
	return fmt.Sprintf("blob-bytes=%d blob-requests=%d manifest-bytes=%d manifest-requests=%d", s.BlobBytes, s.BlobRequests, s.ManifestBytes, s.ManifestRequests)
}

func (s served) minus(o served) served {
	return served{s.BlobBytes - o.BlobBytes, s.ManifestBytes - o.ManifestBytes, s.BlobRequests - o.BlobRequests, s.ManifestRequests - o.ManifestRequests}
}

// counted wraps w so that what the host on ns is sent in answer to req
// is counted.
func (r *siteRegistry) counted(ns string, w http.ResponseWriter, req *http.Request) http.ResponseWriter {
	r.mu.Lock()
	v := r.views[ns]
	r.mu.Unlock()
	c := &countingWriter{ResponseWriter: w, bytes: &v.served.manifestBytes}
	switch {
	case strings.Contains(req.URL.Path, "/blobs/"):
		c.bytes = &v.served.blobBytes
		v.served.blobRequests.Add(1)
	case strings.Contains(req.URL.Path, "/manifests/"):
		v.served.manifestRequests.Add(1)
	}
	return c
}

// sent is what the host on ns was sent so far.
func (r *siteRegistry) sent(ns string) served {
	r.mu.Lock()
	v := r.views[ns]
	r.mu.Unlock()
	s := &v.served
	return served{s.blobBytes.Load(), s.manifestBytes.Load(), s.blobRequests.Load(), s.manifestRequests.Load()}
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	bytes *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.bytes.Add(int64(n))
	return n, err
}

// Flush passes a flush on when the wrapped writer can.
func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
