package k8s_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/llm-testbed/testbed/harness"
)

// manifests are the decoded objects of every file here, by kind and name.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	claims      map[string]*corev1.PersistentVolumeClaim
	jobs        map[string]*batchv1.Job
}

// typeMeta is read first to pick the document's Go type.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// load decodes every YAML document of every manifest strictly: a field
// the API does not have (a typo, a field of another version) is an error.
func load(t *testing.T) manifests {
	t.Helper()
	m := manifests{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, claims: map[string]*corev1.PersistentVolumeClaim{},
		jobs: map[string]*batchv1.Job{},
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(b) {
			if err := m.add(doc); err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
			}
		}
	}
	return m
}

// splitDocs splits a multi-document YAML file at its "---" lines.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func (m *manifests) add(doc []byte) error {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		return decodeInto(doc, m.deployments)
	case "v1 Service":
		return decodeInto(doc, m.services)
	case "v1 ConfigMap":
		return decodeInto(doc, m.configMaps)
	case "v1 PersistentVolumeClaim":
		return decodeInto(doc, m.claims)
	case "batch/v1 Job":
		return decodeInto(doc, m.jobs)
	}
	return fmt.Errorf("unexpected %s %s", tm.APIVersion, tm.Kind)
}

// named is what every API object has.
type named interface{ GetName() string }

func decodeInto[T any, PT interface {
	*T
	named
}](doc []byte, into map[string]PT) error {
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		return err
	}
	p := PT(&v)
	if p.GetName() == "" {
		return errors.New("no metadata.name")
	}
	if _, dup := into[p.GetName()]; dup {
		return fmt.Errorf("%s defined twice", p.GetName())
	}
	into[p.GetName()] = p
	return nil
}

// TestManifests checks that the manifests are valid API objects and fit
// together as docker/README.md describes: the Indexed Job's completions,
// parallelism and shard count agree with the coordinator's; each Service
// selects its pods on a port they expose; the plan targets the mock
// Service; shards and merge share the results claim and directory; every
// container runs the local image without pulling it.
func TestManifests(t *testing.T) {
	t.Parallel()
	m := load(t)
	shards := m.jobs["testbed-shards"]
	coord := m.jobs["testbed-coordinator"]
	merge := m.jobs["testbed-merge"]
	mock := m.deployments["testbed-mock"]
	if shards == nil || coord == nil || merge == nil || mock == nil {
		t.Fatalf("want jobs testbed-shards, testbed-coordinator, testbed-merge and deployment testbed-mock; have %v %v",
			keys(m.jobs), keys(m.deployments))
	}
	n := checkShardJob(t, shards)
	if got := argAfter(coord.Spec.Template.Spec.Containers[0].Args, "--shards"); got != fmt.Sprint(n) {
		t.Errorf("coordinator --shards %q, the Indexed Job runs %d", got, n)
	}
	checkService(t, m, "testbed-mock", mock.Spec.Template.Labels, mock.Spec.Template.Spec.Containers[0])
	checkService(t, m, "testbed-coordinator", coord.Spec.Template.Labels, coord.Spec.Template.Spec.Containers[0])
	checkPlan(t, m, shards)
	checkResults(t, m, shards, merge)
	for _, pod := range []corev1.PodSpec{shards.Spec.Template.Spec, coord.Spec.Template.Spec,
		merge.Spec.Template.Spec, mock.Spec.Template.Spec} {
		for _, c := range pod.Containers {
			if c.Image != "testbed:latest" || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("container %s: image %q pull %q; want testbed:latest, Never (no registry)",
					c.Name, c.Image, c.ImagePullPolicy)
			}
		}
	}
}

// checkShardJob: an Indexed Job running every shard at once, each told
// its completion index as the shard; it returns the shard count.
func checkShardJob(t *testing.T, j *batchv1.Job) int {
	t.Helper()
	s := j.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode %v, want Indexed", s.CompletionMode)
	}
	if s.Completions == nil || s.Parallelism == nil || *s.Completions != *s.Parallelism {
		t.Fatalf("completions %v, parallelism %v: every shard must run at once", s.Completions, s.Parallelism)
	}
	n := int(*s.Completions)
	c := s.Template.Spec.Containers[0]
	idx := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SHARD" })
	if idx < 0 || c.Env[idx].ValueFrom == nil || c.Env[idx].ValueFrom.FieldRef == nil ||
		c.Env[idx].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("env SHARD must come from the completion index annotation: %+v", c.Env)
	}
	want := fmt.Sprintf("$(SHARD)/%d", n)
	if got := argAfter(c.Args, "--shard"); got != want {
		t.Errorf("--shard %q, want %q", got, want)
	}
	sh, err := harness.ParseShard(strings.ReplaceAll(want, "$(SHARD)", "0"))
	if err != nil || sh.Count != n {
		t.Errorf("--shard %q does not parse as shard 0 of %d: %v", want, n, err)
	}
	if !strings.Contains(argAfter(c.Args, "-o"), "$(SHARD)") {
		t.Errorf("-o %q: each shard needs its own directory", argAfter(c.Args, "-o"))
	}
	return n
}

