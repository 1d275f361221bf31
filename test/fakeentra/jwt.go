package fakeentra

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

var b64 = base64.RawURLEncoding

// signRS256 makes a compact JWS: RS256, as Entra signs access tokens.
func signRS256(key *rsa.PrivateKey, header, claims map[string]any) (string, error) {
	h, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return input + "." + b64.EncodeToString(sig), nil
}

// jws is a parsed compact JWS, not yet verified.
type jws struct {
	header map[string]any
	claims map[string]any
	input  string
	sig    []byte
}

func parseJWS(s string) (*jws, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a compact JWS")
	}
	j := &jws{input: parts[0] + "." + parts[1]}
	for i, dst := range []*map[string]any{&j.header, &j.claims} {
		raw, err := b64.DecodeString(parts[i])
		if err != nil {
			return nil, fmt.Errorf("part %d: %w", i, err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return nil, fmt.Errorf("part %d: %w", i, err)
		}
	}
	var err error
	if j.sig, err = b64.DecodeString(parts[2]); err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	return j, nil
}

// verify checks the signature with pub: PS256 (what MSAL signs client
// assertions with) or RS256 (what ADFS-style clients use).
func (j *jws) verify(pub *rsa.PublicKey) error {
	sum := sha256.Sum256([]byte(j.input))
	switch alg, _ := j.header["alg"].(string); alg {
	case "PS256":
		return rsa.VerifyPSS(pub, crypto.SHA256, sum[:], j.sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto})
	case "RS256":
		return rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], j.sig)
	default:
		return fmt.Errorf("unsupported alg %q", alg)
	}
}

func (j *jws) claim(name string) string {
	s, _ := j.claims[name].(string)
	return s
}

func (j *jws) numClaim(name string) int64 {
	switch v := j.claims[name].(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		return n
	}
	return 0
}
