package main

import (
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TestRenderCompiles checks that the printed files are the whole import
// closure, leave out the well-known types, and compile back to descriptors
// declaring the same elements as the Go descriptors they came from.
func TestRenderCompiles(t *testing.T) {
	files, err := render(roots)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"buf/validate/validate.proto",
		"google/api/annotations.proto",
		"google/api/field_behavior.proto",
		"google/api/http.proto",
		"protoc-gen-openapiv2/options/annotations.proto",
		"protoc-gen-openapiv2/options/openapiv2.proto",
	}
	names := slices.Sorted(maps.Keys(files))
	if !slices.Equal(names, want) {
		t.Fatalf("printed files = %q, want %q", names, want)
	}

	srcs := map[string]string{}
	for name, b := range files {
		srcs[name] = string(b)
	}
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(path string) (io.ReadCloser, error) {
				if s, ok := srcs[path]; ok {
					return io.NopCloser(strings.NewReader(s)), nil
				}
				return nil, protoregistry.NotFound
			},
		}),
	}
	compiled, err := compiler.Compile(context.Background(), names...)
	if err != nil {
		t.Fatalf("printed protos do not compile: %v", err)
	}
	for _, got := range compiled {
		orig, err := protoregistry.GlobalFiles.FindFileByPath(got.Path())
		if err != nil {
			t.Fatal(err)
		}
		if g, w := declared(got), declared(orig); !slices.Equal(g, w) {
			t.Errorf("%s declares %q, Go descriptor declares %q", got.Path(), g, w)
		}
		if g, w := protodesc.ToFileDescriptorProto(got).GetOptions().GetGoPackage(),
			protodesc.ToFileDescriptorProto(orig).GetOptions().GetGoPackage(); g != w {
			t.Errorf("%s: go_package %q, want %q", got.Path(), g, w)
		}
	}
}

// declared lists the full names of the top-level elements of a file.
func declared(fd protoreflect.FileDescriptor) []string {
	var names []string
	for i := range fd.Messages().Len() {
		names = append(names, string(fd.Messages().Get(i).FullName()))
	}
	for i := range fd.Enums().Len() {
		names = append(names, string(fd.Enums().Get(i).FullName()))
	}
	for i := range fd.Extensions().Len() {
		names = append(names, string(fd.Extensions().Get(i).FullName()))
	}
	for i := range fd.Services().Len() {
		names = append(names, string(fd.Services().Get(i).FullName()))
	}
	slices.Sort(names)
	return names
}
