package toolschema

// This file decides the action of a schema verdict for one agent: the
// table of guards.SchemaVerdictAction, with DRIFT_ON_USED_FIELDS's MIGRATE
// held only when the migration plan addresses every affected field.

import (
	"strings"

	"github.com/toolsentry/toolsentry/guards"
)

// SchemaAction returns the action of a schema verdict (the table of
// package guards, directive.go)
// for an agent whose affected fields are affected (surface keys, as
// DriftReport.Affected writes them) under the migration plan, and a short
// reason naming what decided it.
func SchemaAction(verdict guards.SchemaVerdict, affected []string, plan MigrationPlan) (guards.Action, string) {
	a, ok := guards.SchemaVerdictAction(verdict)
	switch {
	case !ok:
		return guards.ActionHalt, "unknown schema verdict " + string(verdict)
	case a != guards.ActionMigrate:
		return a, string(verdict) + " lets the agent proceed"
	}
	if len(affected) == 0 {
		return guards.ActionHalt, "drift on used fields without the fields named"
	}
	for _, key := range affected {
		if strings.HasPrefix(key, "output:") || strings.HasPrefix(key, "tool:") {
			return guards.ActionHalt, "drift on " + key + ": no rewrite of the payload can migrate it"
		}
		path := key
		if path == "$" {
			path = ""
		}
		for _, b := range plan.Blocked {
			if pathsRelated(path, b.Path) {
				return guards.ActionHalt, "cannot migrate " + describeKey(key) + ": " + b.Reason
			}
		}
		addressed := false
		for _, s := range plan.Steps {
			if pathsRelated(path, s.Path) || (s.To != "" && pathsRelated(path, s.To)) {
				addressed = true
				break
			}
		}
		if !addressed {
			return guards.ActionHalt, "no migration step addresses " + describeKey(key)
		}
	}
	return guards.ActionMigrate, "the migration addresses every affected field"
}

// pathsRelated reports whether one path is the other or lies below it.
func pathsRelated(a, b string) bool { return pathWithin(a, b) || pathWithin(b, a) }

func describeKey(key string) string {
	if key == "$" || key == "" {
		return "the payload"
	}
	return key
}
