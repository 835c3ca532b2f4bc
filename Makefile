# kubext — `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT     := $(CURDIR)
BIN      := $(ROOT)/bin
KUBE_VERSION := v1.36.3
K8S_BIN  := $(BIN)/k8s-$(KUBE_VERSION)
K8S_TOOLS := kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl
# Tool binaries carry the version hack/tools/dev/go.mod pins in their names,
# so bumping a version there builds the new one; bin/<tool> links to it.
dev_tool_version = $(shell awk '$$1 == "$(1)" { print $$2; exit }' $(ROOT)/hack/tools/dev/go.mod)
CONTROLLER_TOOLS_VERSION := $(call dev_tool_version,sigs.k8s.io/controller-tools)
GOLANGCI_LINT_VERSION    := $(call dev_tool_version,github.com/golangci/golangci-lint/v2)
HELM_VERSION             := $(call dev_tool_version,helm.sh/helm/v3)
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT  := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KUBECTL  := $(K8S_BIN)/kubectl
# The manager's controllers (--controllers); each has its own RBAC role in
# config/rbac/controllers/<name>, besides core (the manager itself).
MANAGER_CONTROLLERS := crontab ip ippool pulsarconsumer reboot redis

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
# The unit and envtest tier includes hack/image and hack/plugin-release,
# which build the release binaries with -trimpath (a build cache of their
# own: cold in CI, minutes on 2 cores); go test's default 10m is too short
# for them on a loaded runner.
UNIT_TIMEOUT  ?= 30m
E2E_TIMEOUT   ?= 40m
# Everything that brings up a lab takes this machine-wide lock: network
# namespaces, the documentation subnets and kwokctl's ports are global.
# (test/chart and test/lab/labnet take it from inside their tests: test/lablock.)
LAB_LOCK      ?= flock -o /tmp/kubext-e2e.lock

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
manifests: $(CONTROLLER_GEN) ## Generate CRDs, the manager's RBAC role (all controllers, and each controller's own) and its webhook configuration from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	for c in $(MANAGER_CONTROLLERS); do \
		$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./internal/controller/$$c/... \
			output:rbac:artifacts:config=config/rbac/controllers/$$c; \
	done
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths="./cmd/manager/...;./internal/webhookcert/...;./internal/webhook/..." \
		output:rbac:artifacts:config=config/rbac/controllers/core

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
test: tools build test-deps ## Run all tests: unit, envtest, lab e2e (network parts need root).
	go test $(GO_TEST_FLAGS) -race -timeout $(UNIT_TIMEOUT) $$(go list ./... | grep -v /test/e2e)
	$(LAB_LOCK) go test $(GO_TEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/...

.PHONY: test-unit
test-unit: tools test-deps ## Run unit and envtest tests only.
	go test $(GO_TEST_FLAGS) -timeout $(UNIT_TIMEOUT) $$(go list ./... | grep -v /test/e2e)

.PHONY: test-deps
test-deps: ## Install the programs the tests run besides Go (redis-server, promtool) when root, else say what is missing.
	hack/test-deps.sh

.PHONY: test-e2e
test-e2e: tools build ## Run the lab e2e tests only.
	$(LAB_LOCK) go test $(GO_TEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/...

##@ Lab

.PHONY: lab-up
lab-up: tools manifests ## Start the lab: kwokctl cluster (LAB_NODES nodes) + network namespaces when root.
	$(BIN)/lab up --name $(LAB_NAME) --nodes $(LAB_NODES) --crds config/crd/bases

.PHONY: lab-down
lab-down: $(BIN)/lab ## Remove the lab and everything it created.
	$(BIN)/lab down --name $(LAB_NAME)

.PHONY: demo
demo: tools build build-installer ## Bring up the lab, install kubext from dist/install.yaml as a user would, walk through each operator.
	DEMO_MANIFEST=$(DIST)/install.yaml $(LAB_LOCK) go run ./test/demo

.PHONY: demo-local
demo-local: tools build ## The demo with the manager and agents run as local processes instead of installed.
	$(LAB_LOCK) go run ./test/demo

##@ Benchmarks (results in docs/benchmarks.md)

.PHONY: bench-reboot
bench-reboot: tools build ## Reboot: rolling reboot of NODES simulated nodes (default 50; light agents above 100), MAX_UNAVAILABLE (default 5): overhead vs ideal, decision latency.
	$(LAB_LOCK) go run ./test/bench/reboot $(if $(NODES),-nodes $(NODES)) $(if $(MAX_UNAVAILABLE),-max-unavailable $(MAX_UNAVAILABLE)) $(if $(AGENTS),-agents $(AGENTS))

.PHONY: bench-reboot-kured
bench-reboot-kured: tools build ## Reboot side by side: kubext and kured (KURED=/path/to/kured, built from kured's source) on the same lab: NODES (default 10), PODS (60), DOWNTIME (20s), CONCURRENCY (1,2), PERIOD (kured's, 10s). Needs root (kured runs in its own PID and mount namespace per node).
	@test -n "$(KURED)" || { echo "KURED=/path/to/kured is required (see docs/benchmarks.md)"; exit 2; }
	$(LAB_LOCK) go run ./test/bench/rebootpeer -kured $(KURED) $(if $(NODES),-nodes $(NODES)) $(if $(PODS),-pods $(PODS)) $(if $(DOWNTIME),-downtime $(DOWNTIME)) $(if $(CONCURRENCY),-concurrency $(CONCURRENCY)) $(if $(PERIOD),-period $(PERIOD)) $(if $(SYSTEMS),-systems $(SYSTEMS))

.PHONY: bench-apps
bench-apps: tools build ## PulsarConsumer + Redis: 1,000 + 200 created at once: time to converge, writes per resync, reconcile latency.
	$(LAB_LOCK) go run ./test/bench/apps

.PHONY: bench-failover
bench-failover: tools build ## Static IP: downtime when the holder's node dies (20 trials), time two nodes answered (split detector), attach latency, client outage during a 5 s partition of the holder and a 5 s kube-apiserver and etcd freeze; PROVIDER=aws on the lab's VPC model. Needs root.
	$(LAB_LOCK) go run ./test/bench/failover $(if $(PROVIDER),-provider $(PROVIDER))

.PHONY: bench-failover-keepalived
bench-failover-keepalived: tools build ## Static IP failover of keepalived on the same lab, probe, kill and split detector: VRRPv2 advert 1 s (default), VRRPv3 0.1 s and 0.01 s (TRIALS each, default 20). Needs root; installs keepalived (Debian) if missing.
	hack/test-deps.sh keepalived
	$(LAB_LOCK) go run ./test/bench/failover -peer keepalived -vrrp-version 2 -advert 1s -trials $(or $(TRIALS),20)
	$(LAB_LOCK) go run ./test/bench/failover -peer keepalived -vrrp-version 3 -advert 100ms -trials $(or $(TRIALS),20)
	$(LAB_LOCK) go run ./test/bench/failover -peer keepalived -vrrp-version 3 -advert 10ms -trials $(or $(TRIALS),20)

.PHONY: bench-scale
bench-scale: tools build ## Static IP at scale: NODES kwok nodes (default 1000) with light agents, IPS IPs and claiming pods (default 10000): convergence vs the floor, writes per node, memory.
	$(LAB_LOCK) go run ./test/bench/scale $(if $(NODES),-nodes $(NODES)) $(if $(IPS),-ips $(IPS))

.PHONY: bench-redis
bench-redis: tools build ## Redis: write gap and acknowledged writes lost when the primary's process or node dies, a scale down removes it, or kubext reboots its node (TRIALS per kind, default 10). Needs root.
	$(LAB_LOCK) go run ./test/bench/redis $(if $(TRIALS),-trials $(TRIALS))

##@ Build

# What every binary says with --version and the image's labels say.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The image is dated by the last commit, not the clock: same commit, same digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 1)
# Evaluated once, not at every use.
VERSION := $(VERSION)
REVISION := $(REVISION)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
export SOURCE_DATE_EPOCH
VERSION_PKG := github.com/kubext/kubext/internal/version
LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION)
# The one image holding every kubext binary (see docs/install.md).
IMG ?= ghcr.io/kubext/manager:$(VERSION)
PLATFORMS ?= linux/amd64,linux/arm64
DIST := $(ROOT)/dist
CYCLONEDX_GOMOD := $(BIN)/cyclonedx-gomod

.PHONY: build
build: ## Build the static binaries into bin/ (as in the image: the deployed-mode lab refuses others), stamped with VERSION and REVISION.
	CGO_ENABLED=0 go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

.PHONY: docker-build
docker-build: oci-image sbom ## Build the OCI image index IMG (PLATFORMS) without a daemon, and its SBOM.

.PHONY: oci-image
oci-image: ## The image only: dist/image (OCI layout) and dist/image.digest.
	go run ./hack/image build --img $(IMG) --version $(VERSION) --revision $(REVISION) --platforms $(PLATFORMS) \
		--layout $(DIST)/image --bin-dir $(DIST)/bin --digest-file $(DIST)/image.digest

.PHONY: image
image: docker-build ## Alias of docker-build.

.PHONY: docker-push
docker-push: ## Push dist/image to IMG's registry (docker config credentials); prints IMG@digest.
	go run ./hack/image push --img $(IMG) --layout $(DIST)/image

.PHONY: sbom
# cyclonedx-gomod lists the whole module graph (go list -m all): it needs
# the module proxy for modules the build never downloaded.
sbom: $(CYCLONEDX_GOMOD) ## CycloneDX SBOM of the module's dependencies: dist/sbom.cdx.json.
	@mkdir -p $(DIST)
	$(CYCLONEDX_GOMOD) mod -licenses -std -noserial -notimestamp -json -output $(DIST)/sbom.cdx.json $(ROOT)

$(CYCLONEDX_GOMOD):
	cd hack/tools/dev && go build -o $(BIN)/ github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

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

.PHONY: build-installer
build-installer: manifests oci-image ## Write dist/install.yaml: config/default with every image pinned to IMG@<digest of the image built>.
	go run ./hack/image installer --img $(IMG) --layout $(DIST)/image --config config/default --out $(DIST)/install.yaml

.PHONY: deploy
# A second apply covers objects that raced the API server's namespace cache
# on a first install; any other error fails it again.
deploy: build-installer $(KUBECTL) ## Install dist/install.yaml (IMG pinned by digest; push it first) into $KUBECONFIG's cluster.
	$(KUBECTL) --kubeconfig $(KUBECONFIG) apply --server-side -f $(DIST)/install.yaml || \
		$(KUBECTL) --kubeconfig $(KUBECONFIG) apply --server-side -f $(DIST)/install.yaml

.PHONY: undeploy
undeploy: $(KUBECTL) ## Remove what deploy created (CRDs and their objects included).
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
	cd hack/tools/dev && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
	ln -sf $(notdir $@) $(BIN)/controller-gen

$(GOLANGCI_LINT):
	cd hack/tools/dev && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	ln -sf $(notdir $@) $(BIN)/golangci-lint

# The lab CLI is part of this module; go build is a no-op when up to date.
.PHONY: $(BIN)/lab
$(BIN)/lab:
	go build -o $(BIN)/lab ./test/lab/cmd/lab

##@ Plugin release

# krew wants a semantic version: VERSION when it is one (a tag such as
# v0.2.0), else v0.0.0-<VERSION>.
PLUGIN_VERSION ?= $(if $(filter v%,$(VERSION)),$(VERSION),v0.0.0-$(VERSION))

.PHONY: plugin-dist
plugin-dist: ## Cross-build kubectl-kubext archives (with completion script), sha256sums and a krew manifest into dist/plugin.
	go run ./hack/plugin-release --version $(PLUGIN_VERSION) --out dist/plugin \
		--ldflags "-s -w -X $(VERSION_PKG).Version=$(PLUGIN_VERSION) -X $(VERSION_PKG).Revision=$(REVISION)"

##@ Chart

HELM     := $(BIN)/helm-$(HELM_VERSION)
PROMTOOL ?= $(shell command -v promtool)
CHART    := charts/kubext
# The files of config/ the chart renders from (the chart's copies live under
# $(CHART)/files/config/<same path>; CRDs under $(CHART)/crds/). One source
# of truth: edit config/, then `make chart-sync`; test/chart fails when the
# copies differ.
CHART_CONFIG_FILES = config/rbac/role.yaml config/rbac/leader_election_role.yaml \
	$(foreach c,core $(MANAGER_CONTROLLERS),config/rbac/controllers/$(c)/role.yaml) \
	config/rbac/metrics_auth_role.yaml config/rbac/metrics_reader_role.yaml \
	$(sort $(wildcard config/rbac/*_editor_role.yaml config/rbac/*_viewer_role.yaml)) \
	config/ip-agent/rbac.yaml config/reboot-agent/rbac.yaml \
	$(sort $(filter-out %/kustomization.yaml %/kustomizeconfig.yaml,$(wildcard config/policy/*.yaml))) \
	config/flowcontrol/leader-election.yaml \
	config/webhook/manifests.yaml config/prometheus/rules.yaml config/prometheus/dashboard.json

# Stamped as helm's own Makefile does: its version, and the Kubernetes
# version that `helm template` and `helm lint` assume without a cluster
# (unstamped, v1.20, which the chart's kubeVersion refuses).
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=36 \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36

$(HELM):
	cd hack/tools/dev && go build -ldflags "$(HELM_LDFLAGS)" -o $@ helm.sh/helm/v3/cmd/helm
	ln -sf $(notdir $@) $(BIN)/helm

.PHONY: helm
helm: $(HELM) ## Build helm (v3, tools module) into bin/ once.

.PHONY: chart-sync
chart-sync: ## Copy the CRDs, RBAC rules, policies, alert rules and dashboard from config/ into the chart.
	rm -rf $(CHART)/crds $(CHART)/files/config
	mkdir -p $(CHART)/crds
	cp config/crd/bases/*.yaml $(CHART)/crds/
	for f in $(CHART_CONFIG_FILES); do mkdir -p $(CHART)/files/$$(dirname $$f); cp $$f $(CHART)/files/$$f; done

.PHONY: chart-lint
chart-lint: $(HELM) ## helm lint --strict the chart.
	$(HELM) lint --strict $(CHART)

.PHONY: chart-package
chart-package: $(HELM) chart-sync ## Package the chart into dist/.
	$(HELM) package $(CHART) -d dist

.PHONY: test-chart
test-chart: $(HELM) test-deps ## Chart and observability tests: sync, lint, render vs config/default, promtool, metric names.
	go test $(GO_TEST_FLAGS) -v ./test/chart/...

# The chart tests run under `make test` too: they need helm (and promtool, from test-deps).
test test-unit: $(HELM)
