package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// wireWorkflow is Workflow as it arrives: the structure is parsed by hand,
// with the depth and size limits, after DecodeStrict has checked the rest.
// Tools is optional here (DecodeWorkflow); ParseWorkflow requires it.
type wireWorkflow struct {
	CompositionID                          string                   `json:"composition_id"`
	WorkflowQualityRequirement             float64                  `json:"workflow_quality_requirement"`
	IntroductionOfNondeterminismAcceptable bool                     `json:"introduction_of_nondeterminism_acceptable"`
	Policy                                 guards.CompositionPolicy `json:"policy"`
	Tools                                  map[string]WorkflowTool  `json:"tools,omitempty"`
	Structure                              json.RawMessage          `json:"structure"`
}

// ParseWorkflow decodes one workflow strictly and validates it: unknown or
// missing fields, wrong JSON types, a malformed structure and every problem
// Validate reports are errors naming the field by its path (wrapping
// ErrInvalid, or ErrUnquantified for a tool without accuracy or calls). It
// never panics, whatever the input.
func ParseWorkflow(raw []byte) (Workflow, error) {
	w, err := DecodeWorkflow(raw)
	if err != nil {
		return Workflow{}, err
	}
	if w.Tools == nil {
		return Workflow{}, guards.FieldError("tools", "missing")
	}
	if err := w.Validate(); err != nil {
		return Workflow{}, err
	}
	return w, nil
}

// DecodeWorkflow decodes a workflow as strictly as ParseWorkflow but lets
// "tools" be absent or incomplete and does not validate: a declared
// workflow whose tools' contracts and measurements come from elsewhere (the
// stream processor's state) is completed by the caller, and then
// EvaluateWorkflow validates it.
func DecodeWorkflow(raw []byte) (Workflow, error) {
	var wire wireWorkflow
	if err := guards.DecodeStrict(raw, &wire); err != nil {
		return Workflow{}, err
	}
	structure, err := parseStructure(wire.Structure)
	if err != nil {
		return Workflow{}, err
	}
	return Workflow{
		CompositionID:                          wire.CompositionID,
		WorkflowQualityRequirement:             wire.WorkflowQualityRequirement,
		IntroductionOfNondeterminismAcceptable: wire.IntroductionOfNondeterminismAcceptable,
		Policy:                                 wire.Policy,
		Tools:                                  wire.Tools,
		Structure:                              structure,
	}, nil
}

// parseStructure parses the NODE grammar from raw JSON, checking shape,
// depth and size (but not tool entries, k or probabilities: Validate does).
func parseStructure(raw json.RawMessage) (Node, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return Node{}, fmt.Errorf("%w: structure: not valid JSON: %v", guards.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Node{}, fmt.Errorf("%w: structure: not valid JSON: data after the value", guards.ErrInvalid)
	}
	count := 0
	return parseNode(tree, "structure", 1, &count)
}

const nodeShapes = `a tool id or an object with one of "chain", "conditional", "k_of_n", "parallel"`

func parseNode(v any, path string, depth int, count *int) (Node, error) {
	if depth > MaxWorkflowDepth {
		return Node{}, guards.FieldError(path, "nesting deeper than %d", MaxWorkflowDepth)
	}
	*count++
	if *count > MaxWorkflowNodes {
		return Node{}, guards.FieldError(path, "structure has more than %d nodes", MaxWorkflowNodes)
	}
	if id, ok := v.(string); ok {
		return Tool(id), nil
	}
	obj, ok := v.(map[string]any)
	if !ok || len(obj) != 1 {
		if ok {
			return Node{}, guards.FieldError(path, "want %s, got an object with %d fields", nodeShapes, len(obj))
		}
		return Node{}, guards.FieldError(path, "want %s, got %s", nodeShapes, guards.JSONKind(v))
	}
	var key string
	var body any
	for k, v := range obj { // exactly one
		key, body = k, v
	}
	switch key {
	case "chain":
		of, err := parseNodeList(body, path+".chain", depth, count)
		return Node{Kind: KindChain, Of: of}, err
	case "parallel":
		fields, err := parseNodeFields(body, path+".parallel", "mode", "of")
		if err != nil {
			return Node{}, err
		}
		mode, _ := fields["mode"].(string)
		kind := map[string]NodeKind{"all": KindParallelAll, "any": KindParallelAny}[mode]
		if kind == 0 {
			return Node{}, guards.FieldError(path+".parallel.mode", `want "all" or "any", got %s`, describeNodeJSON(fields["mode"]))
		}
		of, err := parseNodeList(fields["of"], path+".parallel.of", depth, count)
		return Node{Kind: kind, Of: of}, err
	case "k_of_n":
		fields, err := parseNodeFields(body, path+".k_of_n", "k", "of")
		if err != nil {
			return Node{}, err
		}
		k, err := parseNodeK(fields["k"], path+".k_of_n.k")
		if err != nil {
			return Node{}, err
		}
		of, err := parseNodeList(fields["of"], path+".k_of_n.of", depth, count)
		return Node{Kind: KindKOfN, K: k, Of: of}, err
	case "conditional":
		return parseConditional(body, path, depth, count)
	default:
		return Node{}, guards.FieldError(guards.JoinPath(path, key), "unknown field (want %s)", nodeShapes)
	}
}

