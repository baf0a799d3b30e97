package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"go.yaml.in/yaml/v3"
)

// maxGatewayConfig bounds the --config file: it is read whole.
const maxGatewayConfig = 1 << 20

// gatewayConfig is what "mcprel gateway --config FILE" read: the file's
// settings, already given to the flag set they name (the flags of the
// command line winning), its upstreams and its policy. Every error it
// makes names the file, the line and the key, and never a value: a value
// may be a credential.
type gatewayConfig struct {
	path string
	// lines are the lines of the flags the file set, by flag name, to
	// say where a setting the checks refuse came from.
	lines map[string]int
	// upstreams are the file's, in its order.
	upstreams []gateway.Upstream
	// sum is the SHA-256 of the bytes read: --watch measures a change
	// from what was applied, not from when it began to look.
	sum string
	// display is how --check shows a stdio upstream of the file's: its
	// command and arguments as the file writes them, by name.
	display map[string]string
	// policy, when the file writes it inline, is its text as a policy
	// file of its own (policyName), the file's line numbers kept.
	policy     []byte
	policyName string
}

// configOnlyFlags are the flags the file cannot hold: those that say
// which file to read and what to do with it.
var configOnlyFlags = map[string]string{
	"config": "it is the file itself",
	"check":  "it says what to do with the file",
	"watch":  "it says what to do with the file",
}

// upstreamKeys are the keys of an upstream in the file: those of an MCP
// client's configuration (command, args, env, url, headers, type), and
// one for each per-upstream flag, named by the flag less "upstream-".
var upstreamKeys = map[string]string{
	"type": "", "command": "", "args": "", "env": "", "url": "", "headers": "", "disabled": "",
	"token-env": "upstream-token-env", "token-file": "upstream-token-file",
	"headers-file": "upstream-headers-file", "env-file": "upstream-env-file",
	"limits": "upstream-limits", "capabilities": "upstream-capabilities",
	"per-tenant": "upstream-per-tenant", "keep-names": "upstream-keep-names",
	"oauth-client-id": "upstream-oauth-client-id", "oauth-client-secret-file": "upstream-oauth-client-secret-file",
	"oauth-login": "upstream-oauth-login",
}

// pathFlags hold a file's path: written relative in the file, they are
// relative to the file's directory, not to where the gateway starts.
var pathFlags = map[string]bool{
	"db": true, "policy": true, "key-file": true, "mcp-config": true, "oauth-introspection-secret-file": true,
	"upstream-token-file": true, "upstream-headers-file": true, "upstream-env-file": true,
	"upstream-oauth-client-secret-file": true,
}

// urlFlags take a URL, where a credential has no place: it goes by
// reference through a flag of its own.
var urlFlags = map[string]bool{"otlp-endpoint": true, "oauth-issuer": true, "public-url": true, "oauth-audience": true, "oauth-introspection": true}

// secretFlags take a credential as their value; the file names it by
// reference (${env:NAME}), never inline.
var secretFlags = map[string]bool{"auth-token": true, "token": true, "metrics-token": true}

// loadGatewayConfig reads FILE and sets every flag of fs it names that the
// command line did not (cli): a flag given on the command line overrides
// the file, and for the per-upstream flags (NAME=...), the command line's
// value for an upstream overrides the file's for that upstream only.
// getenv resolves the file's ${env:NAME} references.
func loadGatewayConfig(path string, fs *flag.FlagSet, cli map[string]bool, getenv func(string) (string, bool)) (*gatewayConfig, error) {
	data, err := readSmallFile(path, maxGatewayConfig)
	if err != nil {
		return nil, usagef("gateway: --config: %v", err)
	}
	sum := sha256.Sum256(data)
	c := &gatewayConfig{path: path, lines: map[string]int{}, display: map[string]string{}, sum: string(sum[:])}
	if err := c.parse(data, fs, cli, getenv); err != nil {
		return nil, usageError{err.Error()}
	}
	return c, nil
}

