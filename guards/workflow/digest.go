package workflow

import (
	"github.com/toolsentry/toolsentry/guards"
)

// The digests of workflow verdicts that the seed has no form for. Like the
// seed's, they are sha256 over Python's json.dumps(obj, sort_keys=True), so
// an auditor recomputes them with the standard library of either language.
// The structure is written canonically:
//
//	"<tool id>"
//	{"chain": [S, ...]}
//	{"parallel": {"mode": "all"|"any", "of": [S, ...]}}
//	{"k_of_n": {"k": <int>, "of": [S, ...]}}
//	{"conditional": [{"p": <float>, "then": S}, ...]}
//
// with k a Python int and p a Python float (repr, so 1 is written 1.0).

// structureValue is the canonical structure as a tree for PyJSONDumps.
func structureValue(n Node) any {
	list := func() []any {
		out := make([]any, len(n.Of))
		for i, c := range n.Of {
			out[i] = structureValue(c)
		}
		return out
	}
	switch n.Kind {
	case KindTool:
		return n.Tool
	case KindChain:
		return map[string]any{"chain": list()}
	case KindParallelAll:
		return map[string]any{"parallel": map[string]any{"mode": "all", "of": list()}}
	case KindParallelAny:
		return map[string]any{"parallel": map[string]any{"mode": "any", "of": list()}}
	case KindKOfN:
		return map[string]any{"k_of_n": map[string]any{"k": n.K, "of": list()}}
	default:
		branches := make([]any, len(n.Of))
		for i, c := range n.Of {
			branches[i] = map[string]any{"p": n.P[i], "then": structureValue(c)}
		}
		return map[string]any{"conditional": branches}
	}
}

// incompatibilityValue is an incompatible edge as a tree for PyJSONDumps.
func incompatibilityValue(e EdgeIncompatibility) any {
	from := make([]any, len(e.From))
	for i, f := range e.From {
		from[i] = f
	}
	fields := make([]any, len(e.Fields))
	for i, f := range e.Fields {
		fields[i] = map[string]any{"field": f.Field, "problem": f.Problem, "want": f.Want, "got": f.Got}
	}
	return map[string]any{
		"from": from, "to": e.To, "at": e.At, "check": e.Check, "fields": fields,
		"output_schema_hash": e.OutputSchemaHash, "expected_input_schema_hash": e.ExpectedInputSchemaHash,
	}
}

// structureMeetsDigest is the MEETS digest of a workflow that is not a flat
// chain: json.dumps({"composition", "structure", "composed_quality" (:.3f),
// "requirement" (:.3f)}, sort_keys=True).
func structureMeetsDigest(w Workflow, q float64) string {
	return guards.SHA256Hex(guards.PyJSONDumps(guards.PyObject{
		"composition":      w.CompositionID,
		"structure":        structureValue(w.Structure),
		"composed_quality": guards.PyFixed(q, 3),
		"requirement":      guards.PyFixed(w.WorkflowQualityRequirement, 3),
	}))
}

// incompatibleDigest is the SEMANTIC_INCOMPATIBLE digest outside the seed's
// domain: json.dumps({"composition", "structure", "incompatibilities": [every
// reported incompatible edge with from, to, at, check, fields (field,
// problem, want, got), output_schema_hash, expected_input_schema_hash],
// "incompatible_edges": <int, all of them>}, sort_keys=True).
func incompatibleDigest(w Workflow, report edgeReport) string {
	edges := make([]any, len(report.found))
	for i, e := range report.found {
		edges[i] = incompatibilityValue(e)
	}
	return guards.SHA256Hex(guards.PyJSONDumps(guards.PyObject{
		"composition":        w.CompositionID,
		"structure":          structureValue(w.Structure),
		"incompatibilities":  edges,
		"incompatible_edges": report.total,
	}))
}
