package mandate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// MaxSize bounds a mandate file; real ones are a few kilobytes.
const MaxSize = 1 << 20

// Parse reads a mandate from its YAML form and validates it. The error, if
// any, is an *[Error] listing every problem with its field and line.
func Parse(data []byte) (*countersignv1.Mandate, error) {
	m, problems := parse(data)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return m, nil
}

// Lint returns every problem of a mandate's YAML form, in source order; nil
// when the mandate is valid.
func Lint(data []byte) []Problem {
	_, problems := parse(data)
	return problems
}

func parse(data []byte) (*countersignv1.Mandate, []Problem) {
	root, problems := decodeDocument(data)
	if len(problems) > 0 {
		return nil, problems
	}
	p := &parser{root: root, nodes: map[string]*yaml.Node{}}
	m := &countersignv1.Mandate{}
	p.message(root, "", m.ProtoReflect())
	if len(p.problems) > 0 {
		sortProblems(p.problems)
		return nil, p.problems
	}
	problems = check(m, p.locate)
	sortProblems(problems)
	if len(problems) > 0 {
		return nil, problems
	}
	return m, nil
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decodeDocument parses data as exactly one YAML document whose root is a
// mapping.
func decodeDocument(data []byte) (root *yaml.Node, problems []Problem) {
	at := func(line, col int, format string, args ...any) []Problem {
		return []Problem{{Line: line, Column: col, Message: fmt.Sprintf(format, args...)}}
	}
	if len(data) > MaxSize {
		return nil, at(1, 1, "the file is %d bytes; a mandate may be at most %d", len(data), MaxSize)
	}
	if off := invalidUTF8(data); off >= 0 {
		line, col := position(data, off)
		return nil, at(line, col, "the file is not valid UTF-8 (byte 0x%02x)", data[off])
	}
	defer func() {
		// The YAML library is not ours and the input is untrusted: a
		// panic in it is a rejected file, not a crashed process.
		if r := recover(); r != nil {
			root, problems = nil, at(1, 1, "the YAML parser failed on this file: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, at(1, 1, "the file is empty; a mandate is a YAML mapping of fields")
		}
		return nil, yamlProblem(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, at(extra.Line, extra.Column, "a mandate file holds one YAML document; a second one starts here")
	case !errors.Is(err, io.EOF):
		return nil, yamlProblem(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, at(1, 1, "the file holds no YAML document")
	}
	root = doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, at(root.Line, root.Column, "a mandate is a YAML mapping of fields, got %s", describe(root))
	}
	return root, nil
}

func yamlProblem(err error) []Problem {
	msg := err.Error()
	if m := yamlErrLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return []Problem{{Line: line, Column: 1, Message: "YAML syntax: " + m[2]}}
	}
	return []Problem{{Line: 1, Column: 1, Message: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}}
}

func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

// position is the 1-based line and column (in runes) of byte offset off.
func position(b []byte, off int) (line, col int) {
	line = 1 + bytes.Count(b[:off], []byte("\n"))
	start := bytes.LastIndexByte(b[:off], '\n') + 1
	return line, 1 + utf8.RuneCount(b[start:off])
}

// parser walks the YAML node tree into a proto message, driven by the
// message's descriptor, and remembers where each field path was written.
type parser struct {
	root     *yaml.Node
	nodes    map[string]*yaml.Node // field path → value node; path+keySuffix → key node of a map entry
	problems []Problem
}

const keySuffix = "#key"

func (p *parser) add(n *yaml.Node, path, format string, args ...any) {
	p.problems = append(p.problems, Problem{Line: n.Line, Column: n.Column, Field: path, Message: fmt.Sprintf(format, args...)})
}

// locate returns the position of path, or of its closest written ancestor.
func (p *parser) locate(path string, forKey bool) (int, int) {
	if forKey {
		if n, ok := p.nodes[path+keySuffix]; ok {
			return n.Line, n.Column
		}
	}
	for {
		if n, ok := p.nodes[path]; ok {
			return n.Line, n.Column
		}
		if path == "" {
			return p.root.Line, p.root.Column
		}
		path = parentPath(path)
	}
}

// parentPath strips the last element of a field path: a.b → a, a[3] → a,
// a["k"] → a.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			// A quoted map key may itself contain '['; find the '[' that
			// opens a subscript: the one after which the rest parses.
			for j := i; j >= 0; j = strings.LastIndexByte(path[:j], '[') {
				sub := path[j+1 : len(path)-1]
				if _, err := strconv.Unquote(sub); err == nil || isDigits(sub) {
					return path[:j]
				}
				if j == 0 {
					break
				}
			}
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (p *parser) message(n *yaml.Node, path string, msg protoreflect.Message) {
	if !p.usable(n, path) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.add(n, path, "must be a mapping of fields, got %s", describe(n))
		return
	}
	fields := msg.Descriptor().Fields()
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !p.usable(k, path) {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.add(k, path, "field names are plain words, got %s", describe(k))
			continue
		}
		name := k.Value
		fpath := join(path, name)
		if first, dup := seen[name]; dup {
			p.add(k, fpath, "duplicate key %q (first given at line %d)", name, first.Line)
			continue
		}
		seen[name] = k
		fd := fields.ByName(protoreflect.Name(name))
		if fd == nil {
			p.add(k, fpath, "unknown field %q%s", name, suggest(name, fields))
			continue
		}
		p.nodes[fpath] = v
		p.field(v, fpath, msg, fd)
	}
}