// at is an error at a line of the file, about a key.
func (c *gatewayConfig) at(line int, key, format string, args ...any) error {
	return fmt.Errorf("gateway: %s:%d: %s: %s", c.path, line, key, fmt.Sprintf(format, args...))
}

func (c *gatewayConfig) parse(data []byte, fs *flag.FlagSet, cli map[string]bool, getenv func(string) (string, bool)) (err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("gateway: %s: %s", c.path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return fmt.Errorf("gateway: %s: the file is empty", c.path)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("gateway: %s:%d: the file must be a mapping of settings (http, db, upstreams, policy, …)", c.path, root.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		if first, dup := seen[key]; dup {
			return c.at(k.Line, key, "set twice (first on line %d)", first)
		}
		seen[key] = k.Line
		switch {
		case key == "upstreams":
			if err := c.parseUpstreams(v, fs, cli, getenv); err != nil {
				return err
			}
		case key == "policy" && v.Kind == yaml.MappingNode:
			if cli["policy"] {
				continue
			}
			c.policy, c.policyName = inlineText(data, root, i+1), c.path
			if ext := strings.ToLower(filepath.Ext(c.path)); ext != ".yaml" && ext != ".yml" {
				// JSON: the policy's own JSON, read as a policy file
				// of JSON is (its errors name no line of the file).
				var val any
				if err := v.Decode(&val); err != nil {
					return c.at(v.Line, key, "cannot be read as a policy (a YAML tag?)")
				}
				if c.policy, err = json.Marshal(val); err != nil {
					return c.at(v.Line, key, "%v", err)
				}
			}
			c.lines["policy"] = k.Line
		case configOnlyFlags[key] != "":
			return c.at(k.Line, key, "only on the command line: %s", configOnlyFlags[key])
		case strings.HasPrefix(key, "upstream-") && upstreamFlagKey(key) != "":
			return c.at(k.Line, key, "write it under its upstream, as %s", upstreamFlagKey(key))
		case key == "upstream":
			return c.at(k.Line, key, "the file's upstreams are under upstreams:, a map from each one's name to its command or url")
		default:
			f := fs.Lookup(key)
			if f == nil {
				return c.at(k.Line, key, "not a setting of mcprel gateway (the file's keys are the gateway's flags, and upstreams)")
			}
			if err := c.setFlag(fs, f, v, cli[key], getenv); err != nil {
				return err
			}
		}
	}
	return nil
}

// upstreamFlagKey is the key under an upstream of a per-upstream flag.
func upstreamFlagKey(flagName string) string {
	for k, f := range upstreamKeys {
		if f == flagName {
			return k
		}
	}
	return ""
}

// setFlag gives flag f the file's value v, unless the command line set
// it (overridden).
func (c *gatewayConfig) setFlag(fs *flag.FlagSet, f *flag.Flag, v *yaml.Node, overridden bool, getenv func(string) (string, bool)) error {
	_, isList := f.Value.(*listFlag)
	var values []*yaml.Node
	switch v.Kind {
	case yaml.ScalarNode:
		values = []*yaml.Node{v}
	case yaml.SequenceNode:
		if !isList {
			return c.at(v.Line, f.Name, "takes one value, not a list")
		}
		values = v.Content
	default:
		return c.at(v.Line, f.Name, "takes %s, not a mapping", map[bool]string{true: "a value or a list", false: "a value"}[isList])
	}
	for _, n := range values {
		if n.Kind != yaml.ScalarNode {
			return c.at(n.Line, f.Name, "a list of values, not of lists or mappings")
		}
		if err := c.checkType(f, n); err != nil {
			return err
		}
	}
	if overridden {
		// The command line's value is used, but the file's must hold
		// all the same: nothing inline that is secret. Its references
		// are not read.
		getenv = func(string) (string, bool) { return "stand-in", true }
	}
	resolved := make([]string, len(values))
	for i, n := range values {
		s := n.Value
		if secretFlags[f.Name] || (f.Name == "db" && (strings.Contains(s, "://") || envRef.MatchString(s))) {
			var err error
			if s, err = c.secretValue(f.Name, n, getenv); err != nil {
				return err
			}
		} else if urlFlags[f.Name] && urlHoldsSecret(s) {
			return c.at(n.Line, f.Name, "a secret written inline in the URL: give it by reference (${env:NAME}) through the flag that takes the credential")
		}
		if pathFlags[f.Name] && s != "" && !strings.Contains(s, "://") && s != ":memory:" && !strings.HasPrefix(s, "file:") {
			s = c.relative(s)
		}
		resolved[i] = s
	}
	if overridden {
		return nil
	}
	// Only a setting the file made is blamed on the file's line.
	c.lines[f.Name] = v.Line
	for i, n := range values {
		if err := fs.Set(f.Name, resolved[i]); err != nil {
			return c.at(n.Line, f.Name, "%v", err)
		}
	}
	return nil
}

// checkType refuses a value of the wrong kind for its flag, before the
// flag's own parser sees it: a quoted "true" for a switch, a word for a
// number.
func (c *gatewayConfig) checkType(f *flag.Flag, n *yaml.Node) error {
	getter, ok := f.Value.(flag.Getter)
	if !ok {
		return nil // a list: strings
	}
	switch getter.Get().(type) {
	case bool:
		if n.Tag != "!!bool" {
			return c.at(n.Line, f.Name, "takes true or false")
		}
	case int, int64, uint, uint64:
		if n.Tag != "!!int" {
			return c.at(n.Line, f.Name, "takes a whole number")
		}
	case float64:
		if n.Tag != "!!int" && n.Tag != "!!float" {
			return c.at(n.Line, f.Name, "takes a number")
		}
	case string:
		if n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" {
			return c.at(n.Line, f.Name, "takes a string")
		}
	}
	return nil
}

