package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/mcprel/mcprel/gateway"
)

// maxClientConfig bounds a client's MCP configuration file, read whole.
const maxClientConfig = 1 << 20

// clientConfig is an MCP client's configuration file: Claude Desktop's
// or Claude Code's (.mcp.json), whose servers are under "mcpServers", or
// VS Code's (mcp.json), whose servers are under "servers", each with a
// "type". Its other top-level members are kept as they are, in order.
type clientConfig struct {
	path    string
	members []configMember // the top level, in the file's order
	key     string         // "mcpServers" or "servers"
	entries []configMember // the servers, in the file's order
}

type configMember struct {
	key   string
	value json.RawMessage
}

// vscodeKey is the member VS Code keeps its servers in; Claude's is
// claudeKey.
const (
	claudeKey = "mcpServers"
	vscodeKey = "servers"
)

// readClientConfig reads and parses a client's configuration file. Its
// errors are the file's, never a value of it.
func readClientConfig(path string) (*clientConfig, error) {
	data, err := readSmallFile(path, maxClientConfig)
	if err != nil {
		return nil, err
	}
	return parseClientConfig(path, data)
}

func parseClientConfig(path string, data []byte) (*clientConfig, error) {
	members, err := orderedObject(stripJSONC(data))
	if err != nil {
		return nil, fmt.Errorf("%s is not a JSON object: %v", path, err)
	}
	c := &clientConfig{path: path, members: members}
	var found []string
	for _, m := range members {
		if m.key == claudeKey || m.key == vscodeKey {
			found = append(found, m.key)
			c.key = m.key
			if c.entries, err = orderedObject(m.value); err != nil {
				return nil, fmt.Errorf("%s: %q is not an object of servers: %v", path, m.key, err)
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s has neither %q (Claude Desktop, .mcp.json) nor %q (VS Code) at its top level", path, claudeKey, vscodeKey)
	case 2:
		return nil, fmt.Errorf("%s has both %q and %q: say which by keeping one", path, claudeKey, vscodeKey)
	}
	if len(c.entries) == 0 {
		return nil, fmt.Errorf("%s: %q names no server", path, c.key)
	}
	return c, nil
}

// orderedObject decodes a JSON object's members in order, refusing a
// key given twice (which the clients resolve differently).
func orderedObject(data []byte) ([]configMember, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("it is not an object")
	}
	var members []configMember
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("the key %q is given twice", key)
		}
		seen[key] = true
		members = append(members, configMember{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("something follows the object")
	}
	return members, nil
}

// stripJSONC blanks the comments (// and /* */) and trailing commas VS
// Code allows in its mcp.json, leaving plain JSON of the same length.
func stripJSONC(data []byte) []byte {
	out := bytes.Clone(data)
	inString := false
	lastComma := -1 // a comma not yet followed by a value
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString, lastComma = true, -1
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return out // left for the JSON parser to refuse
			}
			for j := i; j < i+2+end+2; j++ {
				if out[j] != '\n' {
					out[j] = ' '
				}
			}
			i += 2 + end + 1
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out
}

// configEntry is one server of a client's configuration, as the clients
// write it.
type configEntry struct {
	Type     string            `json:"type"`
	Command  *string           `json:"command"`
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	URL      *string           `json:"url"`
	Headers  map[string]string `json:"headers"`
	Disabled bool              `json:"disabled"`
}

// knownEntryFields are the members of an entry the gateway maps, and
// the annotations it may pass over because they change nothing of how
// the server runs (a description, which tools a client approves without
// asking); any other (VS Code's "cwd" and "envFile", a client's own
// extension) is reported, not ignored: it may change how the server runs.
var knownEntryFields = map[string]bool{"type": true, "command": true, "args": true, "env": true, "url": true, "headers": true, "disabled": true,
	"description": true, "autoApprove": true, "alwaysAllow": true}

// configUpstream is an upstream mapped from an entry of a client's
// configuration.
type configUpstream struct {
	key string // the entry's key in the file
	up  gateway.Upstream
}

// placeholder matches a ${...} in a value of the configuration.
var placeholder = regexp.MustCompile(`\$\{([^}]*)\}`)

