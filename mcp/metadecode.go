package mcp

import (
	"encoding/json"
	"hash/maphash"
	"sync/atomic"
)

// maxRememberedMeta bounds the _meta Meta.UnmarshalJSON remembers, in
// bytes.
const maxRememberedMeta = 4 << 10

// rememberedMeta is a _meta that came twice in a row, and its decoded
// value, which is never handed out, only copied.
type rememberedMeta struct {
	raw     string
	decoded map[string]any
}

var (
	lastMeta atomic.Pointer[rememberedMeta]
	// lastSeen is the hash of the last _meta decoded: one seen once is
	// remembered by it alone, so that a _meta that never repeats costs no
	// copy.
	lastSeen atomic.Uint64
	metaSeed = maphash.MakeSeed()
)

// UnmarshalJSON decodes _meta as encoding/json decodes any object into a
// map[string]any (numbers as float64; into a map that is not nil, members
// are added). A modern server puts the same _meta, its serverInfo, in
// every result, and parsing it cost a client more than the rest of a small
// result: so the last _meta decoded is remembered (one, of at most 4 KiB)
// and the same bytes again are answered with a copy of it, which no one
// else holds.
func (m *Meta) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*m = nil
		return nil
	}
	var v map[string]any
	if last := lastMeta.Load(); last != nil && last.raw == string(data) {
		v = copyObject(last.decoded)
	} else {
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		// Twice in a row: worth keeping decoded.
		if h := maphash.Bytes(metaSeed, data); lastSeen.Swap(h) == h && len(data) <= maxRememberedMeta {
			lastMeta.Store(&rememberedMeta{raw: string(data), decoded: copyObject(v)})
		}
	}
	if *m == nil {
		*m = v
		return nil
	}
	for k, x := range v {
		(*m)[k] = x
	}
	return nil
}

// copyObject copies a decoded JSON object deeply: its objects and arrays
// are new, its strings, numbers and booleans are values.
func copyObject(o map[string]any) map[string]any {
	if o == nil {
		return nil
	}
	c := make(map[string]any, len(o))
	for k, v := range o {
		c[k] = copyValue(v)
	}
	return c
}

func copyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return copyObject(v)
	case []any:
		c := make([]any, len(v))
		for i, x := range v {
			c[i] = copyValue(x)
		}
		return c
	}
	return v
}
