//go:build tools

// Package tools pins containerd 2.x, the container runtime of the real nodes (Kubernetes v1.36's kubelet needs
// 2.x): the daemon, its runc shim and ctr, which imports the locally built images.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
