package events

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

var argumentCases = []string{
	`{}`,
	`{"user_id":"u","options":{"limit":10,"fields":["a","b"]}}`,
	`{"items":[{"id":1},{"id":"x","tags":[]}],"empty":{},"none":null}`,
	`{"a.b":1,"x":{"y[0]":2,"p|q":{"r*":true}},"back\\slash":"v"}`,
	`{"m":[[1,2],[3]],"o":[{"j":0},{"k":1}],"n":[[],[]]}`,
	`{"e":[],"f":[{}]}`,
}

// TestLeavesAreTheGuardsSurface: the used input surface from the decoded
// types equals toolschema.SurfaceFromArguments of the very arguments, so the
// schema guard sees the same paths whether it had the values or not. (A
// container empty in one place and not in another is the documented
// exception; see Leaves.)
func TestLeavesAreTheGuardsSurface(t *testing.T) {
	for _, args := range argumentCases {
		f, err := FieldTypesOf([]byte(args))
		if err != nil {
			t.Fatalf("FieldTypesOf(%s): %v", args, err)
		}
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatal(err)
		}
		want := toolschema.SurfaceFromArguments(v)
		got := f.Leaves()
		if len(want) == 0 && len(got) == 0 {
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Leaves of %s (-guards +events):\n%s", args, diff)
		}
	}
}

func TestFieldPathsAreEscaped(t *testing.T) {
	f, err := FieldTypesOf([]byte(`{"a.b":1,"x":{"y[0]":"s"},"l":[{"k|v":null}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := FieldTypes{
		`a\.b`:     toolschema.TypeInteger,
		"x":        toolschema.TypeObject,
		`x.y\[0\]`: toolschema.TypeString,
		"l":        toolschema.TypeArray,
		"l[]":      toolschema.TypeObject,
		`l[].k\|v`: toolschema.TypeNull,
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
