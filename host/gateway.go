package host

import (
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/metrics"
)

// gatewayMetrics tells the gateway's metrics what the gateway observes:
// package metrics sits below the gateway and knows nothing of it.
type gatewayMetrics struct{ m *metrics.GatewayMetrics }

func (g gatewayMetrics) Forwarded(r gateway.ForwardRecord) {
	g.m.Forwarded(metrics.Forward{
		Upstream: r.Upstream, Method: r.Method, Name: r.Name, Outcome: string(r.Outcome),
		InUpstream: r.InUpstream, Total: r.Total, Reached: r.Reached, CancelPropagated: r.CancelPropagated, Retries: r.Retries,
	})
}

func (g gatewayMetrics) UpstreamEvent(e gateway.UpstreamEvent) {
	if e.Kind == gateway.EventCircuit {
		return // the circuit's state is read at every scrape
	}
	g.m.UpstreamEvent(e.Upstream, string(e.Kind))
}

// upstreamStats is the gateway's upstreams as the metrics read them.
func (rt *Runtime) upstreamStats() []metrics.UpstreamStats {
	if rt.gateway == nil {
		return nil
	}
	states := rt.gateway.Upstreams()
	out := make([]metrics.UpstreamStats, 0, len(states))
	for _, u := range states {
		out = append(out, metrics.UpstreamStats{
			Name: u.Name, CircuitOpen: u.Circuit == gateway.CircuitOpen, InFlight: u.InFlight,
			Sessions: u.Sessions, Restarts: uint64(u.Restarts), LateResponses: u.LateResponses,
		})
	}
	return out
}

// observeBoth tells a gateway's events to the metrics and then to the
// caller's observer, when there is one: an observer that hears of an
// event finds it already counted in a scrape.
func observeBoth(mine gateway.Observer, m gateway.Observer) gateway.Observer {
	if mine == nil {
		return m
	}
	return observers{m, mine}
}

type observers []gateway.Observer

func (os observers) Forwarded(r gateway.ForwardRecord) {
	for _, o := range os {
		o.Forwarded(r)
	}
}

func (os observers) UpstreamEvent(e gateway.UpstreamEvent) {
	for _, o := range os {
		o.UpstreamEvent(e)
	}
}
