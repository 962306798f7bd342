//go:build tools

// Package tools pins the CNI plugins the real nodes use: a bridge per node, host-local addresses, loopback.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
