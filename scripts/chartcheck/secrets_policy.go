package main

// Mode injector: the ValidatingAdmissionPolicy that keeps the Secrets only
// the injected countersign container may read away from every pod no
// webhook of the injector judges (templates/injector-secrets-policy.yaml).

import (
	"encoding/json"
	"slices"
	"strings"
)

const invSecretsPolicy = "secrets-policy"

type namedExpression struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

type admissionPolicy struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		FailurePolicy    *string `json:"failurePolicy"`
		MatchConstraints struct {
			NamespaceSelector *labelSelector `json:"namespaceSelector"`
			ObjectSelector    *labelSelector `json:"objectSelector"`
			ResourceRules     []struct {
				APIGroups   []string `json:"apiGroups"`
				APIVersions []string `json:"apiVersions"`
				Operations  []string `json:"operations"`
				Resources   []string `json:"resources"`
			} `json:"resourceRules"`
		} `json:"matchConstraints"`
		MatchConditions []namedExpression `json:"matchConditions"`
		Variables       []namedExpression `json:"variables"`
		Validations     []struct {
			Expression string `json:"expression"`
		} `json:"validations"`
	} `json:"spec"`
}

type admissionPolicyBinding struct {
	Spec struct {
		PolicyName        string   `json:"policyName"`
		ValidationActions []string `json:"validationActions"`
		MatchResources    *struct {
			NamespaceSelector *labelSelector `json:"namespaceSelector"`
			ObjectSelector    *labelSelector `json:"objectSelector"`
		} `json:"matchResources"`
	} `json:"spec"`
}

// notInNames is the kubernetes.io/metadata.name NotIn list of a selector
// that selects by nothing else (nil if it selects by anything else).
func notInNames(sel *labelSelector) []string {
	if sel == nil || len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) != 1 {
		return nil
	}
	e := sel.MatchExpressions[0]
	if e.Key != "kubernetes.io/metadata.name" || e.Operator != "NotIn" {
		return nil
	}
	return slices.Sorted(slices.Values(e.Values))
}

