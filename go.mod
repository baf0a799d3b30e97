module github.com/mcprel/mcprel

go 1.26.0

require (
	github.com/google/jsonschema-go v0.4.3 // indirect
	golang.org/x/time v0.16.0 // indirect
)
