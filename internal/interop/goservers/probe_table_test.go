package goservers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/probe"
	"github.com/mcprel/mcprel/review"
)

// probeTable is the environment variable that runs TestProbeTable:
// "print" prints the table of how servers handle the races, "write"
// writes it into the README too, between its markers.
const probeTable = "MCPREL_PROBE_TABLE"

// root is the main module's directory.
const root = "../../.."

// tableTiming keeps a probe of a server without deadlines from waiting
// the default 20 s for each of its stalled calls.
var tableTiming = probe.Timing{Deadline: 8 * time.Second}

// probed is a server the table probes: its stdio command and the policy
// (under examples/probe) that says what the probe may call on it and
// what its gateway row enforces.
type probed struct {
	name    string
	command []string
	policy  string
}

// buildMcprel builds the mcprel command, for the gateway rows.
func buildMcprel(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcprel")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/mcprel")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build mcprel: %v\n%s", err, out)
	}
	return bin
}

// probeOf probes command with policy, directly or through mcprel gateway
// (mcprel non-empty), over stdio.
func probeOf(t *testing.T, command []string, policy, mcprel string) *probe.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, policy))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := review.Parse(policy, data)
	if err != nil {
		t.Fatal(err)
	}
	target := probe.Target{Command: command}
	if mcprel != "" {
		quoted := make([]string, len(command))
		for i, w := range command {
			quoted[i] = `"` + w + `"`
		}
		target.Command = []string{mcprel, "gateway", "--stdio", "--log-level", "warn", "--db", filepath.Join(t.TempDir(), "gateway.db"),
			"--policy", filepath.Join(root, policy), "--upstream", "peer=" + strings.Join(quoted, " ")}
	}
	rep, err := probe.Run(context.Background(), &probe.Options{Target: target, Policy: pol, Timing: tableTiming})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// verdicts is each fixture's outcome over the eras: failed if it failed
// in one, passed if it passed in one, else not applicable.
func verdicts(rep *probe.Report) map[int]probe.Status {
	out := map[int]probe.Status{}
	for _, r := range rep.Results {
		switch {
		case r.Status == probe.Failed, out[r.Fixture] == probe.Failed:
			out[r.Fixture] = probe.Failed
		case r.Status == probe.Passed, out[r.Fixture] == probe.Passed:
			out[r.Fixture] = probe.Passed
		default:
			out[r.Fixture] = probe.NotApplicable
		}
	}
	return out
}

// deadline is what fixture 6 found of the server's own deadline over the
// eras: "yes" (it ended a call without progress in every era), "none"
// (in none), "some", or "" when the fixture did not pass in any.
func deadline(rep *probe.Report) string {
	var own, none int
	for _, r := range rep.Results {
		if r.Fixture != 6 || r.Status != probe.Passed {
			continue
		}
		if r.Measured["server_deadline"] == true {
			own++
		} else {
			none++
		}
	}
	switch {
	case own > 0 && none == 0:
		return "yes"
	case none > 0 && own == 0:
		return "none"
	case own > 0:
		return "some"
	}
	return ""
}

// The official Go SDK's server, probed alone, answers a request it was
// told to cancel and has no deadline of its own for a call without
// progress; behind mcprel gateway, with the same policy file as the
// gateway's, the same server passes every fixture that applies, and the
// gateway's clocks end such a call: the gateway row shows what the
// gateway adds to an upstream.
func TestProbeGatewayFixesWhatAPeerLacks(t *testing.T) {
	mcprel, gosdk := buildMcprel(t), build(t, "gosdk-server")
	rep := probeOf(t, []string{gosdk}, "examples/probe/peers.yaml", "")
	alone := verdicts(rep)
	if alone[1] != probe.Failed || deadline(rep) != "none" {
		t.Fatalf("go-sdk alone: %v, a deadline of its own: %q; want fixture 1 (cancel before completion) failed and none", alone, deadline(rep))
	}
	rep = probeOf(t, []string{gosdk}, "examples/probe/peers.yaml", mcprel)
	fronted := verdicts(rep)
	for n, s := range fronted {
		if s == probe.Failed {
			t.Errorf("go-sdk behind the gateway failed fixture %d", n)
		}
	}
	if fronted[1] != probe.Passed || deadline(rep) != "yes" {
		t.Fatalf("go-sdk behind the gateway: %v, a deadline: %q; want fixture 1 passed and the gateway's deadline in every era", fronted, deadline(rep))
	}
}

// TestProbeTable probes every peer — the Go SDK's, mcp-go's and the
// TypeScript SDK's servers and server-everything — alone and behind
// mcprel gateway, and prints the table of how they handle the races;
// with MCPREL_PROBE_TABLE=write it also writes it into the README:
//
//	cd internal/interop/goservers && MCPREL_PROBE_TABLE=write go test -run TestProbeTable -v .
//
// It takes a few minutes, and needs Node with the interop packages
// installed (make interop-deps).
func TestProbeTable(t *testing.T) {
	mode := os.Getenv(probeTable)
	if mode == "" {
		t.Skip("set " + probeTable + "=print (or =write, to write the README) to probe every peer")
	}
	mcprel := buildMcprel(t)
	everything, _ := filepath.Abs(filepath.Join(root, "internal/interop/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
	tsServer, _ := filepath.Abs(filepath.Join(root, "internal/interop/ts/ts-server.mjs"))
	peers := []probed{
		{"go-sdk v1.8.0", []string{build(t, "gosdk-server")}, "examples/probe/peers.yaml"},
		{"mcp-go v1.2.1", []string{build(t, "mcpgo-server")}, "examples/probe/peers.yaml"},
		{"TypeScript SDK 1.32.2", []string{"node", tsServer}, "examples/probe/peers.yaml"},
		{"server-everything 2026.8.31", []string{"node", everything, "stdio"}, "examples/probe/everything.yaml"},
	}
	var rows []string
	for _, p := range peers {
		for _, fronted := range []bool{false, true} {
			name, via := p.name, ""
			if fronted {
				name, via = p.name+" behind mcprel gateway", mcprel
			}
			rep := probeOf(t, p.command, p.policy, via)
			v := verdicts(rep)
			cells := []string{name, strings.Join(rep.Eras, ", ")}
			for n := 1; n <= len(probe.Fixtures()); n++ {
				cell := map[probe.Status]string{probe.Passed: "pass", probe.Failed: "**FAIL**", probe.NotApplicable: "–"}[v[n]]
				if d := deadline(rep); n == 6 && v[n] == probe.Passed && d != "" {
					cell = d // fixture 6 says whether the server has a deadline of its own
				}
				cells = append(cells, cell)
			}
			rows = append(rows, "| "+strings.Join(cells, " | ")+" |")
			for _, r := range rep.Results {
				if r.Status == probe.Failed {
					t.Logf("%s: fixture %d (%s): %s", name, r.Fixture, r.Era, r.Detail)
				}
			}
		}
	}
	head := []string{"server (stdio)", "eras"}
	for _, f := range probe.Fixtures() {
		head = append(head, f)
	}
	table := "| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat(" --- |", len(head)) + "\n" + strings.Join(rows, "\n") + "\n"
	fmt.Println(table)
	if mode != "write" {
		return
	}
	readme := filepath.Join(root, "README.md")
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- probe-table: begin -->\n", "<!-- probe-table: end -->"
	i, j := strings.Index(string(data), begin), strings.Index(string(data), end)
	if i < 0 || j < i {
		t.Fatalf("the README has no %q … %q markers", begin, end)
	}
	out := string(data[:i+len(begin)]) + table + string(data[j:])
	if err := os.WriteFile(readme, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
