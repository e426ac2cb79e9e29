package main

// The bodies that `toolsentry notify` posts: Alertmanager v2 alerts, Slack
// incoming-webhook blocks, plain JSON. Each is built from the verdict's own
// fields only (ids, verdict names, directive texts, field paths and types,
// digests): a verdict never holds an argument's value, and nothing here
// reads telemetry.

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// The formats of --format.
const (
	formatJSON         = "json"
	formatSlack        = "slack"
	formatAlertmanager = "alertmanager"
)

var notifyFormats = []string{formatJSON, formatSlack, formatAlertmanager}

// verdictAction is the action (PROCEED, MIGRATE, HALT) of a verdict and
// its one-line summary: the ones the verdict carries, or for a verdict
// written before verdicts carried them, the ones Describe derives (the
// mapping of the directives in force). Every format takes them from here.
func verdictAction(ev events.Event) (guards.Action, string, error) {
	switch {
	case ev.SchemaVerdict != nil:
		if v := ev.SchemaVerdict; v.Action != "" {
			return v.Action, v.Summary, nil
		}
		return ev.SchemaVerdict.Describe()
	case ev.CompositionVerdict != nil:
		if v := ev.CompositionVerdict; v.Action != "" {
			return v.Action, v.Summary, nil
		}
		a, s := ev.CompositionVerdict.Describe()
		return a, s, nil
	}
	return "", "", fmt.Errorf("%w: a %s event is not a verdict", events.ErrBadEvent, ev.Kind)
}

// notice is what every format says about one verdict.
type notice struct {
	id       string // the verdict's CloudEvent id: the idempotency key
	subject  string // the NATS subject it was published on
	typ      string
	time     time.Time // the time of the input it judged; zero when absent
	guard    string    // schema or composition
	verdict  string
	action   guards.Action
	summary  string // the verdict's one-line summary
	toolID   string // schema verdicts: the qualified tool id
	server   string // its server part ("" for a bare id)
	tool     string // its tool name
	agent    string // schema verdicts about one agent
	comp     string // composition verdicts: the composition id
	text     string // the directive, verbatim
	affected []string
	digest   string
	data     any // the verdict's payload, as it is in the stream
}

// newNotice reads a decoded verdict.
func newNotice(ev events.Event, subject string) (notice, error) {
	action, summary, err := verdictAction(ev)
	if err != nil {
		return notice{}, err
	}
	n := notice{id: ev.ID, subject: subject, typ: ev.Type, time: ev.Time, action: action, summary: summary}
	switch {
	case ev.SchemaVerdict != nil:
		v := ev.SchemaVerdict
		n.guard, n.verdict, n.toolID, n.agent, n.text, n.digest, n.data = "schema", string(v.Verdict), v.ToolID, v.AgentID, v.Directive, v.ManifestDigest, v
		n.server, n.tool = events.SplitToolID(v.ToolID)
		if len(v.Affected) > 0 {
			_ = json.Unmarshal(v.Affected, &n.affected) // verdictAction decoded it already
		}
	case ev.CompositionVerdict != nil:
		v := ev.CompositionVerdict
		n.guard, n.verdict, n.comp, n.text, n.digest, n.data = "composition", string(v.Verdict), v.CompositionID, v.Directive, v.ManifestDigest, v
	}
	return n, nil
}

// about names what the verdict is about: "crm/lookup for agent billing-7",
// "composition checkout".
func (n notice) about() string {
	if n.guard == "composition" {
		return "composition " + n.comp
	}
	s := n.toolID
	if n.agent != "" {
		s += " for agent " + n.agent
	}
	return s
}

// headline is the title of a notice: "HALT: DRIFT_ON_USED_FIELDS on
// crm/lookup for agent billing-7".
func (n notice) headline() string {
	return string(n.action) + ": " + n.verdict + " on " + n.about()
}

// severity maps the action to the usual alert severities.
func (n notice) severity() string {
	switch n.action {
	case guards.ActionHalt:
		return "critical"
	case guards.ActionMigrate:
		return "warning"
	}
	return "info"
}

// render writes the body of format for n.
func render(format string, n notice) ([]byte, error) {
	switch format {
	case formatAlertmanager:
		return json.Marshal(alertmanagerAlerts(n))
	case formatSlack:
		return json.Marshal(slackMessage(n))
	case formatJSON:
		return json.Marshal(jsonNotice(n))
	}
	return nil, fmt.Errorf("unknown format %q", format)
}

