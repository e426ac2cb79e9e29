package toolschema_test

import (
	"encoding/json"
	"fmt"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func ExampleFingerprint() {
	a, _ := toolschema.ParseToolDocument([]byte(`{"name":"lookup","inputSchema":{"type":"object","required":["user_id","org"],
		"properties":{"user_id":{"type":"string"},"org":{"$ref":"#/$defs/org"}},"$defs":{"org":{"type":"string"}}}}`))
	b, _ := toolschema.ParseToolDocument([]byte(`{"inputSchema":{"properties":{"org":{"type":["string"]},"user_id":{"type":"string"}},
		"required":["org","user_id"],"type":"object"},"name":"lookup"}`))
	fa, _ := toolschema.Fingerprint(a[0])
	fb, _ := toolschema.Fingerprint(b[0])
	fmt.Println(fa == fb)
	// Output: true
}

func ExampleEvaluateDrift() {
	old, _ := toolschema.ParseToolDocument([]byte(`{"name":"crm.lookup","inputSchema":{"type":"object",
		"properties":{"user_id":{"type":"string"},"include_archived":{"type":"boolean","default":false}}}}`))
	new, _ := toolschema.ParseToolDocument([]byte(`{"name":"crm.lookup","inputSchema":{"type":"object",
		"properties":{"userId":{"type":"string"},"include_archived":{"type":"boolean","default":true}}}}`))

	var args any
	_ = json.Unmarshal([]byte(`{"user_id":"u-42"}`), &args)
	rep, err := toolschema.EvaluateDrift(old[0], new[0], toolschema.UsedSurface{Input: toolschema.SurfaceFromArguments(args)})
	if err != nil {
		panic(err)
	}
	for _, c := range rep.Changes {
		fmt.Println(c.Side, c.Path, c.Kind, c.Breaking)
	}
	fmt.Println(rep.Manifest.Directive)
	migrated, _ := rep.Migration.Apply(args)
	out, _ := json.Marshal(migrated)
	fmt.Println(string(out))
	// Output:
	// input include_archived default_changed true
	// input user_id field_renamed true
	// HALT: Drift on used fields ['include_archived', 'user_id']. Apply migration.
	// {"include_archived":false,"userId":"u-42"}
}
