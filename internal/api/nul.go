package api

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// nulField returns the path of the first string in m, at any depth
// (nested messages, repeated fields, map keys and values), that holds a
// NUL byte, or "" when none does. The ledger's text columns cannot store
// NUL, and protovalidate's rules let it through.
func nulField(m protoreflect.Message) string {
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				at := name + "[" + mapKey(k) + "]"
				if fd.MapKey().Kind() == protoreflect.StringKind && strings.IndexByte(k.String(), 0) >= 0 {
					found = at
				} else {
					found = nulValue(fd.MapValue(), mv, at)
				}
				return found == ""
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if found = nulValue(fd, l.Get(i), name+"["+strconv.Itoa(i)+"]"); found != "" {
					break
				}
			}
		default:
			found = nulValue(fd, v, name)
		}
		return found == ""
	})
	return found
}

// nulValue checks one value of field fd, found at path.
func nulValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return path
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if in := nulField(v.Message()); in != "" {
			return path + "." + in
		}
	default:
	}
	return ""
}

// mapKey writes a map key as protovalidate's field paths do.
func mapKey(k protoreflect.MapKey) string {
	if s, ok := k.Interface().(string); ok {
		return strconv.Quote(s)
	}
	return k.String()
}

// refuseNUL is the InvalidArgument for a NUL byte at path.
func refuseNUL(path string) error {
	desc := "must not contain a NUL byte (U+0000)"
	st := status.New(codes.InvalidArgument, fmt.Sprintf("%s: %s", path, desc))
	return withDetails(st, "INVALID_ARGUMENT", &errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: path, Description: desc}},
	})
}
