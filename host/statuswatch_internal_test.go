package host

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/status"
)

// After a reload the status page takes out the secrets of the upstreams
// the reload brought (a rotated header, a new upstream's environment)
// beside the old ones, which an upstream being drained still runs with;
// it watches the upstreams added and forgets those gone.
func TestUpstreamWatchFollowsAReload(t *testing.T) {
	old := gateway.Upstream{Name: "h", Header: http.Header{"X-Api-Key": {"old-key-value"}}}
	w := newUpstreamWatch([]gateway.Upstream{old})
	rotated := gateway.Upstream{Name: "h", Header: http.Header{"X-Api-Key": {"new-key-value"}}}
	added := gateway.Upstream{Name: "n", Env: []string{"N_TOKEN=n-secret-value"}}
	w.reloaded([]gateway.Upstream{rotated, added})

	w.UpstreamEvent(gateway.UpstreamEvent{Upstream: "h", Kind: gateway.EventDied, Err: errors.New(`refused api key "new-key-value" (was "old-key-value")`)})
	w.UpstreamEvent(gateway.UpstreamEvent{Upstream: "n", Kind: gateway.EventConnectFailed, Err: errors.New("n-secret-value rejected")})
	for _, name := range []string{"h", "n"} {
		su := status.Upstream{Name: name}
		w.fill(&su)
		if su.LastError == "" {
			t.Errorf("upstream %s: no last error kept", name)
		}
		for _, secret := range []string{"new-key-value", "old-key-value", "n-secret-value"} {
			if strings.Contains(su.LastError, secret) {
				t.Errorf("upstream %s shows %q: %s", name, secret, su.LastError)
			}
		}
	}
	w.reloaded([]gateway.Upstream{rotated})
	su := status.Upstream{Name: "n"}
	if w.fill(&su); su.LastError != "" {
		t.Errorf("an upstream gone is still watched: %q", su.LastError)
	}
	// Two configurations' secrets at most: the one before the last
	// may still drain; older ones are forgotten, or every reload of a
	// rotated credential would lengthen the list for good.
	got := strings.Join(w.currentSecrets(), " ")
	if !strings.Contains(got, "new-key-value") || !strings.Contains(got, "n-secret-value") || strings.Contains(got, "old-key-value") {
		t.Errorf("after two reloads the secrets are %q", got)
	}
	w.reloaded([]gateway.Upstream{rotated})
	if got := w.currentSecrets(); len(got) != 1 || got[0] != "new-key-value" {
		t.Errorf("after three reloads the secrets are %q", got)
	}
}
