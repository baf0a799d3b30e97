package review

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes the report for a person to read: the verdict, then one
// section per operation with every section of the checklist.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# mcprel review\n\nVerdict: **%s**", verdictText(r.Verdict))
	fmt.Fprintf(&b, " (%d operation%s)\n\n", len(r.Operations), plural(len(r.Operations)))
	b.WriteString("| operation | verdict |\n| --- | --- |\n")
	for _, op := range r.Operations {
		fmt.Fprintf(&b, "| `%s` | %s |\n", op.Name, verdictLine(&op))
	}
	for _, op := range r.Operations {
		writeOperation(&b, &op)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func verdictText(v string) string {
	if v == ProductionReady {
		return "production ready"
	}
	return "not production ready"
}

func verdictLine(op *OperationReport) string {
	if op.Verdict == ProductionReady {
		return "production ready"
	}
	codes := make([]string, 0, len(op.Refusals))
	for _, c := range op.Codes() {
		codes = append(codes, "`"+string(c)+"`")
	}
	return "refused: " + strings.Join(codes, ", ")
}

func writeOperation(b *strings.Builder, op *OperationReport) {
	fmt.Fprintf(b, "\n## `%s`\n\n", op.Name)
	fmt.Fprintf(b, "Transport: %s. Verdict: **%s**. Retry class: **%s**", orMissing(op.Transport), verdictText(op.Verdict), op.Retry.Class)
	if op.Retry.WithoutKey != "" {
		fmt.Fprintf(b, " (%s without a key)", op.Retry.WithoutKey)
	}
	b.WriteString(".\n")
	if len(op.Refusals) > 0 {
		b.WriteString("\n### Refusals\n\n")
		for _, f := range op.Refusals {
			fmt.Fprintf(b, "- `%s`: %s\n", f.Code, f.Message)
		}
	}
	if len(op.Missing) > 0 {
		b.WriteString("\n### Missing inputs\n\nGive these; the review does not guess them:\n\n")
		for _, m := range op.Missing {
			fmt.Fprintf(b, "- `%s`\n", m)
		}
	}
	if len(op.Warnings) > 0 {
		b.WriteString("\n### Warnings\n\n")
		for _, w := range op.Warnings {
			fmt.Fprintf(b, "- %s\n", w)
		}
	}
	b.WriteString("\n### Cancellation wire\n")
	for _, w := range op.Cancellation {
		fmt.Fprintf(b, "\n**%s** — %s\n\n", w.Wire, w.Signal)
		for _, r := range w.Rules {
			fmt.Fprintf(b, "- %s\n", r)
		}
	}
	b.WriteString("\n### Race table\n\n| event order | server terminal state | final response | client |\n| --- | --- | --- | --- |\n")
	for _, r := range op.Races {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", r.Order, r.ServerTerminal, r.FinalResponse, r.Client)
	}
	fmt.Fprintf(b, "\n### Deadline policy\n\nIdle timeout: %s. Maximum timeout: %s.\n\n", op.Deadlines.Idle, op.Deadlines.Max)
	for _, r := range op.Deadlines.Rules {
		fmt.Fprintf(b, "- %s\n", r)
	}
	fmt.Fprintf(b, "\n### Retry class: %s\n\n", op.Retry.Class)
	if op.Retry.Policy != "" {
		fmt.Fprintf(b, "Retry policy: `%s`.\n\n", op.Retry.Policy)
	}
	for _, r := range op.Retry.Reasons {
		fmt.Fprintf(b, "- %s\n", r)
	}
	b.WriteString("\n### Idempotency boundary\n\n")
	if op.Boundary.Store != "" {
		fmt.Fprintf(b, "Store: %s.\n\n", op.Boundary.Store)
	}
	if len(op.Boundary.Inside) > 0 {
		fmt.Fprintf(b, "- inside the one transaction: %s\n", strings.Join(op.Boundary.Inside, "; "))
	}
	if len(op.Boundary.Outside) > 0 {
		fmt.Fprintf(b, "- outside it: %s\n", strings.Join(op.Boundary.Outside, "; "))
	}
	for _, n := range op.Boundary.Notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	b.WriteString("\n### Flow control\n\n| check | status | detail |\n| --- | --- | --- |\n")
	for _, c := range op.FlowControl {
		fmt.Fprintf(b, "| %s | %s | %s |\n", c.Check, c.Status, c.Detail)
	}
	b.WriteString("\n### Reconnect plan\n\n")
	for i, s := range op.Reconnect {
		fmt.Fprintf(b, "%d. %s\n", i+1, s)
	}
	b.WriteString("\n### Durable Tasks\n\n")
	for _, s := range op.Tasks.Steps {
		fmt.Fprintf(b, "- %s\n", s)
	}
	b.WriteString("\n### Required fixtures (the mcprel tests that prove each when mcprel serves the operation)\n\n| # | scenario | applies | mcprel tests |\n| ---: | --- | --- | --- |\n")
	for _, f := range op.Fixtures {
		applies := "yes"
		if !f.Applies {
			applies = "no: " + f.NotApplicable
		}
		tests := make([]string, len(f.Tests))
		for i, t := range f.Tests {
			tests[i] = fmt.Sprintf("`%s` (%s)", t.Name, t.File)
		}
		cell := strings.Join(tests, ", ")
		if len(f.Tests) == 0 {
			cell = "no mcprel test"
		}
		if f.Note != "" {
			cell += "; " + f.Note
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s |\n", f.N, f.Scenario, applies, cell)
	}
}

func orMissing(s string) string {
	if s == "" {
		return "(missing)"
	}
	return s
}
