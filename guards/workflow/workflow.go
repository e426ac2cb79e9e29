package workflow

// Workflows: compositions beyond the seed's chain (issue 4). A Workflow names
// its tools once, with their quality contracts and measured outcomes, and
// composes them in a Structure that chains, runs in parallel (all or any),
// votes (k of n) and routes (conditional), nested freely. EvaluateWorkflow
// applies the seed's gates in the seed's order to that structure; see
// eval.go for the gates, digests and failure-mode manifest.

import (
	"github.com/toolsentry/toolsentry/guards"

	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
)

// Limits on a workflow's structure. They bound the work EvaluateWorkflow does
// (the Monte Carlo lower bound evaluates the structure MonteCarloSamples
// times) and are checked by Validate and ParseWorkflow.
const (
	// MaxWorkflowDepth is the deepest nesting of structure nodes; a lone
	// tool id is depth 1, a chain of tool ids depth 2.
	MaxWorkflowDepth = 64
	// MaxWorkflowNodes is the most nodes (tool ids and combinators) a
	// structure may hold.
	MaxWorkflowNodes = 1024
	// MaxVoters is the largest n of a k_of_n node.
	MaxVoters = 64
	// ProbabilityTolerance is how far the probabilities of a conditional's
	// branches may sum away from 1.
	ProbabilityTolerance = 1e-9
)

// ErrUnquantified is returned (wrapped, naming the tool) when a tool used by
// a workflow has neither a declared accuracy nor any observed call: the
// seed's "if no [per-tool quality contract], the composition is
// unquantified". It is distinct from ErrInvalid because the input is well
// formed: the stream processor may wait for the first outcomes instead of
// dead-lettering the workflow.
var ErrUnquantified = errors.New("unquantified composition")

// NodeKind says what a structure Node does with its children.
type NodeKind uint8

// The structure node kinds.
const (
	// KindTool is a leaf: one call of the tool named by Node.Tool.
	KindTool NodeKind = iota + 1
	// KindChain runs Of in order, each stage's output feeding the next.
	KindChain
	// KindParallelAll runs every branch of Of on the same input and needs
	// all of them to succeed.
	KindParallelAll
	// KindParallelAny runs the branches of Of (fallback or redundancy) and
	// needs at least one to succeed.
	KindParallelAny
	// KindKOfN runs the branches of Of and needs at least K of them to
	// succeed (voting).
	KindKOfN
	// KindConditional routes to exactly one branch: Of[i] with probability
	// P[i].
	KindConditional
)

var nodeKindNames = [...]string{
	KindTool:        "tool",
	KindChain:       "chain",
	KindParallelAll: "parallel(all)",
	KindParallelAny: "parallel(any)",
	KindKOfN:        "k_of_n",
	KindConditional: "conditional",
}

// String names the kind as the structure's JSON spells it.
func (k NodeKind) String() string {
	if int(k) < len(nodeKindNames) && nodeKindNames[k] != "" {
		return nodeKindNames[k]
	}
	return "NodeKind(" + strconv.Itoa(int(k)) + ")"
}

// Node is one node of a workflow's structure. Build nodes with Tool, Chain,
// ParallelAll, ParallelAny, KOfN and Conditional; the zero Node is invalid.
// Its JSON form is the NODE grammar:
//
//	"<tool id>" | {"chain": [NODE, ...]} | {"parallel": {"mode": "all"|"any", "of": [NODE, ...]}}
//	| {"k_of_n": {"k": K, "of": [NODE, ...]}} | {"conditional": [{"p": P, "then": NODE}, ...]}
type Node struct {
	Kind NodeKind
	Tool string    // KindTool: the tool id, a key of Workflow.Tools
	K    int       // KindKOfN: how many branches must succeed
	Of   []Node    // every kind but KindTool: the stages or branches
	P    []float64 // KindConditional: P[i] is the probability of Of[i]
}

// Branch is one route of a conditional node.
type Branch struct {
	P    float64
	Then Node
}

// Tool is a leaf calling the tool with the given id.
func Tool(id string) Node { return Node{Kind: KindTool, Tool: id} }

// Chain runs the stages in order.
func Chain(stages ...Node) Node { return Node{Kind: KindChain, Of: stages} }

// ParallelAll runs the branches on the same input; all must succeed.
func ParallelAll(branches ...Node) Node { return Node{Kind: KindParallelAll, Of: branches} }

// ParallelAny runs the branches on the same input; one success suffices.
func ParallelAny(branches ...Node) Node { return Node{Kind: KindParallelAny, Of: branches} }

