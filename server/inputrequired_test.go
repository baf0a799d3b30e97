package server

import (
	"strings"
	"testing"
	"time"
)

func TestStateSigner(t *testing.T) {
	s := newStateSigner([]byte("key"), time.Hour)
	t0 := time.Unix(1_800_000_000, 0)
	state := s.sign("tools/call\x00a", []byte("payload"), t0)

	tests := []struct {
		name  string
		scope string
		state string
		at    time.Time
		want  string // payload, or "" for refused
	}{
		{"round trip", "tools/call\x00a", state, t0.Add(time.Minute), "payload"},
		{"another tool's state", "tools/call\x00b", state, t0, ""},
		{"tampered body", "tools/call\x00a", flip(state, 12), t0, ""},
		{"tampered mac", "tools/call\x00a", state + "A", t0, ""},
		{"suffix added", "tools/call\x00a", state + "-TAMPERED", t0, ""},
		{"no separator", "tools/call\x00a", strings.ReplaceAll(state, ".", ""), t0, ""},
		{"expired", "tools/call\x00a", state, t0.Add(time.Hour + time.Second), ""},
	}
	for _, tt := range tests {
		got, err := s.verify(tt.scope, tt.state, tt.at)
		if tt.want == "" {
			if err == nil {
				t.Errorf("%s: accepted", tt.name)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: %q, %v", tt.name, got, err)
		}
	}
	other := newStateSigner([]byte("other key"), time.Hour)
	if _, err := other.verify("tools/call\x00a", state, t0); err == nil {
		t.Error("a state signed with another key was accepted")
	}
}

// flip changes the base64 character at i to another valid one.
func flip(s string, i int) string {
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}
