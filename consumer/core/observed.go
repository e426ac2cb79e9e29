package core

import (
	"errors"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// ObservedCheckpoint is how many observed runs of a composition make a
// checkpoint: at ObservedCheckpoint runs, and at every multiple after, a
// declared workflow's predicted quality is compared with its observed
// end-to-end success and a composition verdict carries the comparison. 30
// runs keep the Wilson interval narrow enough (about ±0.15 at 50%) to tell
// a real gap from noise.
const ObservedCheckpoint = 30

// ObservedRuns counts a composition's runs seen in traces
// (io.toolsentry.workflow.observed.v1), in WorkflowRecord.Observed; they
// are counted whether or not the workflow is declared yet.
type ObservedRuns struct {
	Runs      int64 `json:"runs"`
	Successes int64 `json:"successes"`
	// LastSeq is the stream sequence of the last run counted: observed
	// runs are applied in the composition lane, in stream order, so a
	// redelivery is one whose sequence is not above it.
	LastSeq uint64 `json:"last_seq"`
}

// applyObserved counts one observed run of a composition and, at a
// checkpoint of a declared workflow, publishes its composition verdict with
// the observed comparison (workflow.ApplyObserved decides the verdict).
func (c *Core) applyObserved(st State, in Input) (Effects, error) {
	o := in.Event.WorkflowObserved
	var eff Effects
	rec, found := st.Workflow(o.CompositionID)
	next := &WorkflowRecord{CompositionID: o.CompositionID}
	runs := ObservedRuns{}
	if found {
		if rec.Observed != nil && rec.Observed.LastSeq >= in.Seq {
			return eff, nil // counted before this redelivery
		}
		next = cloneWorkflow(rec)
		if rec.Observed != nil {
			runs = *rec.Observed
		}
	}
	runs.Runs++
	if o.Success {
		runs.Successes++
	}
	runs.LastSeq = in.Seq
	next.Observed = &runs
	if found && len(rec.Workflow) > 0 && runs.Runs%ObservedCheckpoint == 0 {
		if err := c.observedVerdict(st, in, next, &eff); err != nil {
			return Effects{}, err
		}
	}
	eff.Writes = append(eff.Writes, Write{Bucket: Workflows, IDs: []string{o.CompositionID}, Record: next})
	return eff, nil
}

// observedVerdict evaluates the declared workflow as its declaration
// would, with the comparison of its predicted quality and the observed runs,
// and publishes the verdict. A workflow that cannot be evaluated yet (a tool
// without contract or outcomes) gets no verdict at this checkpoint: its runs
// are counted, and the next checkpoint tries again.
func (c *Core) observedVerdict(st State, in Input, rec *WorkflowRecord, eff *Effects) error {
	w, err := workflow.DecodeWorkflow(rec.Workflow)
	if err != nil {
		return nil // stored only after it decoded; its declaration reported it
	}
	m, pending, err := c.evaluate(st, w)
	if err != nil || pending != "" {
		return nil // the state, not this run, makes it unevaluable
	}
	m, observed, err := c.withObserved(st, w, rec, m)
	if err != nil || observed == nil {
		return err
	}
	if rec.Chain, err = c.compositionVerdict(eff, in, rec.CompositionID, m, rec.Chain, observed); err != nil {
		return err
	}
	rec.Pending, rec.Last = "", lastVerdict(m, in)
	return nil
}

// withObserved compares the workflow's predicted quality with its observed
// runs, once there are ObservedCheckpoint of them, and lets the comparison
// decide the verdict (workflow.ApplyObserved). Every evaluation of a workflow
// goes through it, so that a contract or a quality checkpoint does not
// publish again the verdict that the observed runs overruled. The
// comparison is nil with fewer runs or a workflow whose prediction is not
// quantified.
func (c *Core) withObserved(st State, w workflow.Workflow, rec *WorkflowRecord, m workflow.WorkflowManifest) (workflow.WorkflowManifest, *workflow.ObservedQuality, error) {
	if rec.Observed == nil || rec.Observed.Runs < ObservedCheckpoint {
		return m, nil, nil
	}
	predicted, err := workflow.PredictedQuality(predictionWorkflow(st, w))
	if errors.Is(err, workflow.ErrUnquantified) || errors.Is(err, guards.ErrInvalid) {
		return m, nil, nil
	} else if err != nil {
		return m, nil, err
	}
	cmp, err := workflow.CompareObserved(predicted, rec.Observed.Runs, rec.Observed.Successes)
	if err != nil {
		return m, nil, err
	}
	return workflow.ApplyObserved(m, w, cmp), &cmp, nil
}

// predictionWorkflow completes a declared workflow's tools with what the
// state measured: each tool's counted outcomes, and the contract's accuracy
// for a tool the declaration does not name. workflow.PredictedQuality then
// prefers the measured rate to any declared accuracy.
func predictionWorkflow(st State, w workflow.Workflow) workflow.Workflow {
	tools := make(map[string]workflow.WorkflowTool, len(w.Tools))
	for id, t := range w.Tools {
		tools[id] = t
	}
	for _, id := range w.Structure.ToolIDs() {
		t, declared := tools[id]
		q, ok := st.Quality(id)
		if !declared && ok && q.Contract != nil {
			acc := q.Contract.Accuracy
			t.Accuracy, t.Determinism = &acc, q.Contract.Determinism
		}
		if t.Determinism == "" {
			t.Determinism = guards.Deterministic // no bearing on the prediction
		}
		if ok && q.Calls > 0 {
			t.Observed = &workflow.Observed{Calls: q.Calls, Successes: q.Successes}
		}
		tools[id] = t
	}
	w.Tools = tools
	return w
}
