// Command toolsentry watches AI agents' tool calls for silent schema drift
// and composition decay. See README.md, and `toolsentry help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// stdio is the command's standard streams; tests pass buffers.
type stdio struct {
	in  io.Reader
	out io.Writer
	err io.Writer
}

// command is one subcommand of the binary. Each lives in its own file and
// registers itself in an init function, so the dispatcher knows nothing of
// the commands' internals.
type command struct {
	name    string
	summary string // one line for `toolsentry help`
	usage   string // the full help text of `toolsentry NAME --help`
	// usageFunc, when set, writes the help text at the time it is asked
	// for (for help that lists what other files register).
	usageFunc func() string
	run       func(ctx context.Context, args []string, io stdio) error
}

func (c *command) help() string {
	if c.usageFunc != nil {
		return c.usageFunc()
	}
	return c.usage
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("toolsentry: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errExit carries an exit status without a message: the command has already
// said what went wrong on its own output (for example check's per-line errors).
type errExit int

func (e errExit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errUsage marks an error in how the command was called; main prints it with
// a hint to --help and exits 2.
var errUsage = errors.New("usage")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

func exitCode(err error, stderr io.Writer) int {
	var code errExit
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "toolsentry: %v\n", strings.TrimPrefix(err.Error(), "usage: "))
		return 2
	default:
		fmt.Fprintf(stderr, "toolsentry: %v\n", err)
		return 1
	}
}

func run(ctx context.Context, args []string, io stdio) error {
	if len(args) == 0 {
		printHelp(io.err)
		return errExit(2)
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fmt.Fprint(io.out, c.help())
				return nil
			}
		}
		printHelp(io.out)
		return nil
	case "-version", "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	c, ok := commands[name]
	if !ok {
		return usageErrorf("unknown command %q (see `toolsentry help`)", name)
	}
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(io.out, c.help())
			return nil
		}
	}
	return c.run(ctx, args[1:], io)
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `toolsentry catches silent schema drift and composition decay in AI agents' tool calls.

Usage: toolsentry COMMAND [flags] [args]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, "\nRun `toolsentry COMMAND --help` for a command's flags and examples.\n")
}
