//go:build tools

// Package tools pins crictl, the CRI client the real nodes' tests and teardown use to see a node's pods.
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
