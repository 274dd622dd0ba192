// Package envoyconfig parses and validates Envoy bootstraps the way Envoy
// does as far as its API goes, for the tests of the shipped configurations
// (envoy/) and the chart's check (scripts/chartcheck). No Envoy binary runs
// where this project is built, so this is how a config is proven to load.
package envoyconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Every extension type a shipped config packs in an Any must be in
	// the global registry, or it cannot be resolved. The Bootstrap's own
	// imports bring the core types; these bring the extensions.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	// custom_response is never allowed (LocalReplyFaults), but resolved,
	// so that a config naming it is refused for that reason.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/custom_response/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	// Upstream filters are never allowed on a rail's way (RailClusterFaults,
	// LocalReplyFaults), but resolved, so that a config naming the ones a
	// rail's answer could be rewritten by is refused for that reason.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/custom_header/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// ParseBootstrap parses a YAML (or JSON) Envoy bootstrap the way Envoy
// does: YAML to JSON, then the proto3 JSON mapping, with unknown fields an
// error. protojson also resolves every Any's @type while parsing.
func ParseBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

// Validation is what ValidateDeep found.
type Validation struct {
	// Anys lists, by config path, the full type name of every Any unpacked.
	Anys map[string]string
}

// Types returns the distinct type names unpacked from Anys, sorted.
func (v Validation) Types() []string {
	return slices.Compact(slices.Sorted(maps.Values(v.Anys)))
}

// ValidateDeep validates m with its generated rules and then every message
// packed in a google.protobuf.Any beneath it, at any depth (ValidateAll
// alone stops at an Any): each Any's type URL is resolved in the global
// registry, its value unmarshalled (unknown fields are an error) and
// validated, and searched for further Anys. It also refuses deprecated
// fields and enum values, which Envoy warns about or rejects. Every error
// names the config path, e.g.
// static_resources.listeners[0].filter_chains[0].filters[0].typed_config<HttpConnectionManager>.http_filters[0].typed_config<ExtAuthz>.
func ValidateDeep(m proto.Message) (Validation, error) {
	w := &walker{res: Validation{Anys: map[string]string{}}}
	w.validate("", m)
	w.message("", m.ProtoReflect())
	return w.res, errors.Join(w.errs...)
}

// validator is what protoc-gen-validate generates for every Envoy message.
type validator interface{ ValidateAll() error }

type walker struct {
	res  Validation
	errs []error
}

func (w *walker) fail(path, format string, args ...any) {
	if path == "" {
		path = "(root)"
	}
	w.errs = append(w.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// validate runs m's ValidateAll; a message without one cannot be checked,
// which is itself an error for an Envoy config.
func (w *walker) validate(path string, m proto.Message) {
	v, ok := m.(validator)
	if !ok {
		w.fail(path, "%s has no generated validation", m.ProtoReflect().Descriptor().FullName())
		return
	}
	if err := v.ValidateAll(); err != nil {
		w.fail(path, "%v", err)
	}
}

func (w *walker) message(path string, m protoreflect.Message) {
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		w.any(path, m)
		return
	}
	if len(m.GetUnknown()) > 0 {
		w.fail(path, "%s carries %d bytes of fields this API version does not know", m.Descriptor().FullName(), len(m.GetUnknown()))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fp := string(fd.Name())
		if path != "" {
			fp = path + "." + fp
		}
		if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
			w.fail(fp, "field %s is deprecated", fd.FullName())
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				w.value(fmt.Sprintf("%s[%d]", fp, i), fd, l.Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				w.value(fmt.Sprintf("%s[%s]", fp, k.String()), fd.MapValue(), mv)
				return true
			})
		default:
			w.value(fp, fd, v)
		}
		return true
	})
}

func (w *walker) value(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		w.message(path, v.Message())
	case protoreflect.EnumKind:
		ev := fd.Enum().Values().ByNumber(v.Enum())
		if ev == nil {
			w.fail(path, "%d is not a value of %s", v.Enum(), fd.Enum().FullName())
			return
		}
		if opts, ok := ev.Options().(*descriptorpb.EnumValueOptions); ok && opts.GetDeprecated() {
			w.fail(path, "enum value %s is deprecated", ev.FullName())
		}
	}
}

func (w *walker) any(path string, m protoreflect.Message) {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		w.fail(path, "google.protobuf.Any of unexpected Go type %T", m.Interface())
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		w.fail(path, "typed config %q cannot be resolved or unmarshalled: %v", a.GetTypeUrl(), err)
		return
	}
	name := inner.ProtoReflect().Descriptor()
	ip := fmt.Sprintf("%s<%s>", path, name.Name())
	w.res.Anys[ip] = string(name.FullName())
	w.validate(ip, inner)
	w.message(ip, inner.ProtoReflect())
}
