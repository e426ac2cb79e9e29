package consumer_test

import (
	"encoding/json"
	"testing"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// TestToolStateReadsBaselineRecord: the agent's guard reads the baselines
// bucket through agent.ToolState; what the tool's lane writes
// (core.BaselineRecord) must decode into it.
func TestToolStateReadsBaselineRecord(t *testing.T) {
	rec := core.BaselineRecord{
		ToolID:   "github/search_issues",
		Baseline: core.ToolVersion{Fingerprint: "sha256:old", Version: "1", Tool: json.RawMessage(`{"name":"search_issues","inputSchema":{"type":"object","properties":{"per_page":{"type":"integer"}}}}`)},
		Current:  core.ToolVersion{Fingerprint: "sha256:new", Version: "1", Tool: json.RawMessage(`{"name":"search_issues","inputSchema":{"type":"object","properties":{"perPage":{"type":"integer"}}}}`)},
		Held:     true,
	}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agent.DecodeToolState(data)
	if err != nil {
		t.Fatal(err)
	}
	if st.ToolID != rec.ToolID || !st.Held || st.Baseline.Fingerprint != "sha256:old" || st.Current.Fingerprint != "sha256:new" ||
		string(st.Current.InputSchema()) != `{"type":"object","properties":{"perPage":{"type":"integer"}}}` {
		t.Errorf("DecodeToolState = %+v", st)
	}
	if _, err := agent.DecodeToolState([]byte(`{"baseline":{}}`)); err == nil {
		t.Error("a record without a tool id decodes")
	}
}

// TestListedVersionIsTheSplitVersion: a local verdict on a listed tool
// judges the version under which the core splits a tools/list.
func TestListedVersionIsTheSplitVersion(t *testing.T) {
	if agent.ListedVersion != core.UnversionedTool {
		t.Errorf("agent.ListedVersion %q, core.UnversionedTool %q", agent.ListedVersion, core.UnversionedTool)
	}
}
