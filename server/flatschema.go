package server

import (
	"reflect"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcprel/mcprel/jsonrpc"
)

// flatSchema is an input schema simple enough to judge on the raw
// arguments: an object whose declared properties each have one primitive
// type, some of them required, others refused or allowed. Most tools'
// schemas are, those built from a Go struct included. For them a valid
// call is judged without decoding its arguments into a map and walking
// the validator — the costliest step of a small call. It can only say
// "valid": anything it cannot prove so goes to the validator, which also
// words the error.
type flatSchema struct {
	props    map[string]flatProp
	required int  // how many props are required
	closed   bool // additionalProperties: false
}

type flatProp struct {
	kind     string // "string", "boolean", "number", "integer" or "null"
	bit      uint64 // this property's bit among those seen
	required bool
}

// flatSchemaOf returns the flat form of s, or nil when s asks for more
// than flatSchema checks (any keyword but the annotations).
func flatSchemaOf(s *jsonschema.Schema) *flatSchema {
	if s == nil || s.Type != "object" || len(s.Properties) > 64 || !onlyAnnotations(s, "Type", "Properties", "Required", "AdditionalProperties", "PropertyOrder") {
		return nil
	}
	f := &flatSchema{props: make(map[string]flatProp, len(s.Properties))}
	switch ap := s.AdditionalProperties; {
	case ap == nil || reflect.DeepEqual(ap, &jsonschema.Schema{}):
	case reflect.DeepEqual(ap, &jsonschema.Schema{Not: &jsonschema.Schema{}}): // false
		f.closed = true
	default:
		return nil
	}
	i := 0
	for name, p := range s.Properties {
		switch {
		case p == nil || !onlyAnnotations(p, "Type"):
			return nil
		case p.Type != "string" && p.Type != "boolean" && p.Type != "number" && p.Type != "integer" && p.Type != "null":
			return nil
		}
		f.props[name] = flatProp{kind: p.Type, bit: 1 << i}
		i++
	}
	for _, name := range s.Required {
		p, ok := f.props[name]
		if !ok {
			return nil // required yet undeclared: the validator says how
		}
		if !p.required {
			p.required = true
			f.props[name] = p
			f.required++
		}
	}
	return f
}

// annotations are the keywords that never make a value invalid.
var annotations = []string{"ID", "Schema", "Comment", "Title", "Description", "Default", "Deprecated", "ReadOnly", "WriteOnly", "Examples"}

// onlyAnnotations reports whether s sets no field but the annotations and
// the named ones.
func onlyAnnotations(s *jsonschema.Schema, allowed ...string) bool {
	bare := *s
	v := reflect.ValueOf(&bare).Elem()
	for _, name := range append(allowed, annotations...) {
		if f := v.FieldByName(name); f.IsValid() {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	return reflect.DeepEqual(bare, jsonschema.Schema{})
}

// valid reports whether the raw arguments args (valid JSON, as a decoded
// request's members are) certainly satisfy f. False means "ask the
// validator", not "invalid".
func (f *flatSchema) valid(args []byte) bool {
	if len(args) == 0 || args[0] != '{' {
		return false
	}
	var seen uint64
	required := 0
	ok := true
	err := jsonrpc.Members(args, func(key, value []byte) bool {
		p, declared := f.props[string(key)]
		switch {
		case !declared:
			ok = !f.closed
		case seen&p.bit != 0 || !p.accepts(value):
			ok = false // a repeated member, or a value of another type
		default:
			seen |= p.bit
			if p.required {
				required++
			}
		}
		return ok
	})
	return err == nil && ok && required == f.required
}

// accepts reports whether the JSON value v is of p's type. An integer
// written with a fraction or an exponent (1.0, 1e3) is left to the
// validator.
func (p flatProp) accepts(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch p.kind {
	case "string":
		return v[0] == '"'
	case "boolean":
		return v[0] == 't' || v[0] == 'f'
	case "null":
		return v[0] == 'n'
	case "number", "integer":
		if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return false
		}
		if p.kind == "integer" {
			for _, c := range v {
				if c == '.' || c == 'e' || c == 'E' {
					return false
				}
			}
		}
		// A number past float64's range (1e400) is not a number to the
		// validator, which reads arguments as float64.
		_, err := strconv.ParseFloat(string(v), 64)
		return err == nil
	}
	return false
}