// usable rejects anchors and aliases: a reviewer must read each value where
// it applies, and aliases are how YAML bombs are built.
func (p *parser) usable(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		p.add(n, path, "aliases (*%s) are not allowed in a mandate: write each value out", n.Value)
		return false
	}
	if n.Anchor != "" {
		p.add(n, path, "anchors (&%s) are not allowed in a mandate: write each value out", n.Anchor)
		return false
	}
	return true
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func (p *parser) field(v *yaml.Node, path string, msg protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if !p.usable(v, path) {
		return
	}
	if isNull(v) {
		p.add(v, path, "has no value: give one or remove the key")
		return
	}
	switch {
	case fd.IsMap():
		p.mapField(v, path, msg, fd)
	case fd.IsList():
		if v.Kind != yaml.SequenceNode {
			p.add(v, path, "must be a list, got %s", describe(v))
			return
		}
		list := msg.Mutable(fd).List()
		for i, item := range v.Content {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			p.nodes[ipath] = item
			if !p.usable(item, ipath) {
				continue
			}
			if fd.Kind() == protoreflect.MessageKind && !isWellKnown(fd.Message()) {
				elem := list.NewElement()
				p.message(item, ipath, elem.Message())
				list.Append(elem)
				continue
			}
			if val, ok := p.scalar(item, ipath, fd); ok {
				list.Append(val)
			}
		}
	case fd.Kind() == protoreflect.MessageKind && !isWellKnown(fd.Message()):
		p.message(v, path, msg.Mutable(fd).Message())
	default:
		if val, ok := p.scalar(v, path, fd); ok {
			msg.Set(fd, val)
		}
	}
}

func (p *parser) mapField(v *yaml.Node, path string, msg protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if v.Kind != yaml.MappingNode {
		p.add(v, path, "must be a mapping, got %s", describe(v))
		return
	}
	if fd.MapKey().Kind() != protoreflect.StringKind {
		p.add(v, path, "maps with non-string keys are not supported")
		return
	}
	m := msg.Mutable(fd).Map()
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		if !p.usable(k, path) || !p.usable(val, path) {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.add(k, path, "keys must be strings, got %s", describe(k))
			continue
		}
		epath := path + "[" + strconv.Quote(k.Value) + "]"
		if first, dup := seen[k.Value]; dup {
			p.add(k, epath, "duplicate key %q (first given at line %d)", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		p.nodes[epath] = val
		p.nodes[epath+keySuffix] = k
		if isNull(val) {
			p.add(val, epath, "has no value")
			continue
		}
		if x, ok := p.scalar(val, epath, fd.MapValue()); ok {
			m.Set(protoreflect.ValueOfString(k.Value).MapKey(), x)
		}
	}
}

func isWellKnown(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration":
		return true
	}
	return false
}

// zeroIsNoLimit are the counts whose zero value means "no limit". Written
// out, a 0 reads as a limit of nothing, means the opposite and vanishes
// from the stored form (proto3 keeps no zero), so the YAML form refuses it
// as it refuses a budget of 0: the owner leaves the field out instead. A
// mandate built in code or sent to the API cannot tell an explicit 0 from
// an absent field, and means no limit by either.
var zeroIsNoLimit = map[protoreflect.FullName]bool{
	"countersign.v1.Mandate.recurrence_limit": true,
	"countersign.v1.Window.max_calls":         true,
}

// plainInt is the only spelling of an integer a mandate accepts: decimal,
// no sign other than '-', no leading zeros, no underscores.
var plainInt = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

