package main

import "testing"

// The gateway's login asks for consent where it asks for offline_access
// (what an OpenID Connect server needs to grant it), and leaves any other
// authorization URL, and a prompt already there, as it is.
func TestGatewayLoginAsksConsentForOfflineAccess(t *testing.T) {
	for in, want := range map[string]string{
		"https://as.example/authorize?client_id=c&scope=mcp%3Atools+offline_access&state=s": "https://as.example/authorize?client_id=c&prompt=consent&scope=mcp%3Atools+offline_access&state=s",
		"https://as.example/authorize?client_id=c&scope=mcp%3Atools":                        "https://as.example/authorize?client_id=c&scope=mcp%3Atools",
		"https://as.example/authorize?client_id=c":                                          "https://as.example/authorize?client_id=c",
		"https://as.example/authorize?prompt=login&scope=offline_access":                    "https://as.example/authorize?prompt=login&scope=offline_access",
		"https://as.example/authorize?scope=offline_access_not":                             "https://as.example/authorize?scope=offline_access_not",
	} {
		if got := askConsent(in); got != want {
			t.Errorf("askConsent(%s) = %s; want %s", in, got, want)
		}
	}
}
