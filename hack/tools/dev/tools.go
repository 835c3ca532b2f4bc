//go:build tools

// Package tools pins the developer programs: controller-gen (CRDs, RBAC and
// deepcopy from markers), golangci-lint and cyclonedx-gomod (the SBOM). The Makefile builds them into bin/:
//
//	cd hack/tools/dev && go build -o ../../../bin/ \
//	    sigs.k8s.io/controller-tools/cmd/controller-gen \
//	    github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
//	    github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod
package tools

import (
	_ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