// KOfN runs the branches on the same input; k successes are needed.
func KOfN(k int, branches ...Node) Node { return Node{Kind: KindKOfN, K: k, Of: branches} }

// Conditional routes to one branch with the branch's probability.
func Conditional(branches ...Branch) Node {
	n := Node{Kind: KindConditional, Of: make([]Node, len(branches)), P: make([]float64, len(branches))}
	for i, b := range branches {
		n.Of[i], n.P[i] = b.Then, b.P
	}
	return n
}

// Observed counts a tool's outcomes: calls made and calls that succeeded.
type Observed struct {
	Calls     int64 `json:"calls"`
	Successes int64 `json:"successes"`
}

// WorkflowTool is one tool's quality contract and measurements. Accuracy is
// the declared accuracy (nil when the tool has no contract). The schemas are
// JSON Schema documents; without them, compatibility falls back to the
// seed's hash equality.
type WorkflowTool struct {
	Accuracy                *float64        `json:"accuracy,omitempty"`
	Determinism             string          `json:"determinism"`
	InputSchema             json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema            json.RawMessage `json:"output_schema,omitempty"`
	OutputSchemaHash        string          `json:"output_schema_hash,omitempty"`
	ExpectedInputSchemaHash string          `json:"expected_input_schema_hash,omitempty"`
	Observed                *Observed       `json:"observed,omitempty"`
}

// Workflow is a composition of tools with the workflow's requirement. It is
// what ParseWorkflow returns, and what the stream processor builds from a
// declared workflow and the tools' contracts and counts held in its state.
type Workflow struct {
	CompositionID                          string                   `json:"composition_id"`
	WorkflowQualityRequirement             float64                  `json:"workflow_quality_requirement"`
	IntroductionOfNondeterminismAcceptable bool                     `json:"introduction_of_nondeterminism_acceptable"`
	Policy                                 guards.CompositionPolicy `json:"policy"`
	Tools                                  map[string]WorkflowTool  `json:"tools"`
	Structure                              Node                     `json:"structure"`
}

// hasSchemaDoc reports whether raw holds a schema document (not absent, not null).
func hasSchemaDoc(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// measured reports whether the tool has at least one observed call.
func (t WorkflowTool) measured() bool { return t.Observed != nil && t.Observed.Calls > 0 }

// effectiveAccuracy is the accuracy the gates use: the declared accuracy if
// there is one, else the measured success rate.
func (t WorkflowTool) effectiveAccuracy() float64 {
	if t.Accuracy != nil {
		return *t.Accuracy
	}
	return float64(t.Observed.Successes) / float64(t.Observed.Calls)
}

// Validate reports the first problem that makes the workflow meaningless:
// a requirement, accuracy or probability outside [0, 1], an unknown
// determinism, impossible counts, a tool in the structure without an entry,
// an empty chain or branch list, k outside [1, n], probabilities not summing
// to 1 (within ProbabilityTolerance), nesting deeper than MaxWorkflowDepth or
// more than MaxWorkflowNodes nodes. Those errors wrap ErrInvalid and name the
// field by its path. A used tool with neither accuracy nor observed calls
// yields an error wrapping ErrUnquantified.
func (w Workflow) Validate() error {
	if err := guards.CheckUnit("workflow_quality_requirement", w.WorkflowQualityRequirement); err != nil {
		return err
	}
	ids := make([]string, 0, len(w.Tools))
	for id := range w.Tools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := w.Tools[id].validate(); err != nil {
			return fmt.Errorf("tools.%s: %w", id, err)
		}
	}
	count := 0
	if err := w.validateNode(w.Structure, "structure", 1, &count, true); err != nil {
		return err
	}
	var unquantified error
	walkLeaves(w.Structure, "structure", func(n Node, path string) {
		if unquantified == nil && w.Tools[n.Tool].Accuracy == nil && !w.Tools[n.Tool].measured() {
			unquantified = fmt.Errorf("%w: %s: tool %s has neither a declared accuracy nor observed calls", ErrUnquantified, path, strconv.Quote(n.Tool))
		}
	})
	return unquantified
}

func (t WorkflowTool) validate() error {
	if t.Accuracy != nil {
		if err := guards.CheckUnit("accuracy", *t.Accuracy); err != nil {
			return err
		}
	}
	if err := guards.CheckDeterminism(t.Determinism); err != nil {
		return err
	}
	if o := t.Observed; o != nil {
		if o.Calls < 0 || o.Successes < 0 {
			return fmt.Errorf("%w: observed: calls %d and successes %d must not be negative", guards.ErrInvalid, o.Calls, o.Successes)
		}
		if o.Successes > o.Calls {
			return fmt.Errorf("%w: observed: successes %d exceed calls %d", guards.ErrInvalid, o.Successes, o.Calls)
		}
	}
	return nil
}

