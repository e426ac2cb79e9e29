// Package toolschema judges the schemas of tools: what changed between two
// versions of a tool, whether the change touches what an agent uses, and
// how to rewrite the agent's payload for the new version. Like package
// guards, on which it builds, it is pure: no I/O, no clock, no randomness.
//
//	raw ─▶ ParseToolDocument ─▶ ToolDefinition ─▶ Fingerprint (RFC 8785 canonical form, hashed)
//	                                 │
//	old, new ─▶ DiffTools ─▶ []Change (direction-aware breaking flag)
//	old, new, UsedSurface ─▶ EvaluateDrift ─▶ DriftReport
//	                                             ├─ Manifest: guards.EvaluateSchema, the seed's verdict
//	                                             └─ Migration: MigrationPlan.Apply(payload)
//	verdict, affected, plan ─▶ SchemaAction ─▶ guards.Action (PROCEED, MIGRATE, HALT)
//
// ParseToolDocument reads an MCP Tool, a tools/list result or a bare JSON
// Schema; NormalizeSchema turns a JSON Schema into the SchemaNode graph that
// the fingerprint and the diff work on. InputDeviations and
// ObservedInputTool judge what an agent still sends against the current
// schema (the seed's silent rename, seen from the agent's side).
package toolschema
