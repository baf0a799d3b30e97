// Command fakeissuer is an OAuth authorization server reduced to what a
// resource server reads of one: it serves RFC 8414 metadata and a JWK
// Set holding one RSA 2048 key on 127.0.0.1, and prints its issuer URL
// and one access token signed with that key (RS256, RFC 9068), so that
// "mcprel serve --oauth-issuer" can be measured with real tokens. It
// serves until it is killed.
//
//	fakeissuer -audience https://mcp.bench.example/mcp -scope mcp:tools > /tmp/issuer.txt &
//	ISSUER=$(sed -n 1p /tmp/issuer.txt); TOKEN=$(sed -n 2p /tmp/issuer.txt)
//
// Its output is two lines: the issuer URL, then the token. It issues no
// other token: there is no token endpoint.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
)

func main() {
	audience := flag.String("audience", "", "the token's aud: the resource it is for, as mcprel's --public-url names it (required)")
	scope := flag.String("scope", "", "the token's scope, space-separated (none when empty)")
	subject := flag.String("subject", "bench", "the token's sub: the tenant mcprel serves it as")
	ttl := flag.Duration("ttl", 2*time.Hour, "the token's lifetime: exp is now plus this")
	addr := flag.String("addr", "127.0.0.1:0", "address to serve on")
	flag.Parse()
	if *audience == "" || *ttl <= 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(0)
	log.SetPrefix("fakeissuer: ")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		log.Fatal(err)
	}
	kid := randomHex(8)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()

	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &key.PublicKey, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"},
	}})
	if err != nil {
		log.Fatal(err)
	}
	metadata, err := json.Marshal(map[string]any{
		"issuer":                                issuer,
		"jwks_uri":                              issuer + "/jwks",
		"response_types_supported":              []string{"code"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"scopes_supported":                      strings.Fields(*scope),
	})
	if err != nil {
		log.Fatal(err)
	}

	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("at+jwt").WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	claims := map[string]any{
		"iss": issuer, "sub": *subject, "aud": *audience, "client_id": "mcpbench",
		"iat": now.Unix(), "exp": now.Add(*ttl).Unix(), "jti": randomHex(16),
	}
	if *scope != "" {
		claims["scope"] = *scope
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		log.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		log.Fatal(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	serve := func(body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		}
	}
	mux.Handle("GET /.well-known/oauth-authorization-server", serve(metadata))
	mux.Handle("GET /jwks", serve(jwks))
	// The output is complete once the address serves: a shell that reads
	// it may start the resource server at once.
	fmt.Printf("%s\n%s\n", issuer, token)
	os.Stdout.Sync()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
