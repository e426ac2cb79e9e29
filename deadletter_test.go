package toolsentry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// deadLetterBuilder is the one file that writes the dead-letter headers:
// the consumer engine's builder. events.ParseDeadLetter reads them.
const deadLetterBuilder = "consumer/engine/engine_deadletter.go"

// TestOneDeadLetterBuilder fails when a second builder of dead letters
// appears: a file other than deadLetterBuilder (tests aside) that sets the
// reason header, as a header Set or Add, a map assignment or a composite
// literal key, or spells its name out outside the two declarations of the
// header names (the engine's and the events contract's).
func TestOneDeadLetterBuilder(t *testing.T) {
	const reasonHeader = "Toolsentry-Dlq-Reason"
	declared := map[string]bool{deadLetterBuilder: true, "events/dlq.go": true}
	isReason := func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.Ident:
			return x.Name == "HeaderDeadLetterReason" || x.Name == "HeaderDLQReason"
		case *ast.SelectorExpr:
			return x.Sel.Name == "HeaderDeadLetterReason" || x.Sel.Name == "HeaderDLQReason"
		case *ast.BasicLit:
			s, err := strconv.Unquote(x.Value)
			return x.Kind == token.STRING && err == nil && s == reasonHeader
		}
		return false
	}
	writers := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		path = filepath.ToSlash(path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Set" || sel.Sel.Name == "Add") && len(x.Args) > 0 && isReason(x.Args[0]) {
					writers[path]++
				}
			case *ast.AssignStmt:
				for _, lhs := range x.Lhs {
					if ix, ok := lhs.(*ast.IndexExpr); ok && isReason(ix.Index) {
						writers[path]++
					}
				}
			case *ast.KeyValueExpr:
				if isReason(x.Key) {
					writers[path]++
				}
			case *ast.BasicLit:
				if isReason(x) && !declared[path] {
					t.Errorf("%s: %s spelled out: use the header constant of %s", fset.Position(x.Pos()), reasonHeader, deadLetterBuilder)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if writers[deadLetterBuilder] == 0 {
		t.Fatalf("%s writes no reason header: the scan finds no builder", deadLetterBuilder)
	}
	for path, n := range writers {
		if path != deadLetterBuilder {
			t.Errorf("%s writes the dead-letter reason header %d times: dead letters have one builder, %s", path, n, deadLetterBuilder)
		}
	}
}