// relative resolves a path the file gives against the file's directory.
func (c *gatewayConfig) relative(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(c.path), p)
}

// envRef is a whole value that names an environment variable.
var envRef = regexp.MustCompile(`^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$`)

// secretValue reads a credential the file names by reference: a value of
// a secret flag (or a database URL, which may hold a password) must be
// ${env:NAME}, or, for --token, TENANT=${env:NAME}; a database URL
// without a password may be written as it is.
func (c *gatewayConfig) secretValue(flagName string, n *yaml.Node, getenv func(string) (string, bool)) (string, error) {
	prefix, ref := "", n.Value
	if flagName == "token" {
		tenant, rest, ok := strings.Cut(n.Value, "=")
		if !ok || tenant == "" {
			return "", c.at(n.Line, flagName, "wants TENANT=${env:NAME}, a tenant's name and a reference to its token")
		}
		prefix, ref = tenant+"=", rest
	}
	m := envRef.FindStringSubmatch(ref)
	if m == nil {
		if flagName == "db" && !urlHoldsSecret(ref) {
			return ref, nil
		}
		return "", c.at(n.Line, flagName, "a secret written inline: name it by reference, %s${env:NAME}, and put it in the gateway's environment (nothing in the file is secret, so the file can be shared and versioned)", prefix)
	}
	v, ok := getenv(m[1])
	if !ok || v == "" {
		return "", c.at(n.Line, flagName, "environment variable %s is unset or empty", m[1])
	}
	return prefix + v, nil
}

// urlHoldsSecret reports whether s is a URL with a password, or a query
// member whose name is a credential's (password, sslpassword, token…);
// an unparsable URL may hold anything.
func urlHoldsSecret(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return true
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	for q := range u.Query() {
		if secretName.MatchString(q) || q == "key" || q == "sig" {
			return true
		}
	}
	return false
}