// envName is what ${env:NAME} and ${NAME} may name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// upstreamNameChar is a character an upstream's name may hold.
var notUpstreamNameChar = regexp.MustCompile(`[^A-Za-z0-9-]`)

// upstreams maps every server of the configuration to an upstream, in
// the file's order, each named by its key with every character an
// upstream's name may not hold (such as _ or .) made a -. getenv
// resolves ${env:NAME}, and in Claude's file ${NAME} and
// ${NAME:-default} too (VS Code's ${NAME} are its own); nil resolves
// every one to a stand-in, to check a file whose environment is
// another's. What cannot be mapped is reported by entry, every one,
// in one error; it never holds a value of the file, only its names.
// Entries marked "disabled": true are left out.
func (c *clientConfig) upstreams(getenv func(string) (string, bool)) ([]configUpstream, error) {
	var ups []configUpstream
	var problems []string
	byName := map[string]string{}
	for _, m := range c.entries {
		u, errs := c.entry(m, getenv)
		if len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("entry %q: %s", m.key, strings.Join(errs, "; ")))
			continue
		}
		if u == nil { // disabled
			continue
		}
		if other, ok := byName[u.up.Name]; ok {
			problems = append(problems, fmt.Sprintf("entry %q: its upstream name %q is entry %q's too (each character outside [A-Za-z0-9-] becomes -): rename one", m.key, u.up.Name, other))
			continue
		}
		byName[u.up.Name] = m.key
		ups = append(ups, *u)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %d of its %d servers cannot be served:\n  %s", c.path, len(problems), len(c.entries), strings.Join(problems, "\n  "))
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("%s: every server of %q is disabled", c.path, c.key)
	}
	return ups, nil
}

