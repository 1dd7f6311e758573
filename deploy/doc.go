// Package deploy holds no code: it is the deployment material of svc (README.md, the
// 3-node NATS cluster in nats/, systemd units in systemd/, Kubernetes manifests in
// kubernetes/) and the tests that check it: the NATS configurations parse and
// validate with the nats-server of go.mod, the units pass systemd-analyze verify, the
// manifests decode strictly into the Kubernetes API types, and every flag they pass to
// svc is one the built binary's --help lists.
package deploy
