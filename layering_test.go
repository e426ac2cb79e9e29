package toolsentry_test

// This file checks the dependency direction of the layout in DESIGN.md:
// cmd → consumer / publisher → events → guards, and nothing back up.

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/toolsentry/toolsentry"

// layer is what the packages in one folder may import. Of ours: their own
// folder (the packages below it that have no layer of their own), and the
// packages in mayImport, where "x" is the package x alone and "x/..." is x
// and every package below it. Of others (not the standard library): only
// those in external, when external is not nil.
type layer struct {
	folder    string
	mayImport []string
	external  []string
}

// layers hold every folder of the module; a package follows the layer of
// the longest folder that holds it, and a package in none fails the test,
// so that a new folder gets its rule.
var layers = []layer{
	// The seeds' base imports nothing of ours; the two domains build on it,
	// and the workflows use the tool schemas for stage compatibility. No
	// NATS, no I/O libraries: the one outside package is RFC 8785's JCS.
	{folder: "guards", external: []string{}},
	{folder: "guards/toolschema", mayImport: []string{"guards"}, external: []string{"github.com/gowebpki/jcs"}},
	{folder: "guards/workflow", mayImport: []string{"guards", "guards/toolschema"}, external: []string{}},
	{folder: "schemas"},
	{folder: "events", mayImport: []string{"guards/...", "schemas"}},
	// The JetStream runtime imports nothing of ours.
	{folder: "consumer/engine"},
	{folder: "consumer", mayImport: []string{"consumer/engine/...", "publisher/...", "events/...", "guards/...", "schemas"}},
	{folder: "publisher", mayImport: []string{"events/...", "guards/...", "schemas"}},
	{folder: "deploy"},
	{folder: "cmd", mayImport: []string{"consumer/...", "publisher/...", "events/...", "guards/...", "schemas", "deploy"}},
}

// within reports whether the package (a path relative to the module) is
// folder or below it.
func within(pkg, folder string) bool {
	return pkg == folder || strings.HasPrefix(pkg, folder+"/")
}

// layerOf returns the layer of the longest folder that holds pkg.
func layerOf(pkg string) (layer, bool) {
	var best layer
	found := false
	for _, l := range layers {
		if within(pkg, l.folder) && (!found || len(l.folder) > len(best.folder)) {
			best, found = l, true
		}
	}
	return best, found
}

// allows reports whether a package of l may import imp (relative to the
// module).
func (l layer) allows(imp string) bool {
	if own, ok := layerOf(imp); ok && own.folder == l.folder {
		return true
	}
	for _, m := range l.mayImport {
		if tree, ok := strings.CutSuffix(m, "/..."); ok && within(imp, tree) || imp == m {
			return true
		}
	}
	return false
}

// TestLayering runs go list on every package of the module and checks its
// imports (tests excluded: a test may drive a lower layer from above) against
// the layout's direction.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if pkg == "" {
			continue // this test's own package, at the module's root
		}
		l, ok := layerOf(pkg)
		if !ok {
			t.Errorf("%s is in no folder of the layout: give its folder a rule in layers", pkg)
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			switch {
			case imp == module || strings.HasPrefix(imp, module+"/"):
				rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
				if !l.allows(rel) {
					t.Errorf("%s imports %s: the layout lets %s/ import of ours only %s", pkg, rel, l.folder, listOr(l.mayImport, "its own folder"))
				}
			case !strings.Contains(strings.Split(imp, "/")[0], "."):
				// the standard library
			case l.external != nil && !slices.Contains(l.external, imp):
				t.Errorf("%s imports %s: %s/ imports only the standard library and %s", pkg, imp, l.folder, listOr(l.external, "nothing else"))
			}
		}
	}
	if checked < len(layers) {
		t.Errorf("go list named %d packages, fewer than the %d folders of the layout", checked, len(layers))
	}
}

func listOr(list []string, none string) string {
	if len(list) == 0 {
		return none
	}
	return strings.Join(list, ", ")
}