// checkService: the Service selects the pods and targets a port they
// expose, and the shards reach it by the name the plan or args use.
func checkService(t *testing.T, m manifests, name string, podLabels map[string]string, c corev1.Container) {
	t.Helper()
	svc := m.services[name]
	if svc == nil {
		t.Fatalf("no Service %s", name)
	}
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service %s selects %s=%s; the pods are labelled %v", name, k, v, podLabels)
		}
	}
	for _, p := range svc.Spec.Ports {
		if !exposes(c, p.TargetPort) {
			t.Errorf("Service %s targets port %s, which container %s does not expose", name, p.TargetPort.String(), c.Name)
		}
	}
}

func exposes(c corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		byName := port.Type == intstr.String && p.Name == port.StrVal
		if byName || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

// checkPlan: the ConfigMap's plan is a valid plan that can be split into
// the job's shards and targets the mock Service; the shards mount it where
// their args read it.
func checkPlan(t *testing.T, m manifests, shards *batchv1.Job) {
	t.Helper()
	cm := m.configMaps["testbed-plan"]
	if cm == nil {
		t.Fatal("no ConfigMap testbed-plan")
	}
	p, err := harness.ParsePlan([]byte(cm.Data["plan.yaml"]))
	if err != nil {
		t.Fatalf("testbed-plan plan.yaml: %v", err)
	}
	p.Shard = &harness.Shard{Index: 0, Count: int(*shards.Spec.Completions)}
	if err := p.Validate(); err != nil {
		t.Errorf("the plan cannot be split into %d shards: %v", p.Shard.Count, err)
	}
	for _, tg := range p.Targets {
		if !strings.HasPrefix(tg.URL, "http://testbed-mock:") {
			t.Errorf("plan target %s, want the testbed-mock Service", tg.URL)
		}
	}
	c := shards.Spec.Template.Spec.Containers[0]
	if c.Args[1] != "/plans/plan.yaml" || mountOf(shards.Spec.Template.Spec, c, "/plans").ConfigMap == nil {
		t.Errorf("shards read %s; want /plans/plan.yaml from the testbed-plan ConfigMap", c.Args[1])
	}
}

// checkResults: shards and merge mount one claim at /results, and merge
// reads the directories the shards write.
func checkResults(t *testing.T, m manifests, shards, merge *batchv1.Job) {
	t.Helper()
	for _, j := range []*batchv1.Job{shards, merge} {
		pod := j.Spec.Template.Spec
		v := mountOf(pod, pod.Containers[0], "/results")
		if v.PersistentVolumeClaim == nil || m.claims[v.PersistentVolumeClaim.ClaimName] == nil {
			t.Errorf("job %s: /results is not the results claim: %+v", j.Name, v)
		}
	}
	out := argAfter(shards.Spec.Template.Spec.Containers[0].Args, "-o")
	margs := merge.Spec.Template.Spec.Containers[0].Args
	glob := margs[len(margs)-1]
	if ok, _ := filepath.Match(glob, strings.ReplaceAll(out, "$(SHARD)", "3")); !ok || margs[0] != "merge" {
		t.Errorf("merge reads %q; the shards write %q", glob, out)
	}
}

// mountOf is the volume c mounts at path.
func mountOf(pod corev1.PodSpec, c corev1.Container, path string) corev1.VolumeSource {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name {
				return v.VolumeSource
			}
		}
	}
	return corev1.VolumeSource{}
}

func argAfter(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

func keys[V any](m map[string]V) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

// TestStrictDecodingCatchesTypos makes sure the check above can fail: a
// misspelled field is refused.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	t.Parallel()
	doc := []byte("apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec: {completionMod: Indexed}\n")
	var m manifests
	m.jobs = map[string]*batchv1.Job{}
	if err := m.add(doc); err == nil {
		t.Error("completionMod (a typo) was accepted")
	}
}
