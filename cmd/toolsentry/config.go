package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Settings: every flag of a command that parses with parseSettings can also
// be given as an environment variable or as a key of a YAML config file.
// Precedence, highest first: the command line, the environment
// (TOOLSENTRY_<FLAG>, upper case, '-' as '_'), the config file (--config
// FILE or TOOLSENTRY_CONFIG; keys are the flag names), the flag's default.
// The mechanism is generic over the flag.FlagSet: a flag added later gets
// its environment variable and config key without any further code.

// envConfig names the config file when --config is not given.
const envConfig = "TOOLSENTRY_CONFIG"

// configFlag is the flag that names the config file; it cannot be set in
// the file itself.
const configFlag = "config"

// errConfigFile marks a config file that cannot be used: unreadable, not a
// YAML mapping of flag names to values, or naming an unknown setting.
var errConfigFile = errors.New("config file")

// envName is the environment variable of a flag: TOOLSENTRY_ and the flag's
// name in upper case with '-' as '_' (--log-level: TOOLSENTRY_LOG_LEVEL).
func envName(flagName string) string {
	return "TOOLSENTRY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseSettings registers --config on fs, parses args, then gives every
// flag that the command line did not set its value from the environment or,
// failing that, from the config file. An empty environment variable counts
// as unset. Errors are usage errors naming the variable, or the file, line
// and key, that holds the bad value.
func parseSettings(fs *flag.FlagSet, args []string) error {
	path := fs.String(configFlag, "", "")
	// The error is returned, and printed once by main: the flag package
	// would print it a second time on the flag set's output.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageErrorf("%s: %v (see toolsentry %s --help)", fs.Name(), err, fs.Name())
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	file := *path
	if !onCommandLine[configFlag] {
		file = env(envConfig, "")
	}
	var values map[string]configValue
	if file != "" {
		var err error
		if values, err = readConfigFile(file, fs); err != nil {
			return usageErrorf("%v", err)
		}
	}
	// The environment first: a flag's bound variable, else the rule of
	// serve's flags (envName); then the file, for what neither set.
	if err := applyEnv(fs, func(f *flag.Flag) string {
		if f.Name == configFlag {
			return ""
		}
		if v := boundEnv(f); v != "" {
			return v
		}
		return envName(f.Name)
	}); err != nil {
		return err
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true }) // the environment's too
	fs.VisitAll(func(f *flag.Flag) {
		if onCommandLine[f.Name] || f.Name == configFlag {
			return
		}
		if v, ok := values[f.Name]; ok {
			if err := fs.Set(f.Name, v.value); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %q: %v", file, v.line, f.Name, v.value, err))
			}
		}
	})
	if len(errs) > 0 {
		return usageErrorf("%v", errors.Join(errs...))
	}
	return nil
}

// configValue is one setting of a config file and the line it is on.
type configValue struct {
	value string
	line  int
}

// readConfigFile reads a YAML mapping of fs's flag names to scalar values
// (a list of scalars is joined with commas, for --nats-url). Unknown keys,
// duplicate keys and nested values are errors naming the file and line.
func readConfigFile(path string, fs *flag.FlagSet) (map[string]configValue, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errConfigFile, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errConfigFile, path, err)
	}
	values := map[string]configValue{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return values, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w %s:%d: want a mapping of setting names to values (data-dir: /var/lib/toolsentry)", errConfigFile, path, root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			return nil, fmt.Errorf("%w %s:%d: a setting name must be a plain word", errConfigFile, path, k.Line)
		case name == configFlag:
			return nil, fmt.Errorf("%w %s:%d: %q cannot be set in a config file", errConfigFile, path, k.Line, name)
		case fs.Lookup(name) == nil:
			return nil, fmt.Errorf("%w %s:%d: unknown setting %q: toolsentry %s has no --%s flag (known: %s)", errConfigFile, path, k.Line, name, fs.Name(), name, strings.Join(flagNames(fs), ", "))
		}
		if prev, dup := values[name]; dup {
			return nil, fmt.Errorf("%w %s:%d: %q is already set on line %d", errConfigFile, path, k.Line, name, prev.line)
		}
		value, err := scalarText(v)
		if err != nil {
			return nil, fmt.Errorf("%w %s:%d: %s: %v", errConfigFile, path, v.Line, name, err)
		}
		values[name] = configValue{value: value, line: k.Line}
	}
	return values, nil
}

// scalarText is a YAML value as the text a flag parses: a scalar as
// written, null as empty, a list of scalars joined with commas.
func scalarText(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("a list may only hold plain values")
			}
			parts = append(parts, c.Value)
		}
		return strings.Join(parts, ","), nil
	case yaml.AliasNode:
		return scalarText(n.Alias)
	}
	return "", errors.New("want a plain value, not a mapping")
}

// flagNames lists fs's settings, sorted, for error messages.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != configFlag {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	return names
}

// The environment, by one rule for every command: a flag that the command
// line does not set takes the value of its environment variable, and a
// variable that is unset or set to the empty string counts as unset, so
// `TOOLSENTRY_LOG_LEVEL=` leaves --log-level at its default. A value that
// does not parse is a usage error naming the variable, for every command.
// Flags are registered with their plain defaults; bindEnv names a flag's
// variable, and the parse (parseInterleaved, parseFlags, parseSettings)
// applies it once, after the command line.

// envValue is a flag value that the environment variable env sets when the
// command line does not (bindEnv).
type envValue struct {
	flag.Value
	env string
}

// IsBoolFlag keeps a boolean flag usable as a bare --name.
func (v *envValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// bindEnv makes the environment variable env set the flag name of fs when
// the command line does not. The flag must be registered.
func bindEnv(fs *flag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	f.Value = &envValue{Value: f.Value, env: env}
}

// boundEnv is the variable bound to f with bindEnv, or "".
func boundEnv(f *flag.Flag) string {
	if v, ok := f.Value.(*envValue); ok {
		return v.env
	}
	return ""
}

// applyEnv gives every flag of fs that the command line did not set the
// value of its environment variable (varOf; "" for none) when that is set.
// Errors are usage errors naming the variable.
func applyEnv(fs *flag.FlagSet, varOf func(*flag.Flag) string) error {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := varOf(f)
		if onCommandLine[f.Name] || name == "" {
			return
		}
		if v, ok := lookupEnv(name); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", name, v, err))
			}
		}
	})
	if len(errs) > 0 {
		return usageErrorf("%v", errors.Join(errs...))
	}
	return nil
}

// parseFlags parses args with fs, then applies the environment (applyEnv
// of the bound variables). Errors are usage errors that point to the
// command's --help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // the error is returned and printed once by main
	if err := fs.Parse(args); err != nil {
		return usageErrorf("%s: %v (see toolsentry %s --help)", fs.Name(), err, fs.Name())
	}
	return applyEnv(fs, boundEnv)
}

// lookupEnv returns the value of the environment variable name and whether
// it counts as set: present and not empty.
func lookupEnv(name string) (string, bool) {
	v := os.Getenv(name)
	return v, v != ""
}

// env is the value of name, or def when it is unset or empty.
func env(name, def string) string {
	if v, ok := lookupEnv(name); ok {
		return v
	}
	return def
}
