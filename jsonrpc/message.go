package jsonrpc

import "encoding/json"

// Kind says which of the three JSON-RPC message shapes a Message has.
type Kind uint8

const (
	KindRequest      Kind = iota + 1 // has an id and a method; expects a response
	KindNotification                 // has a method and no id; never answered
	KindResponse                     // has an id and a result or an error
)

// String returns the lower-case name of the kind.
func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// Message is one decoded inbound JSON-RPC message. Which fields are set
// depends on Kind: requests have ID, Method and Params; notifications have
// Method and Params; responses have ID and exactly one of Result and Error.
//
// Decode leaves Params and Result as subslices of the frame it decoded: a
// caller that keeps them after reusing the frame's bytes copies them.
type Message struct {
	Kind   Kind
	ID     ID
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *Error
}
