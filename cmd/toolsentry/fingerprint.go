package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func init() {
	register(&command{
		name:    "fingerprint",
		summary: "print the canonical schema fingerprint of a tool, a tools/list result or a schema",
		usage:   fingerprintUsage,
		run:     runFingerprint,
	})
}

const fingerprintUsage = `Usage: toolsentry fingerprint [flags] FILE

Prints the fingerprint of each tool in FILE: "sha256:" and the hex SHA-256 of
the tool's canonical form (RFC 8785 JSON of the normalised schemas, name,
title, description and annotations). Key order, the order of required and
enum, "type": "x" against ["x"], and how $refs are laid out do not change it;
any change of behaviour does.

FILE ("-" for standard input) is an MCP Tool object, an MCP tools/list result
{"tools": [...]} or a bare JSON Schema (taken as the input schema).
For a file with one tool the output is its fingerprint alone; with several,
one line per tool: the fingerprint, two spaces and the name, in the listed
order.

Flags:
  --json   print [{"name", "fingerprint"}, ...] instead (default: false)

Example:
  toolsentry fingerprint tools-list.json
`

type fingerprintJSON struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
}

func runFingerprint(_ context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("fingerprint", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usageErrorf("fingerprint needs one FILE, got %d", len(files))
	}
	var raw []byte
	if files[0] == "-" {
		raw, err = io.ReadAll(sio.in)
	} else {
		raw, err = os.ReadFile(files[0])
	}
	if err != nil {
		return err
	}
	tools, err := toolschema.ParseToolDocument(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	list := make([]fingerprintJSON, len(tools))
	for i, t := range tools {
		fp, err := toolschema.Fingerprint(t)
		if err != nil {
			return fmt.Errorf("%s: tool %q: %w", files[0], t.Name, err)
		}
		list[i] = fingerprintJSON{Name: t.Name, Fingerprint: fp}
	}
	if *asJSON {
		enc := json.NewEncoder(sio.out)
		enc.SetEscapeHTML(false)
		return enc.Encode(list)
	}
	for _, f := range list {
		if len(list) == 1 {
			fmt.Fprintln(sio.out, f.Fingerprint)
		} else {
			fmt.Fprintf(sio.out, "%s  %s\n", f.Fingerprint, f.Name)
		}
	}
	return nil
}
