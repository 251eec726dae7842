//go:build tools

// Package tools names the command the module is built for, so that `go mod tidy`
// records every dependency of kube-apiserver in go.sum.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
