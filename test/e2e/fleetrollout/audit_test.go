package fleetrollout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// auditPolicy logs every request of a node's credential (the kubelet's
// and the agent's: both are system:node:NAME), once each, at Metadata:
// who, user agent, verb, resource. Nothing else is logged.
var auditPolicy = []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: None
`)

// auditEvent is the part of an audit.k8s.io/v1 Event the count needs.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// requestCount is the requests of one program (the user agent's first
// word) of all nodes in a window: in total and by verb and resource.
type requestCount struct {
	Total int
	By    map[string]int // "verb resource[/subresource]"
}

// countRequests reads the audit log and counts the nodes' requests that
// completed in [from, to), per program.
func countRequests(path string, from, to time.Time) (map[string]*requestCount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]*requestCount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if !strings.HasPrefix(ev.User.Username, "system:node:") || ev.StageTimestamp.Before(from) || !ev.StageTimestamp.Before(to) {
			continue
		}
		prog, _, _ := strings.Cut(ev.UserAgent, "/")
		c := out[prog]
		if c == nil {
			c = &requestCount{By: map[string]int{}}
			out[prog] = c
		}
		c.Total++
		what := ev.Verb
		if ev.ObjectRef != nil {
			what += " " + ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				what += "/" + ev.ObjectRef.Subresource
			}
		}
		c.By[what]++
	}
	return out, sc.Err()
}

// String is the count's verbs and resources, most first.
func (c *requestCount) String() string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range c.By {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	var parts []string
	for _, p := range all {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.ReplaceAll(p.k, " ", ":"), p.v))
	}
	return strings.Join(parts, " ")
}
