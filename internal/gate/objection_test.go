package gate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// An advisor's answer cannot express ALLOW. These tests pin the three
// facts that make that so: Objection has no exported fields, every
// internal state of it reads as Hold or Block, and only HoldFor and BlockFor
// build one (besides the zero value, which blocks).

func TestObjectionHasNoExportedFields(t *testing.T) {
	typ := reflect.TypeFor[Objection]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() {
			t.Errorf("Objection.%s is exported; a caller could set it", f.Name)
		}
	}
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		for j := range m.Type.NumOut() {
			if out := m.Type.Out(j); out.Kind() == reflect.Pointer && out.Elem() == typ || out == typ {
				t.Errorf("method Objection.%s returns an Objection; only HoldFor and BlockFor may make one", m.Name)
			}
		}
	}
}

func TestObjectionVerdictIsNeverAllow(t *testing.T) {
	for v := range 256 { // every value objectionVerdict can hold
		o := Objection{verdict: objectionVerdict(v)}
		if got := o.Verdict(); got != Hold && got != Block {
			t.Fatalf("objection state %d reads as %v", v, got)
		}
	}
	if (Objection{}).Verdict() != Block {
		t.Fatal("the zero Objection must block")
	}
	if HoldFor("a", "b").Verdict() != Hold || BlockFor("a", "b").Verdict() != Block {
		t.Fatal("constructors give the wrong verdicts")
	}
}

// TestOnlyConstructorsBuildObjections reads the package's source: an
// Objection literal appears only in HoldFor and BlockFor, and nothing
// assigns an objection's verdict field.
func TestOnlyConstructorsBuildObjections(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					if id, ok := n.Type.(*ast.Ident); ok && id.Name == "Objection" && fn.Name.Name != "HoldFor" && fn.Name.Name != "BlockFor" {
						t.Errorf("%s: %s builds an Objection", fset.Position(n.Pos()), fn.Name.Name)
					}
				case *ast.CallExpr:
					if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "new" && len(n.Args) == 1 {
						if arg, ok := n.Args[0].(*ast.Ident); ok && arg.Name == "Objection" {
							t.Errorf("%s: %s builds an Objection with new", fset.Position(n.Pos()), fn.Name.Name)
						}
					}
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "verdict" {
							t.Errorf("%s: %s assigns an objection's verdict", fset.Position(n.Pos()), fn.Name.Name)
						}
					}
				}
				return true
			})
		}
	}
}
