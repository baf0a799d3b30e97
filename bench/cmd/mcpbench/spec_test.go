package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" \t ", nil},
		{"/tmp/b/mcprel serve --stdio", []string{"/tmp/b/mcprel", "serve", "--stdio"}},
		{"/tmp/b/mcprel gateway --stdio --upstream 'u=/tmp/b/mcprel serve --stdio --log-level warn'",
			[]string{"/tmp/b/mcprel", "gateway", "--stdio", "--upstream", "u=/tmp/b/mcprel serve --stdio --log-level warn"}},
		{`a "b 'c' d" e`, []string{"a", "b 'c' d", "e"}},
		{`a 'b "c" d'`, []string{"a", `b "c" d`}},
		{`a "" ''`, []string{"a", "", ""}},
		{`x="a b"y`, []string{"x=a by"}},
		{`a\ b c\'d \\`, []string{"a b", "c'd", `\`}},
		{`"a \"b\" \\ \$x \n"`, []string{`a "b" \ $x \n`}},
		{`'a \" b'`, []string{`a \" b`}},
		{"a \\\nb", []string{"a", "b"}},
		{`$HOME ~ *.go a,b`, []string{"$HOME", "~", "*.go", "a,b"}}, // nothing expanded, commas kept
		// A quoted upstream holding a quoted path, one level down.
		{`gw --upstream "u=mcprel serve --db \"/tmp/a b/u.db\""`, []string{"gw", "--upstream", `u=mcprel serve --db "/tmp/a b/u.db"`}},
	} {
		got, err := splitWords(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{`a "b`, `a 'b c`, `a \`, `"a\"`} {
		if got, err := splitWords(in); err == nil {
			t.Errorf("splitWords(%q) = %q, want an error", in, got)
		}
	}
}

func TestParseSpec(t *testing.T) {
	s, err := parseSpec("sg=http://127.0.0.1:18000/mcp@node index.js --stdio 'mcprel serve --stdio' --port 18000")
	if err != nil || s.Name != "sg" || s.URL != "http://127.0.0.1:18000/mcp" ||
		!slices.Equal(s.Argv, []string{"node", "index.js", "--stdio", "mcprel serve --stdio", "--port", "18000"}) {
		t.Fatalf("parseSpec = %+v, %v", s, err)
	}
	// '@' in the command, and no URL.
	s, err = parseSpec("ev=npx -y @modelcontextprotocol/server-everything@2026.8.31 --db=a=b")
	if err != nil || s.URL != "" || s.Argv[2] != "@modelcontextprotocol/server-everything@2026.8.31" || s.Argv[3] != "--db=a=b" {
		t.Fatalf("parseSpec = %+v, %v", s, err)
	}
	for _, bad := range []string{
		"noequals", "=cmd", "x=", "x=  ",
		"x=http://127.0.0.1:1/mcp",          // no @command
		"x=http://127.0.0.1/mcp@cmd",        // no port
		"x=http://u:p@127.0.0.1:1/mcp@cmd",  // user info is taken for the end of the URL
		"x=http://127.0.0.1:1/mcp@cmd 'arg", // unterminated quote
	} {
		if s, err := parseSpec(bad); err == nil {
			t.Errorf("parseSpec(%q) = %+v, want an error", bad, s)
		}
	}
	var l serverList
	if err := l.Set("a=x"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("a=y"); err == nil {
		t.Error("a name given twice was accepted")
	}
	var sc sidecarList
	if err := sc.Set("a=x serve"); err == nil {
		t.Error("a sidecar without a URL was accepted")
	}
}

func TestWithTmp(t *testing.T) {
	got := withTmp([]string{"gw", "--db", "{tmp}/g.db", "--upstream", "u=serve --db {tmp}/u.db"}, "/tmp/d")
	want := []string{"gw", "--db", "/tmp/d/g.db", "--upstream", "u=serve --db /tmp/d/u.db"}
	if !slices.Equal(got, want) {
		t.Fatalf("withTmp = %q, want %q", got, want)
	}
}

func TestBearer(t *testing.T) {
	b := bearerList{}
	for _, v := range []string{"oauth=eyJ.a-b_c.d~+/=", "static=s3cret"} {
		if err := b.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	for _, v := range []string{"oauth=other", "=tok", "name=", "name", "x=a b", "x=a\r\nX-Evil: 1", "x=é"} {
		if err := b.Set(v); err == nil {
			t.Errorf("Set(%q) accepted", v)
		} else if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "eyJ") {
			t.Errorf("Set(%q): the error shows a token: %v", v, err)
		}
	}
	if s := b.String(); s != "oauth,static" {
		t.Errorf("String() = %q, want the names only", s)
	}
	servers := []serverSpec{
		{Name: "static", Argv: []string{"mcprel", "serve", "--auth-token", "s3cret", "--x=s3cret"}},
		{Name: "oauth", Argv: []string{"mcprel", "serve"}},
		{Name: "open", Argv: []string{"mcprel", "serve"}},
	}
	if err := withBearers(servers, b); err != nil {
		t.Fatal(err)
	}
	if !servers[0].Bearer || servers[0].bearer != "s3cret" || servers[1].bearer != "eyJ.a-b_c.d~+/=" || servers[2].Bearer {
		t.Fatalf("withBearers: %+v", servers)
	}
	out, err := json.Marshal(redacted(servers, b))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "s3cret") || strings.Contains(string(out), "eyJ") || !strings.Contains(string(out), `"--x=REDACTED"`) {
		t.Fatalf("printed servers: %s", out)
	}
	if servers[0].Argv[3] != "s3cret" {
		t.Fatal("redacted changed the command that is run")
	}
	if err := withBearers(servers[1:], b); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a -bearer for no server: %v", err)
	}
}
