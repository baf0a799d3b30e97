package metrics

import (
	"reflect"
	"testing"

	"github.com/mcprel/mcprel/client"
)

// addStats sums every counter of client.Stats: one it forgot would read
// zero on every scrape however often it happened.
func TestAddStatsSumsEveryCounter(t *testing.T) {
	var a, b client.Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		va.Field(i).SetUint(uint64(i + 1))
		vb.Field(i).SetUint(100)
	}
	sum := reflect.ValueOf(addStats(a, b))
	for i := range sum.NumField() {
		if got, want := sum.Field(i).Uint(), uint64(i+101); got != want {
			t.Errorf("addStats: %s = %d, want %d", sum.Type().Field(i).Name, got, want)
		}
	}
}
