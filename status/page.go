package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"time"
)

// RefreshSeconds is how often the HTML page reloads itself.
const RefreshSeconds = 5

// HTML is the page as HTML: server-rendered, with no script and no asset
// from anywhere, reloading itself every RefreshSeconds.
func (p *Page) HTML() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readOnly(w, r) {
			return
		}
		var buf bytes.Buffer
		if err := pageTemplate.Execute(&buf, p.Snapshot(r.Context())); err != nil {
			p.o.Logger.Error("status page: rendering failed", "err", err)
			http.Error(w, "the status page could not be rendered", http.StatusInternalServerError)
			return
		}
		header(w, "text/html; charset=utf-8")
		w.Write(buf.Bytes())
	})
}

// JSON is the page's data as JSON: a Snapshot.
func (p *Page) JSON() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readOnly(w, r) {
			return
		}
		data, err := json.MarshalIndent(p.Snapshot(r.Context()), "", "  ")
		if err != nil {
			p.o.Logger.Error("status page: encoding failed", "err", err)
			http.Error(w, "the status could not be encoded", http.StatusInternalServerError)
			return
		}
		header(w, "application/json")
		w.Write(append(data, '\n'))
	})
}

// readOnly refuses any method but GET and HEAD.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// header sets what every answer carries: its type, no caching (it is a
// moment's state, and may be an operator's only), and a policy that lets
// the page load nothing and run nothing, nor be framed by another site.
func header(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
}

