package probe

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// maxFramesShown bounds the evidence a text report prints per failure:
// the last frames, where the failure is.
const maxFramesShown = 24

// WriteText writes the report for a person: one line per fixture and era,
// and under each failure the frames that prove it.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "mcprel probe: %s (%s), eras %s\n", r.Target, r.Transport, strings.Join(r.Eras, ", "))
	for _, why := range r.ErasNotSpoken {
		fmt.Fprintf(w, "  not probed: %s\n", why)
	}
	for _, d := range r.Deaths {
		fmt.Fprintf(w, "  %s\n", d)
	}
	fmt.Fprintln(w)
	for _, res := range r.Results {
		fmt.Fprintf(w, "%3d %-36s %-10s %-14s %s\n", res.Fixture, res.Name, res.Era, res.Status, res.Detail)
		if res.Status != Failed {
			continue
		}
		frames := res.Frames
		if len(frames) > maxFramesShown {
			fmt.Fprintf(w, "      … %d earlier frames\n", len(frames)-maxFramesShown)
			frames = frames[len(frames)-maxFramesShown:]
		}
		for _, f := range frames {
			fmt.Fprintf(w, "      %10s %-8s %s\n", f.At, f.Dir, f.Text)
		}
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d failed, %d not applicable\n", r.Count(Passed), r.Count(Failed), r.Count(NotApplicable))
	return err
}

// WriteJUnit writes the report as JUnit XML, for CI: a test case per
// fixture and era, failed ones with their frames, inapplicable ones
// skipped.
func (r *Report) WriteJUnit(w io.Writer) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type testcase struct {
		Class   string   `xml:"classname,attr"`
		Name    string   `xml:"name,attr"`
		Time    float64  `xml:"time,attr"`
		Failure *failure `xml:"failure,omitempty"`
		Skipped *skipped `xml:"skipped,omitempty"`
		Output  string   `xml:"system-out,omitempty"`
	}
	type suite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	s := suite{Name: "mcprel probe " + r.Target, Tests: len(r.Results), Failures: r.Count(Failed), Skipped: r.Count(NotApplicable)}
	for _, res := range r.Results {
		tc := testcase{Class: fmt.Sprintf("probe.%s.fixture%02d", r.Transport, res.Fixture),
			Name: fmt.Sprintf("%d %s [%s]", res.Fixture, res.Name, res.Era), Time: res.Took.Seconds()}
		switch res.Status {
		case Failed:
			var b strings.Builder
			for _, f := range res.Frames {
				fmt.Fprintf(&b, "%s %s %s\n", f.At, f.Dir, f.Text)
			}
			tc.Failure = &failure{Message: res.Detail, Body: b.String()}
		case NotApplicable:
			tc.Skipped = &skipped{Message: res.Detail}
		default:
			tc.Output = res.Detail
		}
		s.Cases = append(s.Cases, tc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
