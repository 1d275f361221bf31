package fakeimds

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Minter issues a token for a registered application (fakeentra.Tenant):
// IMDS and the Arc agent hand out the tenant's tokens for an identity.
type Minter interface {
	Mint(appID, audience string) (token string, expires time.Time, err error)
}

// TokenPath is where IMDS and the Arc agent serve managed identity tokens.
const TokenPath = "/metadata/identity/oauth2/token"

// Identity is IMDS's identity endpoint for one VM: GET TokenPath with
// "Metadata: true", api-version and resource, and client_id for a
// user-assigned identity. An identity the VM does not have is IMDS's 400
// "Identity not found".
type Identity struct {
	Minter Minter
	// SystemAssigned is the app ID of the VM's system-assigned identity
	// ("" when it has none); UserAssigned are the client IDs of the
	// user-assigned identities it has.
	SystemAssigned string
	UserAssigned   []string
	hits           atomic.Int64
}

// Hits is how many tokens the endpoint handed out.
func (id *Identity) Hits() int64 { return id.hits.Load() }

func (id *Identity) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case r.Header.Get("Metadata") != "true":
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required metadata header not specified")
		return
	case q.Get("api-version") == "":
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required query variable 'api-version' is missing")
		return
	case q.Get("resource") == "":
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required query variable 'resource' is missing")
		return
	}
	app := id.SystemAssigned
	if c := q.Get("client_id"); c != "" {
		app = ""
		for _, u := range id.UserAssigned {
			if strings.EqualFold(u, c) {
				app = u
			}
		}
	}
	if app == "" {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Identity not found")
		return
	}
	writeToken(w, id.Minter, app, q.Get("resource"), &id.hits)
}

// Arc is the Azure Arc agent's identity endpoint (himds, on
// localhost:40342): a request without credentials gets 401 with
// "WWW-Authenticate: Basic realm=<key file>", a key it has just written
// under KeyDir; the same request with "Authorization: Basic <key>" gets
// the machine's token.
type Arc struct {
	Minter Minter
	// AppID is the Arc machine's system-assigned identity.
	AppID string
	// KeyDir is where keys are written, as the host names it
	// (/var/opt/azcmagent/tokens); WriteKey writes one there.
	KeyDir   string
	WriteKey func(path string, key []byte) error

	mu         sync.Mutex
	keys       map[string]bool
	challenges atomic.Int64
	hits       atomic.Int64
}

// Hits is how many tokens the endpoint handed out; Challenges how many
// 401 challenges it answered.
func (a *Arc) Hits() int64       { return a.hits.Load() }
func (a *Arc) Challenges() int64 { return a.challenges.Load() }

func (a *Arc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Header.Get("Metadata") != "true" || q.Get("api-version") == "" || q.Get("resource") == "" {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Metadata header, api-version and resource are required")
		return
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		key := hex.EncodeToString(b[:])
		file := path.Join(a.KeyDir, hex.EncodeToString(b[:4])+".key")
		if err := a.WriteKey(file, []byte(key)); err != nil {
			imdsError(w, http.StatusInternalServerError, "server_error", err.Error())
			return
		}
		a.mu.Lock()
		if a.keys == nil {
			a.keys = map[string]bool{}
		}
		a.keys[key] = true
		a.mu.Unlock()
		a.challenges.Add(1)
		w.Header().Set("WWW-Authenticate", "Basic realm="+file)
		imdsError(w, http.StatusUnauthorized, "unauthorized", "Authorization header is required")
		return
	}
	key, ok := strings.CutPrefix(auth, "Basic ")
	a.mu.Lock()
	ok = ok && a.keys[key]
	a.mu.Unlock()
	if !ok {
		imdsError(w, http.StatusUnauthorized, "unauthorized", "The key in the Authorization header does not match")
		return
	}
	writeToken(w, a.Minter, a.AppID, q.Get("resource"), &a.hits)
}

// writeToken answers with a token in the managed identity format (string
// numbers, expires_on as Unix seconds).
func writeToken(w http.ResponseWriter, m Minter, app, resource string, hits *atomic.Int64) {
	tok, exp, err := m.Mint(app, resource)
	if err != nil {
		imdsError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	hits.Add(1)
	secs := strconv.Itoa(int(time.Until(exp).Seconds()))
	writeJSON(w, http.StatusOK, map[string]string{
		"access_token": tok, "client_id": app, "expires_in": secs, "ext_expires_in": secs,
		"expires_on": strconv.FormatInt(exp.Unix(), 10), "not_before": strconv.FormatInt(time.Now().Unix(), 10),
		"resource": resource, "token_type": "Bearer",
	})
}

func imdsError(w http.ResponseWriter, status int, kind, desc string) {
	writeJSON(w, status, map[string]string{"error": kind, "error_description": desc})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		fmt.Println("fakeimds:", err)
	}
}
