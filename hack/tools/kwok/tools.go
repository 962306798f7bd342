//go:build tools

// Package tools pins kwok, which simulates the GPU nodes of the local cluster.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
