# kubext — `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT     := $(CURDIR)
BIN      := $(ROOT)/bin
KUBE_VERSION := v1.36.3
K8S_BIN  := $(BIN)/k8s-$(KUBE_VERSION)
K8S_TOOLS := kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT  := $(BIN)/golangci-lint
KUBECTL  := $(K8S_BIN)/kubectl

LAB_NAME  ?= kubext
LAB_NODES ?= 3
LAB_DIR   := $(ROOT)/.lab/$(LAB_NAME)
KUBECONFIG ?= $(HOME)/.kube/config

# Tests find the control plane through these (envtest honours TEST_ASSET_*).
export TEST_ASSET_KUBE_APISERVER := $(K8S_BIN)/kube-apiserver
export TEST_ASSET_ETCD := $(K8S_BIN)/etcd
export TEST_ASSET_KUBECTL := $(K8S_BIN)/kubectl

K8S_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36

GO_TEST_FLAGS ?= -count=1
E2E_TIMEOUT   ?= 40m

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
		/^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy code from the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs, the manager's RBAC role and its webhook configuration from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook

.PHONY: fmt
fmt: ## gofmt the code.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet the code.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (cache per checkout: a shared cache reports other clones' files).
	GOLANGCI_LINT_CACHE=$(BIN)/.cache/golangci-lint $(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: vet lint verify-generated ## Everything CI checks besides the tests.

.PHONY: verify-generated
verify-generated: generate manifests ## Fail when generated code or CRDs are out of date.
	@if [ -n "$$(git status --porcelain -- api config)" ]; then \
		git status --porcelain -- api config; git diff -- api config | head -50; \
		echo "generated files are out of date: run 'make generate manifests' and commit"; exit 1; fi

##@ Test

.PHONY: test
test: tools build ## Run all tests: unit, envtest, lab e2e (network parts need root).
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v /test/e2e)
	go test $(GO_TEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/...

.PHONY: test-unit
test-unit: tools ## Run unit and envtest tests only.
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v /test/e2e)

.PHONY: test-e2e
test-e2e: tools build ## Run the lab e2e tests only.
	go test $(GO_TEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/...

##@ Lab

.PHONY: lab-up
lab-up: tools manifests ## Start the lab: kwokctl cluster (LAB_NODES nodes) + network namespaces when root.
	$(BIN)/lab up --name $(LAB_NAME) --nodes $(LAB_NODES) --crds config/crd/bases

.PHONY: lab-down
lab-down: $(BIN)/lab ## Remove the lab and everything it created.
	$(BIN)/lab down --name $(LAB_NAME)

.PHONY: demo
demo: tools build ## Bring up the lab, run the manager and agents, walk through each operator.
	go run ./test/demo

##@ Benchmarks (results in docs/benchmarks.md)

.PHONY: bench-reboot
bench-reboot: tools build ## Reboot: rolling reboot of 50 simulated nodes, maxUnavailable 5: overhead vs ideal, decision latency.
	go run ./test/bench/reboot

.PHONY: bench-apps
bench-apps: tools build ## PulsarConsumer + Redis: 1,000 + 200 created at once: time to converge, writes per resync, reconcile latency.
	go run ./test/bench/apps

.PHONY: bench-failover
bench-failover: tools build ## Static IP: downtime when the holder's node dies (20 trials), attach latency; PROVIDER=aws on the lab's VPC model. Needs root.
	go run ./test/bench/failover $(if $(PROVIDER),-provider $(PROVIDER))

##@ Build

.PHONY: build
build: ## Build the binaries into bin/.
	go build -o $(BIN)/ ./cmd/...

.PHONY: run
run: manifests ## Run the manager against $KUBECONFIG.
	go run ./cmd/manager --kubeconfig $(KUBECONFIG)

##@ Deployment (against $KUBECONFIG)

.PHONY: install
install: manifests $(KUBECTL) ## Install the CRDs.
	$(KUBECTL) --kubeconfig $(KUBECONFIG) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: manifests $(KUBECTL) ## Remove the CRDs.
	$(KUBECTL) --kubeconfig $(KUBECONFIG) delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: manifests $(KUBECTL) ## Deploy the manager (and agents) with kustomize.
	$(KUBECTL) --kubeconfig $(KUBECONFIG) apply --server-side -k config/default

.PHONY: undeploy
undeploy: $(KUBECTL) ## Remove what deploy created.
	$(KUBECTL) --kubeconfig $(KUBECONFIG) delete --ignore-not-found -k config/default

##@ Tools (built once into bin/, rebuilt only when missing)

.PHONY: tools
tools: $(addprefix $(K8S_BIN)/,$(K8S_TOOLS)) $(CONTROLLER_GEN) $(BIN)/lab ## Build the lab binaries, controller-gen and the lab CLI.

$(addprefix $(K8S_BIN)/,$(K8S_TOOLS)) &:
	@echo "Building the control plane $(KUBE_VERSION), etcd and kwok into $(K8S_BIN) (cold: several minutes)"
	cd hack/tools/k8s && go build -trimpath -ldflags "$(K8S_LDFLAGS)" -o $(K8S_BIN)/ \
		./etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
		sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl

$(CONTROLLER_GEN):
	cd hack/tools/dev && go build -o $(BIN)/ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT):
	cd hack/tools/dev && go build -o $(BIN)/ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# The lab CLI is part of this module; go build is a no-op when up to date.
.PHONY: $(BIN)/lab
$(BIN)/lab:
	go build -o $(BIN)/lab ./test/lab/cmd/lab
