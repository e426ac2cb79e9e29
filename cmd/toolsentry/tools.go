//go:build tools

// This file pins modules the work in progress imports (OTLP, MCP, orbit
// pcgroups, YAML); it is never built.
package main

import (
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/nats-io/nkeys"
	_ "github.com/synadia-io/orbit.go/pcgroups"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	_ "go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	_ "go.yaml.in/yaml/v3"
)
