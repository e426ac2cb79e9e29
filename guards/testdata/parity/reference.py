#!/usr/bin/env python3
"""Run the seeds' reference Python on JSON Lines cases and print one answer per line.

Usage: reference.py SEEDS_DIR composition|schema < cases.jsonl

The guard code is taken verbatim from the seed documents (from the line that
starts with "from dataclasses import" to the end of the file) and executed
as is, so the answers are the reference's own, not a re-implementation.
"""
import json
import sys
from pathlib import Path

SEEDS = {
    "composition": "000_918c771bac28ae93.txt",
    "schema": "001_e5cb5c1180e470b4.txt",
}


def load_seed(seeds_dir, name):
    text = Path(seeds_dir, SEEDS[name]).read_text(encoding="utf-8")
    start = text.index("from dataclasses import")
    namespace = {"__name__": "seed_" + name}
    exec(compile(text[start:], SEEDS[name], "exec"), namespace)
    return namespace


def composition(ns, case):
    c = case["composition"]
    comp = ns["ToolComposition"](
        composition_id=c["composition_id"],
        tools=tuple(ns["ToolQuality"](**t) for t in c["tools"]),
        workflow_quality_requirement=c["workflow_quality_requirement"],
        introduction_of_nondeterminism_acceptable=c["introduction_of_nondeterminism_acceptable"],
    )
    policy = ns["CompositionPolicy"](**case["policy"])
    m = ns["ToolCompositionSkillGuard"].evaluate_composition(comp, policy)
    return {
        "verdict": m.verdict.name,
        "composed_quality": m.composed_quality,
        "directive": m.directive,
        "manifest_digest": m.manifest_digest,
    }


def schema(ns, case):
    cur = case["current"]
    current = ns["ToolSchema"](
        tool_id=cur["tool_id"],
        version=cur["version"],
        schema_fingerprint=cur["schema_fingerprint"],
        used_fields=frozenset(cur["used_fields"]),
    )
    base = case.get("baseline")
    baseline = None
    if base is not None:
        baseline = ns["SchemaBaseline"](
            baseline_fingerprint=base["baseline_fingerprint"],
            baseline_used_fields=frozenset(base["baseline_used_fields"]),
            changed_fields=frozenset(base["changed_fields"]),
        )
    m = ns["ToolSchemaDriftGuard"].evaluate_schema(current, baseline)
    return {
        "verdict": m.verdict.name,
        "directive": m.directive,
        "manifest_digest": m.manifest_digest,
    }


def main():
    seeds_dir, kind = sys.argv[1], sys.argv[2]
    ns = load_seed(seeds_dir, kind)
    evaluate = {"composition": composition, "schema": schema}[kind]
    out = sys.stdout
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(evaluate(ns, json.loads(line))) + "\n")


if __name__ == "__main__":
    main()
