//go:build tools

// Package tools pins CoreDNS, the real nodes' cluster DNS: it answers the cluster's own zone from the API (its
// kubernetes plugin) so a headless Service's pod names resolve, and forwards nothing off the machine.
package tools

import _ "github.com/coredns/coredns"
