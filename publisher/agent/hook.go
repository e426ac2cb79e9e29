package agent

import (
	"context"
	"encoding/json"
	"errors"
)

// CallHook is the shape of an interception hook on an agent's tool calls
// (an MCP proxy's tools/call): the arguments to send instead, or an error
// that stops the call.
type CallHook func(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error)

// Hook returns the agent's CallHook for a proxy's two switches:
//
//	applyMigrations  haltOnDrift  the hook
//	true             true         Guard: migrated arguments, or the *HaltError
//	true             false        migrated arguments; a HALT lets the call through unchanged
//	false            true         the arguments unchanged, or the *HaltError
//	false            false        the arguments unchanged
//
// A *HaltError's message names the directive, its verdict and manifest
// digest: a proxy answers the call with it as the MCP error. Arguments
// that are not JSON go through unchanged unless haltOnDrift is set (then
// they are refused with ErrBadPayload, since they cannot be judged).
func (a *Agent) Hook(applyMigrations, haltOnDrift bool) CallHook {
	return func(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
		if !applyMigrations && !haltOnDrift {
			return args, nil
		}
		out, err := a.Guard(ctx, tool, args)
		switch {
		case err == nil && applyMigrations:
			return out, nil
		case err == nil:
			return args, nil
		case haltOnDrift:
			return nil, err
		case errors.Is(err, ErrHalt), errors.Is(err, ErrBadPayload):
			return args, nil
		default:
			return nil, err // the caller's context ended
		}
	}
}