// checkSecretsPolicy: the pod webhook is called only for pods labelled
// countersign.io/inject: "true", so in a namespace not labelled enabled a
// pod without the label reaches no webhook. One ValidatingAdmissionPolicy,
// bound to deny and failing closed, must refuse every pod CREATE and
// UPDATE (pods/ephemeralcontainers too) in the webhooks' scope (no
// namespace more excluded) that names one of the injector's protected
// Secrets (--database-secret, every --rail-key's, the audit signing key's)
// unless a webhook judges it; its protected list is exactly those.
func checkSecretsPolicy(r *result, docs []map[string]any, objs []object, flags map[string][]string, mwc webhookConfiguration) {
	var policies []admissionPolicy
	var bindings []admissionPolicyBinding
	for i, o := range objs {
		switch o.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionPolicy
			if r.ok(invParse, decode(docs[i], &p) == nil, "ValidatingAdmissionPolicy/%s does not parse", o.Metadata.Name) {
				policies = append(policies, p)
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionPolicyBinding
			if r.ok(invParse, decode(docs[i], &b) == nil, "ValidatingAdmissionPolicyBinding/%s does not parse", o.Metadata.Name) {
				bindings = append(bindings, b)
			}
		}
	}
	if !r.ok(invSecretsPolicy, len(policies) == 1 && len(bindings) == 1,
		"want one ValidatingAdmissionPolicy and one binding (a pod no webhook judges would read the rail keys), got %d and %d", len(policies), len(bindings)) {
		return
	}
	p, b := policies[0], bindings[0]
	at := "ValidatingAdmissionPolicy/" + p.Metadata.Name
	r.ok(invSecretsPolicy, b.Spec.PolicyName == p.Metadata.Name, "the binding names policy %q, not %q", b.Spec.PolicyName, p.Metadata.Name)
	r.ok(invSecretsPolicy, slices.Equal(b.Spec.ValidationActions, []string{"Deny"}), "the binding's validationActions must be [Deny], got %q", b.Spec.ValidationActions)
	r.ok(invSecretsPolicy, p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy == "Fail", "%s: failurePolicy must be Fail", at)
	rules := p.Spec.MatchConstraints.ResourceRules
	r.ok(invSecretsPolicy, len(rules) == 1 && slices.Equal(rules[0].APIGroups, []string{""}) && slices.Equal(rules[0].APIVersions, []string{"v1"}) &&
		slices.Equal(rules[0].Operations, []string{"CREATE", "UPDATE"}) && slices.Equal(rules[0].Resources, []string{"pods", "pods/ephemeralcontainers"}),
		"%s: want one rule, core/v1 [CREATE, UPDATE] of [pods, pods/ephemeralcontainers], got %+v", at, rules)
	r.ok(invSecretsPolicy, p.Spec.MatchConstraints.ObjectSelector == nil && len(p.Spec.MatchConditions) == 0,
		"%s: no objectSelector or matchConditions: it judges every pod in its namespaces", at)

	// Its namespaces: every namespace the webhooks serve. A namespace they
	// exclude holds nothing of the injector's; one more excluded here is
	// one where a pod reads the rail keys unjudged.
	var hooks []string
	for _, w := range mwc.Webhooks {
		if names := notInNames(&labelSelector{MatchExpressions: slices.DeleteFunc(slices.Clone(selectorExprs(w.NamespaceSelector)),
			func(e labelExpr) bool { return e.Key != "kubernetes.io/metadata.name" })}); hooks == nil || len(names) < len(hooks) {
			hooks = names
		}
	}
	var bindingSel *labelSelector
	if b.Spec.MatchResources != nil {
		r.ok(invSecretsPolicy, b.Spec.MatchResources.ObjectSelector == nil, "the binding has an objectSelector: it must judge every pod")
		bindingSel = b.Spec.MatchResources.NamespaceSelector
	}
	for _, s := range []struct {
		what string
		sel  *labelSelector
	}{{at, p.Spec.MatchConstraints.NamespaceSelector}, {"its binding", bindingSel}} {
		got := notInNames(s.sel)
		r.ok(invSecretsPolicy, got != nil && slices.Equal(got, hooks),
			"%s: namespaceSelector must exclude exactly the webhooks' namespaces %q (kubernetes.io/metadata.name NotIn, nothing else), got %+v", s.what, hooks, s.sel)
	}

	// What it protects: exactly the Secrets the injector mounts into
	// countersign alone.
	want := []string{one(flags, "database-secret")}
	for _, rk := range flags["rail-key"] {
		_, ref, _ := strings.Cut(rk, "=")
		sec, _, _ := strings.Cut(ref, "/")
		want = append(want, sec)
	}
	if s := one(flags, "audit-signing-key-secret"); s != "" {
		want = append(want, s)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	var got []string
	for _, v := range p.Spec.Variables {
		if v.Name == "protected" {
			if json.Unmarshal([]byte(v.Expression), &got) != nil {
				got = nil
			}
		}
	}
	slices.Sort(got)
	r.ok(invSecretsPolicy, slices.Equal(got, want), "%s: variable protected must list exactly the injector's Secrets %q, got %q", at, want, got)
	vars := map[string]string{}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
		e := vars[list]
		r.ok(invSecretsPolicy, strings.Contains(e, "object.spec."+list+".exists(") && strings.Contains(e, "secretKeyRef.name in variables.protected") &&
			strings.Contains(e, "secretRef.name in variables.protected"), "%s: variable %s must find env and envFrom reading a protected Secret in spec.%s", at, list, list)
	}
	r.ok(invSecretsPolicy, strings.Contains(vars["volumes"], "v.secret.secretName in variables.protected") && strings.Contains(vars["volumes"], "s.secret.name in variables.protected"),
		"%s: variable volumes must find Secret and projected volumes of a protected Secret", at)
	const judged = "(has(namespaceObject.metadata.labels) && 'countersign.io/inject' in namespaceObject.metadata.labels && " +
		"namespaceObject.metadata.labels['countersign.io/inject'] == 'enabled') || " +
		"(has(object.metadata.labels) && 'countersign.io/inject' in object.metadata.labels && object.metadata.labels['countersign.io/inject'] == 'true')"
	r.ok(invSecretsPolicy, strings.Join(strings.Fields(vars["judged"]), " ") == judged,
		"%s: variable judged must be exactly the webhooks' selection (namespace label enabled, or pod label \"true\"): %q, got %q", at, judged, vars["judged"])
	const rule = "variables.judged || !(variables.volumes || variables.containers || variables.initContainers || variables.ephemeralContainers)"
	r.ok(invSecretsPolicy, len(p.Spec.Validations) == 1 && strings.Join(strings.Fields(p.Spec.Validations[0].Expression), " ") == rule,
		"%s: want the one validation %q", at, rule)
}

type labelExpr = struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

func selectorExprs(sel *labelSelector) []labelExpr {
	if sel == nil {
		return nil
	}
	return sel.MatchExpressions
}
