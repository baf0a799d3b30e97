package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// DefaultMaxMessageBytes is the per-message size limit a transport applies
// when none is configured: 4 MiB, the same cap the official SDKs use for
// request bodies.
const DefaultMaxMessageBytes = 4 << 20

// envelope is the union of every member a JSON-RPC message may carry. Members
// are raw so that absence, null and wrong types can be told apart.
type envelope struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

var (
	version2  = []byte(`"2.0"`)
	nullValue = []byte("null")
)

// Decode parses one frame holding exactly one JSON-RPC message. The
// message's raw members (Params, Result) are subslices of frame, not
// copies: the caller must not reuse frame's bytes while the message lives.
//
// On failure it returns the error object to answer with. The returned
// Message then still carries what could be recovered: Kind is the shape the
// frame appeared to have and ID is its id when one could be read, so the
// caller can answer a broken request with its id and can stay silent for a
// broken notification, which must never be answered.
func Decode(frame []byte) (Message, *Error) {
	frame = bytes.TrimSpace(frame)
	if len(frame) == 0 {
		return Message{}, NewError(CodeInvalidRequest, "empty message")
	}
	switch frame[0] {
	case '{':
	case '[':
		if !Valid(frame) {
			return Message{}, NewError(CodeParseError, "parse error: invalid JSON")
		}
		return Message{}, NewError(CodeInvalidRequest, "batch messages are not supported: send one JSON-RPC message per frame")
	default:
		if !Valid(frame) {
			return Message{}, NewError(CodeParseError, "parse error: invalid JSON")
		}
		return Message{}, NewError(CodeInvalidRequest, "a JSON-RPC message must be a JSON object")
	}

	// Checked and split in one pass, without copying: the members alias
	// frame. Member names are matched exactly (JSON-RPC's are
	// case-sensitive), and a repeated one counts as its last occurrence,
	// as encoding/json reads it.
	var env envelope
	if err := ValidMembers(frame, func(k, v []byte) bool {
		switch string(k) {
		case "jsonrpc":
			env.JSONRPC = v
		case "id":
			env.ID = v
		case "method":
			env.Method = v
		case "params":
			env.Params = v
		case "result":
			env.Result = v
		case "error":
			env.Error = v
		}
		return true
	}); err != nil {
		return Message{}, NewError(CodeParseError, "parse error: invalid JSON")
	}
	return env.message()
}

func (env *envelope) message() (Message, *Error) {
	var m Message
	hasID := env.ID != nil
	hasMethod := env.Method != nil
	hasResult := env.Result != nil
	hasError := env.Error != nil

	// Classify first, so that every failure below can report the shape the
	// frame appeared to have and its id.
	switch {
	case hasMethod && hasID:
		m.Kind = KindRequest
	case hasMethod:
		m.Kind = KindNotification
	case hasResult || hasError:
		m.Kind = KindResponse
	}
	var idErr error
	if hasID {
		m.ID, idErr = ParseID(env.ID)
	}

	if !bytes.Equal(env.JSONRPC, version2) {
		if env.JSONRPC == nil {
			return m, NewError(CodeInvalidRequest, `missing "jsonrpc": "2.0"`)
		}
		return m, NewError(CodeInvalidRequest, `"jsonrpc" must be "2.0"`)
	}
	if m.Kind == 0 {
		return m, NewError(CodeInvalidRequest, "message has neither a method nor a result or error")
	}
	if idErr != nil && !(m.Kind == KindResponse && bytes.Equal(bytes.TrimSpace(env.ID), nullValue)) {
		return m, &Error{Code: CodeInvalidRequest, Message: idErr.Error()}
	}

	if m.Kind == KindResponse {
		if hasResult && hasError {
			return m, NewError(CodeInvalidRequest, "a response must not carry both result and error")
		}
		if hasError {
			var e Error
			if err := json.Unmarshal(env.Error, &e); err != nil {
				return m, NewError(CodeInvalidRequest, "invalid error object: %v", err)
			}
			m.Error = &e
		} else {
			m.Result = env.Result
		}
		return m, nil
	}

	if hasResult || hasError {
		return m, NewError(CodeInvalidRequest, "a request or notification must not carry result or error")
	}
	if s, ok := PlainString(env.Method); ok {
		m.Method = s
	} else {
		// Into a variable of its own: &m.Method would put every
		// decoded Message on the heap.
		var method string
		if err := json.Unmarshal(env.Method, &method); err != nil {
			return m, NewError(CodeInvalidRequest, `"method" must be a string`)
		}
		m.Method = method
	}
	if m.Method == "" {
		return m, NewError(CodeInvalidRequest, `"method" must not be empty`)
	}
	if env.Params != nil {
		p := bytes.TrimSpace(env.Params)
		if bytes.Equal(p, nullValue) {
			return m, nil // a null params member is read as an absent one
		}
		if len(p) == 0 || p[0] != '{' {
			return m, NewError(CodeInvalidRequest, `"params" must be a JSON object`)
		}
		m.Params = p
	}
	return m, nil
}