// parseUpstreams reads upstreams:, a mapping from each upstream's name to
// what an MCP client's configuration says of a server, with the
// per-upstream flags' keys beside it.
func (c *gatewayConfig) parseUpstreams(v *yaml.Node, fs *flag.FlagSet, cli map[string]bool, getenv func(string) (string, bool)) error {
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		return c.at(v.Line, "upstreams", "a mapping from each upstream's name to its command or url")
	}
	cliFor := cliUpstreamNames(fs)
	seen := map[string]int{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, e := v.Content[i], v.Content[i+1]
		name := k.Value
		key := "upstreams." + name
		if first, dup := seen[name]; dup {
			return c.at(k.Line, key, "a second upstream of that name (the first is on line %d)", first)
		}
		seen[name] = k.Line
		if name == "" || len(name) > 32 || notUpstreamNameChar.MatchString(name) {
			return c.at(k.Line, key, "an upstream's name is 1 to 32 characters of [A-Za-z0-9-]")
		}
		if e.Kind != yaml.MappingNode {
			return c.at(e.Line, key, "a mapping: command, args and env, or url and headers")
		}
		if alias := findAlias(e); alias != nil {
			// An alias would carry a value past the checks of the key
			// it lands under.
			return c.at(alias.Line, key, "YAML aliases (*name) are not read under upstreams: write the value out")
		}
		disabled := false
		for j := 0; j+1 < len(e.Content); j += 2 {
			if e.Content[j].Value == "disabled" && e.Content[j+1].Tag == "!!bool" && e.Content[j+1].Value == "true" {
				disabled = true
			}
		}
		core := map[string]any{}
		display := ""
		for j := 0; j+1 < len(e.Content); j += 2 {
			fk, fv := e.Content[j], e.Content[j+1]
			field := key + "." + fk.Value
			flagName, known := upstreamKeys[fk.Value]
			if !known {
				return c.at(fk.Line, field, "not a setting of an upstream (command, args, env, url, headers, type, and %s)", strings.Join(upstreamFlagKeys(), ", "))
			}
			if disabled {
				continue
			}
			if fk.Value == "command" && fv.Kind == yaml.ScalarNode && (strings.HasPrefix(fv.Value, "./") || strings.HasPrefix(fv.Value, "../")) {
				fv.Value = c.relative(fv.Value) // the file's directory's, as its paths are
			}
			if flagName == "" {
				if err := c.checkInline(field, fv); err != nil {
					return err
				}
				var val any
				if err := fv.Decode(&val); err != nil {
					// Never the decoder's words: they quote the value.
					return c.at(fv.Line, field, "cannot be read as the string, list or mapping of strings it must be (a YAML tag such as !!float?)")
				}
				core[fk.Value] = val
				continue
			}
			value, err := c.upstreamFlagValue(field, fk.Value, fv)
			if err != nil {
				return err
			}
			if cliFor[flagName][name] || (credentialFlags[flagName] && cliCredential(cliFor, name)) {
				continue // the command line says it for this upstream
			}
			if value == "" {
				continue // per-tenant: false
			}
			set := name + "=" + value
			if flagName == "upstream-per-tenant" || flagName == "upstream-keep-names" || flagName == "upstream-oauth-login" {
				set = name
			}
			if err := fs.Set(flagName, set); err != nil {
				return c.at(fv.Line, field, "%v", err)
			}
		}
		if disabled {
			continue
		}
		if cmd, ok := core["command"].(string); ok {
			// What --check shows: the file's words, references as
			// written, never what they resolve to.
			display = shellQuote(cmd)
			if args, ok := core["args"].([]any); ok {
				for _, a := range args {
					display += " " + shellQuote(fmt.Sprint(a))
				}
			}
		}
		c.display[name] = display
		raw, err := json.Marshal(core)
		if err != nil {
			return c.at(e.Line, key, "cannot be read")
		}
		cc := &clientConfig{path: c.path, key: claudeKey}
		cu, problems := cc.entry(configMember{key: name, value: raw}, getenv)
		if len(problems) > 0 {
			return c.at(e.Line, key, "%s", strings.Join(problems, "; "))
		}
		if cu.up.Transport == gateway.Stdio {
			if _, err := exec.LookPath(cu.up.Command[0]); err != nil {
				return c.at(e.Line, key+".command", "%q is not a program this gateway can start (%v)", cu.up.Command[0], lookPathReason(err))
			}
		}
		c.upstreams = append(c.upstreams, cu.up)
	}
	return nil
}

