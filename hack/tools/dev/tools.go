//go:build tools

// Package tools pins the developer programs: controller-gen (CRDs, RBAC and
// deepcopy from markers), golangci-lint, cyclonedx-gomod (the images' SBOM)
// and helm (charts/kubext; v3.21.x, the last line on the k8s v0.36 libraries
// the rest of the project uses: v3.22 pulls v0.37). The Makefile builds them
// into bin/:
//
//	cd hack/tools/dev && go build -o ../../../bin/ \
//	    sigs.k8s.io/controller-tools/cmd/controller-gen \
//	    github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
//	    github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod
//	cd hack/tools/dev && go build -o ../../../bin/ helm.sh/helm/v3/cmd/helm  # make helm stamps it
package tools

import (
	_ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
