package oauth

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func TestHashTokenIsSHA256(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 700, 1024, 5000} {
		token := strings.Repeat("x.", n)[:n]
		if hashToken(token) != sha256.Sum256([]byte(token)) {
			t.Errorf("a token of %d bytes: hash differs from SHA-256", n)
		}
	}
}