// amAlert is one alert of Alertmanager's POST /api/v2/alerts (a JSON array
// of them).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     string            `json:"startsAt,omitempty"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// alertmanagerAlerts is the verdict as one alert. Labels (what routes,
// groups and silences): alertname, guard, verdict, action, severity, and
// tool, tool_id, server, agent for schema verdicts or composition for
// composition verdicts; a label with no value is left out, as Alertmanager
// treats it. No endsAt: Alertmanager resolves it after its resolve_timeout.
func alertmanagerAlerts(n notice) []amAlert {
	labels := map[string]string{
		"alertname": "Toolsentry" + camel(n.verdict),
		"guard":     n.guard,
		"verdict":   n.verdict,
		"action":    string(n.action),
		"severity":  n.severity(),
	}
	for k, v := range map[string]string{"tool": n.tool, "tool_id": n.toolID, "server": n.server, "agent": n.agent, "composition": n.comp} {
		if v != "" {
			labels[k] = v
		}
	}
	ann := map[string]string{
		"title":           n.headline(),
		"summary":         n.summary,
		"description":     n.text,
		"idempotency_key": n.id,
		"manifest_digest": n.digest,
	}
	if len(n.affected) > 0 {
		ann["affected"] = strings.Join(n.affected, ", ")
	}
	a := amAlert{Labels: labels, Annotations: ann}
	if !n.time.IsZero() {
		a.StartsAt = n.time.UTC().Format(time.RFC3339Nano)
	}
	return []amAlert{a}
}

// camel turns DRIFT_ON_USED_FIELDS into DriftOnUsedFields.
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(s), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// Slack's limits on block texts.
const (
	slackHeaderMax  = 150
	slackSectionMax = 3000
	slackFieldMax   = 2000
)

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackBody struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

// slackMessage is an incoming-webhook message: the summary as the
// notification text, then a header, the directive, the fields, and a
// context line with the idempotency key.
func slackMessage(n notice) slackBody {
	var fields []slackText
	field := func(name, value string) {
		if value != "" {
			fields = append(fields, slackText{"mrkdwn", clip("*"+name+"*\n"+slackEscape(value), slackFieldMax)})
		}
	}
	field("Action", string(n.action))
	field("Verdict", n.verdict)
	field("Tool", n.tool)
	field("Server", n.server)
	field("Agent", n.agent)
	field("Composition", n.comp)
	field("Affected", strings.Join(n.affected, ", "))
	ctx := "toolsentry " + n.guard + " verdict · idempotency key " + n.id
	if !n.time.IsZero() {
		ctx += " · " + n.time.UTC().Format(time.RFC3339)
	}
	return slackBody{
		Text: n.headline(),
		Blocks: []slackBlock{
			{Type: "header", Text: &slackText{"plain_text", clip(string(n.action)+" · "+n.verdict, slackHeaderMax)}},
			{Type: "section", Text: &slackText{"mrkdwn", clip("*"+slackEscape(n.about())+"*: "+slackEscape(n.summary)+"\n"+slackEscape(n.text), slackSectionMax)}},
			{Type: "section", Fields: fields},
			{Type: "context", Elements: []slackText{{"mrkdwn", slackEscape(ctx)}}},
		},
	}
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// clip shortens s to at most max bytes, on a rune boundary, with an ellipsis.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// jsonBody is the plain JSON format: the verdict's data, with its id (also
// as idempotency_key), subject, type, time, action and summary.
type jsonBody struct {
	IdempotencyKey string        `json:"idempotency_key"`
	ID             string        `json:"id"`
	Type           string        `json:"type"`
	Subject        string        `json:"subject"`
	Time           string        `json:"time,omitempty"`
	Action         guards.Action `json:"action"`
	Summary        string        `json:"summary"`
	Data           any           `json:"data"`
}

func jsonNotice(n notice) jsonBody {
	b := jsonBody{IdempotencyKey: n.id, ID: n.id, Type: n.typ, Subject: n.subject, Action: n.action, Summary: n.summary, Data: n.data}
	if !n.time.IsZero() {
		b.Time = n.time.UTC().Format(time.RFC3339Nano)
	}
	return b
}
