package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// InputRequired is returned (as an error) by a tool, prompt or resource
// handler that needs input from the client before it can finish: in the
// 2026-07-28 era the request then ends with an input_required result
// listing Requests, and the client retries with the answers, which the
// handler finds in Request.InputResponses.
//
// State is what the handler wants back on the retry. The server signs it
// (HMAC-SHA256, bound to the method and name of the request, its tenant
// and its arguments, with an expiry) before it leaves, and verifies the
// signature when it returns: a retry with a tampered or expired state, or
// with a state issued to another tenant or for other arguments, is refused
// with -32602 before the handler runs, and the handler sees the verified
// bytes in Request.RequestState. The state is signed, not encrypted: the
// client can read it, so nothing secret belongs in it.
//
// In the legacy era a handler asks with Request.CallClient instead;
// InputRequired there is an internal error.
type InputRequired struct {
	Requests map[string]mcp.InputRequest
	State    []byte
}

func (e *InputRequired) Error() string { return "input required" }

// ElicitRequest, SamplingRequest and RootsRequest build input requests.
func ElicitRequest(p mcp.ElicitParams) mcp.InputRequest {
	return mcp.InputRequest{Method: mcp.MethodElicit, Params: p}
}

func SamplingRequest(p mcp.CreateMessageParams) mcp.InputRequest {
	return mcp.InputRequest{Method: mcp.MethodCreateMessage, Params: p}
}

func RootsRequest() mcp.InputRequest {
	return mcp.InputRequest{Method: mcp.MethodListRoots, Params: struct{}{}}
}

// DefaultStateTTL is how long a signed requestState stays valid.
const DefaultStateTTL = time.Hour

// stateSigner signs and verifies requestState values.
type stateSigner struct {
	key []byte
	ttl time.Duration
}

func newStateSigner(key []byte, ttl time.Duration) *stateSigner {
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	return &stateSigner{key: key, ttl: ttl}
}

func (s *stateSigner) mac(scope string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(scope))
	m.Write([]byte{0})
	m.Write(body)
	return m.Sum(nil)
}

// sign returns base64url(expiry || payload) "." base64url(mac).
func (s *stateSigner) sign(scope string, payload []byte, now time.Time) string {
	body := binary.BigEndian.AppendUint64(nil, uint64(now.Add(s.ttl).Unix()))
	body = append(body, payload...)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(s.mac(scope, body))
}

var errBadState = errors.New("requestState failed its integrity check")

func (s *stateSigner) verify(scope, state string, now time.Time) ([]byte, error) {
	b64body, b64mac, ok := strings.Cut(state, ".")
	if !ok {
		return nil, errBadState
	}
	body, err1 := base64.RawURLEncoding.DecodeString(b64body)
	mac, err2 := base64.RawURLEncoding.DecodeString(b64mac)
	if err1 != nil || err2 != nil || len(body) < 8 || !hmac.Equal(mac, s.mac(scope, body)) {
		return nil, errBadState
	}
	if now.Unix() > int64(binary.BigEndian.Uint64(body)) {
		return nil, errors.New("requestState has expired; start the request again")
	}
	return body[8:], nil
}

// argsDigest is a digest of a request's arguments, the same for any two
// encodings of the same JSON value (member order, spacing): what an
// input_required state is bound to besides the method, name and tenant.
func argsDigest(args []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber() // numbers exactly as sent
	canonical := args
	if len(args) > 0 && dec.Decode(&v) == nil {
		canonical, _ = json.Marshal(v) // object members sorted
	}
	sum := sha256.Sum256(canonical)
	return string(sum[:])
}

// retryMembers are the members any modern request may carry on a retry,
// undecoded.
type retryMembers struct {
	inputResponses, requestState json.RawMessage
}

// retryMembersOf finds a request's retry members in its params.
func retryMembersOf(params json.RawMessage) (retryMembers, *jsonrpc.Error) {
	var rm retryMembers
	if len(params) == 0 {
		return rm, nil
	}
	err := jsonrpc.Members(params, func(k, v []byte) bool {
		rm.take(k, v)
		return true
	})
	if err != nil {
		return rm, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: params must be an object")
	}
	return rm, nil
}

