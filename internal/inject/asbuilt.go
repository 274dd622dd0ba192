package inject

import (
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// asBuilt says a stored container is the one built (builtDiff is empty).
func asBuilt(got, want corev1.Container) bool {
	return len(builtDiff(got, want)) == 0
}

// builtDiff names the fields (as in the pod's JSON) in which a container
// the pod carries differs from the one the injector builds, once the API
// server's defaults for fields the injector leaves unset are filled in on
// both. Resources are not compared: a LimitRange's defaults may be filled
// in when the in-tree admission plugins run again after the patch, and
// they open no way around the isolation.
func builtDiff(got, want corev1.Container) []string {
	got, want = *got.DeepCopy(), *want.DeepCopy()
	got.Resources = want.Resources
	if want.ImagePullPolicy == "" {
		got.ImagePullPolicy = "" // defaulted from the image's tag
	}
	containerDefaults(&got)
	containerDefaults(&want)
	var diff []string
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		if !apiequality.Semantic.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			name, _, _ := strings.Cut(g.Type().Field(i).Tag.Get("json"), ",")
			diff = append(diff, name)
		}
	}
	return diff
}

// containerDefaults fills in what the API server defaults in the fields
// the injector's containers use (k8s.io/kubernetes pkg/apis/core/v1
// defaults.go).
func containerDefaults(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil {
			continue
		}
		for _, d := range []struct {
			f *int32
			v int32
		}{{&p.TimeoutSeconds, 1}, {&p.PeriodSeconds, 10}, {&p.SuccessThreshold, 1}, {&p.FailureThreshold, 3}} {
			if *d.f == 0 {
				*d.f = d.v
			}
		}
		// The handler is compared as it is: an exec probe (what the
		// injector builds) has no defaults of its own, so a probe of
		// another command, or one that reaches the HTTP port (httpGet,
		// tcpSocket, grpc), is a difference.
		httpGetDefaults(p.HTTPGet)
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
			if h != nil {
				httpGetDefaults(h.HTTPGet)
			}
		}
	}
}

// httpGetDefaults fills in an httpGet's defaults (SetDefaults_HTTPGetAction
// for every httpGet; and, since Kubernetes 1.37 under the
// H2CContainerProbe gate, SetDefaults_Pod's protocol HTTP1 on probes and
// lifecycle hooks): the API server fills them in on the pod it stores, so
// without them the second pass of every reinvocation, and every update,
// would be refused as not built by the injector.
func httpGetDefaults(a *corev1.HTTPGetAction) {
	if a == nil {
		return
	}
	if a.Path == "" {
		a.Path = "/"
	}
	if a.Scheme == "" {
		a.Scheme = corev1.URISchemeHTTP
	}
	if a.Protocol == nil {
		a.Protocol = ptr(corev1.HTTPProtocolHTTP1)
	}
}

// volumeDefaults is a volume source with the API server's default file
// mode filled in where the injector leaves it unset.
func volumeDefaults(src corev1.VolumeSource) corev1.VolumeSource {
	src = *src.DeepCopy()
	mode := func(m **int32, def int32) {
		if *m == nil {
			*m = ptr(def)
		}
	}
	switch {
	case src.Secret != nil:
		mode(&src.Secret.DefaultMode, corev1.SecretVolumeSourceDefaultMode)
	case src.ConfigMap != nil:
		mode(&src.ConfigMap.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode)
	case src.Projected != nil:
		mode(&src.Projected.DefaultMode, corev1.ProjectedVolumeSourceDefaultMode)
	}
	return src
}

// volumeSourceName says what a volume the injector builds is, for a refusal.
func volumeSourceName(src corev1.VolumeSource) string {
	switch {
	case src.Secret != nil:
		return "Secret " + src.Secret.SecretName
	case src.ConfigMap != nil:
		return "ConfigMap " + src.ConfigMap.Name
	case src.EmptyDir != nil:
		return "an emptyDir"
	}
	return "its own"
}