// lookPathReason says why exec.LookPath did not find a program, without
// repeating its name.
func lookPathReason(err error) string {
	switch {
	case strings.Contains(err.Error(), "executable file not found"):
		return "not found in $PATH"
	case strings.Contains(err.Error(), "permission denied"):
		return "not executable"
	case strings.Contains(err.Error(), "no such file"):
		return "no such file"
	}
	return "it cannot be run"
}

// upstreamFlagKeys are the per-upstream keys, sorted.
func upstreamFlagKeys() []string {
	var keys []string
	for k, f := range upstreamKeys {
		if f != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// upstreamFlagValue is the value a per-upstream key gives its flag, after
// NAME=: a scalar, a list (capabilities), a mapping (limits) or a switch.
func (c *gatewayConfig) upstreamFlagValue(field, key string, v *yaml.Node) (string, error) {
	switch key {
	case "per-tenant", "keep-names", "oauth-login":
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
			return "", c.at(v.Line, field, "takes true or false")
		}
		if v.Value == "true" {
			return "true", nil
		}
		return "", nil
	case "capabilities":
		switch v.Kind {
		case yaml.SequenceNode:
			var caps []string
			for _, n := range v.Content {
				if n.Kind != yaml.ScalarNode {
					return "", c.at(n.Line, field, "a list of capabilities")
				}
				caps = append(caps, n.Value)
			}
			if len(caps) == 0 {
				return "none", nil
			}
			return strings.Join(caps, ","), nil
		case yaml.ScalarNode:
			return v.Value, nil
		}
		return "", c.at(v.Line, field, "a list of capabilities, or none")
	case "limits":
		if v.Kind != yaml.MappingNode {
			return "", c.at(v.Line, field, "a mapping: concurrent, queued, rate, burst, bytes")
		}
		var parts []string
		for j := 0; j+1 < len(v.Content); j += 2 {
			lk, lv := v.Content[j], v.Content[j+1]
			if lv.Kind != yaml.ScalarNode || (lv.Tag != "!!int" && lv.Tag != "!!float") {
				return "", c.at(lv.Line, field+"."+lk.Value, "takes a number")
			}
			parts = append(parts, lk.Value+"="+lv.Value)
		}
		spec := strings.Join(parts, ",")
		if _, err := parseLimits(spec); err != nil {
			return "", c.at(v.Line, field, "%v", err)
		}
		return spec, nil
	}
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		return "", c.at(v.Line, field, "takes a value")
	}
	if pathFlags[upstreamKeys[key]] {
		return c.relative(v.Value), nil
	}
	return v.Value, nil
}

// credentialFlags are the per-upstream flags that give an upstream its
// credentials: one of them on the command line for an upstream overrides
// every one the file gives it, so that the two never mix.
var credentialFlags = map[string]bool{
	"upstream-token-env": true, "upstream-token-file": true, "upstream-headers-file": true,
	"upstream-oauth-client-id": true, "upstream-oauth-client-secret-file": true, "upstream-oauth-login": true,
}

// cliCredential reports whether the command line gives upstream name a
// credential.
func cliCredential(cliFor map[string]map[string]bool, name string) bool {
	for f := range credentialFlags {
		if cliFor[f][name] {
			return true
		}
	}
	return false
}

// findAlias returns the first alias under n, or nil.
func findAlias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n
	}
	for _, c := range n.Content {
		if a := findAlias(c); a != nil {
			return a
		}
	}
	return nil
}

