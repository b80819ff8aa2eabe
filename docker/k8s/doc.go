// Package k8s holds the Kubernetes manifests of a scaled-out run (the
// in-cluster mock and its Service, the plan as a ConfigMap, the
// coordinator, an Indexed Job whose completion index is the shard, the
// results volume and the merge Job) and their test, which decodes every
// document strictly into the Kubernetes API types and checks that the
// pieces fit together. It has no Go code of its own.
package k8s
