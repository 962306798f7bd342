//go:build tools

// Package tools pins the helm CLI used to lint, render and install the chart.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