// cliUpstreamNames are, for each per-upstream flag, the upstreams the
// command line gives it for: theirs override the file's.
func cliUpstreamNames(fs *flag.FlagSet) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		l, ok := f.Value.(*listFlag)
		if !ok || upstreamFlagKey(f.Name) == "" {
			return
		}
		out[f.Name] = map[string]bool{}
		for _, v := range *l {
			name, _, _ := strings.Cut(v, "=")
			out[f.Name][name] = true
		}
	})
	return out
}

// secretName is the name of a variable or header that holds a
// credential.
var secretName = regexp.MustCompile(`(?i)(token|secret|passw(or)?d|api[-_]?key|access[-_]?key|private[-_]?key|credential|authorization|cookie|^auth$|[-_]auth$|session|(^|[-_])key($|[-_]))`)

// secretArgName is a command-line flag whose next argument is a
// credential: --token VALUE.
var secretArgName = regexp.MustCompile(`(?i)^--?[A-Za-z0-9_-]*(token|secret|passw(or)?d|api[-_]?key|credential)[A-Za-z0-9_-]*$`)

// secretArg is a command-line argument that gives a credential inline:
// --token=…, --api-key=…, -password=….
var secretArg = regexp.MustCompile(`(?i)^--?[A-Za-z0-9_-]*(token|secret|passw(or)?d|api[-_]?key|credential)[A-Za-z0-9_-]*=.`)

// secretShape is a value that looks like a credential whatever its name:
// a bearer header, a JWT, the prefixes of common issuers' tokens.
var secretShape = regexp.MustCompile(`^(?i:bearer|basic)\s+\S|^eyJ[A-Za-z0-9_-]{8,}\.|^(ghp|gho|ghs|ghu|github_pat|glpat|xox[abposr]|sk|sk-ant|AKIA|AIza)[-_A-Za-z0-9]{8,}`)

// checkInline refuses a credential written inline in an upstream's env,
// headers or url: every such value must be a reference (${env:NAME}), so
// that the file holds nothing secret.
func (c *gatewayConfig) checkInline(field string, v *yaml.Node) error {
	literal := func(s string) bool { return s != "" && !placeholder.MatchString(s) }
	switch {
	case strings.HasSuffix(field, ".env") || strings.HasSuffix(field, ".headers"):
		if v.Kind != yaml.MappingNode {
			return c.at(v.Line, field, "a mapping of names to values")
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			nk, nv := v.Content[j], v.Content[j+1]
			if nv.Kind != yaml.ScalarNode {
				return c.at(nv.Line, field+"."+nk.Value, "takes a string")
			}
			if literal(nv.Value) && (secretName.MatchString(nk.Value) || secretShape.MatchString(nv.Value) ||
				(strings.Contains(nv.Value, "://") && urlHoldsSecret(nv.Value))) {
				return c.at(nv.Line, field+"."+nk.Value, "a secret written inline: write ${env:NAME} and put it in the gateway's environment, or name a file (%s)", map[bool]string{true: "env-file", false: "token-file, headers-file"}[strings.HasSuffix(field, ".env")])
			}
		}
	case strings.HasSuffix(field, ".url"):
		if v.Kind == yaml.ScalarNode && literal(v.Value) {
			if u, err := url.Parse(v.Value); err == nil {
				for q := range u.Query() {
					if secretName.MatchString(q) || q == "key" || q == "sig" {
						return c.at(v.Line, field, "a secret written inline in the query (%s): pass it in a header from the environment (token-env, headers-file)", q)
					}
				}
			}
		}
	case strings.HasSuffix(field, ".args"):
		if v.Kind == yaml.SequenceNode {
			for i, a := range v.Content {
				// --token VALUE as well as --token=VALUE.
				afterSecretFlag := i > 0 && secretArgName.MatchString(v.Content[i-1].Value)
				if a.Kind == yaml.ScalarNode && literal(a.Value) && (secretShape.MatchString(a.Value) || secretArg.MatchString(a.Value) ||
					afterSecretFlag || (strings.Contains(a.Value, "://") && urlHoldsSecret(a.Value))) {
					return c.at(a.Line, field, "a secret written inline: write ${env:NAME} and put it in the gateway's environment")
				}
			}
		}
	}
	return nil
}

