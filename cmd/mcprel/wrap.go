package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// wrapEntry is the key of the one server a wrapped configuration has.
const wrapEntry = "mcprel"

// The files "gateway wrap --write FILE" writes beside FILE: the original
// kept to undo with, and the copy of its servers the gateway serves.
const (
	wrapBackupSuffix    = ".bak"
	wrapUpstreamsSuffix = ".mcprel-upstreams.json"
)

// gatewayWrapCmd is "mcprel gateway wrap": a client's configuration with
// one server, the gateway over stdio, in front of all the servers it had.
func gatewayWrapCmd(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("gateway wrap", flag.ContinueOnError)
	fset.SetOutput(stdout)
	setUsage(fset, "usage: mcprel gateway wrap [--write [--force]] [--db PATH] FILE\n       mcprel gateway wrap --undo FILE",
		`Prints FILE, an MCP client's configuration (Claude Desktop's or
.mcp.json's mcpServers, VS Code's servers), with its servers replaced by
one, "`+wrapEntry+`", that runs "mcprel gateway --stdio --mcp-config" on
a copy of them: every server, behind mcprel. With --write, FILE is
rewritten in place instead, FILE`+wrapBackupSuffix+` keeping the original
and FILE`+wrapUpstreamsSuffix+` the servers; --undo puts the original
back. Exit status: 0 done, 1 a failure, 2 a mistake in the command line
or a server the gateway cannot serve.`)
	write := fset.Bool("write", false, "rewrite FILE (atomically), keeping the original as FILE"+wrapBackupSuffix+" and the servers as FILE"+wrapUpstreamsSuffix)
	force := fset.Bool("force", false, "with --write, replace a FILE"+wrapBackupSuffix+" there already; with --undo, restore it over a FILE that is not wrapped")
	undo := fset.Bool("undo", false, "put FILE"+wrapBackupSuffix+" back as FILE and remove FILE"+wrapUpstreamsSuffix)
	db := fset.String("db", "", "the gateway's database: a SQLite file, made absolute (default mcprel.db beside FILE)")
	positional, err := parseArgs(fset, args, "")
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("gateway wrap: name one client configuration FILE")
	}
	path, err := filepath.Abs(positional[0])
	if err != nil {
		return err
	}
	if *undo {
		if *write || *db != "" {
			return usagef("gateway wrap: --undo takes no --write or --db")
		}
		return unwrapConfig(path, *force, stdout)
	}
	c, err := readClientConfig(path)
	if err != nil {
		return usagef("gateway wrap: %v", err)
	}
	if c.wrapped() {
		return usagef("gateway wrap: %s is wrapped already: its one server runs the gateway (mcprel gateway wrap --undo %s puts the original back)", path, path)
	}
	// Checked now, as the gateway will: a server it cannot serve is said
	// here, not when the client starts it. The environment is the
	// client's then, so ${env:NAME} is not resolved.
	if _, err := c.upstreams(nil); err != nil {
		return usagef("gateway wrap: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("gateway wrap: finding this mcprel's path: %v", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return fmt.Errorf("gateway wrap: finding this mcprel's path: %v", err)
	}
	dbPath := *db
	if dbPath == "" {
		dbPath = filepath.Join(filepath.Dir(path), "mcprel.db")
	}
	if strings.Contains(dbPath, "://") && urlHoldsSecret(dbPath) {
		// The client's file, and what wrap prints, are not the place
		// for a password; the gateway reads MCPREL_DB from the
		// client's environment for the server's entry.
		return usagef("gateway wrap: --db holds a password, which would be written into %s: give a URL without one (and the password in the entry's env, PGPASSWORD), or a SQLite file", path)
	}
	if !strings.Contains(dbPath, "://") {
		if dbPath, err = filepath.Abs(dbPath); err != nil {
			return err
		}
	}
	upstreams := path + wrapUpstreamsSuffix
	out, err := c.wrap(exe, upstreams, dbPath)
	if err != nil {
		return err
	}
	if !*write {
		stdout.Write(out)
		fmt.Fprintf(stderr, "mcprel: gateway wrap: printed, nothing written; --write writes it to %s, keeping the original as %s and its servers as %s\n", path, path+wrapBackupSuffix, upstreams)
		return nil
	}
	backup := path + wrapBackupSuffix
	if _, err := os.Lstat(backup); err == nil && !*force {
		return usagef("gateway wrap: %s exists: it may be the only copy of an earlier configuration; move it away, or give --force to replace it", backup)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	// The servers first, then the backup, then FILE: a failure on the
	// way leaves FILE as it was.
	if err := writeFileAtomic(upstreams, orig, 0o600); err != nil {
		return fmt.Errorf("gateway wrap: %v", err)
	}
	if err := writeFileAtomic(backup, orig, info.Mode().Perm()); err != nil {
		return fmt.Errorf("gateway wrap: %v", err)
	}
	if err := writeFileAtomic(path, out, info.Mode().Perm()); err != nil {
		return fmt.Errorf("gateway wrap: %v", err)
	}
	fmt.Fprintf(stdout, "wrote %s: its %d servers now run behind one, %q (restart the client to pick it up)\nthe original is kept in %s, its servers in %s\nundo: %s gateway wrap --undo %s\n",
		path, len(c.entries), wrapEntry, backup, upstreams, exe, path)
	return nil
}

// wrapped reports whether the configuration's one server runs the
// gateway on a configuration: wrapping it again would hide the original.
func (c *clientConfig) wrapped() bool {
	if len(c.entries) != 1 {
		return false
	}
	var e configEntry
	if json.Unmarshal(c.entries[0].value, &e) != nil {
		return false
	}
	return len(e.Args) >= 2 && e.Args[0] == "gateway" && slices.Contains(e.Args, "--mcp-config")
}

// wrap is the configuration with its servers replaced by the gateway's
// entry, every other member kept, in order, indented.
func (c *clientConfig) wrap(exe, upstreams, db string) ([]byte, error) {
	entry := map[string]any{
		"command": exe,
		"args":    []string{"gateway", "--stdio", "--mcp-config", upstreams, "--db", db},
	}
	if c.key == vscodeKey {
		entry["type"] = "stdio"
	}
	servers, err := json.Marshal(map[string]any{wrapEntry: entry})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, m := range c.members {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		buf.Write(k)
		buf.WriteByte(':')
		if m.key == c.key {
			buf.Write(servers)
		} else {
			buf.Write(m.value)
		}
	}
	buf.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// unwrapConfig puts FILE.bak back as FILE.
func unwrapConfig(path string, force bool, stdout io.Writer) error {
	backup := path + wrapBackupSuffix
	orig, err := os.ReadFile(backup)
	if errors.Is(err, fs.ErrNotExist) {
		return usagef("gateway wrap --undo: %s does not exist: there is nothing to put back", backup)
	}
	if err != nil {
		return err
	}
	if !force {
		c, err := readClientConfig(path)
		if err == nil && !c.wrapped() {
			return usagef("gateway wrap --undo: %s is not wrapped (changed since?): give --force to put %s back over it all the same", path, backup)
		}
	}
	info, err := os.Stat(backup)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, orig, info.Mode().Perm()); err != nil {
		return fmt.Errorf("gateway wrap --undo: %v", err)
	}
	os.Remove(backup)
	os.Remove(path + wrapUpstreamsSuffix)
	fmt.Fprintf(stdout, "restored %s from %s (restart the client to pick it up)\n", path, backup)
	return nil
}

// writeFileAtomic writes data to path through a temporary file in its
// directory, renamed over it: a reader sees the old file or the new one.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