// ValidateShape is Validate for a declared workflow whose tool entries are
// still to be completed from elsewhere: the requirement, the entries that
// are given, and the structure (kinds, k, probabilities, depth, size), but
// not that every tool has an entry and a quantity.
func (w Workflow) ValidateShape() error {
	if err := guards.CheckUnit("workflow_quality_requirement", w.WorkflowQualityRequirement); err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(w.Tools)) {
		if err := w.Tools[id].validate(); err != nil {
			return fmt.Errorf("tools.%s: %w", id, err)
		}
	}
	count := 0
	return w.validateNode(w.Structure, "structure", 1, &count, false)
}

func (w Workflow) validateNode(n Node, path string, depth int, count *int, entries bool) error {
	if depth > MaxWorkflowDepth {
		return guards.FieldError(path, "nesting deeper than %d", MaxWorkflowDepth)
	}
	*count++
	if *count > MaxWorkflowNodes {
		return guards.FieldError(path, "structure has more than %d nodes", MaxWorkflowNodes)
	}
	if n.Kind == KindTool {
		if len(n.Of) != 0 || len(n.P) != 0 || n.K != 0 {
			return guards.FieldError(path, "a tool node has no branches, k or p")
		}
		if _, ok := w.Tools[n.Tool]; entries && !ok {
			return guards.FieldError(path, "tool %s has no entry in tools", strconv.Quote(n.Tool))
		}
		return nil
	}
	if n.Kind < KindChain || n.Kind > KindConditional {
		return guards.FieldError(path, "unknown node kind %d", int(n.Kind))
	}
	if n.Tool != "" || (n.Kind != KindKOfN && n.K != 0) || (n.Kind != KindConditional && len(n.P) != 0) {
		return guards.FieldError(path, "a %s node has only its branches", n.Kind)
	}
	if len(n.Of) == 0 {
		return guards.FieldError(path, "empty %s", n.Kind)
	}
	switch n.Kind {
	case KindKOfN:
		if len(n.Of) > MaxVoters {
			return guards.FieldError(path, "k_of_n has %d branches, at most %d", len(n.Of), MaxVoters)
		}
		if n.K < 1 || n.K > len(n.Of) {
			return guards.FieldError(path+".k", "k %d is not in [1, n] with n = %d", n.K, len(n.Of))
		}
	case KindConditional:
		if len(n.P) != len(n.Of) {
			return guards.FieldError(path, "%d probabilities for %d branches", len(n.P), len(n.Of))
		}
		sum := 0.0
		for i, p := range n.P {
			if err := guards.CheckUnit("p", p); err != nil {
				return fmt.Errorf("%s[%d]: %w", path, i, err)
			}
			sum += p
		}
		if math.Abs(sum-1) > ProbabilityTolerance {
			return guards.FieldError(path, "probabilities sum to %v, want 1 (within %v)", sum, ProbabilityTolerance)
		}
	}
	for i, c := range n.Of {
		if err := w.validateNode(c, childPath(path, n, i), depth+1, count, entries); err != nil {
			return err
		}
	}
	return nil
}

// childPath is the path of n's i-th child, spelt as in the JSON form:
// structure.chain[0], structure.parallel.of[1], structure.k_of_n.of[2],
// structure.conditional[3].then.
func childPath(path string, n Node, i int) string {
	idx := "[" + strconv.Itoa(i) + "]"
	switch n.Kind {
	case KindChain:
		return path + ".chain" + idx
	case KindParallelAll, KindParallelAny:
		return path + ".parallel.of" + idx
	case KindKOfN:
		return path + ".k_of_n.of" + idx
	default:
		return path + ".conditional" + idx + ".then"
	}
}

// walkLeaves calls f for every tool leaf of n, in structure order, with its
// path.
func walkLeaves(n Node, path string, f func(leaf Node, path string)) {
	if n.Kind == KindTool {
		f(n, path)
		return
	}
	for i, c := range n.Of {
		walkLeaves(c, childPath(path, n, i), f)
	}
}

// ToolIDs returns the distinct tool ids the structure calls, sorted.
func (n Node) ToolIDs() []string {
	var ids []string
	var walk func(Node, int)
	walk = func(n Node, depth int) {
		if depth > MaxWorkflowDepth {
			return
		}
		if n.Kind == KindTool {
			ids = append(ids, n.Tool)
		}
		for _, c := range n.Of {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return guards.SortedSet(ids)
}
