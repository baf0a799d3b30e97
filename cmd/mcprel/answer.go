package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// answerer answers what a server asks "mcprel call" for in the middle of
// a call — elicitation/create, sampling/createMessage, roots/list — the
// way a person expects: on a terminal it asks them (a form field by
// field, with its defaults and choices; a reply for a sampling request);
// from a file given with --answers it answers as written; otherwise it
// declines, and says on stderr how to answer next time.
type answerer struct {
	term    *terminal                  // nil without a terminal on stdin
	out     io.Writer                  // where questions and notes go (stderr)
	file    map[string]json.RawMessage // --answers, by method
	rootURI string                     // --roots: the working directory, as a file URI

	mu sync.Mutex // one question at a time
}

// answerMethods are the requests --answers may answer.
var answerMethods = []string{mcp.MethodElicit, mcp.MethodCreateMessage, mcp.MethodListRoots}

// maxAnswersBytes bounds an --answers file, which is read whole.
const maxAnswersBytes = 1 << 20

// readAnswers reads an --answers file: a JSON object whose members are
// methods (elicitation/create, sampling/createMessage, roots/list) and
// whose values are the results to answer them with.
func readAnswers(path string) (map[string]json.RawMessage, error) {
	data, err := readSmallFile(path, maxAnswersBytes)
	if err != nil {
		return nil, err
	}
	var byMethod map[string]json.RawMessage
	if err := json.Unmarshal(data, &byMethod); err != nil || byMethod == nil {
		return nil, fmt.Errorf(`%s is not a JSON object of answers by method, such as {"%s": {"action": "accept", "content": {...}}}`, path, mcp.MethodElicit)
	}
	for method, answer := range byMethod {
		known := false
		for _, m := range answerMethods {
			known = known || m == method
		}
		if !known {
			return nil, fmt.Errorf("%s answers %q, which a server does not ask a client; answer %s", path, method, strings.Join(answerMethods, ", "))
		}
		if t := bytes.TrimSpace(answer); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("%s: the answer to %s must be a JSON object (the result to send)", path, method)
		}
	}
	return byMethod, nil
}

// capabilities are what the client declares it can answer: elicitation
// always (without a terminal or an answer it declines, which a server
// handles better than a request it may not make), sampling when someone
// or something can answer it, roots only with --roots.
func (a *answerer) capabilities(caps *mcp.ClientCapabilities) {
	caps.Elicitation = json.RawMessage(`{"form":{},"url":{}}`)
	if a.term != nil || a.file[mcp.MethodCreateMessage] != nil {
		caps.Sampling = json.RawMessage(`{}`)
	}
	if a.rootURI != "" || a.file[mcp.MethodListRoots] != nil {
		caps.Roots = json.RawMessage(`{}`)
	}
}

// answer is the client's OnRequest handler.
func (a *answerer) answer(ctx context.Context, method string, params json.RawMessage) (any, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if answer, ok := a.file[method]; ok {
		return answer, nil
	}
	switch method {
	case mcp.MethodElicit:
		return a.elicit(ctx, params)
	case mcp.MethodCreateMessage:
		return a.sample(ctx, params)
	case mcp.MethodListRoots:
		if a.rootURI == "" {
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "this client offers no roots (mcprel call --roots offers the working directory)")
		}
		return map[string]any{"roots": []map[string]any{{"uri": a.rootURI, "name": filepath.Base(strings.TrimPrefix(a.rootURI, "file://"))}}}, nil
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "mcprel call does not serve %s", method)
}

// declined notes on stderr that a question could not be asked, and how to
// answer it next time.
func (a *answerer) declined(method, what string) {
	fmt.Fprintf(a.out, "mcprel call: the server asked for input (%s: %s) and there is no terminal to ask on: declined.\n"+
		"  To answer, run on a terminal, or pass --answers FILE with {%q: <the result to send>}.\n", method, what, method)
}

type elicitParams struct {
	Mode            string          `json:"mode"`
	Message         string          `json:"message"`
	URL             string          `json:"url"`
	RequestedSchema json.RawMessage `json:"requestedSchema"`
}

