package main

import (
	"errors"
	"io"
)

// errMCPToolsCloudEvent is reported for a CloudEvent found in an
// --mcp-tools file, which holds tools/list results only.
var errMCPToolsCloudEvent = errors.New("a CloudEvent in an --mcp-tools file, which holds MCP tools/list results only (give it as a FILE argument instead)")

// readMCPTools reads the --mcp-tools file (standard input for "-"): MCP
// tools/list results, bare ({"tools": [...]}) or in the JSON-RPC responses
// that hold them, one document per page, each becoming a schema observation
// of --server. Any other document is reported as a problem, at its line.
func (r *emitReader) readMCPTools(path string, stdin io.Reader) error {
	name, data, err := readInput(path, stdin)
	if err != nil {
		return err
	}
	r.toolsOnly = true
	defer func() { r.toolsOnly = false }()
	before := len(r.events) + len(r.problems)
	r.read(name, data)
	if len(r.events)+len(r.problems) == before {
		r.problems = append(r.problems, emitProblem{name, errors.New("no tools/list result in it")})
	}
	return nil
}
