package mcptest

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

// StartURL starts cmd, a server that prints its endpoint URL as the first
// line of its standard output (the peer servers of the interop tests do),
// and returns that URL. The server is killed when the test ends; set
// cmd.Stderr first to keep its log.
func StartURL(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "http://") {
		t.Fatalf("%s printed no URL on its first line", strings.Join(cmd.Args, " "))
	}
	return sc.Text()
}
