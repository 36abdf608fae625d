package b2b

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// SecretKeyEnv is the environment variable the CLI and the sink process
// read the secret encryption key from.
const SecretKeyEnv = "FAIRWAY_SECRET_KEY"

// Stored secret formats: the first byte of fairway.partners.secret.
const (
	secretPlain  byte = 0 // 0x00 || secret
	secretAESGCM byte = 1 // 0x01 || 12-byte nonce || AES-256-GCM(secret), AAD = tenant "/" partner
)

// ParseSecretKey parses a 32-byte AES-256 key given as 64 hex digits or as
// standard or URL-safe base64 (what `openssl rand -base64 32` prints).
func ParseSecretKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	// The key itself is never part of the error.
	return nil, fmt.Errorf("%w: %s must be 32 bytes as 64 hex digits or base64 (got %d characters)", ErrConfig, SecretKeyEnv, len(s))
}

// secretBox seals and opens stored secrets; a nil aead stores them as is.
type secretBox struct{ aead cipher.AEAD }

func newSecretBox(key []byte) (secretBox, error) {
	if key == nil {
		return secretBox{}, nil
	}
	if len(key) != 32 {
		return secretBox{}, fmt.Errorf("%w: SecretKey is %d bytes, want 32 (AES-256)", ErrConfig, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return secretBox{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return secretBox{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return secretBox{aead: aead}, nil
}

func aad(tenant, partner string) []byte { return []byte(tenant + "/" + partner) }

func (b secretBox) seal(tenant, partner string, secret []byte) []byte {
	if b.aead == nil {
		return append([]byte{secretPlain}, secret...)
	}
	out := make([]byte, 1+b.aead.NonceSize(), 1+b.aead.NonceSize()+len(secret)+b.aead.Overhead())
	out[0] = secretAESGCM
	_, _ = rand.Read(out[1:])
	return b.aead.Seal(out, out[1:], secret, aad(tenant, partner))
}

// open returns the secret and whether it was stored encrypted.
func (b secretBox) open(tenant, partner string, stored []byte) (Secret, bool, error) {
	if len(stored) == 0 {
		return nil, false, fmt.Errorf("%w: %s/%s: empty stored secret", ErrSecretKey, tenant, partner)
	}
	switch stored[0] {
	case secretPlain:
		return Secret(stored[1:]), false, nil
	case secretAESGCM:
		if b.aead == nil {
			return nil, true, fmt.Errorf("%w: %s/%s: the secret is encrypted; set %s", ErrSecretKey, tenant, partner, SecretKeyEnv)
		}
		ns := b.aead.NonceSize()
		if len(stored) < 1+ns {
			return nil, true, fmt.Errorf("%w: %s/%s: stored secret is truncated", ErrSecretKey, tenant, partner)
		}
		plain, err := b.aead.Open(nil, stored[1:1+ns], stored[1+ns:], aad(tenant, partner))
		if err != nil {
			return nil, true, fmt.Errorf("%w: %s/%s: wrong %s or tampered row", ErrSecretKey, tenant, partner, SecretKeyEnv)
		}
		return Secret(plain), true, nil
	}
	return nil, false, fmt.Errorf("%w: %s/%s: unknown stored format %d", ErrSecretKey, tenant, partner, stored[0])
}