func (p *parser) scalar(n *yaml.Node, path string, fd protoreflect.FieldDescriptor) (protoreflect.Value, bool) {
	var none protoreflect.Value
	if n.Kind != yaml.ScalarNode {
		p.add(n, path, "must be %s, got %s", want(fd), describe(n))
		return none, false
	}
	if isNull(n) {
		p.add(n, path, "has no value")
		return none, false
	}
	tag := n.ShortTag()
	quoted := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	switch fd.Kind() {
	case protoreflect.StringKind:
		if tag != "!!str" {
			p.add(n, path, "must be a string, got %s; quote it if it is meant as text", describe(n))
			return none, false
		}
		return protoreflect.ValueOfString(n.Value), true
	case protoreflect.BoolKind:
		if tag != "!!bool" || quoted {
			p.add(n, path, "must be true or false, got %s", describe(n))
			return none, false
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			p.add(n, path, "must be true or false, got %q", n.Value)
			return none, false
		}
		return protoreflect.ValueOfBool(b), true
	case protoreflect.Int64Kind, protoreflect.Int32Kind:
		bits := 64
		if fd.Kind() == protoreflect.Int32Kind {
			bits = 32
		}
		v, ok := p.integer(n, path, tag, quoted, bits, isAmount(fd))
		if !ok {
			return none, false
		}
		if v == 0 && zeroIsNoLimit[fd.FullName()] {
			p.problems = append(p.problems, Problem{Line: n.Line, Column: n.Column, Field: path, Rule: "mandate.positive_limit",
				Message: fmt.Sprintf("0 here means no limit, not a limit of 0, and is not kept in the stored mandate; leave %s out for no limit, or write a positive one", fd.Name())})
			return none, false
		}
		if bits == 32 {
			return protoreflect.ValueOfInt32(int32(v)), true
		}
		return protoreflect.ValueOfInt64(v), true
	case protoreflect.EnumKind:
		names := EnumNames(fd.Enum())
		if tag != "!!str" {
			p.add(n, path, "must be one of %s, got %s", strings.Join(names, ", "), describe(n))
			return none, false
		}
		num, ok := EnumValue(fd.Enum(), n.Value)
		if !ok {
			p.add(n, path, "must be one of %s, got %q", strings.Join(names, ", "), n.Value)
			return none, false
		}
		return protoreflect.ValueOfEnum(num), true
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return p.timestamp(n, path, tag)
		case "google.protobuf.Duration":
			return p.duration(n, path, tag)
		}
	}
	p.add(n, path, "fields of type %s are not supported in YAML", fd.Kind())
	return none, false
}

func (p *parser) integer(n *yaml.Node, path, tag string, quoted bool, bits int, amount bool) (int64, bool) {
	what := "an integer"
	if amount {
		what = "an integer number of minor units (1250 for 12.50)"
	}
	switch {
	case quoted && plainInt.MatchString(n.Value):
		p.add(n, path, "must be %s written without quotes, got the string %q", what, n.Value)
		return 0, false
	case quoted || tag == "!!str":
		p.add(n, path, "must be %s, got the string %q", what, n.Value)
		return 0, false
	case tag == "!!float":
		v := strings.ToLower(n.Value)
		switch {
		case strings.ContainsAny(v, "e"):
			p.add(n, path, "must be %s in plain digits; the exponent form %s is not accepted", what, n.Value)
		case strings.Contains(v, "inf") || strings.Contains(v, "nan"):
			p.add(n, path, "must be %s, got %s", what, n.Value)
		default:
			if amount {
				p.add(n, path, "%s is not an integer: amounts are integers in the currency's minor units (1250 for 12.50)", n.Value)
			} else {
				p.add(n, path, "must be an integer, got %s", n.Value)
			}
		}
		return 0, false
	case tag != "!!int":
		p.add(n, path, "must be %s, got %s", what, describe(n))
		return 0, false
	case !plainInt.MatchString(n.Value):
		p.add(n, path, "must be %s in plain decimal digits (no sign, leading zeros, underscores, hex or octal), got %s", what, n.Value)
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, bits)
	if err != nil {
		p.add(n, path, "%s does not fit in a %d-bit integer", n.Value, bits)
		return 0, false
	}
	return v, true
}

