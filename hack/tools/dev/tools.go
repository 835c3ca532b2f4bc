//go:build tools

// Package tools pins the developer programs: controller-gen (CRDs, RBAC and
// deepcopy from markers) and golangci-lint. The Makefile builds them into bin/:
//
//	cd hack/tools/dev && go build -o ../../../bin/ \
//	    sigs.k8s.io/controller-tools/cmd/controller-gen \
//	    github.com/golangci/golangci-lint/v2/cmd/golangci-lint
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
