package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func init() {
	register(&command{
		name:    "migrate",
		summary: "rewrite an agent's tool payload from an old schema version to a new one",
		usage:   migrateUsage,
		run:     runMigrate,
	})
}

const migrateUsage = `Usage: toolsentry migrate [flags] OLD NEW < payload.json

Reads the arguments object an agent sends to the tool (one JSON value) on
standard input and writes it, migrated from OLD's input schema to NEW's, on
standard output: renamed fields moved (at any depth, inside arrays),
values converted between string and number, integer or boolean when that is
lossless, enum values mapped to their new spelling, and defaults the payload
relied on pinned. Numbers are kept as written.

A payload that cannot be migrated without losing or misreading data (it
sends a field removed without counterpart, an enum value with no mapping, a
value that does not convert exactly, a field whose meaning changed only in
its description) is not written: the exit status is 1 and the message names
the path. Run toolsentry diff to see the whole plan.

` + toolInputsHelp + `
Flags (they may come before or after the files):
  --tool NAME   the tool to migrate for when OLD or NEW lists several (default: the only one)

Example:
  echo '{"user_id": "u-42", "limit": "10"}' | toolsentry migrate crm-v1.json crm-v2.json
`

func runMigrate(_ context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	toolName := fs.String("tool", "", "")
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 2 {
		return usageErrorf("migrate needs two files, OLD and NEW, got %d", len(files))
	}
	oldT, newT, err := loadToolPair(files[0], files[1], *toolName)
	if err != nil {
		return err
	}
	payload, err := decodePayload(io.in)
	if err != nil {
		return fmt.Errorf("reading the payload from standard input: %w", err)
	}
	rep, err := toolschema.EvaluateDrift(oldT, newT, toolschema.UsedSurface{Input: toolschema.SurfaceFromArguments(payload), Sends: toolschema.SendsFromArguments(payload)})
	if err != nil {
		return err
	}
	out, err := rep.Migration.Apply(payload)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(io.out)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}