// age writes a number of seconds as a person reads it: 42s, 3m12s,
// 5h3m, 2d4h.
func age(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// statusOrder lists the task statuses of a count in their life's order,
// then any other.
func statusOrder(by map[string]int) []string {
	order := []string{"working", "input_required", "completed", "failed", "cancelled"}
	var out []string
	for _, s := range order {
		if _, ok := by[s]; ok {
			out = append(out, s)
		}
	}
	var rest []string
	for s := range by {
		if !slices.Contains(order, s) {
			rest = append(rest, s)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func limit(n int64) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

var pageTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"age": age, "statusOrder": statusOrder, "limit": limit,
	"rate": func(r float64) string {
		if r == 0 {
			return "none"
		}
		return fmt.Sprintf("%g/s", r)
	},
	"ms":       func(ms float64) string { return fmt.Sprintf("%.1f ms", ms) },
	"int64":    func(n int) int64 { return int64(n) },
	"contains": func(list []string, s string) bool { return slices.Contains(list, s) },
	"time":     func(t time.Time) string { return t.Format(time.RFC3339) },
	"inc":      func(n int) int { return n + 1 },
	"max1":     func(n int) int { return max(n, 1) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="` + fmt.Sprint(RefreshSeconds) + `">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Implementation}} status — {{.Replica}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right}code{font:12px ui-monospace,monospace;overflow-wrap:anywhere}
.bad{color:#a40000;font-weight:600}.ok{color:#176f2c}.muted{color:#666}
</style>
</head>
<body>
<h1>{{.Implementation}} {{.Version}}</h1>
<p>Answered by replica <strong id="replica">{{.Replica}}</strong>, started {{time .StartedAt}} (up {{age .UptimeSeconds}}). Page made {{time .GeneratedAt}}; it reloads every ` + fmt.Sprint(RefreshSeconds) + ` s. The same data: <a href="status.json">status.json</a>.</p>
{{with .Upstreams}}
<h2>Upstreams</h2>
{{if not .Available}}<p class="bad">{{.Error}}</p>{{else if not .Upstreams}}<p class="muted">No upstreams.</p>{{else}}
<table id="upstreams">
<tr><th>Name</th><th>Transport</th><th>Era</th><th>State</th><th>Circuit</th><th>Restarts</th><th>In flight</th><th>Sessions</th><th>Latency (recent calls)</th><th>Last error</th></tr>
{{range .Upstreams}}<tr>
<td>{{.Name}}</td><td>{{.Transport}}</td><td>{{or .Era "-"}}</td>
<td class="{{if eq .State "connected"}}ok{{else}}bad{{end}}">{{.State}}</td>
<td class="{{if eq .Circuit "closed"}}ok{{else}}bad{{end}}">{{.Circuit}}</td>
<td class="n">{{.Restarts}}</td><td class="n">{{.InFlight}}</td><td class="n">{{.Sessions}}</td>
<td>{{with .Latency}}{{if .Samples}}p50 {{ms .P50Ms}}, p90 {{ms .P90Ms}}, max {{ms .MaxMs}}, last {{ms .LastMs}} ({{.Samples}} calls){{else}}<span class="muted">no calls yet</span>{{end}}{{end}}</td>
<td>{{if .LastError}}<code>{{.LastError}}</code>{{with .LastErrorAt}} <span class="muted">at {{time .}}</span>{{end}}{{else}}<span class="muted">none</span>{{end}}</td>
</tr>
{{end}}</table>{{end}}
{{end}}
{{with .Replicas}}
<h2>Replicas</h2>
{{if not .Available}}<p class="bad">{{.Error}}</p>{{else if not .Replicas}}<p class="muted">No replica has written its upstreams in the last minute.</p>{{else}}
<p>{{.Total}} replica(s) sharing this store wrote their upstreams in the last minute; the one that answered is marked.</p>
<table id="replicas">
<tr><th>Replica</th><th>Last seen</th><th>Upstream</th><th>State</th><th>Circuit</th><th>In flight</th></tr>
{{range .Replicas}}{{$r := .}}{{$n := len .Upstreams}}{{if .MoreUpstreams}}{{$n = inc $n}}{{end}}
<tr class="replica">
<td rowspan="{{max1 $n}}">{{if .This}}<strong>{{.Name}}</strong> (this one){{else}}{{.Name}}{{end}}</td>
<td rowspan="{{max1 $n}}" class="n">{{age .AgeSeconds}} ago</td>
{{range $i, $u := .Upstreams}}{{if $i}}<tr>{{end}}<td>{{$u.Name}}</td>
<td class="{{if eq $u.State "connected"}}ok{{else}}bad{{end}}">{{$u.State}}</td>
<td class="{{if eq $u.Circuit "closed"}}ok{{else}}bad{{end}}">{{$u.Circuit}}</td>
<td class="n">{{$u.InFlight}}</td></tr>
{{else}}{{if not $r.MoreUpstreams}}<td colspan="4" class="muted">no upstreams</td></tr>{{end}}{{end}}
{{if $r.MoreUpstreams}}{{if $r.Upstreams}}<tr>{{end}}<td colspan="4" class="muted">… and {{$r.MoreUpstreams}} more upstream(s)</td></tr>{{end}}
{{end}}</table>
{{if .More}}<p id="replicas-more">… and {{.More}} more replica(s).</p>{{end}}
{{end}}
{{end}}
{{with .Unknown}}
<h2>Unknown outcomes waiting to be reconciled</h2>
{{if not .Available}}<p class="bad">{{.Error}}</p>{{else if not .Total}}<p class="ok">Nothing waiting.</p>{{else}}
<p><strong>{{.Total}}</strong> operation(s) may or may not have taken effect. Check what each did (with its reconcile read, or at the upstream), then close it with its command and one of <code>--result FILE</code>, <code>--failed MESSAGE</code> or <code>--forget</code>.</p>
<table id="unknown">
<tr><th>Tenant</th><th>Tool</th><th>Key</th><th>Age</th><th>Reconcile with</th><th>Reason</th><th>Close it with</th></tr>
{{range .Outcomes}}<tr>
<td>{{if .Tenant}}{{.Tenant}}{{else}}<span class="muted">(no tenant)</span>{{end}}</td><td>{{.Tool}}</td><td><code>{{.Key}}</code></td>
<td class="n">{{age .AgeSeconds}}</td><td>{{or .ReconcileWith "-"}}</td><td>{{.Reason}}</td><td><code>{{.Resolve}}</code></td>
</tr>
{{end}}</table>
{{if .More}}<p id="unknown-more">… and {{.More}} more (list them with <code>mcprel ledger list</code>).</p>{{end}}
{{end}}
{{end}}
{{with .Tasks}}
<h2>Tasks</h2>
{{if not .Available}}<p class="bad">{{.Error}}</p>{{else}}
<table id="tasks"><tr>{{range statusOrder .ByStatus}}<th>{{.}}</th>{{end}}</tr>
<tr>{{$t := .}}{{range statusOrder .ByStatus}}<td class="n">{{index $t.ByStatus .}}{{if contains $t.AtLeast .}}+{{end}}</td>{{end}}</tr></table>
<p>Oldest working task: {{with .OldestWorkingAgeSeconds}}{{age .}} old{{else}}<span class="muted">none working</span>{{end}}.</p>
{{end}}
{{end}}
{{with .Outbox}}
<h2>Outbox deliveries</h2>
{{if not .Available}}<p class="bad">{{.Error}}</p>{{else}}
<p id="outbox">Pending: <strong>{{.Pending}}{{if .PendingAtLeast}}+{{end}}</strong>. Failed for good: <strong{{if .Failed}} class="bad"{{end}}>{{.Failed}}{{if .FailedAtLeast}}+{{end}}</strong>.</p>
{{end}}
{{end}}
{{with .Tenants}}
<h2>Tenants</h2>
{{if not .Available}}<p class="bad">{{.Error}}</p>{{else}}
{{if .Limits.None}}<p class="muted">No per-tenant limits are set, so no tenant's use is kept.</p>{{else}}
<p>Each tenant is held to: concurrent calls {{limit (int64 .Limits.MaxConcurrent)}}, queued {{limit (int64 .Limits.MaxQueued)}}, rate {{rate .Limits.Rate}} (burst {{limit (int64 .Limits.Burst)}}), request bytes {{limit .Limits.MaxBytes}}.</p>
{{if not .Tenants}}<p class="muted">No tenant has calls in flight.</p>{{end}}
{{end}}
{{if .Tenants}}
<table id="tenants"><tr><th>Tenant</th><th>Running</th><th>Queued</th><th>Bytes</th></tr>
{{range .Tenants}}<tr><td>{{if .Tenant}}{{.Tenant}}{{else}}<span class="muted">(no tenant)</span>{{end}}</td><td class="n">{{.Running}}</td><td class="n">{{.Queued}}</td><td class="n">{{.Bytes}}</td></tr>
{{end}}</table>
{{if .More}}<p>… and {{.More}} more tenant(s) with calls in flight.</p>{{end}}
{{end}}
{{end}}
{{end}}
</body>
</html>
`))
