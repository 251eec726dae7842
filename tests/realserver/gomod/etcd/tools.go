//go:build tools

// Package tools names the command the module is built for, so that `go mod tidy`
// records every dependency of etcd in go.sum.
package tools

import _ "go.etcd.io/etcd/server/v3"