// entry maps one entry; nil and no problems for a disabled one.
func (c *clientConfig) entry(m configMember, getenv func(string) (string, bool)) (*configUpstream, []string) {
	var problems []string
	fields, err := orderedObject(m.value)
	if err != nil {
		return nil, []string{"not an object of a server"}
	}
	var unknown []string
	for _, f := range fields {
		if !knownEntryFields[f.key] {
			unknown = append(unknown, f.key)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		problems = append(problems, fmt.Sprintf("%s not understood (the gateway maps type, command, args, env, url, headers and disabled)", quoteList(unknown)))
	}
	var e configEntry
	if err := json.Unmarshal(m.value, &e); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, append(problems, fmt.Sprintf("%s must be a %s", te.Field, jsonKind(te.Field)))
		}
		return nil, append(problems, "not a server entry")
	}
	if e.Disabled && len(problems) == 0 {
		return nil, nil
	}
	name := notUpstreamNameChar.ReplaceAllString(m.key, "-")
	if len(name) < 1 || len(name) > 32 {
		problems = append(problems, "its key must give an upstream name of 1 to 32 characters (each outside [A-Za-z0-9-] becoming -)")
	}
	u := gateway.Upstream{Name: name}
	// resolve expands the placeholders of one value, reporting those it
	// cannot by the field they are in, never by the value.
	resolve := func(field, v string) string {
		return placeholder.ReplaceAllStringFunc(v, func(p string) string {
			inner := p[2 : len(p)-1]
			name, def, hasDef := inner, "", false
			envPrefix := false
			if n, ok := strings.CutPrefix(inner, "env:"); ok {
				name, envPrefix = n, true
			} else if n, d, ok := strings.Cut(inner, ":-"); ok {
				name, def, hasDef = n, d, true
			}
			switch {
			case strings.HasPrefix(inner, "input:"):
				problems = append(problems, fmt.Sprintf("%s asks for %s, a prompt of VS Code's that only VS Code can answer: put the value in the gateway's environment and write ${env:NAME}", field, p))
				return p
			case !envName.MatchString(name) || (c.key == vscodeKey && !envPrefix):
				// In VS Code's file ${NAME} is one of its own variables
				// (${workspaceFolder}); in Claude's, an environment
				// variable (Claude Code expands ${NAME} and
				// ${NAME:-default}).
				problems = append(problems, fmt.Sprintf("%s holds %s, which the gateway does not resolve (it resolves %s)", field, p, map[bool]string{true: "${env:NAME}", false: "${env:NAME}, ${NAME} and ${NAME:-default}"}[c.key == vscodeKey]))
				return p
			case getenv == nil:
				return "stand-in"
			}
			if v, ok := getenv(name); ok && v != "" {
				return v
			}
			if hasDef {
				return def
			}
			problems = append(problems, fmt.Sprintf("%s holds %s, and the environment variable %s is unset or empty", field, p, name))
			return p
		})
	}
	typ := e.Type
	if typ == "" {
		switch {
		case e.Command != nil:
			typ = "stdio"
		case e.URL != nil:
			typ = "http"
		default:
			return nil, append(problems, "neither a command nor a url")
		}
	}
	switch typ {
	case "stdio":
		u.Transport = gateway.Stdio
		if e.Command == nil || strings.TrimSpace(*e.Command) == "" {
			problems = append(problems, "a stdio server needs a command")
		} else {
			u.Command = append(u.Command, resolve("command", *e.Command))
		}
		for i, a := range e.Args {
			u.Command = append(u.Command, resolve(fmt.Sprintf("args[%d]", i), a))
		}
		for _, k := range sortedKeys(e.Env) {
			if !envName.MatchString(k) {
				problems = append(problems, fmt.Sprintf("env: %q is not a variable's name", k))
				continue
			}
			u.Env = append(u.Env, k+"="+resolve("env "+k, e.Env[k]))
		}
		if e.URL != nil || len(e.Headers) > 0 {
			problems = append(problems, "a stdio server takes no url or headers")
		}
	case "http", "streamable-http", "streamableHttp", "sse":
		u.Transport = gateway.StreamableHTTP
		if typ == "sse" {
			u.Transport = gateway.SSE
		}
		if e.URL == nil {
			problems = append(problems, fmt.Sprintf("a %s server needs a url", typ))
		} else {
			u.URL = resolve("url", *e.URL)
			if p, err := url.Parse(u.URL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				if !strings.Contains(u.URL, "${") { // a placeholder is reported already
					problems = append(problems, "url is not an http:// or https:// URL")
				}
			} else if p.User != nil {
				problems = append(problems, "url holds credentials: put them in headers, from the environment (${env:NAME})")
			}
		}
		for _, k := range sortedKeys(e.Headers) {
			v := resolve("headers "+k, e.Headers[k])
			if strings.ContainsAny(v, "\r\n") {
				problems = append(problems, fmt.Sprintf("headers %s: the value spans lines", k))
				continue
			}
			if u.Header == nil {
				u.Header = http.Header{}
			}
			if err := parseHeaderLines([]byte(k+": "+v), u.Header); err != nil {
				problems = append(problems, fmt.Sprintf("headers %s: %s", k, strings.TrimPrefix(err.Error(), "line 1 ")))
			}
		}
		if e.Command != nil || len(e.Args) > 0 || len(e.Env) > 0 {
			problems = append(problems, fmt.Sprintf("a %s server takes no command, args or env", typ))
		}
	default:
		problems = append(problems, fmt.Sprintf("type %q is not one the gateway serves (stdio, http, sse)", typ))
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return &configUpstream{key: m.key, up: u}, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

// jsonKind is what a field of an entry must be.
func jsonKind(field string) string {
	switch field {
	case "args":
		return "list of strings"
	case "env", "headers":
		return "object of strings"
	case "disabled":
		return "boolean"
	}
	return "string"
}

// mcpConfigUpstreams reads the upstreams of --mcp-config FILE, saying on
// stderr which entry an upstream renamed from its key comes from.
func mcpConfigUpstreams(path string, stderr io.Writer) ([]gateway.Upstream, error) {
	c, err := readClientConfig(path)
	if err != nil {
		return nil, usagef("gateway: --mcp-config: %v", err)
	}
	cups, err := c.upstreams(os.LookupEnv)
	if err != nil {
		return nil, usagef("gateway: --mcp-config %v", err)
	}
	ups := make([]gateway.Upstream, len(cups))
	for i, cu := range cups {
		ups[i] = cu.up
		if cu.up.Name != cu.key {
			fmt.Fprintf(stderr, "mcprel: gateway: --mcp-config: entry %q is upstream %q (an upstream's name holds only [A-Za-z0-9-])\n", cu.key, cu.up.Name)
		}
	}
	return ups, nil
}
