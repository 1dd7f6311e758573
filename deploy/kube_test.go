package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// object is one decoded manifest document.
type object struct {
	file string
	kind string
	name string
	obj  any
}

// kinds maps apiVersion/kind to the Go type of the Kubernetes API it decodes into.
var kinds = map[string]func() any{
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim":           func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// manifests decodes every document of kubernetes/*.yaml strictly: an unknown or
// misspelt field, a value of the wrong type or a kind outside the API fails.
func manifests(t *testing.T) []object {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no kubernetes/*.yaml")
	}
	var out []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			mk, ok := kinds[head.APIVersion+"/"+head.Kind]
			if !ok {
				t.Fatalf("%s document %d: apiVersion %q kind %q is not one this test knows", f, i, head.APIVersion, head.Kind)
			}
			obj := mk()
			// As the API server decodes: case-sensitive field names, no unknown or
			// repeated field (encoding/json alone would take readOnlyRootFileSystem
			// for readOnlyRootFilesystem).
			js, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				t.Errorf("%s %s/%s: %v", f, head.Kind, head.Metadata.Name, err)
				continue
			}
			strict, err := kjson.UnmarshalStrict(js, obj)
			if err = errors.Join(append(strict, err)...); err != nil {
				t.Errorf("%s %s/%s does not match the Kubernetes API: %v", f, head.Kind, head.Metadata.Name, err)
				continue
			}
			out = append(out, object{file: f, kind: head.Kind, name: head.Metadata.Name, obj: obj})
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestKubernetesManifests: the manifests decode into the API types (strictly), hold a
// StatefulSet for NATS and Deployments for the log, signer, witness and portal, and
// every workload meets the house rules: selectors match the pod labels, non-root with
// no privilege escalation, a read-only root, resource requests and limits, probes on
// every container that listens; every Service selects a workload, and every claim,
// ConfigMap and Secret a pod mounts by name is defined here or documented in the file.
func TestKubernetesManifests(t *testing.T) {
	objs := manifests(t)
	want := map[string]bool{"StatefulSet/nats": false, "Deployment/svc-log": false, "Deployment/svc-signer": false, "Deployment/svc-witness": false, "Deployment/svc-portal": false}
	podLabels := map[string]map[string]string{}
	defined := map[string]bool{}
	for _, o := range objs {
		defined[o.kind+"/"+o.name] = true
	}
	for _, o := range objs {
		key := o.kind + "/" + o.name
		if _, ok := want[key]; ok {
			want[key] = true
		}
		var tmpl *corev1.PodTemplateSpec
		var sel map[string]string
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			tmpl, sel = &v.Spec.Template, v.Spec.Selector.MatchLabels
		case *appsv1.StatefulSet:
			tmpl, sel = &v.Spec.Template, v.Spec.Selector.MatchLabels
			for _, c := range v.Spec.VolumeClaimTemplates {
				defined["PersistentVolumeClaim/"+c.Name] = true
			}
		}
		if tmpl == nil {
			continue
		}
		where := o.file + " " + key
		for k, v := range sel {
			if tmpl.Labels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod labels %v", where, k, v, tmpl.Labels)
			}
		}
		podLabels[key] = tmpl.Labels
		checkPod(t, where, &tmpl.Spec, defined, o.file)
	}
	for k, found := range want {
		if !found {
			t.Errorf("no %s in kubernetes/", k)
		}
	}
	for _, o := range objs {
		svc, ok := o.obj.(*corev1.Service)
		if !ok {
			continue
		}
		matched := false
		for _, labels := range podLabels {
			all := true
			for k, v := range svc.Spec.Selector {
				all = all && labels[k] == v
			}
			matched = matched || all
		}
		if !matched || len(svc.Spec.Selector) == 0 {
			t.Errorf("%s Service/%s selects no workload (%v)", o.file, o.name, svc.Spec.Selector)
		}
	}
}

func checkPod(t *testing.T, where string, spec *corev1.PodSpec, defined map[string]bool, file string) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: the pod must run as non-root (runAsNonRoot: true, a non-zero runAsUser)", where)
	}
	text, _ := os.ReadFile(file)
	for _, v := range spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil && !defined["PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName]:
			t.Errorf("%s: volume %s claims %s, defined nowhere", where, v.Name, v.PersistentVolumeClaim.ClaimName)
		case v.ConfigMap != nil && !defined["ConfigMap/"+v.ConfigMap.Name]:
			t.Errorf("%s: volume %s mounts ConfigMap %s, defined nowhere", where, v.Name, v.ConfigMap.Name)
		case v.Secret != nil && !bytes.Contains(text, []byte("secret generic "+v.Secret.SecretName)) && !bytes.Contains(text, []byte("Secret "+v.Secret.SecretName)):
			t.Errorf("%s: volume %s mounts Secret %s, which the file does not say how to create", where, v.Name, v.Secret.SecretName)
		}
	}
	for _, c := range spec.Containers {
		cw := fmt.Sprintf("%s container %s", where, c.Name)
		if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
			t.Errorf("%s: image %q, want a pinned tag", cw, c.Image)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Limits[r]; !ok {
				t.Errorf("%s: no %s limit", cw, r)
			}
			if _, ok := c.Resources.Requests[r]; !ok {
				t.Errorf("%s: no %s request", cw, r)
			}
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s: want allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities drop ALL", cw)
		}
		if len(c.Ports) > 0 && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
			t.Errorf("%s: listens but lacks a readiness or liveness probe", cw)
		}
		for _, e := range c.Env {
			if e.Value != "" && (strings.Contains(strings.ToLower(e.Name), "token") || strings.Contains(strings.ToLower(e.Name), "password") || strings.Contains(strings.ToLower(e.Name), "secret")) {
				t.Errorf("%s: env %s holds a literal; take it from a Secret", cw, e.Name)
			}
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !bytes.Contains(text, []byte(r.SecretKeyRef.Name)) {
				t.Errorf("%s: env %s reads Secret %s, which the file never mentions", cw, e.Name, r.SecretKeyRef.Name)
			}
		}
	}
}

// configMapData is one key of a ConfigMap in file.
func configMapData(t *testing.T, file, name, key string) string {
	t.Helper()
	for _, o := range manifests(t) {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok && o.file == file && o.name == name {
			if v, ok := cm.Data[key]; ok {
				return v
			}
		}
	}
	t.Fatalf("%s: no ConfigMap %s with %s", file, name, key)
	return ""
}

// manifestCommands are the svc command lines of the workloads (image .../svc:...).
func manifestCommands(t *testing.T) []command {
	t.Helper()
	var out []command
	for _, o := range manifests(t) {
		d, ok := o.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if strings.Contains(c.Image, "/svc:") {
				out = append(out, parseArgs(o.file+" Deployment/"+o.name, c.Args))
			}
		}
	}
	return out
}