// inlineText is the text of the value of root's member i (a block
// mapping) as a document of its own: the lines from its first to the
// line before the next top-level key, unindented, after as many empty
// lines as precede it, so that errors in it name the file's lines.
func inlineText(data []byte, root *yaml.Node, i int) []byte {
	v := root.Content[i]
	lines := strings.SplitAfter(string(data), "\n")
	end := len(lines)
	if i+1 < len(root.Content) {
		end = root.Content[i+1].Line - 1
	}
	var b bytes.Buffer
	b.WriteString(strings.Repeat("\n", v.Line-1))
	indent := v.Column - 1
	for n := v.Line - 1; n < end && n < len(lines); n++ {
		l := lines[n]
		if n == v.Line-1 {
			l = l[min(indent, len(l)):] // a flow mapping begins after its key
		} else {
			cut := 0
			for cut < indent && cut < len(l) && l[cut] == ' ' {
				cut++
			}
			l = l[cut:]
		}
		b.WriteString(l)
	}
	return b.Bytes()
}

// annotate says, of a mistake the checks after the file found in a
// setting the file made, where the file made it.
func (c *gatewayConfig) annotate(err error) error {
	if c == nil || err == nil {
		return err
	}
	msg := err.Error()
	var where []string
	for name, line := range c.lines {
		if strings.Contains(msg, "--"+name+" ") || strings.Contains(msg, "--"+name+":") || strings.HasSuffix(msg, "--"+name) {
			where = append(where, fmt.Sprintf("%s on line %d", name, line))
		}
	}
	if len(where) == 0 {
		return err
	}
	slices.Sort(where)
	note := fmt.Sprintf(" (%s: %s)", c.path, strings.Join(where, ", "))
	if _, ok := err.(usageError); ok {
		return usageError{msg + note}
	}
	return fmt.Errorf("%w%s", err, note)
}

// environLookup is os.LookupEnv, for the file's ${env:NAME}.
var environLookup = os.LookupEnv

