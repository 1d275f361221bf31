package deb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// Release is a suite's signed Release file: what it is, when it was
// made, and the SHA-256 and size of every index under dists/<suite>/.
type Release struct {
	Suite, Codename string
	Date            time.Time
	ValidUntil      time.Time // zero when the Release sets none
	Architectures   []string
	Components      []string
	Files           map[string]FileSum // path under dists/<suite>/
	// Signer names the key that made the accepted signature.
	Signer string
}

// FileSum is a file's SHA-256 and size as a signed index gives them.
type FileSum struct {
	SHA256 string
	Size   int64
}

// LoadKeyring reads an OpenPGP keyring file, binary (.gpg, what
// debian-archive-keyring installs) or ASCII-armored (.asc).
func LoadKeyring(path string) (openpgp.EntityList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	var ks openpgp.EntityList
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN PGP")) {
		ks, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
	} else {
		ks, err = openpgp.ReadKeyRing(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("keyring %s: %w", path, err)
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("keyring %s: no keys", path)
	}
	return ks, nil
}

// VerifyInRelease checks a clearsigned InRelease file against keyring and
// parses the Release it signs. name (the URL it came from) is in every
// error. A signature by any key of the keyring that verifies, and whose
// key is not expired or revoked at now, is enough: Debian signs with
// several keys, not all of which a keyring need hold.
func VerifyInRelease(name string, data []byte, keyring openpgp.EntityList, now time.Time) (*Release, error) {
	block, rest := clearsign.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: not a clearsigned file", name)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%s: data after the signature", name)
	}
	signer, err := verifyAny(block, keyring, now)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r, err := ParseRelease(name, block.Plaintext)
	if err != nil {
		return nil, err
	}
	r.Signer = signer
	if !r.ValidUntil.IsZero() && now.After(r.ValidUntil) {
		return nil, fmt.Errorf("%s: expired: Valid-Until %s is past", name, r.ValidUntil.Format(time.RFC1123))
	}
	return r, nil
}

// DefaultMaxReleaseAge bounds the age of a Release that sets no
// Valid-Until (Debian's stable suites set none; their Date moves with
// each point release, a few months apart). A frozen suite (an Ubuntu
// release pocket) needs a larger Mirror.MaxAge.
const DefaultMaxReleaseAge = 2 * 365 * 24 * time.Hour

// check refuses a validly signed Release that is not the one asked for:
// another suite (apt accepts a Release whose Suite or Codename is the
// name asked for, and refuses it otherwise), or one older than notBefore,
// or, without Valid-Until, older than maxAge at now. The archive key
// signs every suite, so a signature alone lets a mirror answer trixie
// with bookworm, or with a years-old trixie.
func (r *Release) check(name, suite string, notBefore, now time.Time, maxAge time.Duration) error {
	if r.Suite != suite && r.Codename != suite {
		return fmt.Errorf("%s: is the Release of another suite: want Suite or Codename %q, found Suite %q, Codename %q", name, suite, r.Suite, r.Codename)
	}
	const day = "2006-01-02 15:04:05 UTC"
	if !notBefore.IsZero() && r.Date.Before(notBefore) {
		return fmt.Errorf("%s: is older than the lock it would replace: Date %s, the lock's %s; the mirror serves stale indexes: use another mirror or build with --lock",
			name, r.Date.Format(day), notBefore.UTC().Format(day))
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxReleaseAge
	}
	if r.ValidUntil.IsZero() && now.Sub(r.Date) > maxAge {
		return fmt.Errorf("%s: is too old: Date %s is more than %d days before %s and it sets no Valid-Until; the mirror serves stale indexes (a suite frozen on purpose takes a larger maxReleaseAgeDays in the image spec)",
			name, r.Date.Format(day), int(maxAge/(24*time.Hour)), now.UTC().Format(day))
	}
	return nil
}

// verifyAny accepts the block when one of its signatures verifies with
// a key of keyring; it returns the signing key's fingerprint and first
// identity.
func verifyAny(block *clearsign.Block, keyring openpgp.EntityList, now time.Time) (string, error) {
	body, err := io.ReadAll(block.ArmoredSignature.Body)
	if err != nil {
		return "", fmt.Errorf("read signature: %w", err)
	}
	cfg := &packet.Config{Time: func() time.Time { return now }}
	pr := packet.NewReader(bytes.NewReader(body))
	var issuers []string
	var lastErr error
	for {
		p, err := pr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return "", fmt.Errorf("read signature: %w", err)
			}
			break
		}
		sig, ok := p.(*packet.Signature)
		if !ok {
			return "", fmt.Errorf("signature block holds a %T, not a signature", p)
		}
		if sig.IssuerKeyId == nil {
			continue
		}
		issuers = append(issuers, fmt.Sprintf("%016X", *sig.IssuerKeyId))
		if len(keyring.KeysByIdUsage(*sig.IssuerKeyId, packet.KeyFlagSign)) == 0 {
			continue
		}
		var one bytes.Buffer
		if err := sig.Serialize(&one); err != nil {
			lastErr = err
			continue
		}
		_, e, err := openpgp.VerifyDetachedSignature(keyring, bytes.NewReader(block.Bytes), &one, cfg)
		if err != nil {
			lastErr = fmt.Errorf("signature by key %016X: %w", *sig.IssuerKeyId, err)
			continue
		}
		return describe(e), nil
	}
	if lastErr != nil {
		return "", fmt.Errorf("no good signature: %w", lastErr)
	}
	if len(issuers) == 0 {
		return "", errors.New("no signature")
	}
	return "", fmt.Errorf("signed by key(s) %s, none of which is in the keyring", strings.Join(issuers, ", "))
}

func describe(e *openpgp.Entity) string {
	s := fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
	for name := range e.Identities {
		return s + " (" + name + ")"
	}
	return s
}

// ParseRelease parses the text of a Release file.
func ParseRelease(name string, text []byte) (*Release, error) {
	p, err := ParseOne(name, text)
	if err != nil {
		return nil, err
	}
	r := &Release{
		Suite:         p.Get("Suite"),
		Codename:      p.Get("Codename"),
		Architectures: strings.Fields(p.Get("Architectures")),
		Components:    strings.Fields(p.Get("Components")),
		Files:         map[string]FileSum{},
	}
	if r.Date, err = parseDate(p.Get("Date")); err != nil {
		return nil, fmt.Errorf("%s: Date: %w", name, err)
	}
	if v := p.Get("Valid-Until"); v != "" {
		if r.ValidUntil, err = parseDate(v); err != nil {
			return nil, fmt.Errorf("%s: Valid-Until: %w", name, err)
		}
	}
	for _, line := range strings.Split(p.Get("SHA256"), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || !validHex(f[0]) {
			return nil, fmt.Errorf("%s: SHA256: %q is not \"sha256 size path\"", name, strings.TrimSpace(line))
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: SHA256: size %q of %s", name, f[1], f[2])
		}
		r.Files[f[2]] = FileSum{SHA256: f[0], Size: n}
	}
	if len(r.Files) == 0 {
		return nil, fmt.Errorf("%s: no SHA256 file list", name)
	}
	return r, nil
}

// dateLayouts are the forms Release files write Date in (RFC 2822 with
// UTC or a numeric zone).
var dateLayouts = []string{time.RFC1123, time.RFC1123Z, "Mon, 2 Jan 2006 15:04:05 MST", "Mon, 2 Jan 2006 15:04:05 -0700"}

func parseDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, l := range dateLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 2822 date", s)
}