func (a *answerer) elicit(ctx context.Context, params json.RawMessage) (any, error) {
	var p elicitParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid elicitation request: %v", err)
	}
	decline := map[string]any{"action": "decline"}
	if a.term == nil {
		a.declined(mcp.MethodElicit, strconv.Quote(p.Message))
		return decline, nil
	}
	fmt.Fprintf(a.out, "\nThe server asks: %s\n", p.Message)
	if p.Mode == "url" {
		fmt.Fprintf(a.out, "It asks you to open %s\n", p.URL)
		return a.confirm(ctx, "Open it and continue? [y/N/c] ", false, nil)
	}
	fields, required, err := formFields(p.RequestedSchema)
	if err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid requestedSchema: %v", err)
	}
	content := map[string]any{}
	for _, f := range fields {
		v, ok, err := a.askField(ctx, f, required[f.name])
		if err != nil {
			return map[string]any{"action": "cancel"}, nil
		}
		if ok {
			content[f.name] = v
		}
	}
	return a.confirm(ctx, "Send these answers? [Y/n/c] ", true, content)
}

// confirm asks yes, no or cancel: accept (with content when there is a
// form), decline, or cancel; def is the answer to an empty line.
func (a *answerer) confirm(ctx context.Context, question string, def bool, content map[string]any) (any, error) {
	line, err := a.term.ask(ctx, a.out, question)
	if err != nil {
		return map[string]any{"action": "cancel"}, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
	case "":
		if !def {
			return map[string]any{"action": "decline"}, nil
		}
	case "c", "cancel":
		return map[string]any{"action": "cancel"}, nil
	default:
		return map[string]any{"action": "decline"}, nil
	}
	res := map[string]any{"action": "accept"}
	if content != nil {
		res["content"] = content
	}
	return res, nil
}

// formField is one property of an elicitation form.
type formField struct {
	name   string
	schema fieldSchema
}

type fieldSchema struct {
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Default     json.RawMessage `json:"default"`
	Enum        []string        `json:"enum"`
	EnumNames   []string        `json:"enumNames"`
	OneOf       []struct {
		Const string `json:"const"`
		Title string `json:"title"`
	} `json:"oneOf"`
	Items *struct {
		Enum  []string `json:"enum"`
		AnyOf []struct {
			Const string `json:"const"`
			Title string `json:"title"`
		} `json:"anyOf"`
	} `json:"items"`
}

// formFields reads a requested schema's properties in the order the
// server wrote them, and which are required.
func formFields(schema json.RawMessage) ([]formField, map[string]bool, error) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if len(schema) > 0 {
		if err := json.Unmarshal(schema, &s); err != nil {
			return nil, nil, err
		}
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	if len(s.Properties) == 0 {
		return nil, required, nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Properties))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("properties must be an object")
	}
	var fields []formField
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := t.(string)
		var fs fieldSchema
		if err := dec.Decode(&fs); err != nil {
			return nil, nil, fmt.Errorf("property %q: %v", name, err)
		}
		fields = append(fields, formField{name: name, schema: fs})
	}
	return fields, required, nil
}

// choices are a field's allowed values and their labels, if it has any.
func (s fieldSchema) choices() (values, labels []string) {
	switch {
	case len(s.OneOf) > 0:
		for _, o := range s.OneOf {
			values, labels = append(values, o.Const), append(labels, o.Title)
		}
	case len(s.Enum) > 0:
		values = s.Enum
		labels = s.EnumNames
	case s.Items != nil && len(s.Items.AnyOf) > 0:
		for _, o := range s.Items.AnyOf {
			values, labels = append(values, o.Const), append(labels, o.Title)
		}
	case s.Items != nil:
		values = s.Items.Enum
	}
	return values, labels
}

// askField asks for one field until the answer fits it (three tries): ok
// false leaves an optional field out. An error is the end of the input.
func (a *answerer) askField(ctx context.Context, f formField, required bool) (v any, ok bool, err error) {
	s := f.schema
	label := cmp.Or(s.Title, f.name)
	values, labels := s.choices()
	var hint []string
	if s.Type != "" {
		hint = append(hint, s.Type)
	}
	if required {
		hint = append(hint, "required")
	}
	if s.Description != "" {
		fmt.Fprintf(a.out, "  %s\n", s.Description)
	}
	for i, val := range values {
		name := val
		if i < len(labels) && labels[i] != "" {
			name = labels[i] + " (" + val + ")"
		}
		fmt.Fprintf(a.out, "    %d) %s\n", i+1, name)
	}
	question := fmt.Sprintf("%s (%s)", label, strings.Join(hint, ", "))
	if len(s.Default) > 0 {
		question += " [" + string(s.Default) + "]"
	}
	question += ": "
	for range 3 {
		line, err := a.term.ask(ctx, a.out, question)
		if err != nil {
			return nil, false, err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			if len(s.Default) > 0 {
				var d any
				if json.Unmarshal(s.Default, &d) == nil {
					return d, true, nil
				}
			}
			if !required {
				return nil, false, nil
			}
			fmt.Fprintln(a.out, "  an answer is required")
			continue
		}
		v, problem := parseField(s, line, values)
		if problem == "" {
			return v, true, nil
		}
		fmt.Fprintln(a.out, "  "+problem)
	}
	return nil, false, io.EOF
}

