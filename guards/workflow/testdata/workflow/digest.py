"""Recompute workflow manifest digests from the documented rules, with
Python's own json.dumps and hashlib (the seed's _hash).

Input: JSON Lines {"workflow": <workflow>, "manifest": <manifest>}.
Output: one hex digest per line.
"""
import hashlib
import json
import sys


def h(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def canon(n):
    if isinstance(n, str):
        return n
    if "chain" in n:
        return {"chain": [canon(c) for c in n["chain"]]}
    if "parallel" in n:
        p = n["parallel"]
        return {"parallel": {"mode": p["mode"], "of": [canon(c) for c in p["of"]]}}
    if "k_of_n" in n:
        k = n["k_of_n"]
        return {"k_of_n": {"k": int(k["k"]), "of": [canon(c) for c in k["of"]]}}
    return {"conditional": [{"p": float(b["p"]), "then": canon(b["then"])} for b in n["conditional"]]}


def leaves(n):
    if isinstance(n, str):
        return 1
    if "chain" in n:
        return sum(leaves(c) for c in n["chain"])
    if "parallel" in n:
        return sum(leaves(c) for c in n["parallel"]["of"])
    if "k_of_n" in n:
        return sum(leaves(c) for c in n["k_of_n"]["of"])
    return sum(leaves(b["then"]) for b in n["conditional"])


def seed_domain(w):
    s = w["structure"]
    if isinstance(s, str) or "chain" not in s or not all(isinstance(c, str) for c in s["chain"]):
        return False
    for c in s["chain"]:
        t = w["tools"][c]
        if t.get("input_schema") is not None or t.get("output_schema") is not None:
            return False
    return True


def digest(w, m):
    v, q, req = m["verdict"], m["composed_quality"], w["workflow_quality_requirement"]
    if leaves(w["structure"]) == 1:
        return h(json.dumps({"composition": w["composition_id"], "tools": "1", "quality": f"{q:.3f}"}, sort_keys=True))
    if v == "COMPOSITION_DEGRADED" and m["directive"].startswith("HALT: Mixing"):
        return h("NONDET_INTRODUCED")
    if v == "COMPOSITION_DEGRADED":
        return h(f"DEGRADED:{q:.3f}")
    if v == "COMPOSITION_MEETS_QUALITY":
        if seed_domain(w):
            return h(json.dumps({"composition": w["composition_id"], "tools": tuple(w["structure"]["chain"]),
                                 "composed_quality": f"{q:.3f}", "requirement": f"{req:.3f}"}, sort_keys=True))
        return h(json.dumps({"composition": w["composition_id"], "structure": canon(w["structure"]),
                             "composed_quality": f"{q:.3f}", "requirement": f"{req:.3f}"}, sort_keys=True))
    # SEMANTIC_INCOMPATIBLE
    edges = m["incompatibilities"]
    if seed_domain(w):
        at = edges[0]["at"]  # structure.chain[i+1]
        return h(f"SCHEMA:{int(at[at.index('[') + 1:-1]) - 1}")
    out = []
    for e in edges:
        out.append({
            "from": e["from"], "to": e["to"], "at": e["at"], "check": e["check"],
            "fields": [{"field": f["field"], "problem": f["problem"], "want": f.get("want", ""), "got": f.get("got", "")}
                       for f in e.get("fields", [])],
            "output_schema_hash": e.get("output_schema_hash", ""),
            "expected_input_schema_hash": e.get("expected_input_schema_hash", ""),
        })
    return h(json.dumps({"composition": w["composition_id"], "structure": canon(w["structure"]),
                         "incompatibilities": out, "incompatible_edges": m["incompatible_edges"]}, sort_keys=True))


for line in sys.stdin:
    if line.strip():
        case = json.loads(line)
        print(digest(case["workflow"], case["manifest"]))