func (p *parser) timestamp(n *yaml.Node, path, tag string) (protoreflect.Value, bool) {
	var none protoreflect.Value
	if tag != "!!str" && tag != "!!timestamp" {
		p.add(n, path, "must be an RFC 3339 timestamp such as 2026-01-01T00:00:00Z, got %s", describe(n))
		return none, false
	}
	t, err := time.Parse(time.RFC3339Nano, n.Value)
	if err != nil {
		p.add(n, path, "must be an RFC 3339 timestamp with a time zone, such as 2026-01-01T00:00:00Z, got %q", n.Value)
		return none, false
	}
	if t.Nanosecond()%1000 != 0 {
		p.add(n, path, "%q is more precise than the microsecond the ledger stores", n.Value)
		return none, false
	}
	ts := timestamppb.New(t)
	if err := ts.CheckValid(); err != nil {
		p.add(n, path, "%q is outside the years 0001 to 9999", n.Value)
		return none, false
	}
	return protoreflect.ValueOfMessage(ts.ProtoReflect()), true
}

var wholeDays = regexp.MustCompile(`^([0-9]{1,5})d$`)

func (p *parser) duration(n *yaml.Node, path, tag string) (protoreflect.Value, bool) {
	var none protoreflect.Value
	if tag != "!!str" {
		p.add(n, path, "must be a duration such as 24h, 90m or 7d, got %s", describe(n))
		return none, false
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		p.add(n, path, "must be a duration such as 24h, 90m or 7d, got %q", n.Value)
		return none, false
	}
	return protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect()), true
}

// ParseDuration reads a Go duration (24h, 1h30m) or a whole number of days (7d).
func ParseDuration(s string) (time.Duration, error) {
	if m := wholeDays.FindStringSubmatch(s); m != nil {
		days, err := strconv.Atoi(m[1])
		if err != nil {
			return 0, err
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// FormatDuration writes d the way a person would: 24h, 1h30m, 45s, and
// whole days from two days up as 7d.
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= 2*day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func isAmount(fd protoreflect.FieldDescriptor) bool {
	return strings.HasSuffix(string(fd.Name()), "_minor")
}

// enumPrefix is the common prefix of an enum's value names, taken from its
// zero value: RAIL_UNSPECIFIED → RAIL_.
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	if zero := ed.Values().ByNumber(0); zero != nil {
		return strings.TrimSuffix(string(zero.Name()), "UNSPECIFIED")
	}
	return ""
}

// EnumNames are the YAML spellings of an enum's values, zero excluded.
func EnumNames(ed protoreflect.EnumDescriptor) []string {
	prefix := enumPrefix(ed)
	var out []string
	for i := 0; i < ed.Values().Len(); i++ {
		v := ed.Values().Get(i)
		if v.Number() == 0 {
			continue
		}
		out = append(out, strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix)))
	}
	return out
}

// EnumValue is the enum value spelt s in YAML ("refund" for
// ACTION_KIND_REFUND); false for unknown spellings and the zero value.
func EnumValue(ed protoreflect.EnumDescriptor, s string) (protoreflect.EnumNumber, bool) {
	if s == "" || s != strings.ToLower(s) {
		return 0, false
	}
	v := ed.Values().ByName(protoreflect.Name(enumPrefix(ed) + strings.ToUpper(s)))
	if v == nil || v.Number() == 0 {
		return 0, false
	}
	return v.Number(), true
}

// EnumName is the YAML spelling of an enum value (e.g. "budgeted"), or its
// number for a value the schema does not name.
func EnumName(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	v := ed.Values().ByNumber(n)
	if v == nil {
		return strconv.Itoa(int(n))
	}
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), enumPrefix(ed)))
}

func want(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		if isAmount(fd) {
			return "an integer number of minor units"
		}
		return "an integer"
	case protoreflect.EnumKind:
		return "one of " + strings.Join(EnumNames(fd.Enum()), ", ")
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return "an RFC 3339 timestamp"
		case "google.protobuf.Duration":
			return "a duration such as 24h"
		}
	}
	return "a value"
}

// describe names what a node is, for messages: "a list", "the string "x"".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int":
		return "the integer " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!null":
		return "null"
	case "!!timestamp":
		return "the timestamp " + n.Value
	}
	return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
}

// suggest proposes the known field closest to an unknown name.
func suggest(name string, fields protoreflect.FieldDescriptors) string {
	best, bestDist := "", 2+len(name)/4
	known := make([]string, 0, fields.Len())
	for i := 0; i < fields.Len(); i++ {
		f := string(fields.Get(i).Name())
		known = append(known, f)
		if d := editDistance(strings.ToLower(name), f); d < bestDist {
			best, bestDist = f, d
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	sort.Strings(known)
	return "; known fields: " + strings.Join(known, ", ")
}

// editDistance is the Levenshtein distance, bounded: the name is from an
// untrusted file, and a long one is near nothing.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	return levenshtein.ComputeDistance(a, b)
}
