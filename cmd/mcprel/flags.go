package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/host"
)

// parseArgs parses args into fs with the flags anywhere among the
// positional arguments, as a user writes them after a tool's arguments
// ("slow_count steps=20 --max 1m") or after a policy file; everything
// after a "--" is positional, so an argument that starts with "-" can
// still be given. It returns the positional arguments in order. -h prints
// the command's help and returns flag.ErrHelp, which is not a failure.
//
// The flag package stops at the first positional argument, so the flags
// are picked out first, each with its value where it takes one, and then
// parsed in one go. Its own complaints go to a discarded writer: a
// mistake is reported in one line that names the flag as typed and points
// at -h, instead of the whole usage, which would bury it. hint is added
// to the message for an unknown flag.
func parseArgs(fs *flag.FlagSet, args []string, hint string) ([]string, error) {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		switch {
		case name == "h" || name == "help":
			printUsage(fs)
			return nil, flag.ErrHelp
		case f == nil:
			return nil, usagef("%[1]s: unknown flag %[2]s (mcprel %[1]s -h lists the flags%[3]s)", fs.Name(), a, hint)
		case hasValue || isBoolFlag(f):
		case i+1 < len(args):
			i++
			flags = append(flags, args[i])
		default:
			return nil, usagef("%s: flag %s needs a value", fs.Name(), a)
		}
	}
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs)
			return nil, err
		}
		return nil, usagef("%s: %v (mcprel %[1]s -h lists the flags)", fs.Name(), err)
	}
	return positional, nil
}

// parseFlags is parseArgs for a command that takes no positional
// arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	positional, err := parseArgs(fs, args, "")
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), positional[0])
	}
	return nil
}

// setUsage makes fs's help (-h, --help) its synopsis, a paragraph that
// says what the command does, and its flags. Help goes to fs.Output(),
// which each command sets to stdout: asked for, it is the output, not a
// complaint; mistakes are reported apart, on stderr.
func setUsage(fs *flag.FlagSet, synopsis, about string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\n%s\n\nFlags:\n", synopsis, about)
		fs.PrintDefaults()
	}
}

// printUsage prints fs's help: its own Usage, or the flag package's.
func printUsage(fs *flag.FlagSet) {
	if fs.Usage != nil {
		fs.Usage()
		return
	}
	fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	fs.PrintDefaults()
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// checkEndpoint refuses, as a mistake in the command line, an endpoint
// that is not an absolute http or https URL with a host: such a URL can
// never be reached, and saying "no connection" would send the user
// looking at the network instead of at what they typed.
func checkEndpoint(cmd, flagName, endpoint string) error {
	u, err := url.Parse(endpoint)
	example := "like http://127.0.0.1:8080/mcp"
	switch {
	case err != nil:
		return usagef("%s: %s %q is not a URL (%v); give the endpoint's http:// or https:// URL, %s", cmd, flagName, endpoint, errors.Unwrap(err), example)
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return usagef("%s: %s %q has no scheme; give the endpoint's http:// or https:// URL, %s", cmd, flagName, endpoint, example)
		}
		return usagef("%s: %s %q: the scheme must be http or https, not %q", cmd, flagName, endpoint, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return usagef("%s: %s %q names no host; give the endpoint's full URL, %s", cmd, flagName, endpoint, example)
	}
	return nil
}

// notFoundAt is, for a connection to endpoint that failed because the
// server answered HTTP 404, a mistake in the command line that says so
// (nil for any other failure): the server was reached and serves no MCP
// endpoint at that path, so there is no connection to look into, only
// the URL to correct — with the path mcprel serves its own at.
func notFoundAt(cmd, endpoint string, err error) error {
	var se *client.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound {
		return nil
	}
	hint := "check the URL's path"
	if u, perr := url.Parse(endpoint); perr == nil && u.Path != host.DefaultPath {
		u.Path, u.RawPath, u.RawQuery, u.Fragment = host.DefaultPath, "", "", ""
		hint = "mcprel serves its endpoint at " + host.DefaultPath + ": " + u.String()
	}
	return usagef("%s: the server at %s answered HTTP 404 (Not Found): it serves no MCP endpoint at that URL; %s", cmd, endpoint, hint)
}

// checkListenAddr refuses, as a mistake in the command line, an address
// to listen on that is not HOST:PORT with a port from 0 to 65535: one that
// no system call could bind is the user's to correct, not a failure of
// the run.
func checkListenAddr(cmd, flagName, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return usagef("%s: %s wants HOST:PORT, such as 127.0.0.1:8080 (port 0 picks a free one), not %q", cmd, flagName, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return usagef("%s: %s %q: the port must be a number from 0 to 65535", cmd, flagName, addr)
	}
	return nil
}

// readSmallFile reads a file of at most limit bytes, read whole: a
// policy, a secret, a few answers. A larger file is refused, not cut.
func readSmallFile(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s is larger than %d KiB", path, limit>>10)
	}
	return data, nil
}
