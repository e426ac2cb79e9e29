package schemas

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The names of the schema documents, one per event payload. A document's
// file is NAME.json in this folder and its CloudEvents type is
// "io.toolsentry." + NAME. A new version of a payload is a new file next to
// the old one; a published file never changes.
const (
	ToolSchemaObservedV1    = "tool.schema.observed.v1"
	ToolInvocationV1        = "tool.invocation.v1"
	ToolContractV1          = "tool.contract.v1"
	ToolQualityCheckpointV1 = "tool.quality.checkpoint.v1"
	WorkflowDeclaredV1      = "workflow.declared.v1"
	VerdictSchemaV1         = "verdict.schema.v1"
	VerdictCompositionV1    = "verdict.composition.v1"
	WorkflowObservedV1      = "workflow.observed.v1"
	// Operators' actions, applied by the tool's lane like any input.
	OperatorBaselineAcceptedV1 = "operator.baseline.accepted.v1"
	OperatorBaselineResetV1    = "operator.baseline.reset.v1"
	OperatorAgentMigratedV1    = "operator.agent.migrated.v1"
	OperatorAgentForgottenV1   = "operator.agent.forgotten.v1"
)

// BaseID is the prefix of every document's $id: BaseID + NAME + ".json". The
// ids identify the documents; nothing is fetched from them.
const BaseID = "https://github.com/toolsentry/toolsentry/schemas/"

// ErrUnknown is returned when a name is not one of the documents above.
var ErrUnknown = errors.New("unknown schema")

// ErrInvalid is returned (wrapped, naming the schema and the JSON Pointer of
// the offending value) when a value does not match its schema, or when the
// bytes given to ValidateJSON are not one JSON value.
var ErrInvalid = errors.New("value does not match its schema")

//go:embed *.json
var files embed.FS

var names = []string{
	ToolSchemaObservedV1,
	ToolInvocationV1,
	ToolContractV1,
	ToolQualityCheckpointV1,
	WorkflowDeclaredV1,
	VerdictSchemaV1,
	VerdictCompositionV1,
	WorkflowObservedV1,
	OperatorBaselineAcceptedV1,
	OperatorBaselineResetV1,
	OperatorAgentMigratedV1,
	OperatorAgentForgottenV1,
}

// Schema is one compiled document. It is safe for concurrent use.
type Schema struct {
	name     string
	compiled *jsonschema.Schema
}

var (
	compileOnce sync.Once
	compiled    map[string]*Schema
	compileErr  error
)

// compileAll compiles every document once; the documents are part of the
// binary, so an error here is a defect that the tests catch.
func compileAll() {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	out := make(map[string]*Schema, len(names))
	for _, name := range names {
		doc, err := files.ReadFile(name + ".json")
		if err != nil {
			compileErr = fmt.Errorf("schemas: reading %s: %w", name, err)
			return
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			compileErr = fmt.Errorf("schemas: parsing %s: %w", name, err)
			return
		}
		if err := c.AddResource(ID(name), v); err != nil {
			compileErr = fmt.Errorf("schemas: adding %s: %w", name, err)
			return
		}
	}
	for _, name := range names {
		sch, err := c.Compile(ID(name))
		if err != nil {
			compileErr = fmt.Errorf("schemas: compiling %s: %w", name, err)
			return
		}
		out[name] = &Schema{name: name, compiled: sch}
	}
	compiled = out
}

// Names returns the names of all documents, in a fixed order.
func Names() []string { return slices.Clone(names) }

// ID returns the $id of the document called name.
func ID(name string) string { return BaseID + name + ".json" }

// Document returns the bytes of the document called name, as embedded.
func Document(name string) ([]byte, error) {
	if !slices.Contains(names, name) {
		return nil, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return files.ReadFile(name + ".json")
}

// Lookup returns the compiled document called name. All documents are
// compiled together on the first call.
func Lookup(name string) (*Schema, error) {
	compileOnce.Do(compileAll)
	if compileErr != nil {
		return nil, compileErr
	}
	s, ok := compiled[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return s, nil
}

// Validate validates v against the document called name; see Schema.Validate.
func Validate(name string, v any) error {
	s, err := Lookup(name)
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// Name returns the document's name, e.g. "tool.invocation.v1".
func (s *Schema) Name() string { return s.name }

// Validate validates v, a value as encoding/json decodes it into an any with
// UseNumber (map[string]any, []any, json.Number, string, bool, nil; float64
// is accepted too). The error wraps ErrInvalid and names up to three
// offending places by JSON Pointer, as in
// "tool.invocation.v1: at /outcome/status: value must be one of "ok", "error"".
func (s *Schema) Validate(v any) error {
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, s.name, err)
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalid, s.name, describe(verr))
}

// ValidateJSON decodes data as one JSON value and validates it.
func (s *Schema) ValidateJSON(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %s: not one JSON value: %v", ErrInvalid, s.name, err)
	}
	return s.Validate(v)
}

const maxReported = 3

// describe renders the leaves of a validation error tree: the places where a
// keyword failed, not the keywords that only say "a subschema failed", each
// with the library's message.
func describe(verr *jsonschema.ValidationError) string {
	return describeLeaves(verr, leafMessage)
}

// describeLeaves renders the leaves of a validation error tree, at most
// maxReported of them, each as its place and what message says of it.
func describeLeaves(verr *jsonschema.ValidationError, message func(*jsonschema.ValidationError) string) string {
	var leaves []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	parts := make([]string, 0, maxReported+1)
	for i, leaf := range leaves {
		if i == maxReported {
			parts = append(parts, fmt.Sprintf("and %d more", len(leaves)-maxReported))
			break
		}
		parts = append(parts, "at "+pointer(leaf.InstanceLocation)+": "+message(leaf))
	}
	return strings.Join(parts, "; ")
}

// leafMessage is the library's message for one failed keyword, without the
// location prefix it adds.
func leafMessage(e *jsonschema.ValidationError) string {
	leaf := *e
	leaf.InstanceLocation = nil
	leaf.Causes = nil
	return strings.TrimPrefix(leaf.Error(), "at '': ")
}

// pointer renders an instance location as a JSON Pointer ("/" for the root).
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}
