package jsonrpc

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"unicode/utf8"
)

// errNotObject is what Members reports for JSON that is not an object.
var errNotObject = errors.New("not a JSON object")

// Members calls fn with each member of the JSON object obj, in order: its
// key, unescaped, and its value's raw bytes, which are a subslice of obj,
// not a copy. It stops early when fn returns false. It returns an error if
// obj is not an object. obj must be valid JSON (as the members of a
// decoded Message are): Members finds where each value ends, and only
// checks what it needs to.
//
// It lets a request's params be split once, without copying, so that each
// member is decoded by the code that needs it and no member is decoded
// twice.
func Members(obj []byte, fn func(key, value []byte) bool) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return errNotObject
		}
		end, escaped := stringEnd(obj, i)
		if end < 0 {
			return errNotObject
		}
		key := obj[i+1 : end-1]
		if escaped || !utf8.Valid(key) {
			// As encoding/json reads it: escapes resolved, invalid
			// UTF-8 replaced.
			var k string
			if err := json.Unmarshal(obj[i:end], &k); err != nil {
				return err
			}
			key = []byte(k)
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return errNotObject
		}
		i = skipSpace(obj, i+1)
		vend := valueEnd(obj, i)
		if vend < 0 {
			return errNotObject
		}
		if !fn(key, obj[i:vend]) {
			return nil
		}
		i = skipSpace(obj, vend)
		if i >= len(obj) {
			return errNotObject
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return nil
		default:
			return errNotObject
		}
	}
	return errNotObject
}

// errNotArray is what Elements reports for JSON that is not an array.
var errNotArray = errors.New("not a JSON array")

// Elements calls fn with each element of the JSON array arr, in order:
// its raw bytes, a subslice of arr, not a copy. It stops early when fn
// returns false, and returns an error if arr is not an array. Like
// Members, it is for valid JSON: it finds where each element ends and
// checks only what it needs to.
func Elements(arr []byte, fn func(value []byte) bool) error {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return errNotArray
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for i < len(arr) {
		end := valueEnd(arr, i)
		if end < 0 {
			return errNotArray
		}
		if !fn(arr[i:end]) {
			return nil
		}
		i = skipSpace(arr, end)
		if i >= len(arr) {
			return errNotArray
		}
		switch arr[i] {
		case ',':
			i = skipSpace(arr, i+1)
		case ']':
			return nil
		default:
			return errNotArray
		}
	}
	return errNotArray
}

// Member returns the raw value of obj's member key (the last one, if obj
// repeats it, as encoding/json reads it), or nil when obj has none. See
// Members for what obj must be.
func Member(obj []byte, key string) []byte {
	var found []byte
	Members(obj, func(k, v []byte) bool {
		if string(k) == key {
			found = v
		}
		return true
	})
	return found
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] (a
// quote), and whether it holds an escape; -1 if it is unterminated.
func stringEnd(b []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// valueEnd returns the index just past the value starting at b[i]; -1 if
// it does not end.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A number or a literal: up to the next delimiter.
	j := i
loop:
	for ; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			break loop
		}
	}
	if j == i {
		return -1
	}
	return j
}

// PlainString returns the value of v, a JSON string, when it holds no
// escape, no control character and only valid UTF-8: then the bytes
// between its quotes are the string encoding/json would decode, and no
// decoder is needed. ok is false for any other v, which the caller
// decodes in full.
//
// A short string seen before (a method name, "complete") is returned from
// a small table of recent ones, without a copy.
func PlainString(v []byte) (s string, ok bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	v = v[1 : len(v)-1]
	ascii := true
	for _, c := range v {
		switch {
		case c < 0x20 || c == '\\' || c == '"':
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	if !ascii {
		if !utf8.Valid(v) {
			return "", false
		}
		return string(v), true
	}
	return intern(v), true
}

// recent holds short strings PlainString returned lately, by a cheap hash
// of their bytes; a string that collides with another replaces it.
var recent [64]atomic.Pointer[string]

const maxInterned = 40

func intern(b []byte) string {
	if len(b) == 0 || len(b) > maxInterned {
		return string(b)
	}
	slot := &recent[(len(b)*31+int(b[0])*7+int(b[len(b)-1])*3+int(b[len(b)/2]))%len(recent)]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