// parseField turns a typed answer into the field's JSON value, or says
// what is wrong with it.
func parseField(s fieldSchema, line string, values []string) (any, string) {
	// A choice's value comes before a choice's number: with choices
	// "2" and "1", typing 1 means "1", not the first.
	pick := func(word string) (string, bool) {
		for _, v := range values {
			if v == word {
				return v, true
			}
		}
		if n, err := strconv.Atoi(word); err == nil && n >= 1 && n <= len(values) {
			return values[n-1], true
		}
		return "", false
	}
	switch {
	case s.Type == "array":
		var picked []string
		for _, word := range strings.Split(line, ",") {
			v, ok := pick(strings.TrimSpace(word))
			if !ok {
				return nil, fmt.Sprintf("choose from the list, by number or value, separated by commas (not %q)", word)
			}
			picked = append(picked, v)
		}
		return picked, ""
	case len(values) > 0:
		v, ok := pick(line)
		if !ok {
			return nil, "choose one of the list, by number or value"
		}
		return v, ""
	case s.Type == "boolean":
		switch strings.ToLower(line) {
		case "y", "yes", "true":
			return true, ""
		case "n", "no", "false":
			return false, ""
		}
		return nil, "answer yes or no"
	case s.Type == "integer":
		n, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, "a whole number, please"
		}
		return n, ""
	case s.Type == "number":
		f, err := strconv.ParseFloat(line, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			// NaN and infinities parse but have no JSON form.
			return nil, "a number, please"
		}
		return f, ""
	}
	return line, ""
}

type sampleParams struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	SystemPrompt string `json:"systemPrompt"`
}

// sample answers a sampling request: on a terminal the person reads the
// messages and replies as the model, or declines with an empty line.
func (a *answerer) sample(ctx context.Context, params json.RawMessage) (any, error) {
	rejected := &jsonrpc.Error{Code: -1, Message: "the user declined the sampling request"}
	if a.term == nil {
		a.declined(mcp.MethodCreateMessage, "a model's reply")
		return nil, rejected
	}
	var p sampleParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid sampling request: %v", err)
	}
	fmt.Fprintln(a.out, "\nThe server asks for a model's reply to:")
	if p.SystemPrompt != "" {
		fmt.Fprintf(a.out, "  [system] %s\n", p.SystemPrompt)
	}
	for _, m := range p.Messages {
		var c struct {
			Type, Text string
		}
		json.Unmarshal(m.Content, &c)
		if c.Type != "text" {
			c.Text = "(" + cmp.Or(c.Type, "unreadable") + " content)"
		}
		fmt.Fprintf(a.out, "  [%s] %s\n", m.Role, c.Text)
	}
	line, err := a.term.ask(ctx, a.out, "Reply as the model (an empty line declines): ")
	if err != nil || strings.TrimSpace(line) == "" {
		return nil, rejected
	}
	return map[string]any{"role": "assistant", "content": map[string]any{"type": "text", "text": strings.TrimSpace(line)},
		"model": "a person at mcprel call", "stopReason": "endTurn"}, nil
}

// rootOf is the working directory as a root's file URI.
func rootOf(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

// terminal reads answers, a line at a time, from a terminal.
type terminal struct {
	once  sync.Once
	lines chan string
	in    io.Reader
}

// openTerminal returns the terminal stdin is, or nil when it is none (a
// pipe, a file, /dev/null).
func openTerminal(stdin io.Reader) *terminal {
	f, ok := stdin.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return &terminal{in: f}
}

// ask writes question and returns the next line typed, or an error at the
// end of the input or when ctx ends first (the call was cancelled or its
// deadline passed while the person thought).
func (t *terminal) ask(ctx context.Context, out io.Writer, question string) (string, error) {
	t.once.Do(func() {
		// One reader for the command's life: a line typed after its
		// question was abandoned answers the next one.
		t.lines = make(chan string)
		go func() {
			r := bufio.NewReader(t.in)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					close(t.lines)
					return
				}
				t.lines <- strings.TrimRight(line, "\r\n")
			}
		}()
	})
	fmt.Fprint(out, question)
	select {
	case line, ok := <-t.lines:
		if !ok {
			fmt.Fprintln(out)
			return "", io.EOF
		}
		return line, nil
	case <-ctx.Done():
		fmt.Fprintln(out)
		return "", context.Cause(ctx)
	}
}
