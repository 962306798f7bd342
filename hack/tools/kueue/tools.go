//go:build tools

// Package tools pins Kueue's manager, the queueing and admission controller that shared GPU clusters run; the
// local cluster runs it when asked (DDPJOB_KUEUE=1, see docs/kueue.md).
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
