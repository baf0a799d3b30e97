module github.com/mcprel/mcprel

go 1.26

require github.com/google/jsonschema-go v0.4.3 // indirect