func parseNodeList(v any, path string, depth int, count *int) ([]Node, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, guards.FieldError(path, "want array, got %s", guards.JSONKind(v))
	}
	if len(arr) == 0 {
		return nil, guards.FieldError(path, "empty: want at least one node")
	}
	out := make([]Node, len(arr))
	for i, e := range arr {
		n, err := parseNode(e, path+"["+strconv.Itoa(i)+"]", depth+1, count)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

func parseConditional(v any, path string, depth int, count *int) (Node, error) {
	path += ".conditional"
	arr, ok := v.([]any)
	if !ok {
		return Node{}, guards.FieldError(path, "want array, got %s", guards.JSONKind(v))
	}
	if len(arr) == 0 {
		return Node{}, guards.FieldError(path, "empty: want at least one branch")
	}
	n := Node{Kind: KindConditional, Of: make([]Node, len(arr)), P: make([]float64, len(arr))}
	for i, e := range arr {
		bpath := path + "[" + strconv.Itoa(i) + "]"
		fields, err := parseNodeFields(e, bpath, "p", "then")
		if err != nil {
			return Node{}, err
		}
		num, ok := fields["p"].(json.Number)
		if !ok {
			return Node{}, guards.FieldError(bpath+".p", "want number, got %s", guards.JSONKind(fields["p"]))
		}
		p, err := strconv.ParseFloat(string(num), 64)
		if err != nil || math.IsInf(p, 0) {
			return Node{}, guards.FieldError(bpath+".p", "number %s is out of range", num)
		}
		child, err := parseNode(fields["then"], bpath+".then", depth+1, count)
		if err != nil {
			return Node{}, err
		}
		n.P[i], n.Of[i] = p, child
	}
	return n, nil
}

// parseNodeFields checks that v is an object with exactly the named fields.
func parseNodeFields(v any, path string, names ...string) (map[string]any, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, guards.FieldError(path, "want object, got %s", guards.JSONKind(v))
	}
	for _, k := range guards.SortedObjectKeys(obj) {
		known := false
		for _, n := range names {
			known = known || k == n
		}
		if !known {
			return nil, guards.FieldError(guards.JoinPath(path, k), "unknown field (known: %s)", strings.Join(names, ", "))
		}
	}
	for _, n := range names {
		if _, ok := obj[n]; !ok {
			return nil, guards.FieldError(guards.JoinPath(path, n), "missing")
		}
	}
	return obj, nil
}

func parseNodeK(v any, path string) (int, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, guards.FieldError(path, "want integer, got %s", guards.JSONKind(v))
	}
	k, err := strconv.ParseInt(string(num), 10, 32)
	if err != nil {
		return 0, guards.FieldError(path, "want an integer, got %s", num)
	}
	return int(k), nil
}

func describeNodeJSON(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return guards.JSONKind(v)
}

// UnmarshalJSON parses the NODE grammar with the depth and size limits.
// Entries, k and probabilities are checked by Workflow.Validate.
func (n *Node) UnmarshalJSON(data []byte) error {
	parsed, err := parseStructure(data)
	if err != nil {
		return err
	}
	*n = parsed
	return nil
}

// MarshalJSON writes the NODE grammar; ParseWorkflow reads it back equal.
func (n Node) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := n.writeJSON(&b, 1); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (n Node) writeJSON(b *bytes.Buffer, depth int) error {
	if depth > MaxWorkflowDepth {
		return fmt.Errorf("%w: structure nesting deeper than %d", guards.ErrInvalid, MaxWorkflowDepth)
	}
	writeList := func(of []Node) error {
		b.WriteByte('[')
		for i, c := range of {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := c.writeJSON(b, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	switch n.Kind {
	case KindTool:
		s, _ := json.Marshal(n.Tool)
		b.Write(s)
		return nil
	case KindChain:
		b.WriteString(`{"chain":`)
		if err := writeList(n.Of); err != nil {
			return err
		}
	case KindParallelAll, KindParallelAny:
		mode := "all"
		if n.Kind == KindParallelAny {
			mode = "any"
		}
		b.WriteString(`{"parallel":{"mode":"` + mode + `","of":`)
		if err := writeList(n.Of); err != nil {
			return err
		}
		b.WriteByte('}')
	case KindKOfN:
		b.WriteString(`{"k_of_n":{"k":` + strconv.Itoa(n.K) + `,"of":`)
		if err := writeList(n.Of); err != nil {
			return err
		}
		b.WriteByte('}')
	case KindConditional:
		if len(n.P) != len(n.Of) {
			return fmt.Errorf("%w: conditional with %d probabilities for %d branches", guards.ErrInvalid, len(n.P), len(n.Of))
		}
		b.WriteString(`{"conditional":[`)
		for i, c := range n.Of {
			if i > 0 {
				b.WriteByte(',')
			}
			p, err := json.Marshal(n.P[i])
			if err != nil {
				return fmt.Errorf("%w: conditional probability: %v", guards.ErrInvalid, err)
			}
			b.WriteString(`{"p":`)
			b.Write(p)
			b.WriteString(`,"then":`)
			if err := c.writeJSON(b, depth+1); err != nil {
				return err
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
	default:
		return fmt.Errorf("%w: unknown node kind %d", guards.ErrInvalid, int(n.Kind))
	}
	b.WriteByte('}')
	return nil
}
