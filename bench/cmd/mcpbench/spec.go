package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// serverSpec is one -server (or -sidecar) value: name=[URL@]command line.
type serverSpec struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	// URL is the endpoint the command serves, when it was given in the
	// spec rather than printed by the server: mcpbench then waits for its
	// port to accept connections.
	URL string `json:"url,omitempty"`
	// Bearer says that every HTTP request to the server carries a bearer
	// token (-bearer); the token itself is never printed.
	Bearer bool `json:"bearer,omitempty"`
	bearer string
}

// parseSpec parses name=[URL@]command line. The command line is split
// into words as a POSIX shell would (see splitWords); a URL is recognised
// by its http:// prefix and ends at the first '@'.
func parseSpec(v string) (serverSpec, error) {
	name, rest, _ := strings.Cut(v, "=")
	s := serverSpec{Name: strings.TrimSpace(name)}
	rest = strings.TrimLeft(rest, " \t")
	if strings.HasPrefix(rest, "http://") {
		u, cmdline, ok := strings.Cut(rest, "@")
		if !ok {
			return s, fmt.Errorf("%q: want name=URL@command line", v)
		}
		if err := checkURL(u); err != nil {
			return s, fmt.Errorf("%q: %w", v, err)
		}
		s.URL, rest = u, cmdline
	}
	argv, err := splitWords(rest)
	if err != nil {
		return s, fmt.Errorf("%q: %w", v, err)
	}
	if s.Name == "" || len(argv) == 0 {
		return s, fmt.Errorf("want name=command line, got %q", v)
	}
	s.Argv = argv
	return s, nil
}

// checkURL accepts an http:// URL whose host names a port.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || u.User != nil {
		return fmt.Errorf("URL %q: want http://HOST:PORT/PATH", s)
	}
	return nil
}

// serverList is the -server flag: repeatable, one server per value.
type serverList []serverSpec

func (l *serverList) String() string { return fmt.Sprint(*l) }

func (l *serverList) Set(v string) error {
	s, err := parseSpec(v)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(*l, func(o serverSpec) bool { return o.Name == s.Name }) {
		return fmt.Errorf("server name %q given twice", s.Name)
	}
	*l = append(*l, s)
	return nil
}

// sidecarList is the -sidecar flag: processes started before a server of
// the same name in each of its runs and stopped after it, charged to it.
type sidecarList []serverSpec

func (l *sidecarList) String() string { return fmt.Sprint(*l) }

func (l *sidecarList) Set(v string) error {
	s, err := parseSpec(v)
	if err != nil {
		return err
	}
	if s.URL == "" {
		return fmt.Errorf("%q: a sidecar needs name=URL@command line, so that mcpbench knows when it is ready", v)
	}
	*l = append(*l, s)
	return nil
}

// splitWords splits a command line into words as a POSIX shell does, with
// nothing expanded (no $VAR, globs, ~ or command substitution): blanks
// separate words; inside '…' every character is literal; inside "…" a
// backslash escapes only ", \, $, ` and a newline; elsewhere a backslash
// makes the next character literal, and a backslash-newline is removed.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	r := []rune(s)
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 == len(r) {
				return nil, errors.New("command line ends in a backslash")
			}
			i++
			if r[i] != '\n' {
				cur.WriteRune(r[i])
				inWord = true
			}
		case c == '\'':
			j := slices.Index(r[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(string(r[i+1 : i+1+j]))
			i += 1 + j
			inWord = true
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i == len(r) {
					return nil, errors.New(`unterminated " quote`)
				}
				if r[i] == '"' {
					break
				}
				if r[i] == '\\' && i+1 < len(r) && strings.ContainsRune("\"\\$`\n", r[i+1]) {
					i++
					if r[i] == '\n' {
						continue
					}
				}
				cur.WriteRune(r[i])
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// bearerList is the -bearer flag: name=token, the bearer token sent to
// server name. Its String names the servers only, so that no usage or
// error message shows a token.
type bearerList map[string]string

func (l bearerList) String() string { return strings.Join(slices.Sorted(maps.Keys(l)), ",") }

func (l bearerList) Set(v string) error {
	name, token, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	switch {
	case !ok || name == "" || token == "":
		return errors.New("want name=token")
	case strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r > '~' }):
		// RFC 6750 §2.1: b64token, printable ASCII without blanks.
		return fmt.Errorf("the token for %q has a blank, control or non-ASCII character", name)
	case l[name] != "":
		return fmt.Errorf("server name %q given twice", name)
	}
	l[name] = token
	return nil
}

// withBearers gives each server the token -bearer names for it, and
// fails for a name no -server has.
func withBearers(servers []serverSpec, bearers bearerList) error {
	for name, token := range bearers {
		i := slices.IndexFunc(servers, func(s serverSpec) bool { return s.Name == name })
		if i < 0 {
			return fmt.Errorf("-bearer %q: no -server of that name", name)
		}
		servers[i].Bearer, servers[i].bearer = true, token
	}
	return nil
}

// redacted returns specs with every bearer token in their words replaced,
// for printing: a server's command line often holds the token it
// accepts (--auth-token).
func redacted(specs []serverSpec, bearers bearerList) []serverSpec {
	out := slices.Clone(specs)
	for i := range out {
		out[i].Argv = slices.Clone(out[i].Argv)
		for j, w := range out[i].Argv {
			for _, token := range bearers {
				w = strings.ReplaceAll(w, token, "REDACTED")
			}
			out[i].Argv[j] = w
		}
	}
	return out
}

// tmpToken in a command's words is replaced by a directory made for the
// run, shared by the server and its sidecars and removed after the run.
const tmpToken = "{tmp}"

func withTmp(argv []string, dir string) []string {
	out := make([]string, len(argv))
	for i, w := range argv {
		out[i] = strings.ReplaceAll(w, tmpToken, dir)
	}
	return out
}

// hostPort is the address to dial for an http:// URL.
func hostPort(rawURL string) string {
	u, _ := url.Parse(rawURL) // checked by parseSpec
	return u.Host
}

// accepting reports whether something accepts TCP connections at addr.
func accepting(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// waitAccepting polls addr until it accepts a connection, the process
// behind it exits (exited closes), or 10 s pass.
func waitAccepting(addr string, exited <-chan struct{}) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	for {
		if accepting(addr) {
			return nil
		}
		select {
		case <-tick.C:
		case <-exited:
			return fmt.Errorf("exited before %s accepted connections (-stderr-dir keeps its output)", addr)
		case <-giveUp:
			return fmt.Errorf("%s accepted no connection within 10 s", addr)
		}
	}
}

// checkPortFree fails when something already listens where a spec says
// its server will, which would otherwise be measured in its place.
func checkPortFree(s serverSpec) error {
	if s.URL != "" && accepting(hostPort(s.URL)) {
		return fmt.Errorf("%s: something already accepts connections at %s (a process left from an earlier run?)", s.Name, hostPort(s.URL))
	}
	return nil
}

// removeAll removes dir; a failure is reported, not fatal.
func removeAll(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "  removing %s: %v\n", dir, err)
	}
}
