//go:build tools

// Package tools pins the node commands of the control plane's own release: the kubelet and kube-proxy that the
// real nodes of the local cluster run (hack/realnode.sh). Kept apart from hack/tools/kube so that adding them
// rebuilds none of the control plane's binaries.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
