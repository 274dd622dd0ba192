package mandate

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// ToYAML writes m in the YAML form [Parse] reads, fields in proto order and
// set-like lists in canonical order, so that Parse(ToYAML(m)) has the same
// hash as m.
func ToYAML(m *countersignv1.Mandate) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("mandate: ToYAML of a nil mandate")
	}
	n := cloneNormalized(m)
	root, err := messageNode(n.ProtoReflect())
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("mandate: YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("mandate: YAML: %w", err)
	}
	return escapeFormat(buf.Bytes()), nil
}

// escapeFormat writes every invisible format character (Unicode Cf: bidi
// overrides, zero-width spaces…) of YAML out as a \u escape. The YAML
// library writes them raw, even in a double-quoted scalar, so a mandate
// stored before ids and text were held to visible characters (text.go)
// would still read as something else. Only double-quoted scalars hold
// them (str quotes every string with one), where the escape means the
// same character: Parse(ToYAML(m)) keeps m's hash.
func escapeFormat(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return unicode.Is(unicode.Cf, r) }) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		switch {
		case !unicode.Is(unicode.Cf, r):
			out.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&out, `\u%04X`, r)
		default:
			fmt.Fprintf(&out, `\U%08X`, r)
		}
	}
	return out.Bytes()
}

func cloneNormalized(m *countersignv1.Mandate) *countersignv1.Mandate {
	n := proto.CloneOf(m)
	normalize(n)
	return n
}

// str is a string scalar; one holding a character a reader cannot see
// (a control, format or line-separator character) is double-quoted, where
// the YAML library escapes controls and separators and [escapeFormat] the
// format characters, so the owner sees each of them.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.ContainsFunc(s, func(r rune) bool { return !visibleText(r) }) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

func plain(tag, v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

func messageNode(msg protoreflect.Message) (*yaml.Node, error) {
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	fields := msg.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !msg.Has(fd) {
			continue
		}
		v, err := fieldNode(fd, msg.Get(fd))
		if err != nil {
			return nil, err
		}
		out.Content = append(out.Content, str(string(fd.Name())), v)
	}
	return out, nil
}

func fieldNode(fd protoreflect.FieldDescriptor, v protoreflect.Value) (*yaml.Node, error) {
	switch {
	case fd.IsMap():
		out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		type entry struct {
			k string
			v protoreflect.Value
		}
		var entries []entry
		v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			entries = append(entries, entry{k.String(), v})
			return true
		})
		sort.Slice(entries, func(i, j int) bool { return entries[i].k < entries[j].k })
		for _, e := range entries {
			val, err := valueNode(fd.MapValue(), e.v)
			if err != nil {
				return nil, err
			}
			out.Content = append(out.Content, str(e.k), val)
		}
		return out, nil
	case fd.IsList():
		out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		list := v.List()
		scalars := true
		for i := 0; i < list.Len(); i++ {
			item, err := valueNode(fd, list.Get(i))
			if err != nil {
				return nil, err
			}
			scalars = scalars && item.Kind == yaml.ScalarNode
			out.Content = append(out.Content, item)
		}
		if scalars && len(out.Content) <= 8 {
			out.Style = yaml.FlowStyle
		}
		return out, nil
	}
	return valueNode(fd, v)
}

func valueNode(fd protoreflect.FieldDescriptor, v protoreflect.Value) (*yaml.Node, error) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return str(v.String()), nil
	case protoreflect.BoolKind:
		return plain("!!bool", strconv.FormatBool(v.Bool())), nil
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		return plain("!!int", strconv.FormatInt(v.Int(), 10)), nil
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return plain("!!int", strconv.Itoa(int(v.Enum()))), nil
		}
		return str(EnumName(fd.Enum(), v.Enum())), nil
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			ts, ok := v.Message().Interface().(*timestamppb.Timestamp)
			if !ok {
				return nil, fmt.Errorf("mandate: %s is not a Timestamp", fd.FullName())
			}
			return str(ts.AsTime().UTC().Format(time.RFC3339Nano)), nil
		case "google.protobuf.Duration":
			d, ok := v.Message().Interface().(*durationpb.Duration)
			if !ok {
				return nil, fmt.Errorf("mandate: %s is not a Duration", fd.FullName())
			}
			return str(FormatDuration(d.AsDuration())), nil
		}
		n, err := messageNode(v.Message())
		if err == nil && fd.Message().FullName() == "countersign.v1.Money" {
			n.Style = yaml.FlowStyle // {amount_minor: 1250, currency: USD}
		}
		return n, err
	}
	return nil, fmt.Errorf("mandate: cannot write %s fields as YAML", fd.Kind())
}
