package oauth

import (
	"maps"
	"net/url"
	"strings"
	"testing"
)

func TestParseChallenges(t *testing.T) {
	type ch = map[string]string
	for _, tc := range []struct {
		headers []string
		want    []string // schemes
		bearer  ch
	}{
		{[]string{`Bearer resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope="a b"`},
			[]string{"bearer"}, ch{"resource_metadata": "https://h/.well-known/oauth-protected-resource/mcp", "scope": "a b"}},
		{[]string{`Basic realm="x, y", BEARER Error="insufficient_scope" , Scope="files:read, files:write"`},
			[]string{"basic", "bearer"}, ch{"error": "insufficient_scope", "scope": "files:read, files:write"}},
		{[]string{`Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple"`, `bearer realm=plain`},
			[]string{"newauth", "basic", "bearer"}, ch{"realm": "plain"}},
		{[]string{`Negotiate YWxhZGRpbjpvcGVuc2VzYW1l==, Bearer`}, []string{"negotiate", "bearer"}, ch{}},
		{[]string{`Bearer realm="a", realm="b", error=invalid_token`}, []string{"bearer"}, ch{"realm": "a", "error": "invalid_token"}},
		{[]string{`Bearer scope="unterminated`}, []string{"bearer"}, ch{"scope": "unterminated"}},
		{[]string{`, ,Bearer  scope = "x"  ,`}, []string{"bearer"}, ch{"scope": "x"}},
		{[]string{`"junk" Bearer scope="x"`}, []string{"junk", "bearer"}, ch{"scope": "x"}},
		{[]string{``}, nil, nil},
	} {
		got := parseChallenges(tc.headers)
		var schemes []string
		for _, c := range got {
			schemes = append(schemes, c.scheme)
		}
		if strings.Join(schemes, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: schemes %v, want %v", tc.headers, schemes, tc.want)
		}
		if b := bearer(tc.headers); !maps.Equal(b, tc.bearer) {
			t.Errorf("%q: bearer params %v, want %v", tc.headers, b, tc.bearer)
		}
	}
	if c := parseChallenges([]string{`Negotiate YWxhZGRpbjpvcGVuc2VzYW1l==`}); len(c) != 1 || c[0].token68 != "YWxhZGRpbjpvcGVuc2VzYW1l==" {
		t.Errorf("token68: %+v", c)
	}
}

func FuzzParseChallenges(f *testing.F) {
	f.Add(`Bearer realm="a\"b", scope="x y", Basic abc==`)
	f.Fuzz(func(t *testing.T, h string) {
		parseChallenges([]string{h}) // terminates, does not panic
	})
}

func TestDescribeHidesEchoedSecrets(t *testing.T) {
	if got := describe("invalid_grant", "code abc123 was used", "abc123"); got != "invalid_grant" {
		t.Errorf("describe %q kept a description echoing a secret", got)
	}
	if got := describe("invalid_grant", "expired\x00\n"); got != "invalid_grant (expired)" {
		t.Errorf("describe %q", got)
	}
	if got := describe(strings.Repeat("e", 100), ""); len(got) != 64 {
		t.Errorf("describe kept %d bytes of a code", len(got))
	}
}

func TestMetadataURLs(t *testing.T) {
	u, _ := url.Parse("https://h.example/public/mcp/")
	got := resourceMetadataURLs(u, "")
	want := []string{"https://h.example/.well-known/oauth-protected-resource/public/mcp", "https://h.example/.well-known/oauth-protected-resource"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("resource metadata URLs %v", got)
	}
	iss, _ := url.Parse("https://a.example/t1")
	got = serverMetadataURLs(iss)
	want = []string{"https://a.example/.well-known/oauth-authorization-server/t1", "https://a.example/.well-known/openid-configuration/t1", "https://a.example/t1/.well-known/openid-configuration"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("server metadata URLs %v", got)
	}
}