// take keeps member k if it is one of the retry members.
func (rm *retryMembers) take(k, v []byte) {
	switch string(k) {
	case "inputResponses":
		rm.inputResponses = v
	case "requestState":
		rm.requestState = v
	}
}

// stateScope is everything an input_required state of this request is
// bound to: method, name, tenant and arguments. The arguments' digest is
// computed only here, when a state is signed or verified, not for every
// call.
func (r *inflight) stateScope() string {
	return r.method + "\x00" + r.scope + "\x00" + r.scopeTenant + "\x00" + argsDigest(r.scopeArgs)
}

// readRetry fills q's InputResponses and RequestState from a request's
// retry members, verifying the state against scope().
func (s *Server) readRetry(q *Request, p retryMembers, scope func() string) *jsonrpc.Error {
	if len(p.inputResponses) > 0 && string(p.inputResponses) != "null" {
		if err := json.Unmarshal(p.inputResponses, &q.InputResponses); err != nil {
			return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: inputResponses must be an object of results")
		}
		for k, v := range q.InputResponses {
			if len(v) == 0 || v[0] != '{' {
				return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: inputResponses[%q] must be an object", k)
			}
		}
	}
	if len(p.requestState) > 0 && string(p.requestState) != "null" {
		var token string
		if err := json.Unmarshal(p.requestState, &token); err != nil {
			return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: requestState must be a string")
		}
		state, err := s.state.verify(scope(), token, time.Now())
		if err != nil {
			return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %v", err)
		}
		q.RequestState = state
	}
	return nil
}

// inputRequired turns an InputRequired from a handler into the result the
// modern era sends, or an error in the legacy era.
func (s *Server) inputRequired(r *inflight, ir *InputRequired, scope string) (mcp.Result, *jsonrpc.Error) {
	if r.era != mcp.Modern {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error: the handler asked for input with an input_required result, which protocol %s does not have", r.sess.Version())
	}
	if len(ir.Requests) == 0 && len(ir.State) == 0 {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error: an input_required result needs input requests or state")
	}
	res := &mcp.InputRequiredResult{ResultBase: mcp.ResultBase{ResultType: mcp.ResultInputRequired}, InputRequests: ir.Requests}
	if ir.State != nil {
		res.RequestState = s.state.sign(scope, ir.State, time.Now())
	}
	return res, nil
}

// Require returns a -32021 error naming the capabilities the client did not
// declare among caps ("sampling", "elicitation", "roots", or an extension
// id such as mcp.ExtensionTasks, which the error's data lists under
// requiredCapabilities.extensions), or nil when it declared them all.
// Return it from a handler that cannot work without them.
func (q *Request) Require(caps ...string) error {
	missing := map[string]map[string]any{}
	for _, c := range caps {
		var have json.RawMessage
		switch c {
		case "sampling":
			have = q.ClientCapabilities.Sampling
		case "elicitation":
			have = q.ClientCapabilities.Elicitation
		case "roots":
			have = q.ClientCapabilities.Roots
		default: // an extension, by its id
			if have = q.ClientCapabilities.Extensions[c]; have == nil {
				if missing["extensions"] == nil {
					missing["extensions"] = map[string]any{}
				}
				missing["extensions"][c] = map[string]any{}
			}
			continue
		}
		if have == nil {
			missing[c] = map[string]any{}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(missing)) // one message for one set of capabilities
	if ext, ok := missing["extensions"]; ok {
		names = slices.DeleteFunc(names, func(n string) bool { return n == "extensions" })
		names = append(names, slices.Sorted(maps.Keys(ext))...)
	}
	return jsonrpc.NewError(mcp.CodeMissingClientCapability, "the client did not declare the capabilities this request needs: %s", strings.Join(names, ", ")).
		WithData(mcp.MissingCapabilityData{RequiredCapabilities: missing})
}
