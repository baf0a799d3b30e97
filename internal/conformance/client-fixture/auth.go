package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/client/oauth"
)

// The suite's authorization servers accept any redirect URI and redirect
// to it at once; this one is never listened on.
const (
	redirectURL = "http://127.0.0.1:3000/callback"
	// clientMetadataURL is the Client ID Metadata Document URL the suite
	// expects (auth/basic-cimd); its authorization servers do not fetch it.
	clientMetadataURL = "https://conformance-test.local/client-metadata.json"
)

// authContext is what MCP_CONFORMANCE_CONTEXT gives an auth scenario:
// pre-registered credentials (auth/pre-registration) or client
// credentials (auth/client-credentials-basic).
type authContext struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
}

// authorizer is the OAuth client of an auth/* scenario: mcprel's
// client/oauth with a headless Authorize, as a program would configure
// it.
func authorizer(scenario, serverURL string) (client.Authorizer, error) {
	var ac authContext
	if s := os.Getenv("MCP_CONFORMANCE_CONTEXT"); s != "" {
		if err := json.Unmarshal([]byte(s), &ac); err != nil {
			return nil, fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	o := oauth.Options{
		ClientID:          ac.ClientID,
		ClientSecret:      ac.ClientSecret,
		ClientMetadataURL: clientMetadataURL,
		ClientName:        "mcprel-conformance-client",
		RedirectURL:       redirectURL,
		Authorize:         followOnce,
	}
	if strings.HasPrefix(scenario, "auth/client-credentials-") {
		o.GrantType = oauth.GrantClientCredentials
	}
	return oauth.New(serverURL, o)
}

// followOnce is the browser of a user who consents at once: it fetches
// the authorization URL and returns where the authorization server
// redirects it, without going there.
func followOnce(ctx context.Context, authorizationURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authorizationURL, nil)
	if err != nil {
		return "", err
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode < 300 || resp.StatusCode >= 400 || loc == "" {
		return "", fmt.Errorf("the authorization endpoint answered %d, not a redirect", resp.StatusCode)
	}
	return loc, nil
}
