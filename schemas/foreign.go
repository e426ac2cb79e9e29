package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// ErrForeignSchema is returned (wrapped) by Compile for a document that is
// not a JSON Schema this package can compile: not JSON, not a schema, or a
// $ref to a document outside it.
var ErrForeignSchema = errors.New("not a compilable JSON Schema")

// foreignID is the $id under which Compile adds a document without one.
const foreignID = "urn:toolsentry:foreign"

// noLoader refuses every document a $ref points to outside the one being
// compiled: a schema that someone else wrote (an MCP tool's inputSchema)
// never makes the compiler read a file or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is outside the document: not loaded", url)
}

// Compile compiles a JSON Schema written outside this binary, such as an
// MCP tool's inputSchema, under the name given (used in error messages).
// Draft 2020-12 applies unless the document's $schema names another; a $ref
// outside the document is refused (ErrForeignSchema), never fetched.
func Compile(name string, doc []byte) (*Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrForeignSchema, name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(foreignID, v); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrForeignSchema, name, err)
	}
	sch, err := c.Compile(foreignID)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrForeignSchema, name, err)
	}
	return &Schema{name: name, compiled: sch}, nil
}

// Conforms validates v as Validate does, but its error never quotes a value
// of v: it names each offending place by JSON Pointer with the keyword that
// failed there, and the field names of a missing required or an unexpected
// property, and the JSON types of a type mismatch. It is for payloads whose
// values are not ours to repeat (an agent's arguments).
func (s *Schema) Conforms(v any) error {
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("%w: %s", ErrInvalid, s.name)
	}
	valueFreeLeaf := func(e *jsonschema.ValidationError) string { return valueFree(e.ErrorKind) }
	return fmt.Errorf("%w: %s: %s", ErrInvalid, s.name, describeLeaves(verr, valueFreeLeaf))
}

// valueFree says what failed without the instance's value.
func valueFree(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		return "missing required " + quoteAll(k.Missing)
	case *kind.AdditionalProperties:
		return "unexpected " + quoteAll(k.Properties)
	case *kind.Type:
		return "got " + k.Got + ", want " + strings.Join(k.Want, " or ")
	case *kind.FalseSchema:
		return "not allowed"
	}
	return "fails " + strings.Join(k.KeywordPath(), "/")
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