// printCheck is --check: every check the gateway makes of its settings
// before it starts, then what would run — listener, database,
// authentication, each upstream (names of credentials, never values), the
// policy and its review's verdicts — without opening or starting
// anything.
func (p *gatewayPlan) printCheck(stdout io.Writer) error {
	ctx := context.Background()
	opts, err := p.rf.options(ctx, p.fs, strings.NewReader(""), io.Discard, io.Discard)
	if err != nil {
		return p.cfg.annotate(err)
	}
	p.rf.logs.Close()
	if opts.FlushTraces != nil {
		defer opts.FlushTraces(ctx)
	}
	policy, _, err := p.policy(opts)
	if err != nil {
		return p.cfg.annotate(err)
	}
	for _, o := range p.oauthUps {
		if o.login { // the key is read as at start; the database is not opened
			if _, err := readGatewayKey(*p.upOAuth.keyFile, "gateway"); err != nil {
				return p.cfg.annotate(err)
			}
			break
		}
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "config\t%s\n", p.cfg.path)
	if opts.Addr != "" {
		fmt.Fprintf(w, "listener\tStreamable HTTP on %s, path %s\n", opts.Addr, cmp.Or(opts.Path, host.DefaultPath))
	} else {
		fmt.Fprintf(w, "listener\tstdio\n")
	}
	fmt.Fprintf(w, "database\t%s\n", describeDSN(opts.DB))
	fmt.Fprintf(w, "sign-in\t%s\n", describeAuth(opts))
	for _, u := range p.ups {
		fmt.Fprintf(w, "upstream %s\t%s\n", u.Name, describeUpstream(u, p.oauthUps[u.Name], p.cfg.display[u.Name]))
	}
	if p.policyData == nil {
		fmt.Fprintf(w, "policy\tnone: every tool is unsafe (never retried, never keyed)\n")
	} else {
		rp, _ := p.reviewPolicy()
		completed := *rp
		completed.Operations = slices.Clone(rp.Operations)
		if err := p.rf.gatewayFacts(opts).Complete(&completed); err != nil {
			return p.cfg.annotate(usagef("gateway: --policy %s: %v", p.policyName, err))
		}
		report := review.Review(&completed)
		fmt.Fprintf(w, "policy\t%s: %d operations, %s\n", p.policyName, len(completed.Operations), report.Verdict)
		for _, op := range report.Operations {
			how := strings.ToLower(op.Retry.Class)
			if tp, ok := policy.Tools[op.Name]; ok && tp.Task != nil {
				how += ", a durable task"
			}
			fmt.Fprintf(w, "  tool %s\t%s: forwarded as %s\n", op.Name, op.Verdict, how)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "the configuration holds: nothing was opened or started")
	return nil
}

// describeDSN names a database without its password.
func describeDSN(dsn string) string {
	if !store.IsPostgres(dsn) {
		return "SQLite file " + dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "PostgreSQL"
	}
	u.RawQuery = "" // sslpassword and the like; Redacted masks the password
	return "PostgreSQL " + u.Redacted()
}

// describeAuth says who may call the listener.
func describeAuth(opts *host.Options) string {
	switch {
	case opts.OAuth != nil:
		return "OAuth access tokens of " + strings.Join(opts.OAuth.Issuers, ", ")
	case opts.Addr == "":
		return "none (stdio: the client that started the gateway)"
	case len(opts.HTTP.Tokens) > 0:
		return fmt.Sprintf("bearer tokens of %d tenants", len(opts.HTTP.Tokens)+map[bool]int{true: 1}[opts.HTTP.AuthToken != ""])
	case opts.HTTP.AuthToken != "":
		return "a bearer token"
	}
	return "none: anyone who reaches the listener (loopback only unless --allowed-host)"
}

// describeUpstream says how an upstream runs, naming its credentials but
// never their values.
func describeUpstream(u gateway.Upstream, o *upstreamOAuth, display string) string {
	var b strings.Builder
	switch u.Transport {
	case gateway.Stdio:
		b.WriteString("stdio: ")
		switch {
		case display != "":
			b.WriteString(display)
		case len(u.Command) > 1:
			// Its arguments may hold what a reference resolved to.
			fmt.Fprintf(&b, "%s and %d arguments", shellQuote(u.Command[0]), len(u.Command)-1)
		default:
			b.WriteString(shellQuote(u.Command[0]))
		}
		if len(u.Env) > 0 {
			var names []string
			for _, kv := range u.Env {
				k, _, _ := strings.Cut(kv, "=")
				names = append(names, k)
			}
			fmt.Fprintf(&b, "; env %s", strings.Join(names, ", "))
		}
	default:
		fmt.Fprintf(&b, "%s: %s", u.Transport, redactURL(u.URL))
		if len(u.Header) > 0 {
			var names []string
			for k := range u.Header {
				names = append(names, k)
			}
			slices.Sort(names)
			fmt.Fprintf(&b, "; headers %s", strings.Join(names, ", "))
		}
	}
	switch {
	case o == nil:
	case o.login:
		b.WriteString("; OAuth with the stored login")
	default:
		b.WriteString("; OAuth client credentials")
	}
	var extra []string
	if u.PerTenant {
		extra = append(extra, "a process per tenant")
	}
	if u.KeepNames {
		extra = append(extra, "names kept")
	}
	if u.Limits != (server.Limits{}) {
		extra = append(extra, "limits")
	}
	if u.Capabilities != nil {
		extra = append(extra, "capabilities declared")
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, "; %s", strings.Join(extra, ", "))
	}
	return b.String()
}

// redactURL is a URL without its userinfo and query, which may hold
// credentials.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(not a URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
