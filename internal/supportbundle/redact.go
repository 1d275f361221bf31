package supportbundle

import (
	"bytes"
	"regexp"
	"sort"
	"sync"
)

// Redacted replaces every secret in a bundle.
const Redacted = "REDACTED"

// The patterns of secrets found in any member, whatever file or log it
// came from. They err on the side of redacting: a support case loses a
// value, never a credential.
var (
	// Private keys in PEM, whole blocks.
	pemPrivateKey = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?s)-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----`)
	})
	// Bootstrap tokens: the ID stays (it names the token), the secret goes.
	bootstrapToken = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\b([a-z0-9]{6})\.[a-z0-9]{16}\b`) })
	// JWTs (Entra access tokens, service account tokens).
	jwt = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)
	})
	// Authorization: Bearer <token>.
	bearer = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+`) })
	// The value of any key that names a secret, in JSON, YAML, INI,
	// key=value lines and command-line flags: token, secret, password,
	// client-key-data, privateKey, credential, apiKey. Objects and lists
	// are not values here; their members are matched on their own.
	// Credentials in URLs: the password of a userinfo, and the
	// signature or token query parameters of signed URLs (a storage SAS's
	// sig, S3's and GCS's signatures): a release's bundle or agent URL
	// in rollout.json may carry one. Scheme, host and path stay.
	urlPassword = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@"'<>]+:)[^@/\s"'<>]+@`)
	})
	urlSignature = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)([?&](?:sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential|x-goog-signature|x-goog-credential|access_token|token)=)[^&\s"'<>#]+`)
	})
	secretKey = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)((?:^|[\s{,"'-])[\w.-]*(?:token|secret|passw(?:or)?d|key-data|keydata|private_?key|credential|api_?key)[\w.-]*["']?\s*[:=]\s*)("[^"\n]*"|'[^'\n]*'|[^\s,{}\[\]"']+)`)
	})
)

// redactor replaces secrets: the patterns above and the literal secrets
// the host's config holds (a bootstrap token or a client secret in a form
// no pattern knows).
type redactor struct {
	literals [][]byte
	count    int
}

func newRedactor(literals []string) *redactor {
	r := &redactor{}
	for _, l := range literals {
		if len(l) >= 6 { // shorter values would redact ordinary words
			r.literals = append(r.literals, []byte(l))
		}
	}
	// Longest first, so a secret that contains another goes whole.
	sort.Slice(r.literals, func(i, j int) bool { return len(r.literals[i]) > len(r.literals[j]) })
	return r
}

// redact returns data with every secret replaced, and counts them.
func (r *redactor) redact(data []byte) []byte {
	for _, l := range r.literals {
		if n := bytes.Count(data, l); n > 0 {
			r.count += n
			data = bytes.ReplaceAll(data, l, []byte(Redacted))
		}
	}
	data = pemPrivateKey().ReplaceAllFunc(data, func(m []byte) []byte {
		r.count++
		kind := pemPrivateKey().FindSubmatch(m)[1]
		return []byte("-----BEGIN " + string(kind) + "-----\n" + Redacted + "\n-----END " + string(kind) + "-----")
	})
	data = r.replace(jwt(), data, func([][]byte) []byte { return []byte(Redacted) })
	data = r.replace(bearer(), data, func(m [][]byte) []byte { return append(append([]byte{}, m[1]...), Redacted...) })
	data = r.replace(bootstrapToken(), data, func(m [][]byte) []byte { return append(append([]byte{}, m[1]...), "."+Redacted...) })
	data = r.replace(urlPassword(), data, func(m [][]byte) []byte { return append(append([]byte{}, m[1]...), Redacted+"@"...) })
	data = r.replace(urlSignature(), data, func(m [][]byte) []byte { return append(append([]byte{}, m[1]...), Redacted...) })
	data = r.replace(secretKey(), data, func(m [][]byte) []byte {
		v := m[2]
		if bytes.Equal(bytes.Trim(v, `"'`), []byte(Redacted)) || len(bytes.Trim(v, `"'`)) == 0 {
			r.count-- // already redacted, or empty: nothing to hide
			return append(append([]byte{}, m[1]...), v...)
		}
		q := ""
		if v[0] == '"' || v[0] == '\'' {
			q = string(v[0])
		}
		return append(append([]byte{}, m[1]...), q+Redacted+q...)
	})
	return data
}

func (r *redactor) replace(re *regexp.Regexp, data []byte, with func([][]byte) []byte) []byte {
	return re.ReplaceAllFunc(data, func(m []byte) []byte {
		r.count++
		return with(re.FindSubmatch(m))
	})
}
